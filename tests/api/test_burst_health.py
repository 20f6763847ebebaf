"""The burst's ``/healthz`` poller survives a dropped connection: it asks again once, as a
browser does; a poll that got no answer in two tries is recorded (and fails the burst test with
its own message) instead of silently ending the polling.

A real HTTP server on a real socket, whose ``/healthz`` drops the connection on the 2nd, 3rd
and 5th requests and answers 200 otherwise.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from tests.api.burst import BurstResult, HealthPoller


class _Drops(BaseHTTPRequestHandler):
    dropped: tuple[int, ...] = (2, 3, 5)  # these requests get no answer: the connection drops
    slow: tuple[int, ...] = ()  # these are answered after 1.5 s
    count = 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        with self.lock:
            type(self).count += 1
            number = type(self).count
        if number in self.dropped:
            self.close_connection = True
            self.connection.close()  # no answer at all: the client sees the connection drop
            return
        if number in self.slow:
            time.sleep(1.5)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


class _SlowOnce(_Drops):
    """Answers the 2nd request after 1.5 s: past the poller's time-out of 0.5 s."""

    dropped = ()
    slow = (2,)
    count = 0


def _serve(handler: type[_Drops]) -> Iterator[str]:
    handler.count = 0  # a fresh count for each test, even when one is run again
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def flaky_health() -> Iterator[str]:
    yield from _serve(_Drops)


@pytest.fixture
def slow_health() -> Iterator[str]:
    yield from _serve(_SlowOnce)


def _poll_until(poller: HealthPoller, result: BurstResult, answers: int) -> None:
    poller.start()
    poller.measuring.set()
    deadline = time.monotonic() + 10
    while len(result.health_status) < answers and time.monotonic() < deadline:
        time.sleep(0.01)
    poller.stop()


def test_dropped_health_requests_are_asked_again_once_then_recorded_and_polling_goes_on(flaky_health: str) -> None:
    result = BurstResult()
    _poll_until(HealthPoller(flaky_health, result, interval_s=0.01), result, answers=5)

    assert len(result.health_status) >= 5, "the poller stopped after a dropped request"
    assert set(result.health_status) == {200}
    # Requests 2 and 3: one poll, no answer in two tries. Request 5: answered on the second (6).
    assert len(result.health_errors) == 1, result.health_errors
    assert "GET /healthz" in result.health_errors[0] and "Error" in result.health_errors[0], result.health_errors
    assert len(result.health_retried) == 1, result.health_retried


def test_a_health_request_that_times_out_is_recorded_without_asking_again(slow_health: str) -> None:
    result = BurstResult()
    _poll_until(HealthPoller(slow_health, result, interval_s=0.01, timeout_s=0.5), result, answers=3)

    assert len(result.health_status) >= 3, "the poller stopped after the time-out"
    assert len(result.health_errors) == 1, result.health_errors
    assert "ReadTimeout" in result.health_errors[0], result.health_errors
    assert result.health_retried == []  # a slow server is not asked again: that would hide it
