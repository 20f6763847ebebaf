"""The course's roster in the database: students imported from the LMS's export, listed, removed.

An import is idempotent: a student already there (matched by login, the user's name, whatever
its case) keeps their token and gets the LMS's fields; a removed student on the roster again is
restored with a new token; a new one gets a fresh token. Tokens are returned once, in the
result, to be mailed out, and stored only as digests. Staff are never made students: a roster
row with a member of staff's login refuses the whole import before anything changes. Every
change is recorded in the audit trail (:mod:`api.store.audit`) and committed with it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import StrEnum
from typing import Sequence

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.store import crud
from api.store.audit import record
from api.store.db import Extension, User, utcnow
from grader.core.roster import RosterEntry
from grader.core.states import Role

__all__ = [
    "MAIL_MERGE_HEADER", "ImportedStudent", "RosterChange", "RosterConflict", "RosterImport", "RosterStudent",
    "aware", "find_user", "import_roster", "list_roster", "mail_merge_rows", "remove_student",
]

# The columns of the file mailed out after an import (``mail_merge_rows``).
MAIL_MERGE_HEADER = ("login", "name", "email", "token", "note")
# The user's columns an import fills in, from the entry's field of the same meaning.
_FIELDS = {"display_name": "name", "email": "email", "sis_id": "sis_id", "lms_id": "lms_id", "section": "section"}


class RosterChange(StrEnum):
    """What an import did to one student."""

    CREATED = "created"  # new: a fresh token
    RESTORED = "restored"  # removed before, on the roster again: a new token
    UPDATED = "updated"  # there already: their token kept, some field changed
    UNCHANGED = "unchanged"  # there already, as the roster says


_ACTIONS = {RosterChange.CREATED: "roster.create", RosterChange.RESTORED: "roster.restore",
            RosterChange.UPDATED: "roster.update"}


class RosterConflict(ValueError):
    """A roster operation would turn a member of staff into a student (or remove one)."""


class ImportedStudent(BaseModel):
    """One roster entry after an import; ``token`` only when a new one was made (shown once)."""

    model_config = ConfigDict(frozen=True)

    login: str
    name: str
    email: str | None
    token: str | None = Field(repr=False)  # never in a log line that prints the result
    change: RosterChange
    has_token: bool  # whether they can sign in now (false: a token revoked by staff, kept revoked)

    @property
    def note(self) -> str:
        """The mail-merge file's note: why the token cell is filled in or empty."""
        if self.change == RosterChange.CREATED:
            return "new"
        if self.change == RosterChange.RESTORED:
            return "restored"
        return "already had a token" if self.has_token else "token revoked: give a new one with admin token create"


class RosterImport(BaseModel):
    """What an import did: each entry in the roster's order, and how many of each change."""

    model_config = ConfigDict(frozen=True)

    students: tuple[ImportedStudent, ...]
    created: int
    updated: int
    restored: int
    unchanged: int

    def summary(self) -> str:
        """``3 students: 2 new, 0 restored, 1 updated, 0 unchanged``."""
        return (f"{len(self.students)} students: {self.created} new, {self.restored} restored, "
                f"{self.updated} updated, {self.unchanged} unchanged")


class RosterStudent(BaseModel):
    """A student as the roster lists them: the LMS's fields, whether they can sign in, their extension."""

    model_config = ConfigDict(frozen=True)

    login: str
    name: str | None
    email: str | None
    sis_id: str | None
    lms_id: str | None
    section: str | None
    has_token: bool
    removed_at: datetime | None
    extension: datetime | None  # their own due date, timezone-aware (UTC)
    extension_reason: str | None


def aware(moment: datetime | None) -> datetime | None:
    """``moment`` with its zone: UTC where the database handed it back without one (SQLite)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=timezone.utc)


def find_user(session: Session, *, login: str) -> User | None:
    """The user of ``login``: of that very name, else of that name in another case (a login
    no database can hold, with a NUL, is nobody's)."""
    if "\x00" in login or len(login) > 100:
        return None
    user = crud.user_by_name(session, name=login)
    if user is None:
        user = session.scalars(select(User).where(func.lower(User.name) == login.lower()).order_by(User.id)).first()
    return user


def _refuse_staff(user: User | None, login: str, what: str) -> None:
    if user is not None and user.role == Role.STAFF:
        raise RosterConflict(
            f"login {login!r}: a member of staff has that login; {what}: staff are never made students "
            "(remove that row from the roster, or give the staff member another login)")


def _changes(user: User, entry: RosterEntry) -> dict[str, tuple[str | None, str | None]]:
    """The user's columns the entry changes: column -> (before, after)."""
    found = {column: (getattr(user, column), getattr(entry, field)) for column, field in _FIELDS.items()}
    return {column: pair for column, pair in found.items() if pair[0] != pair[1]}


def _apply(session: Session, user: User | None, entry: RosterEntry, actor: str) -> ImportedStudent:
    """Create, restore or update one student (its changes added to the session, not committed)."""
    token = None
    if user is None:
        user, token = crud.create_user(session, name=entry.login, role=Role.STUDENT)
        change = RosterChange.CREATED
    elif user.removed_at is not None:
        user, token = crud.create_user(session, name=user.name, role=Role.STUDENT, replace=True)
        user.removed_at = None
        change = RosterChange.RESTORED
    else:
        change = RosterChange.UPDATED if _changes(user, entry) else RosterChange.UNCHANGED
    changed = _changes(user, entry)
    for column, (_, after) in changed.items():
        setattr(user, column, after)
    if change != RosterChange.UNCHANGED:
        detail = "; ".join(f"{column}: {before!r} -> {after!r}" for column, (before, after) in changed.items())
        record(session, actor=actor, action=_ACTIONS[change], subject=f"student {user.name}", detail=detail)
    return ImportedStudent(login=user.name, name=entry.name, email=entry.email, token=token, change=change,
                           has_token=user.token_hash is not None)


def import_roster(session: Session, entries: Sequence[RosterEntry], *, actor: str) -> RosterImport:
    """Bring the database's students in line with ``entries`` (see the module's docstring).

    Args:
        entries: the roster, as :func:`grader.core.roster.read_roster` reads it.
        actor: who imports it, for the audit trail.

    Returns:
        Each entry with its new token (or None) and what changed, in the roster's order.

    Raises:
        RosterConflict: an entry's login is a member of staff's (nothing is changed).
    """
    found = [find_user(session, login=entry.login) for entry in entries]
    for user, entry in zip(found, entries):
        _refuse_staff(user, entry.login, "nothing was imported")
    students = tuple(_apply(session, user, entry, actor) for user, entry in zip(found, entries))
    counts = {change: sum(s.change == change for s in students) for change in RosterChange}
    result = RosterImport(students=students, created=counts[RosterChange.CREATED],
                          updated=counts[RosterChange.UPDATED], restored=counts[RosterChange.RESTORED],
                          unchanged=counts[RosterChange.UNCHANGED])
    record(session, actor=actor, action="roster.import", subject="roster", detail=result.summary())
    session.commit()
    return result


def mail_merge_rows(result: RosterImport) -> list[tuple[str, str, str, str, str]]:
    """The rows of the mail-merge file (:data:`MAIL_MERGE_HEADER`): a token only where one was made."""
    return [(s.login, s.name, s.email or "", s.token or "", s.note) for s in result.students]


def list_roster(
    session: Session, *, include_removed: bool = True, assignment: str | None = None,
) -> list[RosterStudent]:
    """Every student by login, each with their extension's due date for ``assignment`` (None:
    the assignment's, or no assignment named)."""
    extended = (Extension.user_id == User.id) & (Extension.assignment == assignment)
    query = (select(User, Extension.due, Extension.reason).outerjoin(Extension, extended)
             .where(User.role == Role.STUDENT).order_by(User.name))
    if not include_removed:
        query = query.where(User.removed_at.is_(None))
    return [
        RosterStudent(login=user.name, name=user.display_name, email=user.email, sis_id=user.sis_id,
                      lms_id=user.lms_id, section=user.section, has_token=user.token_hash is not None,
                      removed_at=aware(user.removed_at), extension=aware(due), extension_reason=reason)
        for user, due, reason in session.execute(query)
    ]


def remove_student(session: Session, *, login: str, actor: str) -> bool:
    """Take a student off the roster: their token ends at once; they and their submissions stay
    (an import that lists them again restores them with a new token). Whether they were on it.

    Raises:
        LookupError: no student of that login.
        RosterConflict: the login is a member of staff's.
    """
    user = find_user(session, login=login)
    _refuse_staff(user, login, "not removed")
    if user is None:
        raise LookupError(f"login {login!r}: no such student (see admin roster list)")
    if user.removed_at is not None:
        return False
    user.removed_at, user.token_hash = utcnow(), None
    record(session, actor=actor, action="roster.remove", subject=f"student {user.name}",
           detail="token revoked; submissions kept")
    session.commit()
    return True
