"""The staged schedule of a grading (grader.run.scheduler) over two stand-in workers.

The stand-ins answer each run from a table, as a worker would (only the tests selected, a
mutant's run stopping at its first kill), and share one result queue whose order the test sets.
The schedule is driven through ``MatrixRun`` with ``pooled`` workers, as ``WorkerPool`` does:
``run_matrix`` itself starts real workers.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from grader.core.assignment import load_assignment
from grader.core.matrix import Matrix
from grader.core.models import Budget, Outcome, Purpose, SuiteRun, TestOutcome, WorkerRun
from grader.core.paths import default_layout
from grader.core.scoring import score_suite
from grader.core.variants import Variant, VariantKind, VariantSpec
from grader.run.runner import RunLimits, WorkerLost, WorkerResult
from grader.run.scheduler import MAX_CONTINUATIONS, UNDER_CHANCE, MatrixRun

P, F, T, E = Outcome.PASSED, Outcome.FAILED, Outcome.TIMEOUT, Outcome.ERROR
FIRST, CONFIRMING, CONTINUING = Purpose.FIRST, Purpose.CONFIRMING, Purpose.CONTINUING
TESTS = ["t::a", "t::b", "t::c", "t::d"]


def _limits(*, jobs: int = 2, **bounds: Any) -> RunLimits:
    """The assignment's limits, ``bounds`` changed (fields of its ``[limits]``), runs made
    ``jobs`` at a time: the one place this file builds them."""
    run_limits = RunLimits.of(load_assignment(default_layout().assignment), jobs=jobs)
    return replace(run_limits, limits=run_limits.limits.model_copy(update=bounds))


def _variant(variant_id: str, kind: VariantKind, *, required: bool = False) -> Variant:
    spec = VariantSpec(id=variant_id, kind=kind, title=f"{variant_id} title", pitfall=f"{variant_id} pitfall",
                       required=required, caught_by=("x",) if kind is VariantKind.MUTANT else ())
    return Variant(spec=spec, source=f"# {variant_id}\n")


VARIANTS = [
    _variant("reference", VariantKind.REFERENCE),
    _variant("w1", VariantKind.WHEAT),
    _variant("w2", VariantKind.WHEAT),
    _variant("m1", VariantKind.MUTANT, required=True),
    _variant("m2", VariantKind.MUTANT),
    _variant("m3", VariantKind.MUTANT),
]
MUTANTS = ["m1", "m2", "m3"]


@dataclass(frozen=True)
class Sent:
    seed: int
    run: WorkerRun
    cpu_budget: float | None
    wall_budget: float | None


class _Sandbox:
    """What closing a worker touches of its sandbox: killed, with nothing left to reap or free."""

    def __init__(self) -> None:
        self.killed = False

    def kill(self) -> None:
        self.killed = True

    def _reap(self) -> bool:
        return False


class FakeWorker:
    """The part of ``WorkerProcess`` the schedule uses: its hash seed, results queue, ``submit``,
    ``closed`` and sandbox."""

    def __init__(self, hash_seed: int, world: World) -> None:
        self.hash_seed = hash_seed
        self.results = world
        self.world = world
        self.sandbox = _Sandbox()
        self.closed = False

    def submit(self, run: WorkerRun, *, cpu_budget: float | None = None, wall_budget: float | None = None,
               timeout_floor: float | None = None) -> None:
        self.world.sent(self, Sent(self.hash_seed, run, cpu_budget, wall_budget))


Table = dict[str, dict[str, Outcome]]


@dataclass
class World:
    """Both workers' runs: what each variant does to each test, and the order answers come in.

    ``outcomes[variant]`` (or ``outcomes[f"{variant}@{seed}"]`` for one hash seed) gives each
    test's outcome, PASSED where it says nothing; ``confirm[variant]`` the outcomes of a
    confirming run. Answers come first in, first out, except that ``last`` (``variant@seed``)
    waits until nothing else is pending.
    """

    outcomes: Table = field(default_factory=dict)
    confirm: Table = field(default_factory=dict)
    again: Table = field(default_factory=dict)  # a further confirming run's outcomes, under either seed
    durations: dict[str, float] = field(default_factory=dict)
    cpu_s: float = 0.01
    last: tuple[str, ...] = ()
    out_of_budget: dict[str, tuple[str, Budget]] = field(default_factory=dict)  # variant -> test, budget
    lost: tuple[str, ...] = ()  # variants whose first run its worker loses (it dies before reporting it)
    collection_errors: tuple[str, ...] = ()  # met by every run
    log: list[Sent] = field(default_factory=list)
    answered: list[SuiteRun] = field(default_factory=list)
    pending: list[tuple[FakeWorker, Sent]] = field(default_factory=list)
    sent_before_answer: int | None = None  # how many runs were sent before the first answer
    in_flight_max_after_reference: int = 0
    answers_at_send: list[int] = field(default_factory=list)  # how many answers were in at each send

    def sent(self, worker: FakeWorker, sent: Sent) -> None:
        self.log.append(sent)
        self.answers_at_send.append(len(self.answered))
        self.pending.append((worker, sent))
        if self.answered:
            self.in_flight_max_after_reference = max(self.in_flight_max_after_reference, len(self.pending))

    def get(self, timeout: float | None = None) -> WorkerResult:
        if not self.pending:
            raise AssertionError("the schedule waits for a result with no run in flight")
        if self.sent_before_answer is None:
            self.sent_before_answer = len(self.log)
        ready = [p for p in self.pending if f"{p[1].run.variant}@{p[0].hash_seed}" not in self.last]
        worker, sent = (ready or self.pending)[0]
        self.pending.remove((worker, sent))
        if sent.run.variant in self.lost and sent.run.purpose in (FIRST, Purpose.SECOND_SEED):
            return WorkerResult(worker, SuiteRun(variant=sent.run.variant, hash_seed=worker.hash_seed, purpose=sent.run.purpose,
                                            crashed="the worker exited without reporting this run"), lost=True)
        answer = self._answer(worker, sent.run)
        self.answered.append(answer)
        return WorkerResult(worker, answer)

    def table(self, variant: str, seed: int, purpose: Purpose) -> dict[str, Outcome]:
        if purpose is CONFIRMING and variant in self.confirm:
            return self.confirm[variant]
        if purpose is Purpose.CONFIRMING_AGAIN and variant in self.again:
            return self.again[variant]
        return self.outcomes.get(f"{variant}@{seed}", self.outcomes.get(variant, {}))

    def _answer(self, worker: FakeWorker, run: WorkerRun) -> SuiteRun:
        if worker.closed:  # what a closed worker never reported comes back crashed
            return SuiteRun(variant=run.variant, hash_seed=worker.hash_seed, purpose=run.purpose,
                            crashed="the worker exited without reporting this run")
        table = self.table(run.variant, worker.hash_seed, run.purpose)
        results: list[TestOutcome] = []
        stopped = False
        for test in TESTS:
            if run.select is not None and test not in run.select:
                continue
            if stopped:
                results.append(TestOutcome(test_id=test, outcome=Outcome.NOT_RUN, message="not run: the run had stopped"))
                continue
            outcome = table.get(test, P)
            results.append(TestOutcome(test_id=test, outcome=outcome, duration=self._took(run.variant, test),
                                       message="" if outcome is P else f"{outcome.value}"))
            stopped = run.stop_at_first_kill and outcome.kills
        test, budget = self.out_of_budget.get(run.variant, ("", None))
        return SuiteRun(variant=run.variant, hash_seed=worker.hash_seed, purpose=run.purpose, results=tuple(results),
                        cpu_s=self.cpu_s, stopped_early=stopped, budget_exceeded=test, budget=budget,
                        collection_errors=self.collection_errors)

    def _took(self, variant: str, test: str) -> float:
        """``durations[f"{variant}/{test}"]``, else ``durations[test]``, else 0.05 s."""
        return self.durations.get(f"{variant}/{test}", self.durations.get(test, 0.05))

    def runs_of(self, variant: str, purpose: Purpose | None = None) -> list[Sent]:
        return [s for s in self.log if s.run.variant == variant and (purpose is None or s.run.purpose is purpose)]


def _grade(world: World, *, full_matrix: bool = False, chance: int = 0, limits: RunLimits | None = None,
           variants: Iterable[Variant] = VARIANTS) -> tuple[Matrix, tuple[FakeWorker, FakeWorker]]:
    workers = (FakeWorker(1, world), FakeWorker(2, world))
    matrix_run = MatrixRun(layout=default_layout(), tests_dir=Path("/nowhere"), variants=list(variants),
                            limits=limits or _limits(), full_matrix=full_matrix, launched=None, pooled=workers)
    matrix_run.chance = random.Random(chance)  # the order of the runs, and when the reference is run again
    return matrix_run.run(), workers


def _first_runs(world: World) -> list[Sent]:
    """The mutants' first runs (the wheats' have every test, under the test limit)."""
    return [s for s in world.log if s.run.variant in MUTANTS and s.run.purpose is FIRST]


CHANCES = pytest.mark.parametrize("chance", range(4))


@CHANCES
def test_the_reference_runs_under_both_hash_seeds_at_once_with_at_most_one_wheat(chance: int) -> None:
    world = World(outcomes={"m1": {"t::a": F}, "m2": {"t::b": F}})
    matrix, _ = _grade(world, chance=chance)
    references = [s for s in world.log if s.run.variant == "reference" and s.run.purpose is not Purpose.RECHECK]
    assert {(s.run.purpose, s.seed) for s in references} == {(FIRST, 1), (Purpose.SECOND_SEED, 2)}
    assert all(s.run.select is None and not s.run.stop_at_first_kill for s in references)
    # Before any answer: both reference runs, and at most one wheat (with every test).
    at_start = world.log[:world.answers_at_send.count(0)]
    assert sorted(s.run.variant for s in at_start if s.run.variant == "reference") == ["reference"] * 2
    assert len(at_start) in (2, 3) and all(s.run.select is None and s.run.time_limits is None for s in at_start)
    # The rest go once a reference run is in, with the tests that passed it.
    assert all(s.run.select == TESTS for s in world.log[len(at_start):] if s.run.purpose is FIRST)
    assert (matrix.first["reference"].hash_seed, matrix.second["reference"].hash_seed) == (1, 2)
    # Every wheat and mutant ran once; each kill once more.
    firsts = [s for s in world.log if s.run.variant != "reference" and s.run.purpose is FIRST]
    assert sorted(s.run.variant for s in firsts) == ["m1", "m2", "m3", "w1", "w2"]
    assert sorted(s.run.variant for s in world.log if s.run.purpose is CONFIRMING) == ["m1", "m2"]
    assert matrix.runs == len(world.answered) == len(world.log)


def test_a_wheat_is_as_likely_as_a_mutant_to_come_late() -> None:
    """The wheats not sent at the start go among the mutants, in a random order: a test that
    could tell it runs late cannot tell a wheat from a mutant by it."""
    last_kinds = set()
    for chance in range(32):
        world = World()
        _grade(world, chance=chance)
        last_kinds.add(next(s.run.variant for s in reversed(world.log) if s.run.purpose is FIRST)[0])
    assert last_kinds == {"w", "m"}


def test_no_kind_of_variant_always_comes_first_on_a_worker() -> None:
    """Each worker's first run is the reference or a wheat, by chance: a run that could tell it
    came first on its worker would not know it was the reference's."""
    first_kinds: dict[int, set[str]] = {1: set(), 2: set()}
    first_worker: set[int] = set()
    for chance in range(32):
        world = World(outcomes={"m1": {"t::a": F}})
        _grade(world, chance=chance)
        first_worker.add(world.log[0].seed)
        for seed in (1, 2):
            first = next(s for s in world.log if s.seed == seed)
            first_kinds[seed].add("reference" if first.run.variant == "reference" else "wheat")
    assert first_kinds == {1: {"reference", "wheat"}, 2: {"reference", "wheat"}}
    assert first_worker == {1, 2}


@CHANCES
def test_only_tests_that_passed_the_first_reference_run_are_sent(chance: int) -> None:
    # FIFO: the reference run sent first is in first; under the second seed it fails t::d too.
    world = World(outcomes={"reference": {"t::b": F}, "reference@2": {"t::b": F, "t::d": F}},
                  durations={"t::a": 0.01, "t::c": 0.5, "t::d": 3.0})
    matrix, _ = _grade(world, chance=chance)
    bounds = _limits().limits
    first_in = world.log[0].seed
    expected = {"t::a": bounds.timeout_floor_s,  # 10 x 0.01 s is below the floor
                "t::c": pytest.approx(bounds.timeout_factor * 0.5)}
    if first_in == 1:
        expected["t::d"] = bounds.test_timeout_s  # 10 x 3 s, capped
    for sent in _first_runs(world):
        assert sent.run.select == list(expected)
        assert sent.run.time_limits == expected
    # The test the first reference run failed is not run anywhere, and says why.
    assert all(matrix.outcome("t::b", v.id) is Outcome.NOT_RUN for v in VARIANTS[1:])
    reason = next(r.message for r in matrix.first["m1"].results if r.test_id == "t::b")
    assert "wrong on the reference" in reason


def test_time_limits_are_capped_by_the_test_limit() -> None:
    world = World(durations={"t::a": 60.0})
    _grade(world)
    assert all(s.run.time_limits["t::a"] == _limits().limits.test_timeout_s for s in _first_runs(world))


def test_nothing_runs_past_the_reference_when_no_test_passes_it() -> None:
    fails = {t: F for t in TESTS}
    world = World(outcomes={"reference": fails})
    matrix, _ = _grade(world)
    assert not any(s.run.variant in MUTANTS for s in world.log)  # the wheats went with the reference
    assert all(matrix.outcome(t, v.id) is Outcome.NOT_RUN for t in TESTS for v in VARIANTS[1:])


def test_a_wheat_started_beside_a_reference_no_test_passed_counts_for_nothing() -> None:
    """Its run met what the reference's runs met first (collection errors, say): it is not
    weighed, and its cells say why they were not run, as every other variant's do."""
    started_beside = 0
    for chance in range(8):
        world = World(outcomes={"reference": {t: E for t in TESTS}}, collection_errors=("t.py: ValueError",))
        matrix, _ = _grade(world, chance=chance)
        started_beside += any(s.run.variant.startswith("w") for s in world.log)
        assert all(matrix.outcome(t, w) is Outcome.NOT_RUN for t in TESTS for w in ("w1", "w2"))
        assert [matrix.first[w].collection_errors for w in ("w1", "w2")] == [(), ()]  # said once, by the reference
    assert started_beside  # some of these gradings had one


@pytest.mark.parametrize("full_matrix", [False, True])
def test_a_mutant_run_stops_at_its_first_kill_unless_the_full_matrix_is_asked(full_matrix: bool) -> None:
    world = World(outcomes={"m1": {"t::a": F, "t::c": F}})
    matrix, _ = _grade(world, full_matrix=full_matrix)
    (sent,) = world.runs_of("m1", FIRST)
    assert sent.run.stop_at_first_kill is not full_matrix
    assert not any(s.run.stop_at_first_kill for s in world.runs_of("w1") + world.runs_of("w2"))
    assert matrix.outcome("t::a", "m1") is F
    if full_matrix:
        assert [matrix.outcome(t, "m1") for t in TESTS] == [F, P, F, P]
    else:
        assert [matrix.outcome(t, "m1") for t in TESTS[1:]] == [Outcome.NOT_RUN] * 3
        reason = next(r.message for r in matrix.first["m1"].results if r.test_id == "t::c")
        assert "stopped at an earlier test that failed" in reason


@CHANCES
def test_every_kill_gets_a_confirming_run_under_the_other_seed(chance: int) -> None:
    world = World(outcomes={"m1": {"t::b": T}, "m2": {"t::a": F}, "m3": {"t::c": E}},
                  confirm={"m1": {"t::b": T}, "m2": {"t::a": F}, "m3": {"t::c": E}})
    matrix, _ = _grade(world, chance=chance)
    for mutant, test in (("m1", "t::b"), ("m2", "t::a"), ("m3", "t::c")):
        (first,) = world.runs_of(mutant, FIRST)
        (confirming,) = world.runs_of(mutant, CONFIRMING)
        # The killing test, and the tests the first run passed before it, reported again.
        assert confirming.run.select == [test, *TESTS[:TESTS.index(test)]]
        assert confirming.seed != first.seed  # under the other seed
        assert matrix.second[mutant].purpose is CONFIRMING
        assert matrix.confirmed_failure(test, mutant)
    # Confirming runs come late: the reference is run again alongside, now and then.
    late = world.log.index(min((world.runs_of(m, CONFIRMING)[0] for m in MUTANTS), key=world.log.index))
    assert all(s.run.variant in ("reference", *MUTANTS) for s in world.log[late:])


@CHANCES
def test_a_grading_that_shows_no_chance_confirms_each_kill_once(chance: int) -> None:
    world = World(outcomes={"m1": {"t::c": F}, "m2": {"t::b": F}}, confirm={"m1": {"t::c": F}, "m2": {"t::b": F}})
    matrix, _ = _grade(world, chance=chance)
    assert not [s for s in world.log if s.run.purpose is Purpose.CONFIRMING_AGAIN]
    assert matrix.confirmations == 1 and matrix.more == {}
    assert matrix.confirmed_failure("t::c", "m1") and matrix.confirmed_failure("t::b", "m2")


@CHANCES
def test_once_a_test_passed_and_failed_on_one_mutant_each_kill_needs_a_run_more_under_each_seed(chance: int) -> None:
    """A clock can decide a test's verdict, and no seed governs a clock. Once the grading has
    shown such a test (t::a passed on m2, then failed there in the confirming run), every kill
    counts only if it holds in one more run under each seed too, and one that does not is not
    carried on from."""
    world = World(outcomes={"m1": {"t::c": F}, "m2": {"t::b": F}},
                  confirm={"m1": {"t::c": F}, "m2": {"t::a": F, "t::b": F}},
                  again={"m1": {"t::c": F}, "m2": {"t::b": P}})
    matrix, _ = _grade(world, chance=chance)
    assert matrix.confirmations == UNDER_CHANCE == 3
    for mutant in ("m1", "m2"):
        again = world.runs_of(mutant, Purpose.CONFIRMING_AGAIN)
        assert sorted(s.seed for s in again) == [1, 2], again  # one under each seed
        assert len(matrix.more[mutant]) == 2
    assert matrix.confirmed_failure("t::c", "m1")
    assert not matrix.confirmed_failure("t::b", "m2")
    assert not world.runs_of("m2", CONTINUING)
    # Each of those runs has the reference beside it, in its shape: a test failing once the
    # grading runs late (by the clock) fails there too.
    again = [s for s in world.log if s.run.purpose is Purpose.CONFIRMING_AGAIN]
    rechecks = [(s.seed, s.run.select) for s in world.runs_of("reference", Purpose.RECHECK)]
    assert all((s.seed, s.run.select) in rechecks for s in again), (again, rechecks)
    assert matrix.differs_between_runs("t::a", "m2") and not matrix.differs_between_runs("t::c", "m1")
    report = score_suite(submission="s", matrix=matrix, variants=VARIANTS, assignment=load_assignment(
        default_layout().assignment), audience="staff")
    status = {t.id: t.status.value for t in report.tests}
    assert status["t::a"] == "flaky" and status["t::c"] == "valid", status
    assert [m.id for m in report.mutants if m.killed] == ["m1"]


@CHANCES
def test_a_time_out_that_comes_and_goes_on_one_mutant_asks_more_confirmations_but_is_no_flakiness(chance: int) -> None:
    world = World(outcomes={"m1": {"t::c": F}, "m2": {"t::b": F}},
                  confirm={"m1": {"t::c": F}, "m2": {"t::a": T, "t::b": F}}, again={"m1": {"t::c": F}, "m2": {"t::b": F}})
    matrix, _ = _grade(world, chance=chance)
    assert matrix.confirmations == UNDER_CHANCE
    assert len(world.runs_of("m1", Purpose.CONFIRMING_AGAIN)) == len(world.runs_of("m2", Purpose.CONFIRMING_AGAIN)) == 2
    assert not matrix.differs_between_runs("t::a", "m2")  # a time limit is the machine's verdict
    assert matrix.confirmed_failure("t::c", "m1") and matrix.confirmed_failure("t::b", "m2")


@CHANCES
def test_a_kill_that_does_not_hold_under_the_other_seed_counts_for_nothing(chance: int) -> None:
    """A test whose verdict is chance's: under one seed it fails on the mutant, under the other
    it passes. Whatever it failed with, it kills nothing."""
    world = World(outcomes={"m1": {"t::a": F}, "m2": {"t::b": E}}, confirm={"m1": {"t::a": P}, "m2": {"t::b": P}})
    matrix, _ = _grade(world, chance=chance)
    assert not matrix.confirmed_failure("t::a", "m1") and not matrix.confirmed_failure("t::b", "m2")
    report = score_suite(submission="s", matrix=matrix, variants=VARIANTS,
                         assignment=load_assignment(default_layout().assignment), audience="staff")
    assert report.score.killed == 0


def test_a_mutant_is_carried_on_a_bounded_number_of_times() -> None:
    """Every test fails on m1 under one seed and passes under the other: each kill is doubted,
    and the run carried on at most MAX_CONTINUATIONS times, not once per test."""
    world = World(outcomes={"m1": {t: F for t in TESTS}}, confirm={"m1": {t: P for t in TESTS}})
    matrix, _ = _grade(world)
    assert len(world.runs_of("m1", CONTINUING)) == MAX_CONTINUATIONS < len(TESTS) - 1
    assert not any(matrix.confirmed_failure(t, "m1") for t in TESTS)


@CHANCES
def test_a_time_out_that_does_not_hold_up_carries_on_with_the_rest(chance: int) -> None:
    world = World(outcomes={"m1": {"t::a": T, "t::d": F}}, confirm={"m1": {"t::a": P, "t::d": F}})
    matrix, _ = _grade(world, chance=chance)
    (carry_on,) = world.runs_of("m1", CONTINUING)
    assert carry_on.run.select == ["t::b", "t::c", "t::d"] and carry_on.run.stop_at_first_kill
    assert not matrix.confirmed_failure("t::a", "m1")
    assert matrix.outcome("t::d", "m1") is F and matrix.confirmed_failure("t::d", "m1")


@CHANCES
def test_a_mutant_stopped_at_a_brittle_test_carries_on_with_the_valid_ones(chance: int) -> None:
    # t::a fails on a wheat (brittle); m2's run stops there, before the test that really kills it.
    world = World(outcomes={"w2": {"t::a": F}, "m2": {"t::a": F, "t::c": F}})
    matrix, _ = _grade(world, chance=chance)
    (carry_on,) = world.runs_of("m2", CONTINUING)
    assert carry_on.run.select == ["t::b", "t::c", "t::d"]
    assert matrix.outcome("t::a", "m2") is Outcome.NOT_RUN  # brittle: counts on no mutant
    assert matrix.outcome("t::c", "m2") is F
    report = score_suite(submission="s", matrix=matrix, variants=VARIANTS,
                         assignment=load_assignment(default_layout().assignment), audience="staff")
    assert {t.id: t.kills for t in report.tests} == {"t::a": [], "t::b": [], "t::c": ["m2"], "t::d": []}


def test_mutants_that_answer_before_the_second_reference_run_are_weighed_when_it_is_in() -> None:
    # The first-seed reference run comes in last: a test that fails there is flaky, and a mutant
    # killed only by it, which came in before, carries on with the valid tests.
    world = World(outcomes={"reference@1": {"t::a": F}, "m1": {"t::a": F, "t::b": F}}, last=("reference@1",))
    matrix, _ = _grade(world)
    order = [(r.variant, r.purpose, r.hash_seed) for r in world.answered]
    first_m1 = next(i for i, (variant, purpose, _) in enumerate(order) if (variant, purpose) == ("m1", FIRST))
    assert first_m1 < order.index(("reference", FIRST, 1))  # held until the reference was in
    (carry_on,) = world.runs_of("m1", CONTINUING)
    assert carry_on.run.select == ["t::b", "t::c", "t::d"]
    assert matrix.outcome("t::a", "m1") is Outcome.NOT_RUN
    assert matrix.outcome("t::b", "m1") is F
    reason = next(r.message for r in matrix.first["m1"].results if r.test_id == "t::a")
    assert "flaky" in reason


def test_the_cpu_budget_stops_the_grading() -> None:
    world = World(outcomes={m: {"t::a": F} for m in MUTANTS}, cpu_s=0.4)
    limits = _limits(budget_cpu_s=1.0)
    matrix, workers = _grade(world, limits=limits)
    stop = matrix.budget_stop
    assert stop is not None and stop.kind is Budget.CPU and stop.budget == 1.0
    # The third run brought the spending over the budget: nothing was sent after it was in.
    assert len(world.log) < 2 + len(VARIANTS) - 1
    assert matrix.cpu_s == pytest.approx(sum(r.cpu_s for r in world.answered))
    # What was still out when the workers were stopped came back crashed, and is kept as it is.
    assert [bool(r.crashed) for r in world.answered] == [False] * 3 + [True] * (len(world.answered) - 3)
    assert all(w.closed and w.sandbox.killed for w in workers)
    # Each run was sent with the budget left then.
    at_start = world.answers_at_send.count(0)  # the reference runs and a wheat's, maybe, at once
    assert at_start in (2, 3) and all(s.cpu_budget == 1.0 for s in world.log[:at_start])
    assert all(s.cpu_budget < 1.0 for s in world.log[at_start:])
    not_run = [v.id for v in VARIANTS[1:] if v.id not in {s.run.variant for s in world.log}]
    assert not_run
    reason = next(r.message for r in matrix.first[not_run[0]].results if r.test_id == "t::a")
    assert "budget ran out" in reason


def test_a_run_that_reports_the_budget_ran_out_stops_the_grading() -> None:
    world = World(outcomes={"reference@2": {}}, out_of_budget={"reference": ("t::c", Budget.WALL)})
    matrix, _ = _grade(world)
    stop = matrix.budget_stop
    assert stop is not None and (stop.kind, stop.test, stop.variant) == (Budget.WALL, "t::c", "reference")
    assert stop.budget == _limits().limits.budget_wall_s
    assert len(world.log) <= 3 and not any(s.run.variant in MUTANTS for s in world.log)


def test_never_more_runs_at_once_than_jobs() -> None:
    world = World(outcomes={"m1": {"t::a": T}}, confirm={"m1": {"t::a": T}})
    _grade(world, limits=_limits(jobs=2))
    assert 0 < world.in_flight_max_after_reference <= 2


def test_the_reference_is_run_again_among_the_late_runs() -> None:
    # Two late runs: the second always takes a run of the reference with it.
    world = World(outcomes={"m1": {"t::a": T}, "m2": {"t::b": T}}, confirm={"m1": {"t::a": T}, "m2": {"t::b": T}})
    matrix, _ = _grade(world)
    rechecks = world.runs_of("reference", Purpose.RECHECK)
    # Each goes with a late run, in its shape: the same tests reported, under the same seed.
    assert rechecks and all(s.run.select in (["t::a"], ["t::b"]) for s in rechecks)
    assert len(matrix.rechecks) == len(rechecks)


@pytest.mark.parametrize("variant", ["reference", "w1", "m1"])
def test_a_run_its_worker_lost_stops_the_grading_instead_of_becoming_a_verdict(variant: str) -> None:
    """A worker that dies (or goes silent) loses the runs it had: no test of the student's is
    to blame, so nothing of the grading is judged (an internal error: graded again), rather than
    every test brittle (a wheat's run lost) or a mutant not killed (a mutant's)."""
    world = World(lost=(variant,))
    with pytest.raises(WorkerLost, match="without reporting this run"):
        _grade(world)


def test_after_the_budget_ran_out_the_runs_stopped_with_it_are_kept_as_they_are() -> None:
    """Once the budget has run out the schedule stops the workers itself: what they lose then
    is what the budget stopped, kept as it is."""
    # w1 reports last of all, m1 with it (w1 runs under the first seed; m1 under either).
    world = World(out_of_budget={"w1": ("t::b", Budget.CPU)}, lost=("m1",), last=("w1@1", "m1@1", "m1@2"))
    matrix, _ = _grade(world)
    assert matrix.budget_stop is not None and matrix.budget_stop.variant == "w1"
    assert "without reporting this run" in matrix.first["m1"].crashed  # kept, and no error raised


@CHANCES
def test_each_wheat_runs_under_a_seed_of_its_own_and_each_rejection_again_under_the_other(chance: int) -> None:
    """t::a fails on w1 under the first seed only: its verdict is chance's, and it is flaky;
    t::b fails on w2 under both: it rejects a correct implementation, and it is brittle. The
    wheats take the seeds in turn, in the manifest's order: the same in every grading."""
    world = World(outcomes={"w1@1": {"t::a": F}, "w2": {"t::b": E}, "m1": {"t::a": F}})
    matrix, _ = _grade(world, chance=chance)
    assert [{s.seed for s in world.runs_of(w, FIRST)} for w in ("w1", "w2")] == [{1}, {2}]
    (again_w1,), (again_w2,) = world.runs_of("w1", CONFIRMING), world.runs_of("w2", CONFIRMING)
    assert (again_w1.seed, again_w1.run.select, again_w2.seed, again_w2.run.select) == (2, ["t::a"], 1, ["t::b"])
    assert matrix.second["w1"].outcome("t::a") is P and matrix.second["w2"].outcome("t::b") is E
    # m1 is weighed once the wheats' second runs are in: t::a, not valid, kills nothing.
    assert not matrix.confirmed_failure("t::a", "m1") and world.runs_of("m1", CONTINUING)
    report = score_suite(submission="s", matrix=matrix, variants=VARIANTS,
                         assignment=load_assignment(default_layout().assignment), audience="staff")
    tests = {t.id: t for t in report.tests}
    assert {i: t.status.value for i, t in tests.items()} == {
        "t::a": "flaky", "t::b": "brittle", "t::c": "valid", "t::d": "valid"}
    assert "chance" in tests["t::a"].reason and "w1" in tests["t::a"].reason
    assert "w2 (w2 title): error" in tests["t::b"].reason
    reason = next(r.message for r in matrix.first["m1"].results if r.test_id == "t::a")
    assert reason.startswith("not counted: flaky"), reason


@CHANCES
def test_a_wheat_test_slower_than_its_limit_from_the_reference_ran_past_it(chance: int) -> None:
    """The wheats may run before the reference, under the test limit: once the reference's times
    are in, a test that took longer on a wheat than its limit (10 x 0.05 s, at least the 1 s
    floor) timed out there, and is run on it again under its limit."""
    world = World(outcomes={"m1": {"t::a": F}}, durations={"w1/t::c": 3.0}, confirm={"w1": {"t::c": T}})
    matrix, _ = _grade(world, chance=chance)
    floor = _limits().limits.timeout_floor_s
    cell = next(r for r in matrix.first["w1"].results if r.test_id == "t::c")
    assert cell.outcome is T and f"limit of {floor:g} s" in cell.message
    (again,) = world.runs_of("w1", CONFIRMING)
    assert again.run.select == ["t::c"] and again.run.time_limits == {"t::c": floor}
    report = score_suite(submission="s", matrix=matrix, variants=VARIANTS,
                         assignment=load_assignment(default_layout().assignment), audience="staff")
    assert {t.id: t.status.value for t in report.tests}["t::c"] == "brittle"


def test_a_wheat_that_rejects_nothing_is_run_once() -> None:
    world = World(outcomes={"m1": {"t::a": F}})
    _grade(world)
    assert [len(world.runs_of(w)) for w in ("w1", "w2")] == [1, 1]
