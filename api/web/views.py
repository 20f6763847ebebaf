"""Turning stored submissions into what a given user may see."""

from __future__ import annotations

from datetime import datetime, timezone

from fastapi import HTTPException, Request, status
from sqlalchemy.orm import Session

from api.store import crud
from api.store.db import Submission, User
from api.web.hosting import of_submission
from api.web.schemas import Links, SubmissionPublic
from grader.core.states import JobStatus, Role
from grader.core.models import Report
from grader.core.scoring import student_view

__all__ = ["done_report", "links", "owned_submission", "public", "report_for", "shown_time"]


def links(submission_id: int) -> Links:
    base = f"/v1/submissions/{submission_id}"
    return Links(
        self=base,
        report_json=f"{base}/report.json",
        report_html=f"/submissions/{submission_id}",
        report_md=f"{base}/report.md",
        report_junit=f"{base}/report.junit.xml",
        report_gradescope=f"{base}/report.gradescope.json",
    )


def owned_submission(session: Session, submission_id: int, user: User) -> Submission:
    """The submission, if this user may see it; a student asking for another's gets 404, as if
    it did not exist."""
    submission = crud.get_submission(session, submission_id)
    if submission is None or (user.role != Role.STAFF and submission.user_id != user.id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"submission {submission_id}: no such submission")
    return submission


def report_for(request: Request, submission: Submission, user: User) -> Report | None:
    """The stored (staff) report, as a student sees it unless the user is staff."""
    if submission.report_json is None:
        return None
    report = Report.model_validate_json(submission.report_json)
    return report if user.role == Role.STAFF else student_view(report, of_submission(request, submission).variants)


def done_report(request: Request, submission: Submission, user: User) -> Report:
    report = report_for(request, submission, user)
    if report is None:
        detail = (
            f"submission {submission.id} could not be graded: {submission.error}"
            if submission.status == JobStatus.ERROR
            else f"submission {submission.id} is {submission.status}: its report is not ready yet"
        )
        raise HTTPException(status.HTTP_409_CONFLICT, detail)
    return report


def public(request: Request, submission: Submission, user: User, *, with_report: bool) -> SubmissionPublic:
    return SubmissionPublic(
        id=submission.id,
        student=submission.user.name,
        assignment=submission.assignment or "",
        status=submission.status,
        archive_name=submission.archive_name,
        created_at=crud.as_utc(submission.created_at),
        started_at=crud.as_utc(submission.started_at),
        finished_at=crud.as_utc(submission.finished_at),
        passed=submission.passed,
        kill_rate=submission.kill_rate,
        error=submission.error,
        links=links(submission.id),
        report=report_for(request, submission, user) if with_report else None,
        kind=submission.kind,
        timeliness=submission.timeliness,
        due_at=crud.as_utc(submission.due_at),
        days_late=submission.days_late,
        penalty=submission.penalty,
    )


def shown_time(moment: datetime | str | None) -> str:
    """A moment as the pages write it, to the second and with its zone: ``2026-12-03 21:43:57
    UTC`` (stored times are UTC; SQLite hands them back without their zone). Empty for none."""
    if not moment:
        return ""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    utc = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%d %H:%M:%S UTC")
