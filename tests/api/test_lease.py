"""A grading's claim is a lease its worker renews: while the worker lives the job stays its own
however long it takes; once the worker dies and the lease lapses, another worker takes the job,
and the dead one's result could no longer be stored.

On real SQLite and PostgreSQL databases (PostgreSQL's own clock times the lease there), with
the in-process queue and the Celery task grading real submissions.
"""

from __future__ import annotations

import threading
import time

import pytest
from pydantic import ValidationError
from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.config import Settings
from api.store.db import Submission
from api.work.lease import Heartbeat
from api.work.queue import LocalQueue
from tests.api.burst import sleeper_archive

LEASE_S = 1.0
BEAT_S = 0.2


def _store(make_session: sessionmaker, student: str, archive: bytes = b"x") -> int:
    with make_session() as session:
        user, _ = crud.create_user(session, name=student, role="student")
        return crud.create_submission(session, user=user, assignment="l3-3-gru", archive=archive, name=f"{student}.tar.gz").id


def _claim(make_session: sessionmaker, worker: str) -> Submission | None:
    with make_session() as session:
        return crud.claim_next(session, worker=worker, lease_s=LEASE_S)


def _row(make_session: sessionmaker, submission_id: int) -> Submission:
    with make_session() as session:
        return session.get(Submission, submission_id)


def test_a_renewed_claim_holds_and_a_lapsed_one_goes_to_another_worker(make_session: sessionmaker) -> None:
    job = _store(make_session, "alice")
    assert _claim(make_session, "w1").id == job
    with Heartbeat(make_session=make_session, submission_id=job, worker="w1", every_s=BEAT_S):
        time.sleep(3 * LEASE_S)  # three leases long: renewed all along
        assert _claim(make_session, "w2") is None
        with make_session() as session:
            assert crud.lapsed_claims(session, lease_s=LEASE_S) == []
    # w1 renews no more (its worker died): after the lease the job is the next to take, before
    # a queued one of a student never served.
    other = _store(make_session, "bob")
    time.sleep(LEASE_S + 0.3)
    with make_session() as session:
        assert crud.lapsed_claims(session, lease_s=LEASE_S) == [job]
    retaken = _claim(make_session, "w2")
    assert (retaken.id, retaken.claimed_by, retaken.attempts) == (job, "w2", 2)
    # The dead worker's late result cannot be stored, and its heartbeat, were it to beat
    # again, cannot renew what is w2's now.
    with make_session() as session:
        assert crud.renew_claim(session, job, worker="w1") is False
        assert crud.finish_submission(session, job, worker="w1", error="late") is False
        assert crud.renew_claim(session, job, worker="w2") is True
        assert crud.finish_submission(session, job, worker="w2", error="graded once") is True
    assert _row(make_session, job).error == "graded once"
    assert _claim(make_session, "w2").id == other


def test_a_claim_never_renewed_lapses_too(make_session: sessionmaker) -> None:
    """A worker killed before its first beat: the claim itself starts the lease."""
    job = _store(make_session, "alice")
    assert _claim(make_session, "w1").id == job
    assert _claim(make_session, "w2") is None
    time.sleep(LEASE_S + 0.3)
    assert _claim(make_session, "w2").id == job


def test_the_heartbeat_must_fit_the_lease_several_times() -> None:
    assert Settings().lease_s <= 30 and Settings().heartbeat_s * 3 <= Settings().lease_s
    with pytest.raises(ValidationError, match=r"heartbeat_s \(20\) must be at most a third of lease_s \(30\)"):
        Settings(heartbeat_s=20, lease_s=30)


def test_the_local_queue_renews_its_claim_while_it_grades(make_session: sessionmaker, database_url: str) -> None:
    # A grading that blocks for longer than the lease (the sleeper's test waits 3 s).
    job = _store(make_session, "sleeper", sleeper_archive(block_s=3.0))
    settings = Settings(database_url=database_url, workers=1, lease_s=LEASE_S, heartbeat_s=BEAT_S, grade_jobs=1)
    queue = LocalQueue(settings=settings, make_session=make_session)
    queue.start()
    try:
        deadline = time.monotonic() + 60
        while _row(make_session, job).status == "queued":
            assert time.monotonic() < deadline, "never taken"
            time.sleep(0.05)
        taken_for = 0.0
        while _row(make_session, job).status == "running":
            assert _claim(make_session, "other") is None, "a live grading's job was taken"
            time.sleep(0.2)
            taken_for += 0.2
            assert time.monotonic() < deadline + 60, "not graded"
    finally:
        queue.stop()
    row = _row(make_session, job)
    assert (row.status, row.attempts) == ("done", 1), row.error
    assert taken_for >= 2 * LEASE_S  # it did run past the lease


@pytest.fixture
def celery_grade():
    """The Celery app's grade task, run eagerly (no broker): the task's own code."""
    from celery.signals import worker_process_shutdown

    from api.work.celery_app import make_celery
    from api.work.tasks import GRADE

    def make(url: str, **settings):
        app = make_celery(Settings(database_url=url, queue="celery", **settings))
        app.conf.task_always_eager = True
        return app.tasks[GRADE]

    yield make
    worker_process_shutdown.send(sender=None)


def test_the_celery_task_renews_its_claim_while_it_grades(make_session, database_url, celery_grade) -> None:
    job = _store(make_session, "sleeper", sleeper_archive(block_s=3.0))
    task = celery_grade(database_url, lease_s=LEASE_S, heartbeat_s=BEAT_S, grade_jobs=1)
    taken: list[Submission | None] = []
    result: list[object] = []
    grading = threading.Thread(target=lambda: result.append(task.apply(args=(job,))))
    grading.start()
    try:
        deadline = time.monotonic() + 60
        while _row(make_session, job).status == "queued" and time.monotonic() < deadline:
            time.sleep(0.05)
        while _row(make_session, job).status == "running" and time.monotonic() < deadline + 60:
            taken.append(_claim(make_session, "other"))
            time.sleep(0.2)
    finally:
        grading.join()
    assert (result[0].state, result[0].result) == ("SUCCESS", "graded")
    assert len(taken) >= 2 * LEASE_S / 0.2 and not any(taken), "a live grading's job was taken"
    row = _row(make_session, job)
    assert (row.status, row.attempts) == ("done", 1), row.error
