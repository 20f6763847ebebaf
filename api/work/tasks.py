"""The Celery tasks: ``grade`` (queue ``cpu``) and ``golden`` (queue ``gpu``).

Tasks are thin: they take ids, re-fetch everything from the database, call the grader's library
functions and write results to the database. They are idempotent (a claim in the database
decides who grades), so they can be ``acks_late``. A grading's claim is renewed while it runs
(``api.work.lease``): a job whose worker dies is taken by the next worker to look for one once the
claim has lapsed (``Settings.lease_s``), long before Redis would deliver its message again, and
graded once.

:func:`register` puts them on an app (:func:`api.work.celery_app.make_celery` does); a caller sends
one by its name, ``app.tasks[GRADE]``.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from celery import Celery, Task
from celery.signals import worker_process_init, worker_process_shutdown
from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.config import Settings
from api.store.db import Submission, make_engine, make_sessionmaker
from api.work.jobs import GradingDeferred, Pools, grade_submission
from api.work.lease import Heartbeat
from grader.flows.serving import Admission, machine_admission

__all__ = ["GOLDEN", "GRADE", "JobTask", "golden", "grade", "register"]

log = logging.getLogger("mutagrade.celery")

GRADE = "mutagrade.grade"
GOLDEN = "mutagrade.golden"


class _Process:
    """What the tasks of one app keep in a worker process: one engine, and two grading workers
    per assignment kept warm from job to job; made at first use, after the fork."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._make_session: sessionmaker | None = None
        self._pools: Pools | None = None
        self._admission: Admission | None = None

    def sessions(self) -> sessionmaker:
        if self._make_session is None:
            self._make_session = make_sessionmaker(make_engine(self.settings.database_url))
        return self._make_session

    def pools(self) -> Pools:
        if self._pools is None:
            self._pools = Pools(self.settings)
        return self._pools

    def admission(self) -> Admission:
        """The machine's admission, shared with every grading process of this machine."""
        if self._admission is None:
            self._admission = machine_admission("auto")
        return self._admission

    def forget(self) -> None:
        """A fresh process (forked from the parent): nothing of the parent's is used."""
        self._make_session = self._pools = self._admission = None

    def close(self) -> None:
        if self._pools is not None:
            self._pools.close()


_PROCESSES: list[_Process] = []  # of every app the tasks were registered on, for the signals below


@worker_process_init.connect(weak=False)
def _fresh_process(**_: object) -> None:
    for process in _PROCESSES:
        process.forget()


@worker_process_shutdown.connect(weak=False)
def _stop_pools(**_: object) -> None:
    for process in _PROCESSES:
        process.close()


class JobTask(Task):
    """The base of the tasks: the settings of the app they are registered on, and its process state."""

    process: _Process  # given by register()

    @property
    def settings(self) -> Settings:
        return self.process.settings


def grade(task: JobTask, submission_id: int) -> str:
    """Grade the next job (idempotent). Each message stands for one job to do: it was sent
    for ``submission_id``, but the task takes whichever job is next in turn over students
    (``crud.claim_next``: first one whose worker died, its claim lapsed), so the broker's
    order, first come first served, does not decide who waits. A message left with
    nothing to take (its job was taken by another's) does nothing."""
    # claimed_by holds 100 characters; a long host name must not push the task id out of it.
    worker = f"{socket.gethostname()[:50]}:{os.getpid()}:{task.request.id}"
    make_session = task.process.sessions()
    # One grading per core, more while the cores sit idle (grader.run.admission): the job is
    # claimed once this one may start, so its time graded is its own.
    with task.process.admission().slot():
        return _claim_and_grade(task, submission_id, worker=worker, make_session=make_session)


def _claim_and_grade(task: JobTask, submission_id: int, *, worker: str, make_session: sessionmaker) -> str:
    settings = task.settings
    try:
        with make_session() as session:
            submission = crud.claim_next(session, worker=worker, lease_s=settings.lease_s)
    except Exception as exc:  # the database is away for a moment: try again later
        raise task.retry(exc=exc) from exc
    if submission is None:
        return "skipped: nothing queued, and no claim has lapsed"
    log.info("submission %d (sent as submission %d): claimed, attempt %d", submission.id, submission_id,
             submission.attempts)
    with Heartbeat(make_session=make_session, submission_id=submission.id, worker=worker,
                   every_s=settings.heartbeat_s):
        stored = _grade_held(task, submission, worker=worker, make_session=make_session)
    if stored is None:
        return "queued again: the sandbox is not available on this worker"
    return "graded" if stored else "graded, but another worker's result stood"


def _grade_held(task: JobTask, submission: Submission, *, worker: str, make_session: sessionmaker) -> bool | None:
    """Grade a claimed submission; None if it was put back in the queue instead."""
    settings = task.settings
    started = time.monotonic()
    while True:
        try:
            return grade_submission(submission, settings=settings, make_session=make_session, worker=worker,
                                    pools=task.process.pools(), hold_claim=True)
        except GradingDeferred as deferred:
            # This worker's sandbox is not ready: it keeps the job (the others stay in the
            # broker for other workers), takes no other meanwhile, and tries again once the
            # sandbox has been checked again; the tries are bounded by the settings. A wait
            # that would not leave half the task's time limit puts the job back instead
            # (the API's sweeper sends it again).
            if time.monotonic() - started + deferred.retry_after_s > settings.task_time_limit_s / 2:
                with make_session() as session:
                    crud.release(session, submission.id, worker=worker)
                return None
            log.warning("submission %d waits %.0f s for the sandbox: %s", submission.id,
                        deferred.retry_after_s, deferred.why)
            time.sleep(deferred.retry_after_s)


def golden(task: JobTask, run_id: int) -> str:
    """Compare variants (and a student implementation) with live torch, on this worker's device."""
    from api.work.golden_jobs import run_golden

    return run_golden(run_id, settings=task.settings, make_session=task.process.sessions())


def register(app: Celery, settings: Settings) -> None:
    """Put the tasks on ``app``, to run under ``settings``."""
    process = _Process(settings)
    _PROCESSES.append(process)
    # Not shared: an app made later in this process (another settings') gets its own, not these.
    common = {"bind": True, "base": JobTask, "process": process, "shared": False}
    app.task(name=GRADE, max_retries=3, default_retry_delay=5, **common)(grade)
    app.task(name=GOLDEN, max_retries=1, **common)(golden)
