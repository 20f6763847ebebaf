"""The staff's roster pages: the students and their extensions, importing the LMS's CSV export,
granting and ending extensions, removing a student.

Every form posts here with a form token and is checked to come from these pages
(:mod:`api.web.forms`); students get the 403 page. An import answers with a page that shows the
mail-merge file once, in a read-only text box (tokens are stored only as digests, so they can
never be shown again): the tokens travel in that answer's body alone, never in an address (which
access logs, histories and ``Referer`` headers keep) and never in a log. The page's "Save as a
file" button posts that text back to :func:`tokens_file`, which answers with it as an attachment:
a download that works without JavaScript, since the pages' Content-Security-Policy runs no script
and a ``data:`` link would not be followed. Both answers say ``Cache-Control: no-store``.
"""

from __future__ import annotations

import re
import tempfile
from io import StringIO
from pathlib import Path
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, HTTPException, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as FormError

from api.store.db import User
from api.store.extensions import MAX_REASON, grant_extension, parse_due, revoke_extension
from api.store.roster import (
    MAIL_MERGE_HEADER, RosterConflict, import_roster, list_roster, mail_merge_rows, remove_student,
)
from api.web.csrf import FIELD
from api.web.deps import SessionDep
from api.web.hosting import Hosted, HostedQuery
from api.web.forms import PAGE_HEADERS, PageUser, from_elsewhere, page, refused, to_login, token_refused
from grader.core.roster import RosterError, read_roster
from grader.core.states import Role
from grader.report.spreadsheet import write_rows

__all__ = ["MAX_ROSTER_BYTES", "router"]

router = APIRouter(tags=["pages"], include_in_schema=False)
MAX_ROSTER_BYTES = 4 * 1024 * 1024  # an export of a few thousand students is well under this
NO_FILE = "choose the LMS's CSV export (Canvas or Moodle) to import"
NO_STORE = {"Cache-Control": "no-store"}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
Field = Annotated[str | None, Form()]


def _roster(request: Request, session: Session, user: User, hosted: Hosted, *, error: str | None = None,
            status_code: int = status.HTTP_200_OK) -> Response:
    deadline = hosted.rules.deadline
    return page(request, "roster.html", {
        "user": user, "hosted": hosted, "students": list_roster(session, assignment=hosted.name), "error": error,
        "deadline": deadline,
        "zone": (deadline.timezone if deadline is not None else None) or "UTC", "max_reason": MAX_REASON,
    }, status_code)


def _not_staff(
    request: Request, user: User | None, csrf: object = None, *, check_token: bool = True,
) -> Response | None:
    """The answer to a request that is not a signed-in staff member's own post, or None."""
    if user is None:
        return to_login()
    if request.method == "POST" and (refusal := from_elsewhere(request, user)) is not None:
        return refusal
    if user.role != Role.STAFF:
        return refused(request, user, "Staff only", "the roster is for course staff only")
    if request.method == "POST" and check_token:
        return token_refused(request, user, csrf)
    return None


@router.get("/staff/roster", response_class=HTMLResponse)
def roster_page(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery) -> Response:
    if (refusal := _not_staff(request, user)) is not None:
        return refusal
    return _roster(request, session, user, hosted)


@router.post("/staff/roster/import", response_class=HTMLResponse)
async def import_page(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery) -> Response:
    """The import form: the uploaded export read as ``mutagrade admin roster import`` reads a
    file, then a page with the mail-merge file; a refusal is the roster page with the reason."""
    if (refusal := _not_staff(request, user, check_token=False)) is not None:  # before the body is read
        return refusal
    try:
        async with request.form(max_files=1, max_fields=2) as form:
            if (refusal := token_refused(request, user, form.get(FIELD))) is not None:
                return refusal
            upload = form.get("roster")
            if not isinstance(upload, UploadFile) or not upload.filename:
                raise HTTPException(status.HTTP_400_BAD_REQUEST, NO_FILE)
            data = await upload.read(MAX_ROSTER_BYTES + 1)
            name = _UNSAFE_NAME.sub("_", Path(upload.filename).name)[:100] or "roster.csv"
        if len(data) > MAX_ROSTER_BYTES:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                                f"{name}: expected at most {MAX_ROSTER_BYTES} bytes, got more")
    except FormError as exc:  # no file, too large, and a body that is not such a form
        return await run_in_threadpool(_roster, request, session, user, hosted, error=str(exc.detail),
                                       status_code=exc.status_code)
    return await run_in_threadpool(_import, request, session, user, hosted, data, name)


def _import(request: Request, session: Session, user: User, hosted: Hosted, data: bytes, name: str) -> Response:
    with tempfile.TemporaryDirectory(prefix="mutagrade-roster-") as folder:
        path = Path(folder) / "roster.csv"  # the uploaded name only in messages: never a path
        path.write_bytes(data)
        try:
            entries = read_roster(path)
        except RosterError as exc:  # named by the file's own name, not where it was kept
            return _roster(request, session, user, hosted, error=str(exc).replace(str(path), name),
                           status_code=status.HTTP_400_BAD_REQUEST)
    try:
        result = import_roster(session, entries, actor=user.name)
    except RosterConflict as exc:
        return _roster(request, session, user, hosted, error=f"{name}: {exc}", status_code=status.HTTP_409_CONFLICT)
    text = StringIO()
    write_rows(text, MAIL_MERGE_HEADER, mail_merge_rows(result))
    return page(request, "roster_imported.html", {"user": user, "result": result, "csv_text": text.getvalue(),
                                                  "name": name}, headers=NO_STORE)


@router.post("/staff/roster/tokens.csv")
async def tokens_file(request: Request, user: PageUser) -> Response:
    """The import page's "Save as a file": the mail-merge text it posts, back as a CSV attachment."""
    if (refusal := _not_staff(request, user, check_token=False)) is not None:
        return refusal
    try:
        async with request.form(max_files=0, max_fields=2, max_part_size=MAX_ROSTER_BYTES) as form:
            if (refusal := token_refused(request, user, form.get(FIELD))) is not None:
                return refusal
            text = form.get("csv")
    except FormError as exc:
        text, problem = None, f" ({exc.detail})"
    else:
        problem = ""
    header = ",".join(MAIL_MERGE_HEADER)
    if not isinstance(text, str) or not text.startswith(header):
        message = f"csv: expected the text of an import's mail-merge file, starting {header}{problem}"
        return page(request, "refused.html", {"user": user, "title": "Not a mail-merge file", "message": message},
                    status.HTTP_400_BAD_REQUEST)
    return Response(text, media_type="text/csv; charset=utf-8", headers={
        **PAGE_HEADERS, **NO_STORE, "Content-Disposition": 'attachment; filename="tokens.csv"'})


@router.post("/staff/roster/extension", response_class=HTMLResponse)
def extension_form(
    request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery, csrf: Field = None,
    login: Field = None, due: Field = None, timezone: Field = None, reason: Field = None, assignment: Field = None,
) -> Response:
    """Grant a student an extension for an assignment (replacing theirs): a local time and a
    zone, as staff write them."""
    if (refusal := _not_staff(request, user, csrf) or _other_module(request, session, user, hosted, assignment)):
        return refusal
    try:
        moment = parse_due(due or "", timezone=timezone or None)
        grant_extension(session, login=(login or "").strip(), assignment=hosted.name, due=moment,
                        reason=(reason or "").strip(), actor=user.name)
    except (LookupError, ValueError) as exc:
        return _roster(request, session, user, hosted, error=f"extension: {exc}",
                       status_code=status.HTTP_400_BAD_REQUEST)
    return _back(hosted)


@router.post("/staff/roster/extension/revoke", response_class=HTMLResponse)
def revoke_form(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery, csrf: Field = None,
                login: Field = None, assignment: Field = None) -> Response:
    """End a student's extension for an assignment: its due date is theirs again."""
    if (refusal := _not_staff(request, user, csrf) or _other_module(request, session, user, hosted, assignment)):
        return refusal
    try:
        revoke_extension(session, login=login or "", assignment=hosted.name, actor=user.name)
    except LookupError as exc:
        return _roster(request, session, user, hosted, error=str(exc), status_code=status.HTTP_400_BAD_REQUEST)
    return _back(hosted)


@router.post("/staff/roster/remove", response_class=HTMLResponse)
def remove_form(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery, csrf: Field = None,
                login: Field = None) -> Response:
    """Take a student off the roster: their token ends at once; their submissions stay."""
    if (refusal := _not_staff(request, user, csrf)) is not None:
        return refusal
    try:
        remove_student(session, login=login or "", actor=user.name)
    except (LookupError, RosterConflict) as exc:
        return _roster(request, session, user, hosted, error=str(exc), status_code=status.HTTP_400_BAD_REQUEST)
    return _back(hosted)


def _other_module(request: Request, session: Session, user: User, hosted: Hosted, sent: str | None) -> Response | None:
    """The refusal of a form whose body names another module than the address it was posted to
    (``?assignment=``, the module the page showed): nothing is changed in either."""
    if sent is None or sent == hosted.name:
        return None
    return _roster(request, session, user, hosted, status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
                   error=f"assignment: the form names {sent!r} but was posted for {hosted.name!r} "
                         f"(/staff/roster?assignment={hosted.name}); nothing was changed")


def _back(hosted: Hosted) -> Response:
    """The roster page of the assignment the form was posted from."""
    return RedirectResponse(f"/staff/roster?{urlencode({'assignment': hosted.name})}",
                            status_code=status.HTTP_303_SEE_OTHER)
