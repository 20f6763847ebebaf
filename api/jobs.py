"""Grading one stored submission: the job every queue backend runs, by submission id.

Idempotent: it re-fetches the archive from the database, grades it in a fresh temporary folder
and stores the report only if it still holds the claim on the submission.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sqlalchemy.orm import sessionmaker

from api import crud
from api.archive import ArchiveError, ArchiveLimits, unpack
from api.config import Settings
from api.db import Submission
from grader.assignment import load_assignment
from grader.grading import GradingInputError, grade_suite
from grader.journal import JournalFormatError, verify_journal
from grader.models import JournalSummary
from grader.paths import Layout, default_layout
from grader.matrix import WorkerPool

__all__ = ["archive_limits", "grade_submission", "layout_of", "make_pool"]


def layout_of(settings: Settings) -> Layout:
    return Layout(settings.root.resolve()) if settings.root else default_layout()


def archive_limits(settings: Settings) -> ArchiveLimits:
    return ArchiveLimits(
        max_bytes=settings.max_upload_bytes, max_files=settings.max_files, max_unpacked=settings.max_unpacked_bytes
    )


def make_pool(settings: Settings) -> WorkerPool:
    """Warm grading workers for one queue thread (started at its first job)."""
    layout = layout_of(settings)
    return WorkerPool(layout=layout, limits=load_assignment(layout.assignment).run_limits(settings.grade_jobs))


def grade_submission(
    submission: Submission, *, settings: Settings, make_session: sessionmaker, worker: str,
    pool: WorkerPool | None = None,
) -> bool:
    """Grade a claimed submission and store the outcome; returns whether it was stored.

    Bad input (an archive that no longer unpacks, a malformed journal) is stored as the
    submission's error, as is a failure of the grader itself.
    """
    layout = layout_of(settings)
    assignment = load_assignment(layout.assignment)
    limits = assignment.run_limits(settings.grade_jobs)
    try:
        with tempfile.TemporaryDirectory(prefix="mutagrade-submission-") as tmp:
            files = unpack(submission.archive, Path(tmp), archive_limits(settings))
            journal = None
            if files.journal is not None:
                journal = verify_journal(files.journal, files.tests, layout=layout, limits=limits)
            elif assignment.require_journal:
                journal = JournalSummary(checked=True, ok=False, problems=["no journal (.tdd/journal.jsonl) was submitted"])
            report = grade_suite(
                files.tests,
                layout=layout,
                assignment=assignment,
                journal=journal,
                audience="staff",
                jobs=settings.grade_jobs,
                submission=f"submission {submission.id} ({submission.archive_name})",
                full_matrix=bool(submission.full_matrix),
                pool=pool,
            )
    except (ArchiveError, GradingInputError, JournalFormatError) as exc:
        with make_session() as session:
            return crud.finish_submission(session, submission.id, worker=worker, error=f"could not be graded: {exc}")
    except Exception as exc:  # noqa: BLE001 - recorded, and the worker goes on with the next job
        with make_session() as session:
            return crud.finish_submission(session, submission.id, worker=worker, error=f"internal error: {exc!r}")
    with make_session() as session:
        return crud.finish_submission(
            session,
            submission.id,
            worker=worker,
            report_json=report.model_dump_json(),
            passed=report.passed,
            kill_rate=report.score.kill_rate,
        )
