"""Regrade requests and grade overrides: a student asks that a graded submission of theirs be
looked at again (the request is the row itself), staff answer it, and staff may set a
submission's grade by hand with a reason; every staff action is an audit event
(:mod:`api.store.audit`), committed with the change it records.

The rules are checked here, where every caller (REST, pages) comes through, and each refusal is
one of the errors below, whose message names the field or the submission, what was expected and
what was found; the routes turn them into 403, 404, 409 and 422.
"""

from __future__ import annotations

import math
from typing import Iterable

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from api.store import audit
from api.store.db import RegradeRequest, Submission, User, utcnow
from grader.core.states import JobStatus, RegradeState, Role, SubmissionKind

__all__ = [
    "MAX_ANSWER",
    "MAX_MESSAGE",
    "MAX_REASON",
    "Conflict",
    "Invalid",
    "NotAllowed",
    "NotFound",
    "RegradeError",
    "answer_request",
    "answered_requests",
    "get_request",
    "open_requests",
    "override_grade",
    "request_regrade",
    "requests_of",
    "student_names",
]

MAX_MESSAGE = 4000  # characters of a student's request
MAX_ANSWER = 4000  # characters of staff's answer
MAX_REASON = 2000  # characters of the reason for an override
# A request may be made about a submission whose grading has ended, either way.
_ASKABLE = (JobStatus.DONE, JobStatus.ERROR)


class RegradeError(Exception):
    """A refused regrade request, answer or override; the message says why."""


class NotFound(RegradeError):
    """No such request or submission (or not the asker's own)."""


class NotAllowed(RegradeError):
    """Not for this user's role."""


class Conflict(RegradeError):
    """Not in this state: a preview, a grading not ended, a request already open or answered."""


class Invalid(RegradeError):
    """A field out of its bounds."""


def _text(value: str, *, field: str, most: int) -> str:
    """``value`` stripped, if it holds 1 to ``most`` characters."""
    stripped = value.strip()
    if not 1 <= len(stripped) <= most:
        raise Invalid(f"{field}: must be 1 to {most} characters (spaces around it left out), got {len(stripped)}")
    if "\x00" in stripped:  # PostgreSQL stores no NUL in text
        raise Invalid(f"{field}: must not hold a NUL character (at character {stripped.index(chr(0)) + 1})")
    return stripped


def _not_a_preview(submission: Submission) -> None:
    if submission.kind == SubmissionKind.PREVIEW:
        raise Conflict(f"submission {submission.id} is a preview: previews never count for the grade")


def request_regrade(session: Session, *, submission: Submission, user: User, message: str) -> RegradeRequest:
    """Open ``user``'s request that ``submission`` be looked at again, and commit it.

    Args:
        submission: the student's own submission (not a preview), done or not gradable (error).
        user: the student asking.
        message: what to look at and why: 1 to :data:`MAX_MESSAGE` characters once stripped.

    Raises:
        NotAllowed: ``user`` is not a student.
        NotFound: the submission is not ``user``'s (said as if it did not exist).
        Conflict: a preview, a grading not ended, or a request of this submission already open.
        Invalid: the message is empty or too long.
    """
    if user.role != Role.STUDENT:
        raise NotAllowed("regrade requests are for students; staff answer them or grade again")
    if submission.user_id != user.id:
        raise NotFound(f"submission {submission.id}: no such submission")
    _not_a_preview(submission)
    if submission.status not in _ASKABLE:
        raise Conflict(f"submission {submission.id} is {submission.status}: ask once its grading has ended")
    text = _text(message, field="message", most=MAX_MESSAGE)
    # Look for an open request and add one under a lock on the submission's row (PostgreSQL;
    # SQLite locks the whole database for the write), held to the commit: two posts at once
    # cannot both find none open. The row is written unchanged; only the lock is wanted.
    session.execute(update(Submission).where(Submission.id == submission.id).values(kind=Submission.kind))
    already = session.scalar(select(RegradeRequest).where(
        RegradeRequest.submission_id == submission.id, RegradeRequest.state == RegradeState.OPEN))
    if already is not None:
        session.rollback()
        raise Conflict(f"submission {submission.id} already has an open regrade request (request {already.id}): "
                       "wait for staff's answer before asking again")
    request = RegradeRequest(submission_id=submission.id, user_id=user.id, message=text, state=RegradeState.OPEN)
    session.add(request)
    session.commit()
    return request


def get_request(session: Session, request_id: int) -> RegradeRequest | None:
    return session.get(RegradeRequest, request_id)


def open_requests(session: Session) -> list[RegradeRequest]:
    """Every open request, the oldest first (the one waiting longest)."""
    query = select(RegradeRequest).where(RegradeRequest.state == RegradeState.OPEN).order_by(RegradeRequest.id)
    return list(session.scalars(query))


def answered_requests(session: Session, *, limit: int = 500) -> list[RegradeRequest]:
    """Answered requests, the latest answered first."""
    query = (select(RegradeRequest).where(RegradeRequest.state == RegradeState.ANSWERED)
             .order_by(RegradeRequest.answered_at.desc(), RegradeRequest.id.desc()).limit(limit))
    return list(session.scalars(query))


def requests_of(session: Session, *, submission_id: int) -> list[RegradeRequest]:
    """A submission's requests, the oldest first."""
    query = select(RegradeRequest).where(RegradeRequest.submission_id == submission_id).order_by(RegradeRequest.id)
    return list(session.scalars(query))


def student_names(session: Session, requests: Iterable[RegradeRequest]) -> dict[int, str]:
    """The name of each request's student, by request id (one query for them all)."""
    requests = list(requests)
    ids = {r.user_id for r in requests}
    rows = session.execute(select(User.id, User.name).where(User.id.in_(ids))) if ids else []
    names = {row.id: row.name for row in rows}
    return {r.id: names.get(r.user_id, "") for r in requests}


def answer_request(session: Session, *, request_id: int, actor: str, answer: str, regrade: bool) -> RegradeRequest:
    """Answer an open request as ``actor`` (staff), and commit it with its audit events.

    ``regrade`` records that the submission is to be graded again; the caller queues it
    (``api/web/submitting.py`` ``start_regrade``), once this has committed.

    Raises:
        NotFound: no such request.
        Conflict: it was answered already (by whom and when is said).
        Invalid: the answer is empty or longer than :data:`MAX_ANSWER`.
    """
    request = session.get(RegradeRequest, request_id)
    if request is None:
        raise NotFound(f"regrade request {request_id}: no such request")
    text = _text(answer, field="answer", most=MAX_ANSWER)
    # Answered only if still open: of two answers at once, the second finds it answered.
    done = session.execute(
        update(RegradeRequest)
        .where(RegradeRequest.id == request_id, RegradeRequest.state == RegradeState.OPEN)
        .values(state=RegradeState.ANSWERED, answer=text, answered_by=actor[:100], answered_at=utcnow())
    )
    if done.rowcount != 1:
        session.rollback()
        session.refresh(request)
        raise Conflict(f"regrade request {request_id} was already answered by {request.answered_by} "
                       f"at {request.answered_at:%Y-%m-%d %H:%M:%S}")
    subject = f"submission {request.submission_id}"
    audit.record(session, actor=actor, action="answer regrade request", subject=subject,
                 detail=f"request {request_id}{' (graded again)' if regrade else ''}: {text}")
    if regrade:
        audit.record(session, actor=actor, action="grade again", subject=subject,
                     detail=f"asked in regrade request {request_id}")
    session.commit()
    session.refresh(request)
    return request


def override_grade(
    session: Session, *, submission: Submission, points: float | None, reason: str, actor: str,
    points_possible: float,
) -> Submission:
    """Set ``submission``'s grade to ``points`` by hand (None: back to the graded one), with the
    reason, as ``actor`` (staff); committed with its audit event.

    Args:
        points: 0 to ``points_possible``, or None to clear the override.
        reason: why, 1 to :data:`MAX_REASON` characters once stripped (clearing needs one too).
        points_possible: the assignment's points.

    Raises:
        Conflict: the submission is a preview.
        Invalid: points outside 0..``points_possible`` (or not a number), or no reason.
    """
    _not_a_preview(submission)
    if points is not None and not (math.isfinite(points) and 0 <= points <= points_possible):
        raise Invalid(f"points: must be between 0 and {points_possible:g} (the assignment's points), got {points:g}")
    text = _text(reason, field="reason", most=MAX_REASON)
    if points is not None:
        points = float(points) + 0.0  # -0.0 is 0 points
    submission.override_points = points
    submission.override_reason = None if points is None else text
    submission.override_by = None if points is None else actor[:100]
    submission.override_at = None if points is None else utcnow()
    if points is None:
        audit.record(session, actor=actor, action="clear override", subject=f"submission {submission.id}",
                     detail=text)
    else:
        audit.record(session, actor=actor, action="override grade", subject=f"submission {submission.id}",
                     detail=f"{points:g} of {points_possible:g} points: {text}")
    session.commit()
    return submission
