"""A burst of submissions against a live server, measured: how fast they are accepted and
graded, and how quickly ``GET /healthz`` answers while the server grades them.

Shared by ``tests/api/test_burst.py`` (which asserts on the figures) and ``bench/burst.py``
(which prints them, and how long the burst's submissions waited with a hostile sleeper among
them). Everything goes over real HTTP to a real ``mutagrade serve``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable
from datetime import datetime

import httpx

from tests.api.conftest import tar_gz

__all__ = ["BurstResult", "HealthPoller", "Sleeper", "percentile", "run_burst", "sleeper_archive", "small_archive"]

# Two of the bundled student's tests, alone in one file: a real suite, but fast to grade, so
# the burst measures the service (queue, database, HTTP) more than the grader.
SMALL_SUITE = '''"""Two tests: a small suite that grades quickly."""

import math

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, GRUCell, gru_cell


def test_hand_example_gru_cell():
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    h2 = gru_cell(Tensor([[1.0]], dtype=np.float64), np.array([[0.5]]), *w)
    assert np.allclose(h2.data, [[0.25 * np.tanh(0.75) + 0.375]])


def test_state_dict_keys_follow_torch():
    gru = GRU(3, 4, num_layers=2)
    assert list(gru.state_dict()) == [
        "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
        "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
    ]
    assert list(GRUCell(3, 4).state_dict()) == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
'''


def small_archive() -> bytes:
    return tar_gz({"test_small.py": SMALL_SUITE})


# A hostile suite that costs nothing in CPU and much in wall time: its test waits in a fixture,
# on a barrier two threads meet at, one of them twice. Only numpy, which the policy allows.
SLEEPER_SUITE = '''"""A test that blocks in its fixture."""

import numpy as np
import pytest

from tinyllm.rnn.gru import GRU


@pytest.fixture
def blocked():
    np.testing.run_threaded(
        lambda i, b: [b.wait({timeout}) for _ in range(1 + (i == 0))], max_workers=2, pass_count=True, pass_barrier=True
    )


def test_keys(blocked):
    assert "bias_hh_l0" in GRU(2, 3).state_dict()
'''


def sleeper_archive(block_s: float | None = None) -> bytes:
    """The sleeper's suite: its test blocks until its time limit kills it, or with ``block_s``
    only that long (then the barrier breaks and the test fails)."""
    return tar_gz({"test_sleeper.py": SLEEPER_SUITE.format(timeout="" if block_s is None else repr(block_s))})


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0-100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class BurstResult:
    """What a burst did and how long each part took (seconds)."""

    post_status: list[int] = field(default_factory=list)
    post_latency: list[float] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    health_status: list[int] = field(default_factory=list)
    health_latency: list[float] = field(default_factory=list)
    health_errors: list[str] = field(default_factory=list)  # polls that got no answer in two tries
    health_retried: list[str] = field(default_factory=list)  # polls answered on the second try only
    final: dict[int, str] = field(default_factory=dict)  # id -> status when the burst ended
    listed: dict[int, dict] = field(default_factory=dict)  # id -> the submission as listed at the end
    sleeper_status: list[int] = field(default_factory=list)  # the answer to each of the sleeper's posts
    kinds: dict[int, str] = field(default_factory=dict)  # id -> the kind of suite posted (a mix's)
    posted_s: float = 0.0  # first POST sent to last POST answered
    graded_s: float = 0.0  # first POST sent to every submission done (or error)

    def waited(self) -> list[float]:
        """Seconds each of the burst's graded submissions waited in the queue (stored to taken)."""
        return [_seconds(body["created_at"], body["started_at"]) for body in self.listed.values() if body["started_at"]]

    def waited_by_kind(self, kind: str) -> list[float]:
        """:meth:`waited` of the submissions of one kind of a mix."""
        return [_seconds(b["created_at"], b["started_at"]) for i, b in self.listed.items()
                if b["started_at"] and self.kinds.get(i) == kind]

    def graded_by_kind(self, kind: str) -> list[float]:
        """Seconds each submission of one kind of a mix took to grade (taken to report)."""
        return [_seconds(b["started_at"], b["finished_at"]) for i, b in self.listed.items()
                if b["started_at"] and b["finished_at"] and self.kinds.get(i) == kind]

    def turnaround(self) -> list[float]:
        """Seconds from each graded submission's storing to its report."""
        return [_seconds(body["created_at"], body["finished_at"]) for body in self.listed.values()
                if body["finished_at"]]

    @property
    def graded_per_s(self) -> float:
        return len(self.ids) / self.graded_s if self.graded_s else 0.0

    @property
    def posted_per_s(self) -> float:
        return len(self.post_status) / self.posted_s if self.posted_s else 0.0

    def summary(self) -> str:
        h, p = self.health_latency, self.post_latency
        return (
            f"{len(self.ids)} submissions accepted in {self.posted_s:.2f} s ({self.posted_per_s:.1f}/s), "
            f"graded in {self.graded_s:.1f} s: {self.graded_per_s:.2f} submissions/s; "
            f"POST p50 {percentile(p, 50) * 1e3:.1f} ms p99 {percentile(p, 99) * 1e3:.1f} ms; "
            f"healthz ({len(h)} requests while grading) p50 {percentile(h, 50) * 1e3:.1f} ms "
            f"p99 {percentile(h, 99) * 1e3:.1f} ms, {len(self.health_retried)} answered on a second try, "
            f"{len(self.health_errors)} unanswered"
        )


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


class Sleeper:
    """A hostile student among the burst's: posts the sleeper's suite at once, and again every
    ``every_s`` until stopped, as fast as the service takes it (the answers go into
    ``result.sleeper_status``)."""

    def __init__(self, url: str, token: str, result: BurstResult, *, every_s: float = 1.0) -> None:
        self.url = url
        self.token = token
        self.result = result
        self.every_s = every_s
        self.archive = sleeper_archive()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._post, daemon=True)

    def start(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {self.token}"}) as http:
            self._once(http)  # before the burst: the first is the first job taken
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=120)

    def _post(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {self.token}"}) as http:
            while not self._stopping.wait(self.every_s):
                self._once(http)

    def _once(self, http: httpx.Client) -> None:
        answer = http.post("/v1/submissions", files={"archive": ("sleeper.tar.gz", self.archive, "application/gzip")})
        self.result.sleeper_status.append(answer.status_code)


class HealthPoller:
    """Polls ``GET /healthz`` on a thread of its own until stopped; while ``measuring`` is set,
    each answer's status and latency go into ``result``.

    A request whose connection drops is asked once more at once, as a browser does with a
    connection the server closed (``result.health_retried``); a poll that gets no answer in
    two tries, or whose request times out, goes into ``result.health_errors``. Polling goes on
    after either: a failed request can neither end the measurement nor go unreported."""

    def __init__(self, url: str, result: BurstResult, *, interval_s: float = 0.05, timeout_s: float = 10.0) -> None:
        self.url = url
        self.result = result
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.measuring = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=2 * self.timeout_s + 5)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.url, timeout=self.timeout_s) as http:
            while not self._stopping.is_set():
                self._once(http)
                time.sleep(self.interval_s)

    def _once(self, http: httpx.Client) -> None:
        started = time.perf_counter()
        failures: list[str] = []
        status = None
        for _ in range(2):
            try:
                status = http.get("/healthz").status_code
                break
            except httpx.TimeoutException as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                break  # a server too slow to answer: asking again would hide it
            except httpx.HTTPError as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
        elapsed = time.perf_counter() - started
        if not self.measuring.is_set():  # only what a user sees while the server is busy counts
            return
        told = f"GET /healthz after {elapsed:.2f} s: " + "; then ".join(failures)
        if status is None:
            self.result.health_errors.append(told)
            return
        if failures:
            self.result.health_retried.append(told)
        self.result.health_status.append(status)
        self.result.health_latency.append(elapsed)


def run_burst(
    url: str,
    *,
    student_tokens: list[str],
    staff_token: str,
    archive: bytes | Callable[[int], tuple[str, bytes]],
    count: int = 100,
    threads: int = 16,
    health_interval_s: float = 0.05,
    min_health_samples: int = 300,
    timeout_s: float = 600.0,
    sleeper_token: str | None = None,
) -> BurstResult:
    """Post ``count`` copies of ``archive`` at once (student ``i % len(student_tokens)`` posts the
    i-th; ``archive(i)``, a mix, gives the i-th's kind and archive), then wait until every accepted one is graded; ``/healthz`` is polled all along, and
    until at least ``min_health_samples`` answers were timed. With ``sleeper_token``, that
    student posts the sleeper's suite just before the burst and again every second while it
    lasts (:class:`Sleeper`); only the burst's own submissions are waited for."""
    result = BurstResult()
    lock = threading.Lock()
    health = HealthPoller(url, result, interval_s=health_interval_s)
    sleeper = Sleeper(url, sleeper_token, result) if sleeper_token else None

    local = threading.local()
    clients: list[httpx.Client] = []

    def post(index: int) -> None:
        if not hasattr(local, "http"):  # one connection per posting thread, as separate users have
            local.http = httpx.Client(base_url=url, timeout=60)
            with lock:
                clients.append(local.http)
        token = student_tokens[index % len(student_tokens)]
        kind, data = archive(index) if callable(archive) else ("", archive)
        started = time.perf_counter()
        answer = local.http.post(
            "/v1/submissions",
            headers={"Authorization": f"Bearer {token}"},
            files={"archive": (f"burst-{index}.tar.gz", data, "application/gzip")},
        )
        elapsed = time.perf_counter() - started
        with lock:
            result.post_status.append(answer.status_code)
            result.post_latency.append(elapsed)
            if answer.status_code == 202:
                result.ids.append(answer.json()["id"])
                result.kinds[result.ids[-1]] = kind

    health.start()
    health.measuring.set()
    started = time.perf_counter()
    try:
        if sleeper is not None:
            sleeper.start()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(post, range(count)))  # list(): re-raise any exception of a POST
        result.posted_s = time.perf_counter() - started

        wanted = set(result.ids)
        deadline = time.monotonic() + timeout_s
        with httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {staff_token}"}) as staff:
            while True:
                listed = staff.get("/v1/submissions", params={"limit": 1000}).json()
                result.listed = {s["id"]: s for s in listed if s["id"] in wanted}
                result.final = {i: s["status"] for i, s in result.listed.items()}
                finished = all(result.final.get(i) in ("done", "error") for i in wanted)
                if finished or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
        result.graded_s = time.perf_counter() - started
        health.measuring.clear()
    finally:
        if sleeper is not None:
            sleeper.stop()
        health.stop()
        for client in clients:
            client.close()
    if len(result.health_latency) < min_health_samples:
        raise AssertionError(
            f"only {len(result.health_latency)} /healthz answers were timed while grading "
            f"(wanted {min_health_samples}): the burst ended too soon to measure; "
            f"POST answers {dict(Counter(result.post_status))}, {len(result.ids)} accepted, "
            f"their statuses at the end {dict(Counter(result.final.values()))}; "
            f"/healthz requests that got no answer: {len(result.health_errors)} {result.health_errors[:3]}"
        )
    return result
