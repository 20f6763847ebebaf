"""Grading one stored submission: the job every queue backend runs, by submission id.

Idempotent: it re-fetches the archive from the database, opens it as every intake opens a
submission (:func:`grader.flows.intake.open_submission`: unpacked into a fresh temporary folder,
its tests found and its journal verified), and stores the report only if it still holds the
claim on the submission.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.config import Settings, UnknownAssignment, archive_limits, layout_of
from api.store.db import Submission
from grader.core.assignment import load_assignment
from grader.core.caps import report_json_within
from grader.flows.grading import GradingInputError, grade_suite
from grader.flows.intake import Upload, open_submission
from grader.core.models import Audience
from grader.core.paths import Layout
from grader.flows.serving import RunLimits, SandboxUnavailable, WorkerPool

__all__ = ["POOL_IDLE_S", "GradingDeferred", "Pools", "grade_submission"]

log = logging.getLogger("mutagrade.queue")

POOL_IDLE_S = 10.0  # seconds a thread's warm workers of an assignment wait for its next job


class GradingDeferred(Exception):
    """The submission is back in the queue, as it was: this machine's sandbox is not available
    now (bubblewrap failing for a while, say). Its grader waits ``retry_after_s`` (the sandbox
    is checked again by then) before it takes a job again."""

    def __init__(self, why: str, retry_after_s: float) -> None:
        super().__init__(why)
        self.why = why
        self.retry_after_s = retry_after_s


class Pools:
    """Warm grading workers for one queue thread (or Celery process): a pool per hosted
    assignment, each started at its assignment's first job. A pool's workers load one
    assignment's variants; no two assignments share one. A pool not used for ``idle_s`` while
    the thread grades other assignments lets its workers go (started again at its next job)."""

    def __init__(self, settings: Settings, *, idle_s: float = POOL_IDLE_S) -> None:
        self.settings = settings
        self.idle_s = idle_s
        self._pools: dict[str, WorkerPool] = {}
        self._used: dict[str, float] = {}

    def of(self, layout: Layout) -> WorkerPool:
        """The pool of ``layout``'s assignment; the others' unused past ``idle_s`` are closed."""
        name, now = layout.assignment_name, time.monotonic()
        for other, pool in self._pools.items():
            if other != name and now - self._used[other] > self.idle_s:
                pool.close()
        pool = self._pools.get(name)
        if pool is None:
            limits = RunLimits.of(load_assignment(layout.assignment), jobs=self.settings.grade_jobs)
            pool = self._pools[name] = WorkerPool(layout=layout, limits=limits)
        self._used[name] = now
        return pool

    def close(self) -> None:
        """Let every pool's workers go (a pool starts them again at its next job)."""
        for pool in self._pools.values():
            pool.close()


def grade_submission(
    submission: Submission, *, settings: Settings, make_session: sessionmaker, worker: str,
    pools: Pools | None = None, hold_claim: bool = False,
) -> bool:
    """Grade a claimed submission and store the outcome; returns whether it was stored.

    It is graded for the assignment it was made for. Bad input (an archive that no longer
    unpacks, tests where they cannot be told, an assignment the service no longer hosts) is
    stored as the submission's error, as is a failure of the grader itself; a journal that
    cannot be read is one that does not verify, and the suite is graded.

    Args:
        pools: the caller's warm workers (none: workers started for this grading alone).
        hold_claim: when the sandbox is unavailable, keep the claim (the caller waits and
            calls again) instead of putting the submission back in the queue.

    Raises:
        GradingDeferred: the sandbox is unavailable here: the submission waits for it, back in
            the queue unless ``hold_claim`` (after ``settings.sandbox_attempts`` tries it is
            stored as an error instead).
    """
    upload = Upload(submission.archive_name, submission.archive)
    try:
        layout = layout_of(settings, submission.assignment)
        assignment = load_assignment(layout.assignment)
        with open_submission(upload, layout=layout, assignment=assignment, archive_limits=archive_limits(settings),
                             limits=RunLimits.of(assignment, jobs=settings.grade_jobs)) as opened:
            try:
                report = grade_suite(
                    opened.tests,
                    layout=layout,
                    assignment=assignment,
                    journal=opened.journal,  # its replay counts against the grading's budgets
                    audience=Audience.STAFF,
                    jobs=settings.grade_jobs,
                    submission=f"submission {submission.id} ({submission.archive_name})",
                    full_matrix=bool(submission.full_matrix),
                    pool=pools.of(layout) if pools is not None else None,
                )
            except GradingInputError as exc:  # files named as in the archive, not where it was unpacked
                raise GradingInputError(opened.relabel(str(exc))) from None
    except SandboxUnavailable as exc:
        return _without_sandbox(submission, exc, settings=settings, make_session=make_session, worker=worker,
                                release=not hold_claim)
    except (GradingInputError, UnknownAssignment) as exc:
        with make_session() as session:
            return crud.finish_submission(session, submission.id, worker=worker, error=f"could not be graded: {exc}")
    except Exception as exc:  # noqa: BLE001 - recorded, and the worker goes on with the next job
        log.exception("submission %s: the grader failed", submission.id)  # the student sees one line; staff the cause
        with make_session() as session:
            return crud.finish_submission(session, submission.id, worker=worker, error=f"internal error: {exc!r}")
    with make_session() as session:
        return crud.finish_submission(
            session,
            submission.id,
            worker=worker,
            report_json=report_json_within(report),  # within the stored cap (grader.core.caps)
            passed=report.passed,
            kill_rate=report.score.kill_rate,
        )


def _without_sandbox(
    submission: Submission, exc: SandboxUnavailable, *, settings: Settings, make_session: sessionmaker, worker: str,
    release: bool,
) -> bool:
    """Nothing can be graded on this machine now: the submission waits (back in the queue if
    ``release``) to be tried again once the sandbox has been checked again, up to
    ``settings.sandbox_attempts`` tries in all; then it is stored as an error that says what is
    missing and what to do."""
    tries = submission.sandbox_waits + 1
    if tries < settings.sandbox_attempts:
        with make_session() as session:
            waits = crud.wait_for_sandbox(session, submission.id, worker=worker, release=release)
        if waits is None:
            return False  # regraded or requeued meanwhile: not ours to put back
        submission.sandbox_waits = waits
        raise GradingDeferred(str(exc), settings.sandbox_retry_s) from exc
    error = (
        f"could not be graded: the grading sandbox was not available on this machine in {tries} tries: {exc}. "
        "Staff: `mutagrade doctor` says what is missing; regrade the submission once it is fixed"
    )
    with make_session() as session:
        return crud.finish_submission(session, submission.id, worker=worker, error=error)
