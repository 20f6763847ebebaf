"""Regrade requests and grade overrides as the REST routes and the pages show them
(api/web/routes/regrades.py, and the submission page of api/web/routes/pages.py): the public
shapes of the stored rows, the store's refusals as HTTP errors, and what the submission page
shows of them (:func:`regrade_panel`)."""

from __future__ import annotations

from fastapi import HTTPException, Request, status
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from api.store import audit, crud, regrades
from api.store.db import RegradeRequest, Submission, User
from api.web.hosting import of_submission
from api.web.regrade_schemas import OverridePublic, RegradeRequestPublic
from api.web.views import owned_submission
from grader.core.states import IN_FLIGHT, JobStatus, RegradeState, Role, SubmissionKind

__all__ = [
    "AuditEventPublic", "RegradePanel", "http_error", "override_public", "points_possible", "regrade_panel",
    "requests_public",
]

_STATUS = {
    regrades.NotAllowed: status.HTTP_403_FORBIDDEN,
    regrades.NotFound: status.HTTP_404_NOT_FOUND,
    regrades.Conflict: status.HTTP_409_CONFLICT,
    regrades.Invalid: status.HTTP_422_UNPROCESSABLE_CONTENT,
}


def http_error(exc: regrades.RegradeError) -> HTTPException:
    """The store's refusal as the HTTP error a client gets, its message as the detail."""
    return HTTPException(_STATUS.get(type(exc), status.HTTP_400_BAD_REQUEST), str(exc))


def points_possible(request: Request, submission: Submission) -> float:
    """The points of the submission's assignment: the most an override may give."""
    return float(of_submission(request, submission).rules.points)


def requests_public(session: Session, rows: list[RegradeRequest]) -> list[RegradeRequestPublic]:
    names = regrades.student_names(session, rows)
    return [
        RegradeRequestPublic(
            id=r.id, submission_id=r.submission_id, student=names[r.id], message=r.message, state=r.state,
            created_at=crud.as_utc(r.created_at), answer=r.answer, answered_by=r.answered_by,
            answered_at=crud.as_utc(r.answered_at),
        )
        for r in rows
    ]


def override_public(submission: Submission, possible: float) -> OverridePublic:
    return OverridePublic(
        submission_id=submission.id, points=submission.override_points, points_possible=possible,
        reason=submission.override_reason, by=submission.override_by, at=crud.as_utc(submission.override_at),
    )


class AuditEventPublic(BaseModel):
    """One event of the audit trail, as the staff's pages list it."""

    model_config = ConfigDict(frozen=True)

    at: str
    actor: str
    action: str
    detail: str


class RegradePanel(BaseModel):
    """What the submission page shows of regrades: the requests and their answers, whether the
    student may ask (or why not), the override, and for staff the submission's audit events."""

    model_config = ConfigDict(frozen=True)

    requests: list[RegradeRequestPublic]
    can_ask: bool
    ask_note: str | None  # why the student may not ask now, if it is worth saying
    override: OverridePublic | None
    points_possible: float
    staff: bool
    pending: bool  # being graded: staff's forms wait for the grading to end (the page reloads itself)
    events: list[AuditEventPublic]


def _may_ask(submission: Submission, rows: list[RegradeRequest]) -> tuple[bool, str | None]:
    """Whether the student may ask about ``submission`` now, and if not, why (None: the page
    says so already, as a grading in flight)."""
    if submission.kind == SubmissionKind.PREVIEW:
        return False, "This is a preview: it never counts for the grade, so there is nothing to regrade."
    if any(r.state == RegradeState.OPEN for r in rows):
        return False, "Your request is open: staff's answer will appear here."
    return submission.status in (JobStatus.DONE, JobStatus.ERROR), None


def regrade_panel(request: Request, session: Session, submission_id: int, user: User) -> RegradePanel:
    """The submission page's regrade section, for ``user`` (who may see the submission)."""
    submission = owned_submission(session, submission_id, user)
    rows = regrades.requests_of(session, submission_id=submission.id)
    staff = user.role == Role.STAFF
    can_ask, note = (False, None) if staff else _may_ask(submission, rows)
    events = audit.events(session, subject=f"submission {submission.id}") if staff else []
    possible = points_possible(request, submission)
    return RegradePanel(
        requests=requests_public(session, rows),
        can_ask=can_ask,
        ask_note=note,
        override=override_public(submission, possible) if submission.override_points is not None else None,
        points_possible=possible,
        staff=staff,
        pending=submission.status in IN_FLIGHT,
        events=[AuditEventPublic(at=crud.as_utc(e.at), actor=e.actor, action=e.action, detail=e.detail)
                for e in events],
    )
