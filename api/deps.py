"""Typed dependencies of the routes: the database session, the current user, staff only."""

from __future__ import annotations

from typing import Annotated, Iterator

from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api import crud
from api.db import User

__all__ = ["ID_MAX", "CurrentUser", "RowId", "SessionDep", "StaffUser", "get_session"]

TOKEN_COOKIE = "mutagrade_token"
_READ_ONLY = frozenset({"GET", "HEAD"})  # the methods the cookie is taken for, on the REST API

# Ids are Integer columns: 32-bit on PostgreSQL, 64-bit on SQLite. A larger number in a URL
# must be refused as bad input (422), not reach the driver and come back as a 500.
ID_MAX = 2**31 - 1
RowId = Annotated[int, Path(ge=1, le=ID_MAX, description="a positive id")]

_bearer = HTTPBearer(auto_error=False, description="a token from `mutagrade admin token create`")


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.make_session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def get_current_user(
    request: Request,
    session: SessionDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> User:
    """The user of the bearer token, or of the cookie the sign-in form sets (a token is never
    taken from the URL: addresses end up in logs, histories and ``Referer`` headers).

    The cookie opens what the pages link to (reports to download) and changes nothing: the
    browser sends it with a request to this host from any page of the same site, so a post from
    elsewhere would ride on it. The pages' own forms post to the pages, which check them
    (:mod:`api.csrf`)."""
    token = credentials.credentials if credentials else None
    if token is None and request.method in _READ_ONLY:
        token = request.cookies.get(TOKEN_COOKIE)
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
    if user.role != "staff":
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this route is for course staff only")
    return user


StaffUser = Annotated[User, Depends(get_staff_user)]
