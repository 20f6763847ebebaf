"""The states and roles the service stores and answers with, as StrEnums.

The database keeps them as plain strings (a StrEnum is a ``str``: no migration), and so does the
JSON the API sends. Standard library only: the command line's parser (:mod:`api.cli`) and the
student package's client (:mod:`grader.flows.submit`) name them without the service's dependencies.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["IN_FLIGHT", "JobStatus", "Role"]


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
