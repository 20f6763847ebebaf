"""Faults in the compose deployment, with real processes (tests/deploy/conftest.py starts it on
loopback): a worker killed with SIGKILL mid-burst, Redis restarted empty with jobs queued, the
api killed and started again. After each, every job is graded, and graded exactly once.

"Graded once" is checked where it is recorded: one row per submission in PostgreSQL, its
``attempts`` (a claim counts one; a retake after a dead worker two), and the workers' own logs,
which say ``'graded'`` once for the task whose claim stood (as many times in all as there are
submissions), and never that another worker's result stood. Every wait is bounded.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text

from api.config import Settings

from tests.api.conftest import tar_gz, wait_done
from tests.deploy.conftest import WEAK, Deployment, deployment, graded_lines, wait_for
from tests.services import PostgresServer

SECOND_RESULT = "another worker's result stood"


_ENGINES: dict[str, Engine] = {}


def _rows(live: Deployment) -> list:
    """Every submission's row, straight from PostgreSQL (one engine per database: polled often)."""
    engine = _ENGINES.get(live.database_url) or _ENGINES.setdefault(live.database_url, create_engine(live.database_url))
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT id, status, claimed_by, attempts, passed, started_at, heartbeat_at, finished_at, "
                 "now() AS db_now FROM submissions ORDER BY id")
        ).all()


@pytest.fixture(autouse=True)
def _dispose_engines() -> Iterator[None]:
    yield
    while _ENGINES:
        _ENGINES.popitem()[1].dispose()


def _post_weak(live: Deployment, students: list[str], each: int = 2) -> list[int]:
    """``each`` weak suites from every student (two: as many as one may have in flight), in turn."""
    ids = []
    clients = [live.server.client(student) for student in students]
    try:
        for number in range(each):
            for client in clients:
                answer = client.post("/v1/submissions", files={"archive": (f"weak{number}.tar.gz", tar_gz(WEAK))})
                assert answer.status_code == 202, answer.text
                ids.append(answer.json()["id"])
    finally:
        for client in clients:
            client.close()
    return ids


def _assert_each_graded_once(live: Deployment, ids: list[int], retaken: dict[int, int] | None = None) -> None:
    """Every id is done, not passed (the weak suite), in one row, with ``attempts`` 1 (or as
    ``retaken`` says), and its final task said 'graded' exactly once in the workers' logs."""
    retaken = retaken or {}
    rows = _rows(live)
    assert [row.id for row in rows] == ids, "a submission was lost or stored twice"
    logs = live.logs()
    assert SECOND_RESULT not in logs
    for row in rows:
        assert row.status == "done" and row.passed is False, row
        assert row.attempts == retaken.get(row.id, 1), row
        task_id = row.claimed_by.split(":", 2)[2]
        assert graded_lines(logs, task_id) == 1, f"submission {row.id}: task {task_id} not graded exactly once"
    # No grading was stored but the ones above: as many as there are submissions.
    assert len(re.findall(r"mutagrade\.grade\[[-\w]+\] succeeded in [\d.]+s: 'graded'", logs)) == len(ids)


def test_a_worker_killed_mid_burst_leaves_its_job_to_the_other(tmp_path: Path, postgres: PostgresServer) -> None:
    # Every setting as the compose file and the defaults have it: the claim's lease (30 s),
    # its renewal (every 5 s), the sweeper (30 s), Redis's visibility timeout (30 minutes).
    lease_s = Settings().lease_s
    with deployment(tmp_path, postgres) as live:
        posted = time.monotonic()
        ids = _post_weak(live, ["alice", "bob", "carol"])

        def fresh_job() -> tuple[int, str, str, datetime] | None:
            # A job claimed less than 0.5 s ago: far from its end (a weak suite takes over a
            # second), so the kill that follows lands mid-job.
            for row in _rows(live):
                if row.status == "running" and (row.db_now - row.started_at).total_seconds() < 0.5:
                    _, pid, task_id = row.claimed_by.split(":", 2)
                    owner = live.worker_of(int(pid))
                    if owner is not None:
                        return row.id, owner, task_id, row.started_at
            return None

        victim_id, victim, task_id, claimed_at = wait_for(fresh_job, 60, "a job starting", every=0.02)
        survivor = next(name for name in live.workers if name != victim)
        live.workers[victim].kill()  # the worker and its pool: no ack, no goodbye
        killed = next(row for row in _rows(live) if row.id == victim_id)
        assert killed.status == "running" and killed.claimed_by.endswith(task_id), "killed after the job"
        killed_at = killed.db_now

        with live.server.client("prof", "staff") as staff:
            for submission_id in ids:
                left = 240 - (time.monotonic() - posted)
                assert wait_done(staff, submission_id, timeout=max(left, 1))["status"] == "done"

        _assert_each_graded_once(live, ids, retaken={victim_id: 2})
        final = next(row for row in _rows(live) if row.id == victim_id)
        _, pid, final_task = final.claimed_by.split(":", 2)
        # Taken by the surviving worker, under a claim of its own (a task of its own) ...
        assert final_task != task_id and live.worker_of(int(pid)) == survivor
        assert graded_lines(live.logs(), task_id) == 0
        # ... not before the dead worker's claim had gone unrenewed for the lease (so a live
        # worker's job is never taken), and graded within 90 s of the kill, not after Redis's
        # visibility timeout.
        retaken_s, graded_s = ((moment - killed_at).total_seconds() for moment in (final.started_at, final.finished_at))
        print(f"\nthe killed job: retaken {retaken_s:.1f} s after the kill, graded {graded_s:.1f} s after it; "
              f"the burst graded {time.monotonic() - posted:.1f} s after it was posted")
        assert (final.started_at - claimed_at).total_seconds() >= lease_s
        assert graded_s <= 90


def test_redis_restarted_empty_while_jobs_wait(tmp_path: Path, postgres: PostgresServer) -> None:
    with deployment(tmp_path, postgres, resend_after_s="3") as live:
        with live.server.client("prof", "staff") as staff:
            ids = _post_weak(live, ["alice", "bob"])
            # Two workers take one job each; the others wait in Redis's list for queue cpu.
            wait_for(lambda: live.redis.command("LLEN", "cpu") not in (":0", ""), 30, "jobs waiting in Redis")
            live.redis.kill()
            live.redis.start()  # same port, no data: the waiting jobs are gone from the broker
            assert live.redis.command("LLEN", "cpu") == ":0"
            assert any(row.status == "queued" for row in _rows(live)), "nothing was left waiting"

            # The api's sweeper sends what stays queued again; workers reconnect by themselves.
            for submission_id in ids:
                assert wait_done(staff, submission_id, timeout=150)["status"] == "done"
        ready = wait_for(lambda: httpx.get(f"{live.api.url}/readyz", timeout=10).status_code == 200, 30, "ready")
        assert ready
        _assert_each_graded_once(live, ids)


def test_the_api_restarted_loses_nothing(tmp_path: Path, postgres: PostgresServer) -> None:
    # No sweeper within the test (600 s): only what the api does when it starts can save a job.
    with deployment(tmp_path, postgres, resend_after_s="600") as live:
        # Jobs already sent: the api dies right after accepting them.
        sent = _post_weak(live, ["alice"])
        live.api.kill()

        # Jobs never sent: the broker is down when they arrive, so they are only stored ...
        live.redis.kill()
        live.api.start(require_ready=False)
        unready = wait_for(lambda: httpx.get(f"{live.api.url}/readyz", timeout=10), 60, "the api answers")
        assert unready.status_code == 503 and unready.json()["queue"] == "not running"
        stored = _post_weak(live, ["bob"])
        # ... and the api dies before the broker is back.
        live.api.kill()
        live.redis.start()
        live.api.start()  # on start-up it sends every job still queued

        with live.server.client("prof", "staff") as staff:
            for submission_id in sent + stored:
                assert wait_done(staff, submission_id, timeout=150)["status"] == "done"
        _assert_each_graded_once(live, sent + stored)
