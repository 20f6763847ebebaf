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

import grader.sandbox as sandbox
from api import crud
from api.config import Settings
from api.db import Submission, make_engine, make_sessionmaker
from api.jobs import GradingDeferred, grade_submission
from api.migrate import upgrade
from api.queue import LocalQueue
from tests.api.conftest import example_archive


@pytest.fixture
def database(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'mutagrade.db'}"
    upgrade(url)
    make_session = make_sessionmaker(make_engine(url))
    with make_session() as session:
        user, _ = crud.create_user(session, name="ada", role="student")
        submission = crud.create_submission(session, user=user, archive=example_archive(), name="ada.tar.gz")
    return url, make_session, submission.id


@pytest.fixture
def no_sandbox_users(monkeypatch):
    """This process sees no sandbox user (its answer about the sandbox is asked afresh)."""
    monkeypatch.setattr(sandbox, "sandbox_users", lambda: [])
    sandbox._ANSWERS.clear()
    yield
    sandbox._ANSWERS.clear()


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
        assert (row.status, row.attempts, row.claimed_by, row.error) == ("queued", attempt, None, None)
    with make_session() as session:
        submission = crud.claim_next(session, worker="w")
    assert grade_submission(submission, settings=settings, make_session=make_session, worker="w") is True
    row = _row(make_session, submission_id)
    assert (row.status, row.attempts, row.report_json) == ("error", 3, None)
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
    assert (row.status, row.claimed_by) == ("running", "other")


def test_the_queue_waits_for_the_sandbox_and_then_grades(database, monkeypatch):
    url, make_session, submission_id = database
    settings = Settings(database_url=url, workers=2, sandbox_attempts=5, sandbox_retry_s=3.0)
    users = sandbox.sandbox_users
    monkeypatch.setattr(sandbox, "RETRY_FAILED_PROBE_S", 0.5)  # the answer is asked again this soon
    monkeypatch.setattr(sandbox, "sandbox_users", lambda: [])
    sandbox._ANSWERS.clear()
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
        monkeypatch.setattr(sandbox, "sandbox_users", users)  # the setup script has run meanwhile
        deadline = time.monotonic() + 120
        while _row(make_session, submission_id).status != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        queue.stop()
        sandbox._ANSWERS.clear()
    row = _row(make_session, submission_id)
    assert (row.status, row.attempts, row.error) == ("done", 2, None)
    assert row.passed is True and json.loads(row.report_json)["passed"] is True


def test_a_celery_task_meeting_it_retries_after_the_same_wait(database, no_sandbox_users, monkeypatch):
    """The Celery task puts the submission back and asks to be retried once the sandbox has
    been checked again. Run eagerly here (the task's own code, no broker): the retries follow
    at once, so the third claim stores the error."""
    from api.celery_app import make_celery

    url, make_session, submission_id = database
    app = make_celery(Settings(database_url=url, queue="celery", sandbox_retry_s=42.0, sandbox_attempts=3))
    app.conf.task_always_eager = True
    task = app.mutagrade_tasks["grade"]
    asked: list[tuple[float, int]] = []
    retry = task.retry

    def recorded(*args, **kwargs):
        asked.append((kwargs["countdown"], kwargs["max_retries"]))
        return retry(*args, **kwargs)

    monkeypatch.setattr(task, "retry", recorded)
    result = task.apply(args=(submission_id,))
    assert (result.state, result.result) == ("SUCCESS", "graded")
    assert asked == [(42.0, 3), (42.0, 3)]
    row = _row(make_session, submission_id)
    assert (row.status, row.attempts) == ("error", 3)
    assert row.error.startswith("could not be graded: the grading sandbox was not available")
