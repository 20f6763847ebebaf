"""Gradebook exports: one row per student, as Canvas or Moodle imports grades, or a plain CSV.

- ``canvas``: Canvas's gradebook import, ``Student,ID,SIS User ID,SIS Login ID,Section,<title>``,
  then ``Points Possible,,,,,<points>``, then each student's final points (blank: no grade;
  Canvas leaves such a cell as it was).
- ``moodle``: Moodle's CSV grade import, ``First name,Last name,Email address,ID number,<title>,
  Feedback``; staff map ``Email address`` to the user's email, the title's column to the grade
  item and ``Feedback`` to its feedback, which says the status and any late penalty.
- ``csv``: ``student,name,email,submission,status,points,late_penalty,final_points``.

Numbers carry at most 2 decimals; every cell goes through :mod:`grader.report.spreadsheet`, so
a name a spreadsheet would compute (``=HYPERLINK(...)``) is written as text.
"""

from __future__ import annotations

import io
from typing import Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from grader.core.roster import RosterEntry
from grader.report.spreadsheet import spreadsheet_cell, write_rows

__all__ = ["GRADEBOOK_FORMATS", "GradeRow", "render_gradebook"]

GRADEBOOK_FORMATS = ("csv", "canvas", "moodle")
GradebookFormat = Literal["csv", "canvas", "moodle"]

_CANVAS_HEADER = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
_MOODLE_HEADER = ("First name", "Last name", "Email address", "ID number")
_CSV_HEADER = ("student", "name", "email", "submission", "status", "points", "late_penalty", "final_points")


class GradeRow(BaseModel):
    """One student's line of a gradebook export.

    ``points`` is the grade before any late penalty (None: nothing was graded, no submission
    or one that could not be graded), ``penalty_points`` what lateness took off it, and
    ``final_points`` what the gradebook records. ``submission`` names what was graded (an id or
    a folder; "" none); ``status`` says it in words ("passed", "not passed", "late, 2 days",
    "no submission").
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    entry: RosterEntry
    points: float | None = Field(ge=0, allow_inf_nan=False)
    penalty_points: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    final_points: float | None = Field(ge=0, allow_inf_nan=False)
    submission: str = ""
    status: str


def _number(value: float | None) -> str:
    """At most 2 decimals, no trailing zeros: 41.666 -> "41.67", 80.0 -> "80"; None -> ""."""
    if value is None:
        return ""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _names(entry: RosterEntry) -> tuple[str, str]:
    """First and last name of a "Last, First" name (a name without a comma is a first name)."""
    last, comma, first = entry.name.partition(", ")
    return (first, last) if comma else (entry.name, "")


def _feedback(row: GradeRow) -> str:
    if row.penalty_points > 0:
        return f"{row.status}; late penalty: {_number(row.penalty_points)} of {_number(row.points)} points"
    return row.status


def _canvas(rows: Sequence[GradeRow], points_possible: float) -> list[list[object]]:
    lines: list[list[object]] = [["Points Possible", "", "", "", "", _number(points_possible)]]
    for row in rows:
        e = row.entry
        lines.append([e.name, e.lms_id, e.sis_id, e.login, e.section, _number(row.final_points)])
    return lines


def _moodle(rows: Sequence[GradeRow]) -> list[list[object]]:
    return [[*_names(row.entry), row.entry.email, row.entry.sis_id, _number(row.final_points), _feedback(row)]
            for row in rows]


def _plain(rows: Sequence[GradeRow]) -> list[list[object]]:
    return [[row.entry.login, row.entry.name, row.entry.email, row.submission, row.status, _number(row.points),
             _number(row.penalty_points), _number(row.final_points)] for row in rows]


def render_gradebook(rows: Iterable[GradeRow], *, fmt: GradebookFormat, assignment_title: str,
                     points_possible: float) -> str:
    """Render ``rows`` as a gradebook CSV.

    Args:
        rows: one per student, in the order to write them.
        fmt: ``canvas``, ``moodle`` or ``csv`` (see the module's docstring).
        assignment_title: the grade column's name (Canvas and Moodle).
        points_possible: full marks (Canvas's "Points Possible" row).

    Returns:
        The CSV text, lines ending in CRLF as RFC 4180 has them; write it with ``newline=""``.

    Raises:
        ValueError: ``fmt`` is not one of :data:`GRADEBOOK_FORMATS`.
    """
    rows = list(rows)
    title = spreadsheet_cell(assignment_title)  # a header a spreadsheet would compute is text too
    if fmt == "canvas":
        header, lines = [*_CANVAS_HEADER, title], _canvas(rows, points_possible)
    elif fmt == "moodle":
        header, lines = [*_MOODLE_HEADER, title, "Feedback"], _moodle(rows)
    elif fmt == "csv":
        header, lines = list(_CSV_HEADER), _plain(rows)
    else:
        raise ValueError(f"fmt: expected 'csv', 'canvas' or 'moodle', got {fmt!r}")
    out = io.StringIO(newline="")
    write_rows(out, header, lines)
    return out.getvalue()
