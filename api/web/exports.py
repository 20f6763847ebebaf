"""The gradebook as staff download it: every student's grade of record (api/store/grades.py) as
the service's own CSV, or as Canvas's or Moodle's import (grader/report/gradebook.py); and one
zip of every grade-of-record archive, with a manifest.

The service's CSV keeps the columns it always had (``student``, ``submissions``, the latest and
the best graded submission) and adds the grade of record after them. Every cell a spreadsheet
would compute is written as text (:mod:`grader.report.spreadsheet`).
"""

from __future__ import annotations

import io
import re
import tempfile
import zipfile
from datetime import timezone
from typing import IO, Literal

from sqlalchemy.orm import Session

from api.store import crud
from api.store.db import Submission
from api.store.grades import GradeRecord
from grader.core.assignment import Assignment
from grader.core.roster import RosterEntry
from grader.core.states import Timeliness
from grader.report.gradebook import GradeRow, render_gradebook
from grader.report.spreadsheet import write_rows

__all__ = [
    "GRADEBOOK_FIELDS", "MANIFEST_FIELDS", "ExportFormat", "gradebook_csv", "gradebook_export", "grade_rows",
    "points_cell", "safe_name", "status_words", "submissions_zip",
]

ExportFormat = Literal["csv", "canvas", "moodle"]
GRADEBOOK_FIELDS = (
    "student", "submissions",
    "latest_id", "latest_passed", "latest_kill_rate", "latest_at",
    "best_id", "best_passed", "best_kill_rate",
    "name", "email", "rule", "record_id", "timeliness", "points", "late_penalty", "override", "final_points",
)
MANIFEST_FIELDS = ("login", "submission_id", "stamped_at", "timeliness", "final_points")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_SPOOL_BYTES = 32 * 1024 * 1024  # a larger zip goes to a temporary file


def points_cell(value: float | None) -> str:
    """Points with at most 2 decimals, no trailing zeros (41.666 -> ``41.67``, 80.0 -> ``80``); "" for none."""
    if value is None:
        return ""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _days(count: int) -> str:
    return f"{count} day" + ("" if count == 1 else "s")


def status_words(record: GradeRecord) -> str:
    """The grade of record in words: ``passed``, ``not passed, late, 2 days``, with staff's
    override and its reason; ``no submission`` or ``not graded yet`` where nothing counts."""
    submission = record.submission
    if submission is None:
        return "not graded yet" if record.submissions else "no submission"
    words = "not graded" if record.points is None else ("passed" if submission.passed else "not passed")
    if submission.timeliness == Timeliness.LATE:
        words += f", late, {_days(submission.days_late)}"
    if record.overridden:
        reason = submission.override_reason or ""
        words += "; overridden by staff" + (f": {reason}" if reason else "")
    return words


def grade_rows(records: list[GradeRecord]) -> list[GradeRow]:
    """The exports' rows: each student as the roster knows them, and their grade of record."""
    return [
        GradeRow(
            entry=RosterEntry(login=r.user.name, name=r.user.display_name or "", email=r.user.email,
                              sis_id=r.user.sis_id, lms_id=r.user.lms_id, section=r.user.section),
            points=r.points, penalty_points=r.penalty_points, final_points=r.final_points,
            submission=str(r.submission.id) if r.submission else "", status=status_words(r),
        )
        for r in records
    ]


def _graded(submission: Submission | None, *, at: bool) -> list[object]:
    if submission is None:
        return ["", "", "", ""] if at else ["", "", ""]
    rate = f"{submission.kill_rate:.4f}" if submission.kill_rate is not None else ""
    cells: list[object] = [submission.id, "yes" if submission.passed else "no", rate]
    return [*cells, crud.as_utc(submission.finished_at)] if at else cells


def _csv_row(record: GradeRecord) -> list[object]:
    chosen, user = record.submission, record.user
    override = chosen.override_points if chosen is not None else None
    return [
        user.name, record.submissions, *_graded(record.latest, at=True), *_graded(record.best, at=False),
        user.display_name, user.email, record.rule, chosen.id if chosen else "",
        (chosen.timeliness or "") if chosen else "", points_cell(record.points),
        points_cell(record.penalty_points) if chosen else "", points_cell(override), points_cell(record.final_points),
    ]


def gradebook_csv(records: list[GradeRecord]) -> str:
    """The service's own gradebook CSV (:data:`GRADEBOOK_FIELDS`)."""
    out = io.StringIO(newline="")
    write_rows(out, GRADEBOOK_FIELDS, (_csv_row(record) for record in records))
    return out.getvalue()


def gradebook_export(records: list[GradeRecord], *, fmt: ExportFormat, assignment: Assignment) -> str:
    """The gradebook in ``fmt``: the service's CSV, or Canvas's or Moodle's import."""
    if fmt == "csv":
        return gradebook_csv(records)
    return render_gradebook(grade_rows(records), fmt=fmt, assignment_title=assignment.name,
                            points_possible=assignment.points)


def safe_name(name: str, *, fallback: str = "archive") -> str:
    """``name`` as a zip member's name part: its last path part, every character but letters,
    digits, ``.``, ``_`` and ``-`` made ``_``, no leading dot (``../a b.tgz`` -> ``a_b.tgz``)."""
    last = re.split(r"[/\\]", name)[-1]
    safe = _UNSAFE.sub("_", last).lstrip(".")
    return safe[:200] or fallback


def submissions_zip(session: Session, records: list[GradeRecord]) -> IO[bytes]:
    """A zip of every student's grade-of-record archive, as ``<login>/<id>-<archive name>``,
    and ``manifest.csv`` (:data:`MANIFEST_FIELDS`, one row per student); the file, read from
    its start. Archives are read from the database one at a time."""
    out = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)
    manifest = []
    with zipfile.ZipFile(out, "w") as bundle:
        for record in records:
            chosen = record.submission
            if chosen is None:
                manifest.append([record.user.name, "", "", "", ""])
                continue
            member = f"{safe_name(record.user.name, fallback='student')}/{chosen.id}-{safe_name(chosen.archive_name)}"
            stamped = crud.as_utc(chosen.created_at)
            info = zipfile.ZipInfo(member, date_time=_zip_time(chosen))
            bundle.writestr(info, chosen.archive, compress_type=zipfile.ZIP_STORED)  # archives are packed already
            session.expire(chosen, ["archive"])  # let its bytes go
            manifest.append([record.user.name, chosen.id, stamped, chosen.timeliness or "",
                             points_cell(record.final_points)])
        text = io.StringIO(newline="")
        write_rows(text, MANIFEST_FIELDS, manifest)
        bundle.writestr("manifest.csv", text.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    out.seek(0)
    return out


def _zip_time(submission: Submission) -> tuple[int, int, int, int, int, int]:
    """The member's time: when the submission was stored (UTC; a zip holds no zone)."""
    moment = submission.created_at
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return (max(moment.year, 1980), moment.month, moment.day, moment.hour, moment.minute, moment.second)
