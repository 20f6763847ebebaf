"""What every HTML page module shares: the templates, the page response with its headers, the
signed-in user of the pages, and the checks of a posted form (its origin and its form token).

A page module renders with :func:`page`, finds its user with :data:`PageUser`, and checks a
form that changes something with :func:`from_elsewhere` (before the body is read) and
:func:`token_refused`; a refusal is the 403 page of :func:`refused`, the user still signed in.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode
from typing import Annotated, Mapping

from fastapi import Depends, Request, Response, status
from fastapi.responses import RedirectResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup

from api.store import crud
from api.store.db import User
from api.web.csrf import FIELD, foreign_origin, form_token, token_matches
from api.web.deps import SessionDep, request_token
from api.web.views import shown_time
from grader.core.states import Role
from grader.report._common import mutant_name

__all__ = [
    "staff_only",
    "PAGE_HEADERS", "PageUser", "templates", "from_elsewhere", "page", "page_user", "refused", "to_login",
    "token_refused",
]

templates = Jinja2Templates(directory=str(Path(__file__).resolve().parent / "templates"))
# The pages load nothing but themselves and their inline style sheet, and submit forms only here.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def _moment(value: datetime | str | None) -> Markup:
    """A moment as people read it, the exact one kept for machines: ``<time datetime=…>``."""
    if not value:
        return Markup("")
    exact = crud.as_utc(value) if isinstance(value, datetime) else value
    return Markup('<time datetime="{}">{}</time>').format(exact, shown_time(exact))


templates.env.globals.update(moment=_moment, mutant_name=mutant_name, FIELD=FIELD)


def page(
    request: Request, name: str, context: dict, status_code: int = status.HTTP_200_OK,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Render template ``name`` with the pages' headers, and the form token ``csrf`` when signed in.

    A page of one assignment (``hosted`` in its context) gets ``aq``, the query that names it
    (``assignment=NAME``), for its links and forms, and the switch to the service's others."""
    token = request_token(request)
    hosted = context.get("hosted")
    context = {"csrf": form_token(token) if token and context.get("user") else None,
               "hosting": request.app.state.hosting,
               "aq": urlencode({"assignment": hosted.name}) if hosted is not None else "", **context}
    return templates.TemplateResponse(
        request, name, context, status_code=status_code, headers={**(headers or {}), **PAGE_HEADERS}
    )


def page_user(request: Request, session: SessionDep) -> User | None:
    """The user signed in by the cookie, if any (a sync dependency: it runs in the thread pool)."""
    token = request_token(request)
    return crud.user_by_token(session, token=token) if token else None


PageUser = Annotated[User | None, Depends(page_user)]


def to_login() -> Response:
    """The way to the sign-in form, for a page asked for without a sign-in."""
    return RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)


def refused(request: Request, user: User | None, title: str, message: str) -> Response:
    """A 403 page saying why, the user still signed in (never the sign-in form again)."""
    return page(request, "refused.html", {"user": user, "title": title, "message": message},
                status.HTTP_403_FORBIDDEN)


def staff_only(request: Request, user: User | None, message: str) -> Response | None:
    """None for a signed-in member of staff; else the sign-in form, or the 403 page saying
    ``message`` (what the page is, for course staff only)."""
    if user is None:
        return to_login()
    if user.role != Role.STAFF:
        return refused(request, user, "Staff only", message)
    return None


def from_elsewhere(request: Request, user: User | None) -> Response | None:
    """The refusal of a post that says it comes from another origin than these pages."""
    origin = foreign_origin(request)
    if origin is None:
        return None
    return refused(request, user, "Refused",
                   f"this form was sent from {origin}, not from this site's own page: "
                   "open the page here and send it again from this site")


def token_refused(request: Request, user: User, sent: object) -> Response | None:
    """The refusal of a post whose form token is not the signed-in user's."""
    if token_matches(request_token(request) or "", sent):
        return None
    return refused(request, user, "Refused",
                   "this form's token is missing or is not that of your sign-in (a page from before "
                   "you signed in, or a form from another site): reload the page and send it again from this site")
