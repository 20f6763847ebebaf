"""What a long-lived grading service grades with, in one place: warm worker pools, the
machine's admission of gradings, the limits runs work under, and the sandbox's refusal.

The service's work side (``api/work/``) reaches the grader only through ``grader/flows``: this
module names the parts of ``grader/run`` and ``grader/sandbox`` it holds on to between
gradings, so that the service depends on the flows' surface, not on the layers below it.
"""

from __future__ import annotations

from grader.run.admission import Admission, machine_admission, machine_capacity
from grader.run.runner import RunLimits
from grader.run.pool import WorkerPool
from grader.sandbox.base import SandboxUnavailable
from grader.sandbox.status import RETRY_FAILED_PROBE_S

__all__ = [
    "Admission",
    "RETRY_FAILED_PROBE_S",
    "RunLimits",
    "SandboxUnavailable",
    "WorkerPool",
    "machine_admission",
    "machine_capacity",
]
