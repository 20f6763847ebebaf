"""Staff routes: the gradebook."""

from __future__ import annotations

import csv
import io

from fastapi import APIRouter, Response

from api import crud
from api.deps import SessionDep, StaffUser

router = APIRouter(prefix="/v1", tags=["staff"])

GRADEBOOK_FIELDS = (
    "student", "submissions",
    "latest_id", "latest_passed", "latest_kill_rate", "latest_at",
    "best_id", "best_passed", "best_kill_rate",
)


def gradebook_csv(session) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(GRADEBOOK_FIELDS)
    for row in crud.gradebook_rows(session):
        latest, best = row["latest"], row["best"]
        writer.writerow([
            row["student"], row["submissions"],
            latest.id if latest else "", _yes(latest.passed) if latest else "",
            f"{latest.kill_rate:.4f}" if latest and latest.kill_rate is not None else "",
            crud.as_utc(latest.finished_at) if latest else "",
            best.id if best else "", _yes(best.passed) if best else "",
            f"{best.kill_rate:.4f}" if best and best.kill_rate is not None else "",
        ])
    return out.getvalue()


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
