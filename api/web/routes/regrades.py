"""Regrade requests and grade overrides: a student asks that a graded submission of theirs be
looked at again, staff answer (and may grade it again) or set its grade by hand with a reason.

REST under ``/v1`` and the pages' forms (the submission page's, and ``/staff/regrades``) both
call :mod:`api.store.regrades`, whose refusals come back as 403, 404, 409 or 422 with its
message; grading again is ``api/web/submitting.py`` ``start_regrade``, as the staff's button does.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Form, HTTPException, Query, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session

from api.store import regrades
from api.store.db import RegradeRequest, User
from api.web.deps import CurrentUser, RowId, SessionDep, StaffUser
from api.web.forms import PageUser, from_elsewhere, page, refused, to_login, token_refused, staff_only
from api.web.regrade_schemas import (
    OverridePublic,
    RegradeAnswer,
    RegradeAsk,
    RegradeOverride,
    RegradeRequestPublic,
)
from api.web.regrading import http_error, override_public, points_possible, requests_public
from api.web.submitting import start_regrade
from api.web.views import owned_submission
from grader.core.states import RegradeState, Role

__all__ = ["router"]

router = APIRouter()
rest = APIRouter(prefix="/v1", tags=["regrades"])
pages = APIRouter(tags=["pages"], include_in_schema=False)

_ERRORS = {
    401: {"description": "missing or unknown token"},
    404: {"description": "no such submission or request (or not yours)"},
}
_STAFF = {**_ERRORS, 403: {"description": "staff only"}}


# -- REST --------------------------------------------------------------------------------------------

@rest.post(
    "/submissions/{submission_id}/regrade-requests",
    status_code=status.HTTP_201_CREATED,
    response_model=RegradeRequestPublic,
    responses={**_ERRORS, 403: {"description": "students only"},
               409: {"description": "a preview, not graded yet, or a request already open"}},
)
def ask(session: SessionDep, user: CurrentUser, submission_id: RowId, body: RegradeAsk) -> RegradeRequestPublic:
    """Ask that your submission be looked at again (one open request per submission)."""
    submission = owned_submission(session, submission_id, user)
    try:
        row = regrades.request_regrade(session, submission=submission, user=user, message=body.message)
    except regrades.RegradeError as exc:
        raise http_error(exc) from None
    return requests_public(session, [row])[0]


@rest.get("/submissions/{submission_id}/regrade-requests", response_model=list[RegradeRequestPublic],
          responses=_ERRORS)
def of_submission(session: SessionDep, user: CurrentUser, submission_id: RowId) -> list[RegradeRequestPublic]:
    """A submission's regrade requests and their answers, the oldest first."""
    submission = owned_submission(session, submission_id, user)
    return requests_public(session, regrades.requests_of(session, submission_id=submission.id))


@rest.get("/regrade-requests", response_model=list[RegradeRequestPublic], responses=_STAFF)
def listing(
    session: SessionDep, user: StaffUser,
    state: Annotated[RegradeState, Query(description="open (oldest first) or answered (latest first)")]
    = RegradeState.OPEN,
) -> list[RegradeRequestPublic]:
    """Every open regrade request (staff), or with ``state=answered`` the answered ones."""
    rows = regrades.open_requests(session) if state == RegradeState.OPEN else regrades.answered_requests(session)
    return requests_public(session, rows)


def _answer(
    request: Request, session: Session, user: User, request_id: int, *, text: str, regrade: bool,
) -> RegradeRequest:
    """Answer, then queue the submission again if asked: what the REST route and the form do."""
    answered = regrades.answer_request(session, request_id=request_id, actor=user.name, answer=text, regrade=regrade)
    if regrade:
        start_regrade(request, session, user, answered.submission_id)
    return answered


@rest.post("/regrade-requests/{request_id}/answer", response_model=RegradeRequestPublic,
           responses={**_STAFF, 409: {"description": "already answered"}})
def answer(request: Request, session: SessionDep, user: StaffUser, request_id: RowId,
           body: RegradeAnswer) -> RegradeRequestPublic:
    """Answer an open request (staff); ``regrade: true`` grades the submission again."""
    try:
        answered = _answer(request, session, user, request_id, text=body.answer, regrade=body.regrade)
    except regrades.RegradeError as exc:
        raise http_error(exc) from None
    return requests_public(session, [answered])[0]


@rest.post("/submissions/{submission_id}/override", response_model=OverridePublic,
           responses={**_STAFF, 409: {"description": "a preview"}, 422: {"description": "points out of bounds"}})
def override(request: Request, session: SessionDep, user: StaffUser, submission_id: RowId,
             body: RegradeOverride) -> OverridePublic:
    """Set a submission's grade by hand, with a reason (staff); ``points: null`` clears it."""
    submission = owned_submission(session, submission_id, user)
    possible = points_possible(request, submission)
    try:
        regrades.override_grade(session, submission=submission, points=body.points, reason=body.reason,
                                actor=user.name, points_possible=possible)
    except regrades.RegradeError as exc:
        raise http_error(exc) from None
    return override_public(submission, possible)


# -- pages -------------------------------------------------------------------------------------------

def _refusal(request: Request, user: User | None, sent: str | None) -> Response | None:
    """Why a posted form is not taken: no sign-in, another origin, not this sign-in's token."""
    if user is None:
        return to_login()
    return from_elsewhere(request, user) or token_refused(request, user, sent)


def _error(request: Request, user: User, exc: HTTPException, back: str) -> Response:
    """The refusal of a form, with its HTTP status, and the way back."""
    return page(request, "regrade_error.html", {"user": user, "message": exc.detail, "back": back}, exc.status_code)


def _back(path: str) -> Response:
    return RedirectResponse(path, status_code=status.HTTP_303_SEE_OTHER)


@pages.get("/staff/regrades", response_class=HTMLResponse)
def regrades_page(request: Request, session: SessionDep, user: PageUser) -> Response:
    """Every open request (the oldest first, each with an answer form), then the answered ones."""
    if (refusal := staff_only(request, user, "regrade requests are answered by course staff only")) is not None:
        return refusal
    return page(request, "regrades.html", {
        "user": user,
        "open": requests_public(session, regrades.open_requests(session)),
        "answered": requests_public(session, regrades.answered_requests(session)),
    })


# Not under ".../regrade": the student's page holds no address of staff's "Grade again" button.
@pages.post("/submissions/{submission_id}/ask-for-regrade", response_class=HTMLResponse)
def ask_form(
    request: Request, session: SessionDep, user: PageUser, submission_id: RowId,
    csrf: Annotated[str | None, Form()] = None, message: Annotated[str, Form()] = "",
) -> Response:
    """The student's "Ask for a regrade" form, then their submission's page again."""
    if (refusal := _refusal(request, user, csrf)) is not None:
        return refusal
    back = f"/submissions/{submission_id}"
    try:
        submission = owned_submission(session, submission_id, user)
        regrades.request_regrade(session, submission=submission, user=user, message=message)
    except HTTPException as exc:
        return _error(request, user, exc, back)
    except regrades.RegradeError as exc:
        return _error(request, user, http_error(exc), back)
    return _back(back)


@pages.post("/staff/regrades/{request_id}/answer", response_class=HTMLResponse)
def answer_form(
    request: Request, session: SessionDep, user: PageUser, request_id: RowId,
    csrf: Annotated[str | None, Form()] = None, answer: Annotated[str, Form()] = "",
    regrade: Annotated[bool, Form()] = False,  # the "grade again" checkbox: sent only when ticked
    back: Annotated[Literal["list", "submission"], Form()] = "list",
) -> Response:
    """Staff's answer form, on /staff/regrades and on the submission page; back to where it was."""
    if (refusal := _refusal(request, user, csrf)) is not None:
        return refusal
    if user.role != Role.STAFF:
        return refused(request, user, "Staff only", "regrade requests are answered by course staff only")
    row = regrades.get_request(session, request_id)
    there = f"/submissions/{row.submission_id}" if row is not None and back == "submission" else "/staff/regrades"
    try:
        _answer(request, session, user, request_id, text=answer, regrade=regrade)
    except regrades.RegradeError as exc:
        return _error(request, user, http_error(exc), there)
    return _back(there)


@pages.post("/submissions/{submission_id}/override", response_class=HTMLResponse)
def override_form(
    request: Request, session: SessionDep, user: PageUser, submission_id: RowId,
    csrf: Annotated[str | None, Form()] = None, points: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> Response:
    """Staff's override form on the submission page (points left empty: clear the override)."""
    if (refusal := _refusal(request, user, csrf)) is not None:
        return refusal
    if user.role != Role.STAFF:
        return refused(request, user, "Staff only", "grades are set by hand by course staff only")
    back = f"/submissions/{submission_id}"
    try:
        submission = owned_submission(session, submission_id, user)
        regrades.override_grade(session, submission=submission, points=_points(points), reason=reason,
                                actor=user.name, points_possible=points_possible(request, submission))
    except HTTPException as exc:
        return _error(request, user, exc, back)
    except regrades.RegradeError as exc:
        return _error(request, user, http_error(exc), back)
    return _back(back)


def _points(sent: str) -> float | None:
    """The override form's points: empty is none (clear the override), else a number."""
    if not sent.strip():
        return None
    try:
        return float(sent)
    except ValueError:
        raise regrades.Invalid(f"points: expected a number of points (or nothing, to clear), got {sent[:40]!r}") from None


router.include_router(rest)
router.include_router(pages)
