"""A grading's results: every test on every variant, and where a budget stopped it.

The scheduler (:mod:`grader.run.scheduler`) fills a :class:`Matrix`; scoring
(:mod:`grader.core.scoring`) reads it. It holds data and the rules for reading it, no process.
"""

from __future__ import annotations

from dataclasses import dataclass

from grader.core.models import Budget, Outcome, SuiteRun

__all__ = ["BudgetStop", "Matrix"]


@dataclass(frozen=True)
class BudgetStop:
    """Where a grading budget ran out, and which (its CPU seconds or its wall-clock seconds)."""

    budget: float
    test: str
    variant: str
    kind: Budget = Budget.CPU


@dataclass(frozen=True)
class Matrix:
    """Every test on every variant: a first run of each variant, the reference's second run
    and the confirming runs (a mutant's kills, a wheat's rejections), what was not run and why,
    and where the budget ran out."""

    first: dict[str, SuiteRun]
    second: dict[str, SuiteRun]
    rechecks: tuple[SuiteRun, ...] = ()  # the reference run again among the late runs
    budget_stop: BudgetStop | None = None
    cpu_s: float = 0.0
    runs: int = 0  # suite runs made (confirmations and continuations included)

    @property
    def test_ids(self) -> list[str]:
        reference = self.first.get("reference")
        return reference.test_ids if reference is not None else []

    def outcome(self, test_id: str, variant: str) -> Outcome:
        run = self.first.get(variant)
        if run is None:
            return Outcome.NOT_RUN
        return run.outcome(test_id)

    def passed_again(self, test_id: str, variant: str) -> bool:
        """Whether ``test_id``, failed on ``variant`` (a wheat) in its run, passed there when it
        was run again under the other seed: the failure was chance's, not the variant's."""
        again = self.second.get(variant)
        return again is not None and again.outcome(test_id) is Outcome.PASSED

    def confirmed_failure(self, test_id: str, variant: str) -> bool:
        """Whether ``test_id`` failed on ``variant`` for sure: in its run and again in the
        confirming run, under the other seed (so a test whose verdict is chance's, under one
        seed the same on every variant, kills nothing)."""
        first = self.first.get(variant)
        if first is None or not first.outcome(test_id).kills:
            return False
        second = self.second.get(variant)
        return second is not None and second.outcome(test_id).kills
