"""Submissions: upload, status, reports in every format, listing, regrade."""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, File, HTTPException, Query, Request, Response, UploadFile, status
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api import crud
from grader.flows.archive import ArchiveError, check_archive
from api.db import User
from api.config import archive_limits
from api.deps import CurrentUser, RowId, SessionDep, StaffUser
from api.schemas import ID_MAX, SubmissionCreated, SubmissionPublic
from api.states import JobStatus, Role
from api.views import done_report, links, owned_submission, public
from grader.report import render
from grader.report.gradescope import gradescope_options, render_gradescope

router = APIRouter(prefix="/v1/submissions", tags=["submissions"])

_ERRORS = {
    401: {"description": "missing or unknown token"},
    404: {"description": "no such submission (or not yours)"},
}


async def _read_capped(upload: UploadFile, limit: int) -> bytes:
    """The upload's bytes, refusing as soon as they pass ``limit``."""
    chunks, size = [], 0
    while chunk := await upload.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise ArchiveError(f"the archive is larger than {limit} bytes, the most accepted", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _refused(archive: UploadFile, exc: ArchiveError) -> HTTPException:
    return HTTPException(exc.status, f"archive {archive.filename!r}: {exc}")


_ANY_STATUS = f"^({'|'.join(JobStatus)})$"  # a filter by status: one of the states, as a pattern

# A grading takes seconds to a minute: asking again this often costs the service nothing.
_IN_FLIGHT_RETRY_S = 10


def _too_many_in_flight(in_flight: int, limit: int) -> HTTPException:
    which = "submission" if in_flight == 1 else "submissions"
    once = "once it is graded" if in_flight == 1 else "once one of them is graded"
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"you have {in_flight} {which} in flight (queued or being graded) and at most {limit} may be; "
        f"submit again {once}",
        headers={"Retry-After": str(_IN_FLIGHT_RETRY_S)},
    )


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionCreated,
    responses={**_ERRORS, 413: {"description": "too large"}, 415: {"description": "not an archive"},
               422: {"description": "a member breaks a rule"},
               429: {"description": "too many submissions in the window, or in flight at once"}},
)
async def create_submission(
    request: Request,
    response: Response,
    session: SessionDep,
    user: CurrentUser,
    archive: Annotated[UploadFile, File(description="a .tar.gz or .zip of your tests (and .tdd/)")],
) -> SubmissionCreated:
    """Upload a submission; it is checked now, stored, and graded in the background."""
    created = await accept_upload(request, session, user, archive)
    response.headers["Location"] = f"/v1/submissions/{created.id}"
    return created


async def accept_upload(request: Request, session: Session, user: User, archive: UploadFile) -> SubmissionCreated:
    """Check, store and queue ``user``'s uploaded ``archive``: the REST upload and the
    submissions page's form both come here.

    Raises:
        HTTPException: 429 over the rate limit or the in-flight limit (with ``Retry-After``),
            413 too large, 415 not an archive, 422 a member that breaks a rule.
    """
    settings = request.app.state.settings
    wait = request.app.state.limiter.hit(user.id)
    if wait:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"at most {settings.rate_limit} submissions per {settings.rate_window_s:g} s; try again in {math.ceil(wait)} s",
            headers={"Retry-After": str(math.ceil(wait))},
        )
    # Refused before the upload is read when already at the limit; counted again, under a
    # lock, when it is stored (posts sent at once).
    in_flight = await run_in_threadpool(crud.in_flight, session, user_id=user.id)
    if in_flight >= settings.max_in_flight:
        raise _too_many_in_flight(in_flight, settings.max_in_flight)
    try:
        data = await _read_capped(archive, settings.max_upload_bytes)
    except ArchiveError as exc:
        raise _refused(archive, exc) from None

    def store() -> SubmissionCreated:
        # Unpacking the archive and writing it to the database block: they run in the thread
        # pool, so a burst of uploads never holds up the event loop (and every other request).
        try:
            check_archive(data, archive_limits(settings))
        except ArchiveError as exc:
            raise _refused(archive, exc) from None
        try:
            submission = crud.create_submission(session, user=user, archive=data, name=archive.filename or "archive",
                                                max_in_flight=settings.max_in_flight)
        except crud.InFlightLimit as exc:
            raise _too_many_in_flight(exc.in_flight, exc.limit) from None
        request.app.state.queue.enqueue(submission.id)
        return SubmissionCreated(id=submission.id, status=submission.status, links=links(submission.id))

    return await run_in_threadpool(store)


@router.get("", response_model=list[SubmissionPublic], responses=_ERRORS)
def list_submissions(
    request: Request,
    session: SessionDep,
    user: CurrentUser,
    # PostgreSQL refuses NUL in text (a 500 if it reached the query); names are at most 100.
    student: Annotated[
        str | None, Query(max_length=100, pattern="^[^\\x00]*$", description="staff: only this student's")
    ] = None,
    status_: Annotated[str | None, Query(alias="status", pattern=_ANY_STATUS)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=ID_MAX)] = 0,
) -> list[SubmissionPublic]:
    """A student's own submissions; staff see everyone's, with filters."""
    own = None if user.role == Role.STAFF else user
    rows = crud.list_submissions(
        session, user=own, student=student if own is None else None, status=status_, limit=limit, offset=offset
    )
    return [public(request, s, user, with_report=False) for s in rows]


@router.get("/{submission_id}", response_model=SubmissionPublic, responses=_ERRORS)
def get_submission(request: Request, session: SessionDep, user: CurrentUser, submission_id: RowId) -> SubmissionPublic:
    """Status, and the report once the submission is done."""
    return public(request, owned_submission(session, submission_id, user), user, with_report=True)


@router.get("/{submission_id}/report.json", responses={**_ERRORS, 409: {"description": "not graded yet"}})
def report_json(request: Request, session: SessionDep, user: CurrentUser, submission_id: RowId) -> Response:
    report = done_report(request, owned_submission(session, submission_id, user), user)
    return Response(render(report, "json"), media_type="application/json")


@router.get("/{submission_id}/report.md", responses={**_ERRORS, 409: {"description": "not graded yet"}})
def report_markdown(request: Request, session: SessionDep, user: CurrentUser, submission_id: RowId) -> Response:
    """The report in Markdown, as ``mutagrade grade --format github`` writes it (student text escaped)."""
    report = done_report(request, owned_submission(session, submission_id, user), user)
    return Response(render(report, "github"), media_type="text/markdown; charset=utf-8")


@router.get("/{submission_id}/report.junit.xml", responses={**_ERRORS, 409: {"description": "not graded yet"}})
def report_junit(request: Request, session: SessionDep, user: CurrentUser, submission_id: RowId) -> Response:
    report = done_report(request, owned_submission(session, submission_id, user), user)
    return Response(render(report, "junit"), media_type="application/xml")


@router.get("/{submission_id}/report.gradescope.json", responses={**_ERRORS, 409: {"description": "not graded yet"}})
def report_gradescope(request: Request, session: SessionDep, user: CurrentUser, submission_id: RowId) -> Response:
    report = done_report(request, owned_submission(session, submission_id, user), user)
    # Scored as the assignment says; hidden mutants are never revealed here: this document is
    # the reader's to download, not Gradescope's to hold until the due date.
    options = gradescope_options(request.app.state.assignment)
    return Response(render_gradescope(report, options), media_type="application/json")


@router.get("/{submission_id}/report.html", responses={**_ERRORS, 409: {"description": "not graded yet"}})
def report_html(request: Request, session: SessionDep, user: CurrentUser, submission_id: RowId) -> Response:
    from api.routes.pages import submission_page

    return submission_page(request, session, user, submission_id)


@router.post(
    "/{submission_id}/regrade",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionCreated,
    responses={**_ERRORS, 403: {"description": "staff only"}},
)
def regrade(request: Request, session: SessionDep, user: StaffUser, submission_id: RowId) -> SubmissionCreated:
    """Grade a submission again (staff)."""
    return start_regrade(request, session, user, submission_id)


def start_regrade(request: Request, session: Session, user: User, submission_id: int) -> SubmissionCreated:
    """Queue a submission to be graded again: the staff route and the submission page's button
    come here (their callers check the user is staff)."""
    submission = owned_submission(session, submission_id, user)
    crud.regrade(session, submission=submission)
    request.app.state.queue.enqueue(submission.id)
    return SubmissionCreated(id=submission.id, status=submission.status, links=links(submission.id))
