"""The Celery application, built by :func:`make_celery` from settings, with the tasks of
:mod:`api.work.tasks` (``grade`` on queue ``cpu``, ``golden`` on queue ``gpu``) registered on it.
"""

from __future__ import annotations

from celery import Celery

from api.config import Settings, get_settings
from api.work.tasks import GOLDEN, GRADE, register

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
        task_routes={GRADE: {"queue": "cpu"}, GOLDEN: {"queue": "gpu"}},
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
    register(app, settings)
    return app
