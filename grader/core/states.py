"""The states and roles the service stores and answers with, as StrEnums.

The database keeps them as plain strings (a StrEnum is a ``str``: no migration), and so does the
JSON the API sends. Standard library only: the command line's parser (:mod:`api.cli`) and the
student package's client (:mod:`grader.flows.submit`) name them without the service's dependencies.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["IN_FLIGHT", "JobStatus", "RegradeState", "Role", "SubmissionKind", "Timeliness"]


class JobStatus(StrEnum):
    """Where a job stands: a submission's grading, or a golden run. ``queued`` -> ``running``
    -> ``done`` | ``error``; a job whose worker died or was stopped is queued again."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    ERROR = "error"


# Not graded yet: what counts against a student's in-flight limit, and what a page reloads for.
IN_FLIGHT = (JobStatus.QUEUED, JobStatus.RUNNING)


class Role(StrEnum):
    """What a user may do: a student sees their own submissions; staff see everyone's and more."""

    STUDENT = "student"
    STAFF = "staff"


class SubmissionKind(StrEnum):
    """A submission counts for the grade; a preview (``mutagrade check`` against a server) is
    graded the same way but never becomes the grade of record, and has its own rate limit."""

    SUBMISSION = "submission"
    PREVIEW = "preview"


class Timeliness(StrEnum):
    """A submission's time against its student's due date (``grader/core/deadlines.py``); one
    that would be refused is never stored."""

    ON_TIME = "on_time"
    LATE = "late"


class RegradeState(StrEnum):
    """A student's regrade request: open until staff answer it."""

    OPEN = "open"
    ANSWERED = "answered"
