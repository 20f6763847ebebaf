"""Staff routes: the gradebook (the service's CSV, Canvas's and Moodle's imports) and every
student's grade-of-record archive in one zip."""

from __future__ import annotations

from typing import IO, Annotated, Iterator

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from api.store.grades import grade_records
from api.web.deps import SessionDep, StaffUser
from api.web.hosting import HostedQuery
from api.web.exports import ExportFormat, gradebook_export, submissions_zip

router = APIRouter(prefix="/v1", tags=["staff"])

_STAFF_ONLY = {401: {"description": "missing token"}, 403: {"description": "staff only"}}


@router.get("/gradebook.csv", responses={**_STAFF_ONLY, 422: {"description": "an unknown format"}})
def gradebook(
    request: Request, session: SessionDep, user: StaffUser, hosted: HostedQuery,
    fmt: Annotated[ExportFormat, Query(
        alias="format", description="csv: the service's columns; canvas, moodle: their gradebook imports")] = "csv",
) -> Response:
    """Every student's grade of record for an assignment (by its rule), with its points, late
    penalty, override and final points; ``csv`` also has the latest and the best graded submission."""
    rules = hosted.rules
    text = gradebook_export(grade_records(session, name=hosted.name, assignment=rules), fmt=fmt, assignment=rules)
    name = f"gradebook-{hosted.name}.csv" if fmt == "csv" else f"gradebook-{hosted.name}-{fmt}.csv"
    return Response(text, media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


def _chunks(handle: IO[bytes]) -> Iterator[bytes]:
    try:
        while chunk := handle.read(1024 * 1024):
            yield chunk
    finally:
        handle.close()


@router.get("/submissions.zip", responses={**_STAFF_ONLY, 200: {"content": {"application/zip": {}}}})
def submissions_archive(request: Request, session: SessionDep, user: StaffUser, hosted: HostedQuery) -> Response:
    """Every student's grade-of-record archive for an assignment, as ``<login>/<submission
    id>-<archive name>``, and ``manifest.csv`` (login, submission id, stamped time,
    timeliness, final points)."""
    records = grade_records(session, name=hosted.name, assignment=hosted.rules)
    return StreamingResponse(_chunks(submissions_zip(session, records)), media_type="application/zip",
                             headers={"Content-Disposition": f'attachment; filename="submissions-{hosted.name}.zip"'})
