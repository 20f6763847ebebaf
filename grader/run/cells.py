"""The arithmetic of a grading's runs: the tests a run passed, each test's time limit away from
the reference, a run filled out or continued, and the budget charged. Pure functions over
:class:`~grader.core.models.SuiteRun` values; :mod:`grader.run.scheduler` decides which runs to
make with them."""

from __future__ import annotations

from typing import Callable, Sequence

from grader.core.matrix import BudgetStop
from grader.core.models import Budget, Outcome, SuiteRun, TestOutcome
from grader.run.runner import GradingBudget, RunLimits

__all__ = ["charge", "fill", "held_to", "limits_from_reference", "merge", "passed_tests"]


def passed_tests(run: SuiteRun) -> list[str]:
    return [r.test_id for r in run.results if r.outcome is Outcome.PASSED]


def limits_from_reference(references: Sequence[SuiteRun], tests: Sequence[str], limits: RunLimits) -> dict[str, float]:
    """Each test's limit away from the reference: ``factor ×`` its (slowest) time there, at
    least the floor, at most the test limit."""
    took: dict[str, float] = {}
    for reference in references:
        for r in reference.results:
            took[r.test_id] = max(took.get(r.test_id, 0.0), r.duration)
    bound = limits.limits
    return {
        test: round(min(bound.test_timeout_s, max(bound.floor_s, bound.timeout_factor * took.get(test, 0.0))), 3)
        for test in tests
    }


def held_to(run: SuiteRun, limits: dict[str, float]) -> SuiteRun:
    """``run`` with each test that passed but took longer than its limit in ``limits`` (a run
    made before those limits were known) turned into a time-out, as if it had been stopped."""
    results = tuple(
        r.model_copy(update={"outcome": Outcome.TIMEOUT,
                             "message": f"the test ran past its limit of {limits[r.test_id]:g} s "
                                        f"(it took {r.duration:.2f} s)"})
        if r.outcome is Outcome.PASSED and r.test_id in limits and r.duration > limits[r.test_id] else r
        for r in run.results
    )
    return run.model_copy(update={"results": results})


def fill(run: SuiteRun, test_ids: Sequence[str], why: Callable[[str], str | None]) -> SuiteRun:
    """``run`` with the suite's tests in order, and the ones it did not run NOT_RUN with
    ``why(test_id)`` (left out, so MISSING, where that is None: it should have run)."""
    have = {r.test_id: r for r in run.results}
    results = []
    for test_id in test_ids:
        reason = None if test_id in have else why(test_id)
        if test_id in have or reason is not None:
            results.append(have.get(test_id) or TestOutcome(test_id=test_id, outcome=Outcome.NOT_RUN, message=reason))
    extra = tuple(r for r in run.results if r.test_id not in set(test_ids))
    return run.model_copy(update={"results": tuple(results) + extra})


def merge(earlier: SuiteRun, later: SuiteRun) -> SuiteRun:
    """A run continued: the later run's outcomes replace the earlier NOT_RUN ones."""
    newer = {r.test_id: r for r in later.results}
    results = tuple(
        newer.get(r.test_id, r) if r.outcome is Outcome.NOT_RUN else r for r in earlier.results
    )
    return earlier.model_copy(update={
        "results": results,
        "collection_errors": earlier.collection_errors + later.collection_errors,
        "crashed": earlier.crashed or later.crashed,
        "duration": round(earlier.duration + later.duration, 3),
        "cpu_s": round(earlier.cpu_s + later.cpu_s, 3),
        "stopped_early": later.stopped_early,
        "budget_exceeded": earlier.budget_exceeded or later.budget_exceeded,
    })


def charge(budget: GradingBudget, run: SuiteRun) -> BudgetStop | None:
    """Count ``run``'s CPU time against the grading's budget; where it stopped, or spent past,
    a budget, the stop to report (the test it was in, the variant, which budget)."""
    budget.spent += run.cpu_s
    if run.budget_exceeded:
        kind = run.budget or Budget.CPU
        whole = budget.wall if kind is Budget.WALL else budget.cpu
        return BudgetStop(whole or 0.0, run.budget_exceeded, run.variant, kind)
    if budget.cpu is not None and budget.spent > budget.cpu:
        slowest = max(run.results, key=lambda r: r.duration, default=None)
        return BudgetStop(budget.cpu, slowest.test_id if slowest else "(collecting the tests)", run.variant)
    return None
