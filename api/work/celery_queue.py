"""The Celery backend of the queue interface: jobs go to Redis, Celery workers grade them."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.work.celery_app import make_celery
from api.config import Settings
from api.store.db import utcnow
from api.work.tasks import GOLDEN, GRADE

__all__ = ["CeleryQueue"]

log = logging.getLogger("mutagrade.queue")


class CeleryQueue:
    """Sends each submission id to the ``cpu`` queue; the database still holds every job's state."""

    def __init__(self, *, settings: Settings, make_session: sessionmaker) -> None:
        self.settings = settings
        self.make_session = make_session
        self.app = make_celery(settings)
        self._stopping = threading.Event()
        self._sweeper: threading.Thread | None = None

    @property
    def resend_after_s(self) -> float:
        return self.settings.resend_after_s

    def start(self) -> None:
        # Jobs stored but never sent (the API stopped between the two) are sent now.
        self._resend(older_than_s=0.0)
        self._sweeper = threading.Thread(target=self._sweep, daemon=True)
        self._sweeper.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=5)

    def _sweep(self) -> None:
        """Send again what stays queued: the broker may have lost it (a Redis restarted without
        its data) or never got it (it was down). Also what stays running on a lapsed claim: its
        worker died, and the broker would hand its message on only after the visibility
        timeout. A job sent twice is graded once, since the task claims it in the database
        first. Lapsed claims are looked for at every heartbeat, the rest every
        ``resend_after_s``."""
        tick = min(self.resend_after_s, self.settings.heartbeat_s)
        last_resend = time.monotonic()
        while not self._stopping.wait(tick):
            try:
                if time.monotonic() - last_resend >= self.resend_after_s:
                    last_resend = time.monotonic()
                    self._resend(older_than_s=self.resend_after_s)
                else:
                    self._wake_for_lapsed()
            except Exception:  # noqa: BLE001 - the database may be away; try again next round
                log.exception("could not look for jobs to send again")

    def _wake_for_lapsed(self) -> None:
        """A grading whose claim was not renewed for the lease: its worker died. Any worker
        that takes a message takes that job first (``crud.claim_next``), so a message is sent
        only when none waits in the broker: when the workers are idle. (Sent while one waits,
        they would pile up for as long as no worker consumes the queue.)"""
        with self.make_session() as session:
            lapsed = crud.lapsed_claims(session, lease_s=self.settings.lease_s)
        if lapsed and self._waiting("cpu") == 0:
            for submission_id in lapsed:
                self.enqueue(submission_id)
            log.info("sent %d job(s) whose worker died to the broker again", len(lapsed))

    def _resend(self, *, older_than_s: float) -> None:
        now = utcnow()
        cutoff = now - timedelta(seconds=older_than_s)
        with self.make_session() as session:
            submissions = [
                crud.queued_since(session, cutoff=cutoff),
                crud.lapsed_claims(session, lease_s=self.settings.lease_s),
            ]
            # No golden run may last longer than its claim's lease (Settings), so a claim older
            # than it belongs to a dead worker.
            lapsed = now - timedelta(seconds=self.settings.claim_lease_s)
            goldens = crud.golden_runs_to_resend(session, cutoff=cutoff, lapsed=lapsed)
        sent = self._send_missing("cpu", *submissions, self.enqueue)
        sent += self._send_missing("gpu", *goldens, self.enqueue_golden)
        if sent:
            log.info("sent %d job(s) to the broker again", sent)

    def _send_missing(self, queue: str, queued: list[int], lapsed: list[int], send) -> int:
        """Send ``lapsed`` jobs again, and ``queued`` ones when the broker holds fewer messages
        for ``queue`` than there are: then some were lost. (Sending them all every round would
        pile up copies for as long as no worker consumes the queue, e.g. no gpu worker.)"""
        jobs = list(lapsed)
        if queued:
            waiting = self._waiting(queue)
            if waiting is None:  # the broker is away: nothing can be sent now anyway
                return 0
            if waiting < len(queued):
                jobs += queued
        for job_id in jobs:
            send(job_id)
        return len(jobs)

    def _waiting(self, queue: str) -> int | None:
        """How many messages the broker holds for ``queue`` (None when it cannot be asked)."""
        try:
            with self.app.connection_for_write() as connection:
                return connection.default_channel.queue_declare(queue=queue).message_count
        except Exception:  # noqa: BLE001 - the broker is away
            return None

    def enqueue(self, submission_id: int) -> None:
        self._send(GRADE, submission_id, queue="cpu", what="submission")

    def enqueue_golden(self, run_id: int) -> None:
        self._send(GOLDEN, run_id, queue="gpu", what="golden run")

    def _send(self, task: str, job_id: int, *, queue: str, what: str) -> None:
        try:
            self.app.tasks[task].apply_async(
                args=[job_id], queue=queue, retry=True,
                retry_policy={"max_retries": 3, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
            )
        except Exception:  # noqa: BLE001 - the job is stored; the sweeper sends it when the broker is back
            log.warning("broker unavailable: %s %d stays queued and is sent again later", what, job_id)

    def healthy(self) -> bool:
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=1)
            return True
        except Exception:  # noqa: BLE001 - health checks report, they do not raise
            return False
