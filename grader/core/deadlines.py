"""Due dates and the late policy: the assignment's ``[deadline]``, and when a submission was late.

A due date is an instant: read from TOML as a local time and a zone name (``due =
"2026-12-11T23:59"``, ``timezone = "Europe/Berlin"``, so that daylight saving time is the
zone's to say) or as a time with its offset (``"2026-12-11T23:59+01:00"``, or a TOML offset
date-time). A submission is late once the due date and ``grace_minutes`` have passed; each day
of 24 hours started after that is a day late, and costs ``penalty_per_day`` of the points, at
most ``penalty_cap`` (``late = "penalty"``), or late work is refused (``late = "refuse"``).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

__all__ = ["Deadline", "Timeliness", "judge"]

DAY = timedelta(hours=24)
_DATE_AND_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_EXAMPLE = '"2026-12-11T23:59" with timezone = "Europe/Berlin", or "2026-12-11T23:59+01:00"'


class Deadline(BaseModel):
    """When an assignment is due, and what late work costs: the assignment's ``[deadline]``.

    ``timezone`` (a zone name such as ``Europe/Berlin``) places a due date written without an
    offset; ``due`` is always timezone-aware once read. ``penalty_per_day`` must be given with
    ``late = "penalty"`` (the default), so that no course takes nothing off late work by
    forgetting it; ``penalty_cap`` is the most a submission can lose (1: all of it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    timezone: str | None = None  # read before ``due``, which it places
    due: datetime
    grace_minutes: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    late: Literal["refuse", "penalty"] = "penalty"
    penalty_per_day: float = Field(default=0.0, ge=0, le=1)
    penalty_cap: float = Field(default=1.0, ge=0, le=1)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"expected a time zone name such as Europe/Berlin or UTC, got {value!r}") from None
        return value

    @field_validator("due", mode="before")
    @classmethod
    def _date_and_time(cls, value: Any) -> Any:
        if isinstance(value, date) and not isinstance(value, datetime):
            raise ValueError(f"expected a date and a time such as {_EXAMPLE}, got the date {value.isoformat()} alone")
        if isinstance(value, str):
            if not _DATE_AND_TIME.match(value.strip()):
                raise ValueError(f"expected a date and a time such as {_EXAMPLE}, got {value!r}")
            try:
                return datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValueError(f"expected a date and a time such as {_EXAMPLE}, got {value!r}") from None
        return value

    @field_validator("due")
    @classmethod
    def _placed(cls, value: datetime, info: ValidationInfo) -> datetime:
        zone = info.data.get("timezone")
        if value.tzinfo is not None and value.utcoffset() is not None:
            return value.astimezone(ZoneInfo(zone)) if zone else value
        if zone is None:
            raise ValueError(
                f"expected an offset (+01:00, Z) or a valid timezone beside it, such as {_EXAMPLE}; "
                f"got {value.isoformat()} with neither")
        return value.replace(tzinfo=ZoneInfo(zone))

    @model_validator(mode="after")
    def _penalty_given(self) -> Deadline:
        if self.late == "penalty" and "penalty_per_day" not in self.model_fields_set:
            raise ValueError(
                'penalty_per_day: required with late = "penalty" (the share of the points lost per day late, '
                'such as 0.1; 0 marks late work late and takes nothing), or set late = "refuse"')
        return self


class Timeliness(BaseModel):
    """Whether a submission came in time, and what lateness costs it.

    ``penalty`` is the share of the points taken away: 0 on time, 1 when refused (late work
    earns nothing). ``due`` is the due date that applied (the student's extension, if any);
    None where the assignment has no deadline.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["on_time", "late", "refused"]
    days_late: int = Field(ge=0)
    penalty: float = Field(ge=0, le=1)
    due: datetime | None

    @property
    def words(self) -> str:
        """``on time``, ``late, 2 days`` or ``refused, 1 day late``: a gradebook's status."""
        days = f"{self.days_late} day" + ("" if self.days_late == 1 else "s")
        if self.status == "late":
            return f"late, {days}"
        if self.status == "refused":
            return f"refused, {days} late"
        return "on time"


def _aware(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{name}: expected a timezone-aware datetime (with an offset or a zone), got naive {value}; "
            "a time without a zone cannot be compared with a due date")


def judge(at: datetime, deadline: Deadline | None, *, extension: datetime | None = None) -> Timeliness:
    """Judge a submission made ``at`` against ``deadline``.

    Args:
        at: when the submission was made (timezone-aware).
        deadline: the assignment's deadline; None: there is none, and every time is on time.
        extension: the student's own due date, in place of the deadline's (timezone-aware).

    Returns:
        On time up to the due date plus the grace minutes; after that late by each started day
        of 24 hours, with ``min(penalty_cap, days × penalty_per_day)`` taken off, or refused
        where the deadline refuses late work.

    Raises:
        ValueError: ``at`` or ``extension`` is a naive datetime.
    """
    _aware(at, "at")
    if extension is not None:
        _aware(extension, "extension")
    if deadline is None:
        return Timeliness(status="on_time", days_late=0, penalty=0.0, due=None)
    due = extension if extension is not None else deadline.due
    over = at - (due + timedelta(minutes=deadline.grace_minutes))
    if over <= timedelta(0):
        return Timeliness(status="on_time", days_late=0, penalty=0.0, due=due)
    days = -(-over // DAY)  # each day started counts
    if deadline.late == "refuse":
        return Timeliness(status="refused", days_late=days, penalty=1.0, due=due)
    return Timeliness(status="late", days_late=days, penalty=min(deadline.penalty_cap, days * deadline.penalty_per_day),
                      due=due)
