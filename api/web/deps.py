"""Typed dependencies of the routes: the database session, the current user, staff only."""

from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session

from api.store import crud
from api.store.db import User
from api.web.schemas import ID_MAX
from grader.core.states import Role

__all__ = ["ID_MAX", "TOKEN_COOKIE", "CurrentUser", "RowId", "SessionDep", "StaffUser", "get_session", "request_token"]

TOKEN_COOKIE = "mutagrade_token"
_READ_ONLY = frozenset({"GET", "HEAD"})  # the methods the cookie is taken for, on the REST API

RowId = Annotated[int, Path(ge=1, le=ID_MAX, description="a positive id")]

_bearer = HTTPBearer(auto_error=False, description="a token from `mutagrade admin token create`")


def request_token(request: Request, *, bearer: bool = False, cookie: bool = True) -> str | None:
    """The token a request carries, or None: with ``bearer``, its ``Authorization: Bearer``
    token first; with ``cookie``, the one of the cookie the sign-in form sets. Every route and
    page reads it here, and never from the URL (addresses end up in logs, histories and
    ``Referer`` headers)."""
    if bearer:
        scheme, credentials = get_authorization_scheme_param(request.headers.get("Authorization"))
        if scheme.lower() == "bearer" and credentials:
            return credentials
    return (request.cookies.get(TOKEN_COOKIE) or None) if cookie else None


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.make_session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def get_current_user(
    request: Request,
    session: SessionDep,
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],  # the API's description names it
) -> User:
    """The user of the bearer token, or of the sign-in cookie (:func:`request_token`).

    The cookie opens what the pages link to (reports to download) and changes nothing: the
    browser sends it with a request to this host from any page of the same site, so a post from
    elsewhere would ride on it. The pages' own forms post to the pages, which check them
    (:mod:`api.web.csrf`)."""
    token = request_token(request, bearer=True, cookie=request.method in _READ_ONLY)
    if not token:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing token: send 'Authorization: Bearer <token>'"
            + ("" if request.method in _READ_ONLY else " (the sign-in cookie opens pages and downloads only)"),
            headers={"WWW-Authenticate": "Bearer"},
        )
    user = crud.user_by_token(session, token=token)
    if user is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"}
        )
    return user


CurrentUser = Annotated[User, Depends(get_current_user)]


def get_staff_user(user: CurrentUser) -> User:
    if user.role != Role.STAFF:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this route is for course staff only")
    return user


StaffUser = Annotated[User, Depends(get_staff_user)]
