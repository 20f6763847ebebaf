"""A burst of 100 submissions from 10 students against one server with two grading threads:
every one is accepted, stored once and graded once, and the server keeps answering
``/healthz`` quickly while it grades.

The suite submitted is small (two tests) so the burst measures the service more than the
grader. The figures are printed (``pytest -s``) for the README; ``bench/burst.py`` measures the
same standalone.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterator

import pytest

from tests.api.burst import percentile, run_burst, small_archive
from tests.api.conftest import Server, make_server

SUBMISSIONS = 100
STUDENTS = 10
RATE_LIMIT = 10  # per student and minute: 10 students x 10 is the whole burst, none refused
HEALTH_P99_S = 0.100


@pytest.fixture
def busy_server(tmp_path: Path) -> Iterator[Server]:
    # Each student's ten are posted at once, so all ten are in flight at once: none refused.
    srv = make_server(tmp_path, workers="2", grade_jobs="1", rate_limit=str(RATE_LIMIT), max_in_flight=str(RATE_LIMIT))
    srv.start()
    yield srv
    srv.stop()
    # Shown by pytest only if the test failed: what the server said while it was measured.
    print(f"server log (last 5000 characters):\n{srv.log.read_text(errors='replace')[-5000:]}")


def test_a_burst_is_graded_exactly_once_and_health_stays_fast(busy_server: Server, tmp_path: Path) -> None:
    students = [busy_server.token(f"burst-{n:02d}") for n in range(STUDENTS)]
    result = run_burst(
        busy_server.url,
        student_tokens=students,
        staff_token=busy_server.token("burst-staff", "staff"),
        archive=small_archive(),
        count=SUBMISSIONS,
        timeout_s=900,  # a loaded 2-core machine grades the burst in 2 to 10 minutes
    )
    print(f"\nburst: {result.summary()}")

    # Accepted, all of them: no 429 (each student is at, not over, the limit), no 5xx.
    assert result.post_status == [202] * SUBMISSIONS
    # None duplicated: 100 distinct ids ...
    assert len(set(result.ids)) == SUBMISSIONS
    # ... none lost: each reached done, none errored, and the listing holds exactly these.
    assert sorted(result.final) == sorted(result.ids)
    assert set(result.final.values()) == {"done"}, {i: s for i, s in result.final.items() if s != "done"}

    # Graded once each: the database itself says every job was claimed a single time.
    database = busy_server.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT id, status, attempts, claimed_by FROM submissions").fetchall()
    assert sorted(r[0] for r in rows) == sorted(result.ids)
    assert {(status, attempts) for _, status, attempts, _ in rows} == {("done", 1)}
    # Both grading threads took part.
    assert len({claimed_by for *_, claimed_by in rows}) == 2

    # The server stayed responsive while it graded: every /healthz got an answer, and a 200.
    assert result.health_errors == []
    assert set(result.health_status) == {200}
    assert len(result.health_latency) >= 300
    assert percentile(result.health_latency, 99) < HEALTH_P99_S, result.summary()
