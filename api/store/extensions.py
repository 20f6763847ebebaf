"""Students' own due dates: extensions granted by staff, each replacing one assignment's due
date for one student (and an earlier one of theirs for that assignment).

A due date is an instant: a time without a zone is refused, never guessed, since the same
"23:59" is an hour apart in two zones. :func:`parse_due` reads one as people write it (a local
time and a zone name, or a time with its offset); the database keeps it in UTC. Every grant and
revocation is recorded in the audit trail (:mod:`api.store.audit`) and committed with it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from api.store.audit import record
from api.store.db import Extension, User, utcnow
from api.store.roster import aware, find_user
from grader.core.states import Role

__all__ = [
    "MAX_REASON", "ExtensionGrant", "extension_of", "grant_extension", "list_extensions", "parse_due",
    "revoke_extension",
]

MAX_REASON = 1000  # characters
_DATE_AND_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_EXAMPLE = "2026-12-12T23:59 with a time zone such as Europe/Berlin, or 2026-12-12T23:59+01:00"


class ExtensionGrant(BaseModel):
    """One student's extension: their due date (UTC), why, by whom and when."""

    model_config = ConfigDict(frozen=True)

    login: str
    assignment: str  # the hosted assignment's name
    due: datetime
    reason: str
    granted_by: str
    granted_at: datetime


# Due dates this far from the calendar's ends convert to every zone, with any grace added.
_FIRST_YEAR, _LAST_YEAR = 1971, 9000


def parse_due(text: str, *, timezone: str | None) -> datetime:
    """The instant ``text`` names: a time with an offset (``2026-12-12T23:59+01:00``, ``...Z``),
    or a local time placed in the zone ``timezone`` (``Europe/Berlin``).

    Raises:
        ValueError: not a date and a time, an unknown zone, or a local time with no zone.
    """
    written = text.strip()
    if not _DATE_AND_TIME.match(written):
        raise ValueError(f"due: expected a date and a time such as {_EXAMPLE}, got {text!r}")
    try:
        moment = datetime.fromisoformat(written)
    except ValueError:
        raise ValueError(f"due: expected a date and a time such as {_EXAMPLE}, got {text!r}") from None
    if not _FIRST_YEAR <= moment.year <= _LAST_YEAR:
        raise ValueError(f"due: expected a year from {_FIRST_YEAR} to {_LAST_YEAR}, got {moment.year}")
    zone = _zone(timezone) if timezone else None
    if moment.tzinfo is not None:
        return moment
    if zone is None:
        raise ValueError(f"due {text!r} has no time zone: give a time zone name (such as Europe/Berlin) "
                         "or an offset (2026-12-12T23:59+01:00)")
    return moment.replace(tzinfo=zone)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"timezone: expected a time zone name such as Europe/Berlin or UTC, got {name!r}") from None


def _student(session: Session, login: str) -> User:
    user = find_user(session, login=login)
    if user is None:
        raise LookupError(f"login {login!r}: no such student (see admin roster list)")
    if user.role != Role.STUDENT:
        raise ValueError(f"login {login!r}: a member of staff, not a student: staff have no due date")
    return user


def _grant_of(user: User, extension: Extension) -> ExtensionGrant:
    return ExtensionGrant(login=user.name, assignment=extension.assignment or "", due=aware(extension.due), reason=extension.reason,
                          granted_by=extension.granted_by, granted_at=aware(extension.granted_at))


def grant_extension(
    session: Session, *, login: str, assignment: str, due: datetime, reason: str = "", actor: str,
) -> ExtensionGrant:
    """Give student ``login`` the due date ``due`` for ``assignment``, replacing an extension
    they had for it. A date before the assignment's own is allowed (it is theirs from now on).

    Raises:
        ValueError: ``due`` has no time zone, the reason is over :data:`MAX_REASON`
            characters, or ``login`` is a member of staff's.
        LookupError: no user of that login.
    """
    if due.tzinfo is None or due.utcoffset() is None:
        raise ValueError(f"due must carry a time zone (an offset or a zone name), got {due.isoformat()} with none")
    if len(reason) > MAX_REASON:
        raise ValueError(f"reason: expected at most {MAX_REASON} characters, got {len(reason)}")
    if not _FIRST_YEAR <= due.year <= _LAST_YEAR:
        raise ValueError(f"due: expected a year from {_FIRST_YEAR} to {_LAST_YEAR}, got {due.year}")
    user = _student(session, login)
    utc = due.astimezone(UTC)
    extension = session.scalar(_of(user.id, assignment))
    before = f"; replaces {aware(extension.due).isoformat()}" if extension is not None else ""
    if extension is None:
        extension = Extension(user_id=user.id, assignment=assignment)
        session.add(extension)
    extension.due, extension.reason, extension.granted_by, extension.granted_at = utc, reason, actor, utcnow()
    record(session, actor=actor, action="extension.grant", subject=f"student {user.name}",
           detail=f"assignment {assignment}; due {utc.isoformat()}{before}; reason: {reason}")
    session.commit()
    return _grant_of(user, extension)


def _of(user_id: int, assignment: str) -> Select:
    return select(Extension).where(Extension.user_id == user_id, Extension.assignment == assignment)


def extension_of(session: Session, user_id: int, *, assignment: str) -> datetime | None:
    """The due date of user ``user_id``'s extension for ``assignment`` (timezone-aware, UTC),
    or None: they have the assignment's."""
    extension = session.scalar(_of(user_id, assignment))
    return aware(extension.due) if extension is not None else None


def list_extensions(session: Session, *, assignment: str | None = None) -> list[ExtensionGrant]:
    """Every extension (of ``assignment`` only, if given), by login and assignment."""
    query = (select(User, Extension).join(Extension, Extension.user_id == User.id)
             .order_by(User.name, Extension.assignment))
    if assignment is not None:
        query = query.where(Extension.assignment == assignment)
    return [_grant_of(user, extension) for user, extension in session.execute(query)]


def revoke_extension(session: Session, *, login: str, assignment: str, actor: str) -> bool:
    """End student ``login``'s extension for ``assignment`` (its due date is theirs again);
    whether they had one.

    Raises:
        LookupError: no user of that login.
    """
    user = find_user(session, login=login)
    if user is None:
        raise LookupError(f"login {login!r}: no such student (see admin roster list)")
    extension = session.scalar(_of(user.id, assignment))
    if extension is None:
        return False
    record(session, actor=actor, action="extension.revoke", subject=f"student {user.name}",
           detail=f"assignment {assignment}; was due {aware(extension.due).isoformat()}")
    session.delete(extension)
    session.commit()
    return True
