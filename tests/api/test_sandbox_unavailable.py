"""A grading machine whose sandbox is unavailable for a while loses no submission.

Its grading threads put each submission they take back in the queue, untouched, and wait for
the sandbox to be checked again; once it is back the submission is graded as if nothing had
happened. A machine whose sandbox stays unavailable stores, after a few tries, an error that
says what is missing, not an "internal error". The sandbox is made unavailable the way a new
machine is before ``scripts/setup-sandbox.sh`` has run: no sandbox user.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import grader.sandbox.process as process
import grader.sandbox.status as status
from api.store import crud
from api.config import Settings
from api.store.db import Submission, make_engine, make_sessionmaker
from api.work.jobs import GradingDeferred, grade_submission
from api.store.migrate import upgrade
from api.work.queue import LocalQueue
from grader.sandbox.users import sandbox_users
from tests.api.conftest import example_archive


@pytest.fixture
def database(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'mutagrade.db'}"
    upgrade(url)
    make_session = make_sessionmaker(make_engine(url))
    with make_session() as session:
        user, _ = crud.create_user(session, name="ada", role="student")
        submission = crud.create_submission(session, user=user, assignment="l3-3-gru", archive=example_archive(), name="ada.tar.gz")
    return url, make_session, submission.id


def _sandbox_users(monkeypatch, found) -> None:
    """Make ``found`` the sandbox users this process sees, in each module that looks them up
    (the worker's start first: it never sees users the check has not seen)."""
    for module in (process, status):
        monkeypatch.setattr(module, "sandbox_users", found)


@pytest.fixture
def no_sandbox_users(monkeypatch):
    """This process sees no sandbox user (its answer about the sandbox is asked afresh)."""
    _sandbox_users(monkeypatch, lambda: [])
    status._ANSWERS.clear()
    yield
    status._ANSWERS.clear()


def _row(make_session, submission_id: int) -> Submission:
    with make_session() as session:
        return session.get(Submission, submission_id)


def test_each_claim_puts_the_submission_back_until_the_last_stores_why(database, no_sandbox_users):
    url, make_session, submission_id = database
    settings = Settings(database_url=url, sandbox_attempts=3, sandbox_retry_s=7.0)
    for attempt in (1, 2):
        with make_session() as session:
            submission = crud.claim_next(session, worker="w")
        with pytest.raises(GradingDeferred) as deferred:
            grade_submission(submission, settings=settings, make_session=make_session, worker="w")
        assert deferred.value.retry_after_s == 7.0
        assert "no user mutagrade-sandbox-N on this machine" in deferred.value.why
        row = _row(make_session, submission_id)
        assert (row.status, row.attempts, row.sandbox_waits, row.claimed_by, row.error) == (
            "queued", attempt, attempt, None, None)
    with make_session() as session:
        submission = crud.claim_next(session, worker="w")
    assert grade_submission(submission, settings=settings, make_session=make_session, worker="w") is True
    row = _row(make_session, submission_id)
    assert (row.status, row.attempts, row.sandbox_waits, row.report_json) == ("error", 3, 2, None)
    assert row.error.startswith("could not be graded: the grading sandbox was not available on this machine in 3 tries")
    assert "sandbox mode auto needs layer(s) uid" in row.error and "mutagrade doctor" in row.error
    assert "internal error" not in row.error


def test_a_submission_put_back_is_not_taken_from_a_regrade(database, no_sandbox_users):
    """Staff regraded it while its grading met the sandbox: the regrade's queue entry stands."""
    url, make_session, submission_id = database
    settings = Settings(database_url=url, sandbox_attempts=3)
    with make_session() as session:
        submission = crud.claim_next(session, worker="w")
    with make_session() as session:
        crud.regrade(session, submission=session.get(Submission, submission_id))
        crud.claim_next(session, worker="other")
    assert grade_submission(submission, settings=settings, make_session=make_session, worker="w") is False
    row = _row(make_session, submission_id)
    assert (row.status, row.claimed_by, row.sandbox_waits) == ("running", "other", 0)


def test_a_regrade_gets_every_try_again(database, no_sandbox_users):
    """Claims before (a regrade, a restart) do not use up the tries: only waits for the
    sandbox count, and a regrade starts them again."""
    url, make_session, submission_id = database
    settings = Settings(database_url=url, sandbox_attempts=2)
    with make_session() as session:
        submission = crud.claim_next(session, worker="w")
    with pytest.raises(GradingDeferred):
        grade_submission(submission, settings=settings, make_session=make_session, worker="w")
    with make_session() as session:
        crud.regrade(session, submission=session.get(Submission, submission_id))
    for _ in range(3):  # claimed and put back by a stopped server three times: no wait counted
        with make_session() as session:
            crud.claim_next(session, worker="w")
            crud.requeue_running(session)
    with make_session() as session:
        submission = crud.claim_next(session, worker="w")
    assert (submission.attempts, submission.sandbox_waits) == (5, 0)
    with pytest.raises(GradingDeferred):  # the first of its two tries again, not an error
        grade_submission(submission, settings=settings, make_session=make_session, worker="w")
    assert _row(make_session, submission_id).sandbox_waits == 1


def test_the_queue_waits_for_the_sandbox_and_then_grades(database, monkeypatch):
    url, make_session, submission_id = database
    settings = Settings(database_url=url, workers=2, sandbox_attempts=5, sandbox_retry_s=3.0)
    users = sandbox_users
    monkeypatch.setattr(status, "RETRY_FAILED_PROBE_S", 0.5)  # the answer is asked again this soon
    _sandbox_users(monkeypatch, lambda: [])
    status._ANSWERS.clear()
    queue = LocalQueue(settings=settings, make_session=make_session)
    queue.start()
    try:
        deadline = time.monotonic() + 60
        while (_row(make_session, submission_id).status, _row(make_session, submission_id).attempts) != ("queued", 1):
            assert time.monotonic() < deadline, "the submission was never put back"
            time.sleep(0.02)
        # One thread took it and put it back; for the 3 s pause neither takes it again.
        for _ in range(10):
            time.sleep(0.05)
            row = _row(make_session, submission_id)
            assert (row.status, row.attempts, row.claimed_by) == ("queued", 1, None)
        _sandbox_users(monkeypatch, users)  # the setup script has run meanwhile
        deadline = time.monotonic() + 120
        while _row(make_session, submission_id).status != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        queue.stop()
        status._ANSWERS.clear()
    row = _row(make_session, submission_id)
    assert (row.status, row.attempts, row.sandbox_waits, row.error) == ("done", 2, 1, None)
    assert row.passed is True and json.loads(row.report_json)["passed"] is True


@pytest.fixture
def celery_grade():
    """The Celery app's grade task, run eagerly: the task's own code, with no broker. Its
    warm workers (and their sandbox users) are let go afterwards, as a worker process's end
    does."""
    from celery.signals import worker_process_shutdown

    from api.work.celery_app import make_celery
    from api.work.tasks import GRADE

    def make(url: str, **settings):
        app = make_celery(Settings(database_url=url, queue="celery", **settings))
        app.conf.task_always_eager = True
        return app.tasks[GRADE]

    yield make
    worker_process_shutdown.send(sender=None)


def test_a_celery_task_keeps_its_job_and_grades_it_once_the_sandbox_is_back(database, monkeypatch, celery_grade):
    """The worker keeps the job it took (the others stay in the broker for other workers),
    waits, and grades it once the sandbox has been checked again."""
    import threading

    url, make_session, submission_id = database
    users = sandbox_users
    monkeypatch.setattr(status, "RETRY_FAILED_PROBE_S", 0.2)
    _sandbox_users(monkeypatch, lambda: [])
    status._ANSWERS.clear()
    task = celery_grade(url, sandbox_retry_s=1.0, sandbox_attempts=5)
    seen: list[tuple[str, str | None, int]] = []

    def setup_script_runs() -> None:  # while the task waits: the row is still the task's
        deadline = time.monotonic() + 60
        while _row(make_session, submission_id).sandbox_waits < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        row = _row(make_session, submission_id)
        seen.append((row.status, row.claimed_by, row.sandbox_waits))
        _sandbox_users(monkeypatch, users)

    helper = threading.Thread(target=setup_script_runs)
    helper.start()
    try:
        started = time.monotonic()
        result = task.apply(args=(submission_id,))
        waited = time.monotonic() - started
    finally:
        helper.join()
        status._ANSWERS.clear()
    assert (result.state, result.result) == ("SUCCESS", "graded")
    assert seen and seen[0][0] == "running" and seen[0][1] is not None and seen[0][2] == 1
    assert waited >= 1.0  # it waited for the sandbox to be checked again
    row = _row(make_session, submission_id)
    assert (row.status, row.attempts, row.sandbox_waits, row.error) == ("done", 1, 1, None)
    assert row.passed is True


def test_a_celery_task_whose_time_limit_cannot_hold_the_wait_puts_the_job_back(database, no_sandbox_users, celery_grade):
    url, make_session, submission_id = database
    task = celery_grade(url, sandbox_retry_s=30.0, task_time_limit_s=40.0)
    result = task.apply(args=(submission_id,))
    assert result.result == "queued again: the sandbox is not available on this worker"
    row = _row(make_session, submission_id)
    assert (row.status, row.claimed_by, row.attempts, row.sandbox_waits) == ("queued", None, 1, 1)
