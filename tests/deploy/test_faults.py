"""Faults in the compose deployment, with real processes (tests/deploy/conftest.py starts it on
loopback): a worker killed with SIGKILL mid-job, Redis restarted empty with jobs queued, the
api killed and started again. After each, every job is graded, and graded exactly once.

"Graded once" is checked where it is recorded: one row per submission in PostgreSQL, its
``attempts`` (a claim counts one; a retake after a dead worker two), and the workers' own logs,
which say ``'graded'`` once for the task whose claim stood, and never that another worker's
result stood. Every wait is bounded.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from sqlalchemy import Engine, create_engine, text

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
            text("SELECT id, status, claimed_by, attempts, passed, started_at, now() AS db_now "
                 "FROM submissions ORDER BY id")
        ).all()


@pytest.fixture(autouse=True)
def _dispose_engines() -> Iterator[None]:
    yield
    while _ENGINES:
        _ENGINES.popitem()[1].dispose()


def _post_weak(client: httpx.Client, count: int) -> list[int]:
    ids = []
    for number in range(count):
        answer = client.post("/v1/submissions", files={"archive": (f"weak{number}.tar.gz", tar_gz(WEAK))})
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["id"])
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


def test_a_worker_killed_mid_job_leaves_it_to_the_other(tmp_path: Path, postgres: PostgresServer) -> None:
    # A short visibility timeout so Redis hands the dead worker's job on within the test; the
    # sweeper is kept out of it (600 s) so it is that redelivery, and nothing else, that saves it.
    # One child per run: a job lasts a little longer, so a kill can be sure to land mid-job.
    with deployment(tmp_path, postgres, visibility_timeout_s="30", task_time_limit_s="20",
                    resend_after_s="600", grade_jobs="1") as live:
        with live.server.client("alice") as alice:
            ids = _post_weak(alice, 4)

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

            for submission_id in ids:
                assert wait_done(alice, submission_id, timeout=150)["status"] == "done"

        _assert_each_graded_once(live, ids, retaken={victim_id: 2})
        final = next(row for row in _rows(live) if row.id == victim_id)
        _, pid, final_task = final.claimed_by.split(":", 2)
        # The same message, delivered again by Redis, taken by the surviving worker ...
        assert final_task == task_id
        assert live.worker_of(int(pid)) == survivor
        # ... only once the dead worker's claim had lapsed (27 s: 30 s less a tenth), and soon
        # after the visibility timeout: kombu looks for lost jobs every 3 s here, not every 100 s.
        retaken_after = (final.started_at - claimed_at).total_seconds()
        assert 27 <= retaken_after <= 60, retaken_after


def test_redis_restarted_empty_while_jobs_wait(tmp_path: Path, postgres: PostgresServer) -> None:
    with deployment(tmp_path, postgres, resend_after_s="3") as live:
        with live.server.client("alice") as alice:
            ids = _post_weak(alice, 4)
            # Two workers take one job each; the others wait in Redis's list for queue cpu.
            wait_for(lambda: live.redis.command("LLEN", "cpu") not in (":0", ""), 30, "jobs waiting in Redis")
            live.redis.kill()
            live.redis.start()  # same port, no data: the waiting jobs are gone from the broker
            assert live.redis.command("LLEN", "cpu") == ":0"
            assert any(row.status == "queued" for row in _rows(live)), "nothing was left waiting"

            # The api's sweeper sends what stays queued again; workers reconnect by themselves.
            for submission_id in ids:
                assert wait_done(alice, submission_id, timeout=150)["status"] == "done"
        ready = wait_for(lambda: httpx.get(f"{live.api.url}/readyz", timeout=10).status_code == 200, 30, "ready")
        assert ready
        _assert_each_graded_once(live, ids)


def test_the_api_restarted_loses_nothing(tmp_path: Path, postgres: PostgresServer) -> None:
    # No sweeper within the test (600 s): only what the api does when it starts can save a job.
    with deployment(tmp_path, postgres, resend_after_s="600") as live:
        with live.server.client("alice") as alice:
            # Jobs already sent: the api dies right after accepting them.
            sent = _post_weak(alice, 2)
        live.api.kill()

        # Jobs never sent: the broker is down when they arrive, so they are only stored ...
        live.redis.kill()
        live.api.start(require_ready=False)
        with live.server.client("alice") as alice:
            unready = wait_for(lambda: httpx.get(f"{live.api.url}/readyz", timeout=10), 60, "the api answers")
            assert unready.status_code == 503 and unready.json()["queue"] == "not running"
            stored = _post_weak(alice, 2)
        # ... and the api dies before the broker is back.
        live.api.kill()
        live.redis.start()
        live.api.start()  # on start-up it sends every job still queued

        with live.server.client("alice") as alice:
            for submission_id in sent + stored:
                assert wait_done(alice, submission_id, timeout=150)["status"] == "done"
        _assert_each_graded_once(live, sent + stored)
