"""Due dates as the service applies them: a student's due date (the assignment's ``[deadline]``,
or the extension staff granted them), an upload judged against it by the server's clock
(:func:`grader.core.deadlines.judge`), and the words the refusal and the pages say it in.

The time of an upload is the database's clock when the whole archive has been received
(:func:`api.store.crud.database_now`: PostgreSQL's ``now()``, shared by every API machine; with
SQLite, this machine's UTC clock), and it is stored as the submission's time.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo

from fastapi import HTTPException, status
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from api.store import crud
from api.store.db import User
from api.store.extensions import extension_of
from grader.core.deadlines import Deadline, Timeliness, judge

__all__ = ["DueNotice", "UploadTime", "due_notice", "judge_upload", "late_refusal", "percent", "shown_due"]


class UploadTime(BaseModel):
    """An upload's time and its judgement against the student's due date."""

    model_config = ConfigDict(frozen=True)

    at: datetime
    judged: Timeliness
    extended: bool  # the due date is the student's extension


class DueNotice(BaseModel):
    """What the submissions page says before an upload: the due date, and what an upload now is."""

    model_config = ConfigDict(frozen=True)

    due: str  # as shown_due writes it
    extended: bool
    status: str  # on_time | late | refused
    now: str  # a sentence: what an upload now would be


def judge_upload(session: Session, *, user: User, assignment: str, deadline: Deadline | None) -> UploadTime:
    """An upload by ``user`` for ``assignment`` made now, judged against their due date for it
    (``deadline``, the assignment's, or their extension)."""
    extension = extension_of(session, user.id, assignment=assignment) if deadline is not None else None
    at = crud.database_now(session)
    return UploadTime(at=at, judged=judge(at, deadline, extension=extension), extended=extension is not None)


def _zone(deadline: Deadline) -> tzinfo:
    return ZoneInfo(deadline.timezone) if deadline.timezone else deadline.due.tzinfo


def shown_due(moment: datetime, deadline: Deadline) -> str:
    """A due date in the assignment's time zone: ``2026-12-11 23:59 CET (Europe/Berlin)``."""
    local = moment.astimezone(_zone(deadline)).strftime("%Y-%m-%d %H:%M %Z")
    return f"{local} ({deadline.timezone})" if deadline.timezone else local


def percent(share: float) -> str:
    """A share of the points in percent, as the pages write it: 0.2 -> ``20``, 0.125 -> ``12.5``."""
    return f"{round(share * 100, 1):g}"


def _days(count: int) -> str:
    return f"{count} day" + ("" if count == 1 else "s")


def late_refusal(upload: UploadTime, deadline: Deadline) -> HTTPException:
    """The 403 of a submission past the due date of an assignment that refuses late work."""
    judged = upload.judged
    whose = "your extension's due date" if upload.extended else "the due date"
    return HTTPException(
        status.HTTP_403_FORBIDDEN,
        f"this assignment refuses late submissions: {whose} was {shown_due(judged.due, deadline)} and it is now "
        f"{_days(judged.days_late)} late, so nothing was stored. An extension (a due date of your own) is granted "
        "by course staff: ask them. A preview (`mutagrade check`) is still accepted",
    )


def due_notice(upload: UploadTime, deadline: Deadline | None) -> DueNotice | None:
    """The submissions page's notice of the due date; None where the assignment has none."""
    if deadline is None or upload.judged.due is None:
        return None
    judged = upload.judged
    if judged.status == "on_time":
        now = "An upload now is on time."
    elif judged.status == "late":
        now = f"An upload now is late, {_days(judged.days_late)}: it loses {percent(judged.penalty)} % of its points."
    else:
        now = (f"An upload now is refused: {_days(judged.days_late)} late, and this assignment takes no late "
               "submissions. An extension (a due date of your own) is granted by course staff.")
    return DueNotice(due=shown_due(judged.due, deadline), extended=upload.extended, status=judged.status, now=now)
