"""Server-rendered HTML pages: sign-in and sign-out, submissions (with the upload form), one
submission's report (with the staff's regrade button), the gradebook.

No JavaScript and no build step: plain templates, readable with any browser or screen reader.
A token reaches the pages one way only: the sign-in form, which sets an HTTP-only cookie (never
``?token=``: addresses are written to access logs and browser histories).
Student text (test ids, messages, file and user names) is escaped by Jinja's autoescaping, and
every page also tells the browser to run no script at all (:data:`api.web.forms.PAGE_HEADERS`).
The forms that change something post here with a form token and are checked to come from these
pages (:mod:`api.web.csrf`); uploading and regrading go through the same code as the REST routes.
"""

from __future__ import annotations

from typing import Annotated, Mapping

from fastapi import APIRouter, Form, HTTPException, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as FormError

from api.store import crud
from api.web.csrf import FIELD
from api.store.db import User
from api.web.deps import TOKEN_COOKIE, RowId, SessionDep
from api.web.hosting import Hosted, HostedQuery, hosted_by_form
from api.web.forms import PageUser, from_elsewhere, page, refused, to_login, token_refused, staff_only
from api.web.submitting import accept_upload, start_regrade
from api.store.grades import RULE_WORDS, grade_records
from api.web.deadlines import due_notice, judge_upload
from api.web.exports import points_cell
from api.web.regrading import regrade_panel
from grader.core.states import IN_FLIGHT, Role
from api.web.views import owned_submission, public

router = APIRouter(tags=["pages"], include_in_schema=False)
# A page of a submission not graded yet reloads itself this often (seconds).
PENDING_REFRESH_S = 3
NO_FILE = "choose a .tar.gz or .zip of your tests to upload"


@router.get("/", response_class=HTMLResponse)
def home() -> Response:
    return RedirectResponse("/submissions", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    return page(request, "login.html", {"user": None, "error": None})


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, session: SessionDep, token: Annotated[str, Form()]) -> Response:
    # Signing a victim in as someone else (so that what they upload lands in that account)
    # takes a post from another site: refused like any other.
    if (refusal := from_elsewhere(request, None)) is not None:
        return refusal
    if crud.user_by_token(session, token=token.strip()) is None:
        return page(request, "login.html", {"user": None, "error": "unknown token"}, status.HTTP_401_UNAUTHORIZED)
    response = RedirectResponse("/submissions", status_code=status.HTTP_303_SEE_OTHER)
    response.set_cookie(TOKEN_COOKIE, token.strip(), httponly=True, samesite="strict")
    return response


@router.api_route("/logout", methods=["GET", "POST"], response_class=HTMLResponse)
def logout() -> Response:
    """Sign out of the pages: the cookie is cleared (the token itself stays valid for the API)."""
    response = to_login()
    response.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict")
    return response


def _submissions(
    request: Request, session: Session, user: User, hosted: Hosted, *, error: str | None = None,
    status_code: int = status.HTTP_200_OK, headers: Mapping[str, str] | None = None,
) -> Response:
    """The submissions page of one assignment: the upload form (for it by default), the due
    date, and the user's submissions for it (staff: everyone's)."""
    rows = crud.list_submissions(session, user=None if user.role == Role.STAFF else user, assignment=hosted.name,
                                 limit=500)
    views = [public(request, s, user, with_report=False) for s in rows]
    deadline = hosted.rules.deadline
    due = due_notice(judge_upload(session, user=user, assignment=hosted.name, deadline=deadline), deadline)
    return page(request, "submissions.html", {"user": user, "hosted": hosted, "rows": views, "error": error,
                                              "due": due}, status_code, headers)


@router.get("/submissions", response_class=HTMLResponse)
def submissions_page(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery) -> Response:
    if user is None:
        return to_login()
    return _submissions(request, session, user, hosted)


@router.post("/submissions", response_class=HTMLResponse)
async def upload(request: Request, session: SessionDep, user: PageUser) -> Response:
    """The upload form: checked and stored as the REST upload is, then the new submission's
    page; a refusal is the submissions page again, with the reason and the REST status."""
    if user is None:
        return to_login()
    if (refusal := from_elsewhere(request, user)) is not None:  # before the body is read
        return refusal
    hosted = request.app.state.hosting.default  # the page the refusal shows, until the form names one
    try:
        # A form token, the assignment and one file, nothing more: a larger form is refused as
        # it is read (a file input left empty comes as a field).
        async with request.form(max_files=1, max_fields=3) as form:
            if (refusal := token_refused(request, user, form.get(FIELD))) is not None:
                return refusal
            hosted = hosted_by_form(request, form.getlist("assignment"))
            archive = form.get("archive")
            if not isinstance(archive, UploadFile) or not archive.filename:
                raise HTTPException(status.HTTP_400_BAD_REQUEST, NO_FILE)
            created = await accept_upload(request, session, user, archive, hosted=hosted)
    except FormError as exc:  # the REST upload's refusals (HTTPException), and a body that is not such a form
        return await run_in_threadpool(
            _submissions, request, session, user, hosted, error=str(exc.detail), status_code=exc.status_code,
            headers=exc.headers,
        )
    return RedirectResponse(f"/submissions/{created.id}", status_code=status.HTTP_303_SEE_OTHER)


def submission_page(request: Request, session: Session, user: User | None, submission_id: int) -> Response:
    if user is None:
        return to_login()
    view = public(request, owned_submission(session, submission_id, user), user, with_report=True)
    report = view.report
    mutants = {m.id: m for m in report.mutants} if report else {}
    pending = view.status in IN_FLIGHT
    return page(request, "submission.html", {
        "user": user, "s": view, "report": report, "mutants": mutants,
        "refresh_s": PENDING_REFRESH_S if pending else None,
        "regrade_panel": regrade_panel(request, session, submission_id, user),
    })


@router.get("/submissions/{submission_id}", response_class=HTMLResponse)
def submission_html(request: Request, session: SessionDep, user: PageUser, submission_id: RowId) -> Response:
    return submission_page(request, session, user, submission_id)


@router.post("/submissions/{submission_id}/regrade", response_class=HTMLResponse)
def regrade(
    request: Request, session: SessionDep, user: PageUser, submission_id: RowId,
    csrf: Annotated[str | None, Form()] = None,  # the form token (api.web.csrf.FIELD)
) -> Response:
    """The staff's "Grade again" button: the staff REST route's regrade, then the same page."""
    if user is None:
        return to_login()
    refusal = from_elsewhere(request, user) or token_refused(request, user, csrf)
    if refusal is not None:
        return refusal
    if user.role != Role.STAFF:
        return refused(request, user, "Staff only", "regrading is for course staff only")
    start_regrade(request, session, user, submission_id)
    return RedirectResponse(f"/submissions/{submission_id}", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/gradebook", response_class=HTMLResponse)
def gradebook_page(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery) -> Response:
    if (refusal := staff_only(request, user, "the gradebook is for course staff only")) is not None:
        return refusal
    assignment = hosted.rules
    return page(request, "gradebook.html", {
        "user": user, "hosted": hosted, "rows": grade_records(session, name=hosted.name, assignment=assignment),
        "points": points_cell,
        "rule": RULE_WORDS[assignment.grade_of_record], "possible": points_cell(assignment.points),
    })
