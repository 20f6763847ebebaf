"""Request and response bodies of the API (every one of them), and what a golden run stores."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.store.records import GoldenResult
from grader.core.models import Report

__all__ = [
    "ASSIGNMENT_NAME",
    "ID_MAX",
    "AssignmentPublic",
    "GoldenRequest",
    "GoldenRunPublic",
    "Health",
    "Links",
    "MutantPublic",
    "SubmissionCreated",
    "SubmissionPublic",
]

# Ids are Integer columns: 32-bit on PostgreSQL, 64-bit on SQLite. A larger number in a request
# must be refused as bad input (422), not reach the driver and come back as a 500.
ID_MAX = 2**31 - 1
# An assignment's name as a request may give it: its folder's name (PostgreSQL refuses NUL in text).
ASSIGNMENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class Links(BaseModel):
    self: str
    report_json: str
    report_html: str
    report_md: str
    report_junit: str
    report_gradescope: str


class SubmissionCreated(BaseModel):
    id: int
    status: str
    links: Links


class SubmissionPublic(BaseModel):
    """A submission as its owner (or staff) sees it; ``report`` once it is done."""

    id: int
    student: str
    assignment: str  # the hosted assignment it was made for (its folder's name)
    status: str  # queued | running | done | error (grader.core.states.JobStatus)
    archive_name: str
    created_at: str
    started_at: str
    finished_at: str
    passed: bool | None
    kill_rate: float | None
    error: str | None
    links: Links
    report: Report | None = None
    # A preview is graded the same way, never the grade of record (grader.core.states.SubmissionKind).
    kind: str = "submission"  # submission | preview
    # Stamped when it was stored, against the student's due date (api/web/deadlines.py).
    timeliness: str | None = None  # on_time | late; None: there is no due date
    due_at: str = ""  # the due date that applied (the student's extension, if any), UTC
    days_late: int = 0  # each day of 24 hours started after the due date (and grace)
    penalty: float = 0.0  # the share of the points a late submission loses


class MutantPublic(BaseModel):
    id: str
    title: str
    required: bool
    hidden: bool


class AssignmentPublic(BaseModel):
    assignment: str  # what a submission names it by (its folder's name)
    default: bool  # what a submission naming none is for
    name: str
    threshold: float
    required: list[str]
    allow_invalid_tests: bool
    require_journal: bool
    mutants: list[MutantPublic]


class Health(BaseModel):
    status: str
    database: str | None = None
    queue: str | None = None


class GoldenRequest(BaseModel):
    cases: int = Field(default=4, ge=1, le=1000, description="random cases per variant")
    submission_id: int | None = Field(
        default=None, ge=1, le=ID_MAX, description="also check this submission's python/tinyllm"
    )
    assignment: str | None = Field(
        default=None, max_length=100, pattern=ASSIGNMENT_NAME,
        description="whose variants (default: the submission's assignment, else the service's default)",
    )


class GoldenRunPublic(BaseModel):
    id: int
    assignment: str
    status: str  # queued | running | done | error (grader.core.states.JobStatus)
    submission_id: int | None
    cases: int
    created_at: str
    finished_at: str
    result: GoldenResult | None
    error: str | None
