"""Request and response bodies of the API, split by role and use."""

from __future__ import annotations

from pydantic import BaseModel

from grader.core.models import Report

__all__ = [
    "AssignmentPublic",
    "Health",
    "Links",
    "MutantPublic",
    "SubmissionCreated",
    "SubmissionPublic",
]


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
    status: str  # queued | running | done | error
    archive_name: str
    created_at: str
    started_at: str
    finished_at: str
    passed: bool | None
    kill_rate: float | None
    error: str | None
    links: Links
    report: Report | None = None


class MutantPublic(BaseModel):
    id: str
    title: str
    required: bool
    hidden: bool


class AssignmentPublic(BaseModel):
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
