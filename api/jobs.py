"""Grading one stored submission: the job every queue backend runs, by submission id.

Idempotent: it re-fetches the archive from the database, grades it in a fresh temporary folder
and stores the report only if it still holds the claim on the submission.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy.orm import sessionmaker

from api import crud
from api.config import Settings, archive_limits, layout_of
from grader.flows.archive import ArchiveError, unpack
from api.db import Submission
from grader.core.assignment import load_assignment
from grader.core.caps import report_json_within
from grader.flows.grading import GradingInputError, grade_suite
from grader.core.journal import NO_JOURNAL, JournalFormatError
from grader.core.models import Audience, JournalSummary
from grader.run.runner import RunLimits
from grader.run.scheduler import WorkerPool
from grader.sandbox.base import SandboxUnavailable

__all__ = ["GradingDeferred", "grade_submission", "make_pool"]


class GradingDeferred(Exception):
    """The submission is back in the queue, as it was: this machine's sandbox is not available
    now (bubblewrap failing for a while, say). Its grader waits ``retry_after_s`` (the sandbox
    is checked again by then) before it takes a job again."""

    def __init__(self, why: str, retry_after_s: float) -> None:
        super().__init__(why)
        self.why = why
        self.retry_after_s = retry_after_s


def make_pool(settings: Settings) -> WorkerPool:
    """Warm grading workers for one queue thread (started at its first job)."""
    layout = layout_of(settings)
    return WorkerPool(layout=layout, limits=RunLimits.of(load_assignment(layout.assignment), jobs=settings.grade_jobs))


def grade_submission(
    submission: Submission, *, settings: Settings, make_session: sessionmaker, worker: str,
    pool: WorkerPool | None = None, hold_claim: bool = False,
) -> bool:
    """Grade a claimed submission and store the outcome; returns whether it was stored.

    Bad input (an archive that no longer unpacks, a malformed journal) is stored as the
    submission's error, as is a failure of the grader itself.

    Args:
        hold_claim: when the sandbox is unavailable, keep the claim (the caller waits and
            calls again) instead of putting the submission back in the queue.

    Raises:
        GradingDeferred: the sandbox is unavailable here: the submission waits for it, back in
            the queue unless ``hold_claim`` (after ``settings.sandbox_attempts`` tries it is
            stored as an error instead).
    """
    layout = layout_of(settings)
    assignment = load_assignment(layout.assignment)
    unpacked = ""
    try:
        with tempfile.TemporaryDirectory(prefix="mutagrade-submission-") as tmp:
            unpacked = tmp
            files = unpack(submission.archive, Path(tmp), archive_limits(settings))
            journal = None
            if files.journal is None and assignment.require_journal:
                journal = JournalSummary(checked=True, ok=False, problems=[NO_JOURNAL])
            report = grade_suite(
                files.tests,
                layout=layout,
                assignment=assignment,
                journal=journal,
                journal_file=files.journal,  # verified under the grading's own limits
                audience=Audience.STAFF,
                jobs=settings.grade_jobs,
                submission=f"submission {submission.id} ({submission.archive_name})",
                full_matrix=bool(submission.full_matrix),
                pool=pool,
            )
    except SandboxUnavailable as exc:
        return _without_sandbox(submission, exc, settings=settings, make_session=make_session, worker=worker,
                                release=not hold_claim)
    except (ArchiveError, GradingInputError, JournalFormatError) as exc:
        # Files named as in the archive, not where it was unpacked.
        why = str(exc).replace(unpacked, submission.archive_name) if unpacked else str(exc)
        with make_session() as session:
            return crud.finish_submission(session, submission.id, worker=worker, error=f"could not be graded: {why}")
    except Exception as exc:  # noqa: BLE001 - recorded, and the worker goes on with the next job
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
