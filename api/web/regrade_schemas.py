"""Request and response bodies of the regrade requests and grade overrides (``/v1``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.store.regrades import MAX_ANSWER, MAX_MESSAGE, MAX_REASON

__all__ = ["OverridePublic", "RegradeAnswer", "RegradeAsk", "RegradeOverride", "RegradeRequestPublic"]


# Text fields are stripped, then held to their bounds (a blank one is refused, naming it).
_Message = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_MESSAGE),
                     Field(description=f"what staff should look at again, and why: 1 to {MAX_MESSAGE} characters")]
_Answer = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_ANSWER),
                    Field(description=f"the answer the student reads: 1 to {MAX_ANSWER} characters")]
_Reason = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_REASON),
                    Field(description=f"why, recorded in the audit trail: 1 to {MAX_REASON} characters")]


class RegradeAsk(BaseModel):
    """A student's request that a submission be looked at again."""

    model_config = ConfigDict(extra="forbid")

    message: _Message


class RegradeAnswer(BaseModel):
    """Staff's answer to a request; ``regrade`` queues the submission to be graded again."""

    model_config = ConfigDict(extra="forbid")

    answer: _Answer
    regrade: bool = False


class RegradeOverride(BaseModel):
    """Staff's grade for a submission, by hand; ``points`` null clears it. The upper bound is the
    assignment's points (checked against it: a 422 names both bounds)."""

    model_config = ConfigDict(extra="forbid")

    # Bounds checked by the store, whose refusal names both (0 and the assignment's points).
    points: float | None = Field(description="0 to the assignment's points, or null to clear the override")
    reason: _Reason


class RegradeRequestPublic(BaseModel):
    """A regrade request as its student and staff see it."""

    id: int
    submission_id: int
    student: str
    message: str
    state: str  # open | answered (grader.core.states.RegradeState)
    created_at: str
    answer: str | None
    answered_by: str | None
    answered_at: str


class OverridePublic(BaseModel):
    """A submission's grade as staff set it; ``points`` null when there is no override."""

    submission_id: int
    points: float | None
    points_possible: float
    reason: str | None
    by: str | None
    at: str
