"""Staff routes: the gradebook."""

from __future__ import annotations

import io

from fastapi import APIRouter, Response

from api.store import crud
from api.web.deps import SessionDep, StaffUser
from grader.report.spreadsheet import write_rows

router = APIRouter(prefix="/v1", tags=["staff"])

GRADEBOOK_FIELDS = (
    "student", "submissions",
    "latest_id", "latest_passed", "latest_kill_rate", "latest_at",
    "best_id", "best_passed", "best_kill_rate",
)


def gradebook_csv(session) -> str:
    """The gradebook as CSV; a student name a spreadsheet would compute is written as text."""
    out = io.StringIO()
    write_rows(out, GRADEBOOK_FIELDS, (_gradebook_row(row) for row in crud.gradebook_rows(session)))
    return out.getvalue()


def _gradebook_row(row: dict) -> list[object]:
    latest, best = row["latest"], row["best"]
    return [
        row["student"], row["submissions"],
        latest.id if latest else "", _yes(latest.passed) if latest else "",
        f"{latest.kill_rate:.4f}" if latest and latest.kill_rate is not None else "",
        crud.as_utc(latest.finished_at) if latest else "",
        best.id if best else "", _yes(best.passed) if best else "",
        f"{best.kill_rate:.4f}" if best and best.kill_rate is not None else "",
    ]


def _yes(value: bool | None) -> str:
    return "yes" if value else "no"


@router.get("/gradebook.csv", responses={401: {"description": "missing token"}, 403: {"description": "staff only"}})
def gradebook(session: SessionDep, user: StaffUser) -> Response:
    """Every student: latest and best graded submission (CSV)."""
    return Response(
        gradebook_csv(session),
        media_type="text/csv",
        headers={"Content-Disposition": 'attachment; filename="gradebook.csv"'},
    )
