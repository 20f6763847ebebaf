"""The class's submissions of record, for the staff's statistics and similarity pages: which
one stands for each student (the grade of record, :func:`api.store.grades.grade_records`), how
many students have none that could be graded, and the stored reports and archives of those that
stand, read a few at a time (two hundred archives of up to 2 MiB each are never held at once)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from datetime import datetime

from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.store.db import Submission, User
from api.store.grades import grade_records
from grader.core.assignment import Assignment
from grader.core.states import JobStatus, Role, SubmissionKind

__all__ = ["READ_AT_ONCE", "RecordedSubmission", "recorded_submissions", "stored_archives", "stored_reports",
           "ungraded_students"]

READ_AT_ONCE = 16  # rows whose report or archive one query reads


class RecordedSubmission(BaseModel):
    """A student's grade of record (its light columns): what stands for them in the class's figures."""

    model_config = ConfigDict(frozen=True)

    id: int
    student: str  # the user's name (login)
    archive_name: str
    graded: bool  # it has a report (a grade of record may be one staff gave points to, ungraded)
    finished_at: datetime | None  # a regrade changes it, and the report with it


def recorded_submissions(session: Session, *, name: str, assignment: Assignment) -> list[RecordedSubmission]:
    """Each current student's grade of record for the hosted assignment ``name``, by its rule,
    by student name; a student with none (nothing submitted, nothing graded yet) is left out."""
    return [
        RecordedSubmission(id=r.submission.id, student=r.user.name, archive_name=r.submission.archive_name,
                           graded=r.submission.status == JobStatus.DONE, finished_at=r.submission.finished_at)
        for r in grade_records(session, name=name, assignment=assignment) if r.submission is not None
    ]


def _current_students():
    return (User.role == Role.STUDENT) & User.removed_at.is_(None)


def ungraded_students(session: Session, *, name: str, recorded: Collection[str]) -> int:
    """Current students with no grade of record for the hosted assignment ``name`` (none among
    ``recorded``, by login) who submitted something for it that could not be graded: the
    class's figures count them apart."""
    query = (select(func.count(func.distinct(Submission.user_id)))
             .join(User, User.id == Submission.user_id)
             .where(Submission.status == JobStatus.ERROR, Submission.kind == SubmissionKind.SUBMISSION,
                    Submission.assignment == name, _current_students()))
    if recorded:
        query = query.where(User.name.not_in(list(recorded)))
    return int(session.scalar(query) or 0)


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    ids = list(ids)
    for start in range(0, len(ids), READ_AT_ONCE):
        yield ids[start:start + READ_AT_ONCE]


def stored_reports(session: Session, ids: Iterable[int]) -> Iterator[tuple[int, str]]:
    """(id, the staff report's JSON) of each of ``ids`` that has a report, by id."""
    for chunk in _chunks(ids):
        query = (select(Submission.id, Submission.report_json)
                 .where(Submission.id.in_(chunk), Submission.report_json.is_not(None)).order_by(Submission.id))
        yield from ((i, text) for i, text in session.execute(query))


def stored_archives(session: Session, ids: Iterable[int]) -> Iterator[tuple[int, str, bytes]]:
    """(id, the archive's name, its bytes) of each of ``ids``, by id."""
    for chunk in _chunks(ids):
        query = (select(Submission.id, Submission.archive_name, Submission.archive)
                 .where(Submission.id.in_(chunk)).order_by(Submission.id))
        yield from ((i, name, bytes(data)) for i, name, data in session.execute(query))
