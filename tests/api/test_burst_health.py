"""The burst's ``/healthz`` poller survives a failed request: the failure is recorded (and
fails the burst test with its own message) instead of silently ending the polling.

A real HTTP server on a real socket, whose ``/healthz`` drops the connection on the second
request and answers 200 otherwise.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from tests.api.burst import BurstResult, HealthPoller


class _DropsOnce(BaseHTTPRequestHandler):
    count = 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        with self.lock:
            type(self).count += 1
            number = type(self).count
        if number == 2:
            self.close_connection = True
            self.connection.close()  # no answer at all: the client sees the connection drop
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky_health() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DropsOnce)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_dropped_health_request_is_recorded_and_polling_goes_on(flaky_health: str) -> None:
    result = BurstResult()
    poller = HealthPoller(flaky_health, result, interval_s=0.01)
    poller.start()
    poller.measuring.set()
    deadline = time.monotonic() + 10
    while len(result.health_status) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    poller.stop()

    assert len(result.health_status) >= 5, "the poller stopped after the dropped request"
    assert set(result.health_status) == {200}
    assert len(result.health_errors) == 1
    assert "/healthz" in result.health_errors[0] and "Error" in result.health_errors[0], result.health_errors
