"""Submissions: upload, status, reports in every format, listing, regrade."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, Query, Request, Response, UploadFile, status

from api.store import crud
from api.web.deps import CurrentUser, RowId, SessionDep, StaffUser
from api.web.hosting import hosted_by_form, hosted_by_name, of_submission
from api.web.schemas import ASSIGNMENT_NAME, ID_MAX, SubmissionCreated, SubmissionPublic
from grader.core.states import JobStatus, Role
from api.web.submitting import accept_upload, start_regrade
from api.web.views import done_report, owned_submission, public
from grader.report import render
from grader.report.gradescope import gradescope_options, render_gradescope

router = APIRouter(prefix="/v1/submissions", tags=["submissions"])

_ERRORS = {
    401: {"description": "missing or unknown token"},
    404: {"description": "no such submission (or not yours)"},
}


_ANY_STATUS = f"^({'|'.join(JobStatus)})$"  # a filter by status: one of the states, as a pattern
# The upload's assignment field (the previews' too): the REST client and the student command send it.
AssignmentField = Annotated[str | None, Form(
    max_length=100, pattern=ASSIGNMENT_NAME,
    description="the assignment it is for: its name, as GET /v1/assignments lists them (default: the service's default)",
)]

@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionCreated,
    responses={**_ERRORS, 403: {"description": "late, where the assignment refuses late work (nothing stored)"},
               413: {"description": "too large"}, 415: {"description": "not an archive"},
               422: {"description": "a member breaks a rule, or an assignment this service does not host"},
               429: {"description": "too many submissions in the window, or in flight at once"}},
)
async def create_submission(
    request: Request,
    response: Response,
    session: SessionDep,
    user: CurrentUser,
    archive: Annotated[UploadFile, File(description="a .tar.gz or .zip of your tests (and .tdd/)")],
    assignment: AssignmentField = None,
) -> SubmissionCreated:
    """Upload a submission for an assignment; it is checked now, stamped with its time against
    your due date, stored, and graded in the background."""
    # Every value the form sends (the parameter above is its last, validated): sent twice is refused.
    hosted = hosted_by_form(request, (await request.form()).getlist("assignment"))
    created = await accept_upload(request, session, user, archive, hosted=hosted)
    response.headers["Location"] = f"/v1/submissions/{created.id}"
    return created


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
    assignment: Annotated[str | None, Query(max_length=100, pattern=ASSIGNMENT_NAME,
                                            description="only those made for this assignment")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=ID_MAX)] = 0,
) -> list[SubmissionPublic]:
    """A student's own submissions; staff see everyone's, with filters."""
    own = None if user.role == Role.STAFF else user
    if assignment is not None:
        hosted_by_name(request, assignment)  # a module this service does not host: 422, not an empty list
    rows = crud.list_submissions(
        session, user=own, student=student if own is None else None, status=status_, assignment=assignment,
        limit=limit, offset=offset,
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
    submission = owned_submission(session, submission_id, user)
    report = done_report(request, submission, user)
    # Scored as its assignment says; hidden mutants are never revealed here: this document is
    # the reader's to download, not Gradescope's to hold until the due date.
    options = gradescope_options(of_submission(request, submission).rules)
    return Response(render_gradescope(report, options), media_type="application/json")


@router.get("/{submission_id}/report.html", responses={**_ERRORS, 409: {"description": "not graded yet"}})
def report_html(request: Request, session: SessionDep, user: CurrentUser, submission_id: RowId) -> Response:
    from api.web.routes.pages import submission_page

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
