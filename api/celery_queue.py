"""The Celery backend of the queue interface: jobs go to Redis, Celery workers grade them."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from api.celery_app import make_celery
from api.config import Settings
from api.db import Submission, utcnow

__all__ = ["CeleryQueue"]

log = logging.getLogger("mutagrade.queue")


class CeleryQueue:
    """Sends each submission id to the ``cpu`` queue; the database still holds every job's state."""

    RESEND_AFTER_S = 30.0

    def __init__(self, *, settings: Settings, make_session: sessionmaker) -> None:
        self.settings = settings
        self.make_session = make_session
        self.app = make_celery(settings)
        self._stopping = threading.Event()
        self._sweeper: threading.Thread | None = None

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
        its data) or never got it (it was down). A job sent twice is graded once, since the
        task claims it in the database first."""
        while not self._stopping.wait(self.RESEND_AFTER_S):
            try:
                self._resend(older_than_s=self.RESEND_AFTER_S)
            except Exception:  # noqa: BLE001 - the database may be away; try again next round
                log.exception("could not look for queued jobs to send again")

    def _resend(self, *, older_than_s: float) -> None:
        cutoff = utcnow() - timedelta(seconds=older_than_s)
        with self.make_session() as session:
            queued = list(
                session.scalars(
                    select(Submission.id).where(Submission.status == "queued", Submission.created_at <= cutoff)
                )
            )
        for submission_id in queued:
            self.enqueue(submission_id)
        if queued:
            log.info("sent %d queued job(s) to the broker", len(queued))

    def enqueue(self, submission_id: int) -> None:
        try:
            self.app.mutagrade_tasks["grade"].apply_async(
                args=[submission_id], queue="cpu", retry=True,
                retry_policy={"max_retries": 3, "interval_start": 0, "interval_step": 0.5, "interval_max": 1},
            )
        except Exception:  # noqa: BLE001 - the job is stored; the sweeper sends it when the broker is back
            log.warning("broker unavailable: submission %d stays queued and is sent again later", submission_id)

    def enqueue_golden(self, run_id: int) -> None:
        self.app.mutagrade_tasks["golden"].apply_async(args=[run_id], queue="gpu")

    def healthy(self) -> bool:
        try:
            with self.app.connection_for_write() as connection:
                connection.ensure_connection(max_retries=1, timeout=1)
            return True
        except Exception:  # noqa: BLE001 - health checks report, they do not raise
            return False
