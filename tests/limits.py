"""Run limits for tests that set their own: the assignment's :class:`Limits` with the given
times, and no grading budget (a test that is about a budget sets one itself)."""

from __future__ import annotations

from typing import Any

from grader.core.assignment import Limits
from grader.run.runner import RunLimits

__all__ = ["unbudgeted"]


def unbudgeted(*, test_timeout_s: float = 20.0, run_timeout_s: float = 120.0, memory_mb: int = 2048,
               **how: Any) -> RunLimits:
    """Limits of these times and memory, no budget; ``how`` is the rest of :class:`RunLimits`."""
    limits = Limits(test_timeout_s=test_timeout_s, run_timeout_s=run_timeout_s, memory_mb=memory_mb,
                    budget_cpu_s=None, budget_wall_s=None, budget_memory_mb=None)
    return RunLimits(limits=limits, **how)
