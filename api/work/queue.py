"""The queue behind one small interface: submissions in, graded submissions out.

``LocalQueue`` (the default) grades in threads of the server process. Jobs live in the
database (a submission's status is its job's state), so jobs left queued or running when the
server stopped resume when it starts again; each thread takes the next job in turn over
students (``crud.claim_next``), once the machine's admission lets one more grading in
(:mod:`grader.run.admission`: one per core, more while the cores sit idle, as ``grade-batch``
does), so a grading whose tests sleep holds no one up. The Celery backend implements the same
interface.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Protocol

from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.config import Settings
from api.work.jobs import POOL_IDLE_S, GradingDeferred, Pools, grade_submission
from api.work.lease import Heartbeat
from grader.flows.serving import machine_admission

__all__ = ["LocalQueue", "Queue", "make_queue"]

log = logging.getLogger("mutagrade.queue")


class Queue(Protocol):
    """What the API needs of a queue."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def enqueue(self, submission_id: int) -> None: ...
    def enqueue_golden(self, run_id: int) -> None: ...
    def healthy(self) -> bool: ...


class LocalQueue:
    """Grading threads in this process, fed from the database."""

    def __init__(self, *, settings: Settings, make_session: sessionmaker) -> None:
        self.settings = settings
        self.make_session = make_session
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._wake = threading.Condition()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._paused_until = 0.0  # no thread takes a job before then (the sandbox is unavailable)
        self.admission = machine_admission("auto")
        # Threads enough for every grading the admission may let in at once, unless set.
        self.count = settings.workers if settings.workers is not None else self.admission.capacity.most

    def start(self) -> None:
        with self.make_session() as session:
            resumed = crud.requeue_running(session)
        if resumed:
            log.info("resumed %d job(s) left running by a stopped server", resumed)
        for number in range(self.count):
            thread = threading.Thread(target=self._loop, args=(f"{self.name}/{number}",), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stopping.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    def enqueue(self, submission_id: int) -> None:
        with self._wake:
            self._wake.notify()

    def enqueue_golden(self, run_id: int) -> None:
        from api.work.golden_jobs import run_golden

        # One comparison at a time is plenty on a machine without a GPU worker.
        thread = threading.Thread(
            target=run_golden, args=(run_id,), kwargs={"settings": self.settings, "make_session": self.make_session},
            daemon=True,
        )
        thread.start()

    def healthy(self) -> bool:
        return all(t.is_alive() for t in self._threads) and len(self._threads) == self.count

    def _loop(self, worker: str) -> None:
        # Each thread keeps two grading workers warm (per assignment) while jobs keep coming (a burst pays their
        # start-up once), and lets them go, with their sandbox users, once it has been idle.
        pools = Pools(self.settings)
        idle_since = time.monotonic()
        try:
            while not self._stopping.is_set():
                try:
                    paused = self._paused_until - time.monotonic()
                    if paused > 0:
                        self._stopping.wait(paused)
                        continue
                    if not self.admission.enter(self._stopping):
                        break
                    try:
                        graded = self._take_one(worker, pools)
                    finally:
                        self.admission.leave()
                    if not graded:
                        if time.monotonic() - idle_since > POOL_IDLE_S:
                            pools.close()
                        with self._wake:
                            self._wake.wait(timeout=1.0)
                        continue
                    idle_since = time.monotonic()
                except Exception:  # noqa: BLE001 - a broken job must not end the worker thread
                    log.exception("grading worker %s: unexpected error; continuing", worker)
                    pools.close()
                    self._stopping.wait(1.0)
        finally:
            pools.close()


    def _take_one(self, worker: str, pools: Pools) -> bool:
        """Claim the next job and grade it; False when there was none."""
        with self.make_session() as session:
            # In turn over students; first a job whose claim lapsed (a server sharing this
            # database died grading it).
            submission = crud.claim_next(session, worker=worker, lease_s=self.settings.lease_s)
        if submission is None:
            return False
        try:
            with Heartbeat(make_session=self.make_session, submission_id=submission.id, worker=worker,
                           every_s=self.settings.heartbeat_s):
                grade_submission(submission, settings=self.settings, make_session=self.make_session,
                                 worker=worker, pools=pools)
        except GradingDeferred as deferred:
            # Every thread of this process would meet the same sandbox: all wait.
            self._paused_until = max(self._paused_until, time.monotonic() + deferred.retry_after_s)
            log.warning("grading worker %s: submission %d queued again, grading resumes in %.0f s: %s",
                        worker, submission.id, deferred.retry_after_s, deferred.why)
            pools.close()
        return True


def make_queue(*, settings: Settings, make_session: sessionmaker) -> Queue:
    """The queue backend the settings name."""
    if settings.queue == "celery":
        from api.work.celery_queue import CeleryQueue

        return CeleryQueue(settings=settings, make_session=make_session)
    return LocalQueue(settings=settings, make_session=make_session)
