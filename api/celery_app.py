"""The Celery application and its two tasks: ``grade`` (queue ``cpu``) and ``golden`` (queue ``gpu``).

This module owns the app; it is built by :func:`make_celery` from settings. Tasks are thin:
they take ids, re-fetch everything from the database, call the grader's library functions and
write results to the database. They are idempotent (a claim in the database decides who grades),
so they can be ``acks_late``. A grading's claim is renewed while it runs (``api.lease``): a job
whose worker dies is taken by the next worker to look for one once the claim has lapsed
(``Settings.lease_s``), long before Redis would deliver its message again, and graded once.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from api import crud
from api.config import Settings, get_settings
from api.db import make_engine, make_sessionmaker
from api.jobs import GradingDeferred, grade_submission, make_pool
from api.lease import Heartbeat

log = logging.getLogger("mutagrade.celery")

__all__ = ["make_celery"]


def make_celery(settings: Settings | None = None) -> Celery:
    """The Celery app for these settings, with the ``grade`` and ``golden`` tasks."""
    settings = settings or get_settings()
    app = Celery("mutagrade", broker=settings.broker_url)
    app.conf.update(
        task_acks_late=True,  # a job is acknowledged only when it is done ...
        task_reject_on_worker_lost=True,  # ... and given to another worker if this one dies
        worker_prefetch_multiplier=1,  # one job at a time per process: no hoarding
        task_time_limit=settings.task_time_limit_s,
        # The soft limit lets the task record its error before the hard kill: 10 s before it,
        # or a tenth of the limit when that is short (never a fixed 1 s under a short limit).
        task_soft_time_limit=settings.task_time_limit_s - min(10.0, settings.task_time_limit_s / 10),
        task_default_queue="cpu",
        task_routes={"mutagrade.grade": {"queue": "cpu"}, "mutagrade.golden": {"queue": "gpu"}},
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            # kombu looks for jobs whose worker vanished only every interval x throttle seconds
            # (10 x 10 by default): 100 s on top of the timeout. Scan every tenth of the timeout
            # (at most 10 s) instead, so a dead worker's job moves on soon after its lease ends.
            "unacked_restore_interval": max(1.0, min(10.0, settings.visibility_timeout_s / 10)),
            "unacked_restore_throttle": 1,
            # The scan holds a lock in Redis; one held by a worker killed mid-scan would block
            # every scan for 5 minutes by default. A scan takes milliseconds.
            "unacked_mutex_expire": int(min(300.0, max(10.0, settings.visibility_timeout_s / 2))),
        },
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,  # results go to the database, not to a result backend
        worker_hijack_root_logger=False,
    )
    state: dict[str, object] = {}

    def sessions():
        if "make_session" not in state:  # one engine per worker process, made after the fork
            state["make_session"] = make_sessionmaker(make_engine(settings.database_url))
        return state["make_session"]

    def pool():
        if "pool" not in state:  # two grading workers kept warm by this process, from job to job
            state["pool"] = make_pool(settings)
        return state["pool"]

    @worker_process_init.connect(weak=False)
    def _fresh_engine(**_: object) -> None:
        state.clear()

    @worker_process_shutdown.connect(weak=False)
    def _stop_pool(**_: object) -> None:
        if "pool" in state:
            state["pool"].close()

    @app.task(name="mutagrade.grade", bind=True, max_retries=3, default_retry_delay=5)
    def grade(task, submission_id: int) -> str:
        """Grade the next job (idempotent). Each message stands for one job to do: it was sent
        for ``submission_id``, but the task takes whichever job is next in turn over students
        (``crud.claim_next``: first one whose worker died, its claim lapsed), so the broker's
        order, first come first served, does not decide who waits. A message left with
        nothing to take (its job was taken by another's) does nothing."""
        # claimed_by holds 100 characters; a long host name must not push the task id out of it.
        worker = f"{socket.gethostname()[:50]}:{os.getpid()}:{task.request.id}"
        make_session = sessions()
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
            stored = _grade_held(submission, worker=worker, make_session=make_session)
        if stored is None:
            return "queued again: the sandbox is not available on this worker"
        return "graded" if stored else "graded, but another worker's result stood"

    def _grade_held(submission, *, worker: str, make_session) -> bool | None:
        """Grade a claimed submission; None if it was put back in the queue instead."""
        started = time.monotonic()
        while True:
            try:
                return grade_submission(submission, settings=settings, make_session=make_session, worker=worker,
                                        pool=pool(), hold_claim=True)
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

    @app.task(name="mutagrade.golden", bind=True, max_retries=1)
    def golden(task, run_id: int) -> str:
        """Compare variants (and a student implementation) with live torch, on this worker's device."""
        from api.golden_jobs import run_golden

        return run_golden(run_id, settings=settings, make_session=sessions())

    app.mutagrade_tasks = {"grade": grade, "golden": golden}
    return app
