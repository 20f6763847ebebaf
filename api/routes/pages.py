"""Server-rendered HTML pages: sign-in and sign-out, submissions, one submission's report, the
gradebook.

No JavaScript and no build step: plain templates, readable with any browser or screen reader.
A token reaches the pages one way only: the sign-in form, which sets an HTTP-only cookie (never
``?token=``: addresses are written to access logs and browser histories).
Student text (test ids, messages, file and user names) is escaped by Jinja's autoescaping, and
every page also tells the browser to run no script at all (:data:`PAGE_HEADERS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import Session

from api import crud
from api.db import User
from api.deps import TOKEN_COOKIE, RowId, SessionDep
from api.views import owned_submission, public

router = APIRouter(tags=["pages"], include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parents[1] / "templates"))
# The pages load nothing but themselves and their inline style sheet, and submit forms only here.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def _page(request: Request, name: str, context: dict, status_code: int = status.HTTP_200_OK) -> Response:
    return templates.TemplateResponse(request, name, context, status_code=status_code, headers=PAGE_HEADERS)


def _page_user(request: Request, session: Session) -> User | None:
    token = request.cookies.get(TOKEN_COOKIE)
    return crud.user_by_token(session, token=token) if token else None


def _to_login() -> Response:
    return RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/", response_class=HTMLResponse)
def home() -> Response:
    return RedirectResponse("/submissions", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    return _page(request, "login.html", {"user": None, "error": None})


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, session: SessionDep, token: Annotated[str, Form()]) -> Response:
    if crud.user_by_token(session, token=token.strip()) is None:
        return _page(request, "login.html", {"user": None, "error": "unknown token"}, status.HTTP_401_UNAUTHORIZED)
    response = RedirectResponse("/submissions", status_code=status.HTTP_303_SEE_OTHER)
    response.set_cookie(TOKEN_COOKIE, token.strip(), httponly=True, samesite="strict")
    return response


@router.api_route("/logout", methods=["GET", "POST"], response_class=HTMLResponse)
def logout() -> Response:
    """Sign out of the pages: the cookie is cleared (the token itself stays valid for the API)."""
    response = _to_login()
    response.delete_cookie(TOKEN_COOKIE, httponly=True, samesite="strict")
    return response


@router.get("/submissions", response_class=HTMLResponse)
def submissions_page(request: Request, session: SessionDep) -> Response:
    user = _page_user(request, session)
    if user is None:
        return _to_login()
    rows = crud.list_submissions(session, user=None if user.role == "staff" else user, limit=500)
    views = [public(request, s, user, with_report=False) for s in rows]
    return _page(request, "submissions.html", {"user": user, "rows": views})


def submission_page(request: Request, session: Session, user: User | None, submission_id: int) -> Response:
    if user is None:
        return _to_login()
    view = public(request, owned_submission(session, submission_id, user), user, with_report=True)
    report = view.report
    mutants = {m.id: m for m in report.mutants} if report else {}
    return _page(request, "submission.html", {"user": user, "s": view, "report": report, "mutants": mutants})


@router.get("/submissions/{submission_id}", response_class=HTMLResponse)
def submission_html(request: Request, session: SessionDep, submission_id: RowId) -> Response:
    return submission_page(request, session, _page_user(request, session), submission_id)


@router.get("/gradebook", response_class=HTMLResponse)
def gradebook_page(request: Request, session: SessionDep) -> Response:
    user = _page_user(request, session)
    if user is None:
        return _to_login()
    if user.role != "staff":
        return _page(
            request, "login.html", {"user": user, "error": "the gradebook is for course staff only"},
            status.HTTP_403_FORBIDDEN,
        )
    return _page(request, "gradebook.html", {"user": user, "rows": crud.gradebook_rows(session)})
