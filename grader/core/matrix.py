"""A grading's results: every test on every variant, and where a budget stopped it.

The scheduler (:mod:`grader.run.scheduler`) fills a :class:`Matrix`; scoring
(:mod:`grader.core.scoring`) reads it. It holds data and the rules for reading it, no process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grader.core.models import Budget, Outcome, SuiteRun

__all__ = ["BudgetStop", "Matrix", "chance_shown", "differ"]


_FAILING = frozenset({Outcome.FAILED, Outcome.ERROR})


def _split(outcomes: set[Outcome], failing: frozenset[Outcome]) -> bool:
    return Outcome.PASSED in outcomes and bool(outcomes & failing)


def chance_shown(runs: list[SuiteRun]) -> bool:
    """Whether some test passed and failed (or raised, or ran past its limit) in two of ``runs``,
    the runs of one variant: the variant was the same, so that test's result is chance's. A
    time-out counts here, not in :func:`differ`: a test that sleeps by the clock shows chance as
    surely as one that fails by it, while an honest test near its limit only costs the grading
    more confirming runs. A run the grading's budget stopped is left out."""
    seen: dict[str, set[Outcome]] = {}
    for run in runs:
        if not run.budget_exceeded:
            for result in run.results:
                seen.setdefault(result.test_id, set()).add(result.outcome)
    return any(_split(outcomes, _FAILING | {Outcome.TIMEOUT}) for outcomes in seen.values())


def differ(runs: list[SuiteRun], test_id: str) -> bool:
    """Whether ``test_id`` passed in one of ``runs`` (of one variant) and failed or raised in
    another. Time-outs are left out (a time limit is the machine's verdict, not the test's), and
    so is a run the grading's budget stopped. A run that died counts: its tests not reported
    raised (a test may end its own process by chance, as surely as fail by it)."""
    return _split({run.outcome(test_id) for run in runs if not run.budget_exceeded}, _FAILING)


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
    # A mutant's further confirming runs, made once the grading has shown chance (see
    # :data:`grader.run.scheduler.UNDER_CHANCE`), and how many confirming runs a kill needs.
    more: dict[str, tuple[SuiteRun, ...]] = field(default_factory=dict)
    confirmations: int = 1
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

    def differs_between_runs(self, test_id: str, variant: str) -> bool:
        """Whether ``test_id`` passed on ``variant`` in one of its runs (its first, the
        confirming ones) and failed or raised in another: the variant is the same, so the
        difference is chance's (a clock read, say), never the implementation's (:func:`differ`)."""
        runs = [self.first.get(variant), self.second.get(variant), *self.more.get(variant, ())]
        return differ([run for run in runs if run is not None], test_id)

    def confirmed_failure(self, test_id: str, variant: str) -> bool:
        """Whether ``test_id`` failed on ``variant`` for sure: in its run and again in the
        confirming run, under the other seed (so a test whose verdict is chance's, under one
        seed the same on every variant, kills nothing), and in each further confirming run the
        grading needs (``confirmations``)."""
        first = self.first.get(variant)
        if first is None or not first.outcome(test_id).kills:
            return False
        second = self.second.get(variant)
        more = self.more.get(variant, ())
        return (second is not None and second.outcome(test_id).kills and len(more) >= self.confirmations - 1
                and all(test_id in run.test_ids and run.outcome(test_id).kills for run in more))
