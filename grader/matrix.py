"""A grading's runs: the staged protocol over two workers, and the pool that keeps them warm.

:func:`run_matrix` grades in stages, so that a broken or hostile suite costs little: the
reference first (twice, under two hash seeds, in two workers at once); then the wheats, only
with the tests that passed on the reference; then the mutants, only with the tests that passed
on the reference and every wheat, each under a time limit derived from the test's time on the
reference, and each mutant's run stopping at its first kill (unless the full matrix is asked
for). A kill by a time-out, or by a run that died, is confirmed by running that test again; a
failed assertion is not (the second reference run already guards against chance). A CPU budget
bounds the whole grading. :class:`WorkerPool` keeps the two workers for one grading after
another.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from grader.launch import FIRST_HASH_SEED, SECOND_HASH_SEED, Launched
from grader.models import Outcome, SuiteRun, TestOutcome, WorkerRun
from grader.paths import Layout
from grader.runner import RunLimits, WorkerProcess, _Result, _silence_limit
from grader.sandbox import SandboxMode
from grader.variants import Variant, VariantKind

__all__ = ["BudgetStop", "Matrix", "WorkerPool", "run_matrix"]


@dataclass(frozen=True)
class BudgetStop:
    """Where the grading budget ran out."""

    budget: float
    test: str
    variant: str


@dataclass(frozen=True)
class Matrix:
    """Every test on every variant: a first run of each variant, the reference's second run
    and the confirming runs, what was not run and why, and where the budget ran out."""

    first: dict[str, SuiteRun]
    second: dict[str, SuiteRun]
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

    def confirmed_failure(self, test_id: str, variant: str) -> bool:
        """Whether ``test_id`` failed on ``variant`` for sure: a failed assertion or an error
        once, or a time-out (or a run that died) twice."""
        first = self.first.get(variant)
        if first is None or not first.outcome(test_id).kills:
            return False
        if not _needs_confirmation(first, test_id):
            return True
        second = self.second.get(variant)
        return second is not None and second.outcome(test_id).kills


def _needs_confirmation(run: SuiteRun, test_id: str) -> bool:
    return bool(run.crashed) or run.outcome(test_id) in (Outcome.TIMEOUT, Outcome.MISSING)


def _time_limits(reference: SuiteRun, tests: Sequence[str], limits: RunLimits) -> dict[str, float]:
    """Each test's limit away from the reference: ``factor ×`` its time there, at least the
    floor, at most the test limit."""
    took = {r.test_id: r.duration for r in reference.results}
    return {
        test: round(min(limits.test_timeout, max(limits.timeout_floor, limits.timeout_factor * took.get(test, 0.0))), 3)
        for test in tests
    }


def _fill(run: SuiteRun, test_ids: Sequence[str], why: str) -> SuiteRun:
    """``run`` with an outcome for every test of the suite: the ones it did not run are
    NOT_RUN, with ``why``."""
    have = {r.test_id: r for r in run.results}
    results = tuple(have.get(t) or TestOutcome(test_id=t, outcome=Outcome.NOT_RUN, message=why) for t in test_ids)
    extra = tuple(r for r in run.results if r.test_id not in set(test_ids))
    return run.model_copy(update={"results": results + extra})


def _merge(earlier: SuiteRun, later: SuiteRun) -> SuiteRun:
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


class _Budget:
    """CPU seconds spent by every run so far, against the grading budget."""

    def __init__(self, budget: float | None) -> None:
        self.budget = budget
        self.spent = 0.0

    def left(self) -> float | None:
        return None if self.budget is None else max(0.0, self.budget - self.spent)

    def charge(self, run: SuiteRun) -> BudgetStop | None:
        self.spent += run.cpu_s
        if self.budget is None:
            return None
        if run.budget_exceeded:
            return BudgetStop(self.budget, run.budget_exceeded, run.variant)
        if self.spent > self.budget:
            slowest = max(run.results, key=lambda r: r.duration, default=None)
            return BudgetStop(self.budget, slowest.test_id if slowest else "(collecting the tests)", run.variant)
        return None


class _MatrixRun:
    """The staged protocol of :func:`run_matrix`, over two workers sharing one result queue."""

    def __init__(self, *, layout: Layout, tests_dir: Path, variants: Sequence[Variant], limits: RunLimits,
                 full_matrix: bool, launched: Launched | None,
                 pooled: tuple[WorkerProcess, WorkerProcess] | None = None) -> None:
        self.variants = {v.id: v for v in variants}
        self.limits = limits
        self.full_matrix = full_matrix
        self.owns = pooled is None  # a pool's workers outlive this grading, unless it goes wrong
        self.results: queue.Queue[_Result] = pooled[0].results if pooled else queue.Queue()
        self.budget = _Budget(limits.cpu_budget)
        self.first: dict[str, SuiteRun] = {}
        self.second: dict[str, SuiteRun] = {}
        self.stop: BudgetStop | None = None
        self.in_flight = 0
        self.received = 0
        self.passing: list[str] = []  # passed on the reference (first hash seed)
        self.valid: list[str] = []  # ... and on every wheat: the tests the mutants are run with
        self.time_limits: dict[str, float] = {}  # each test's limit away from the reference
        # Two workers under two hash seeds: the second runs the reference only, alongside the
        # first, so that a test whose result depends on the hash seed shows up as flaky.
        if pooled is not None:
            self.seed_one, self.seed_two = pooled
            return
        try:
            self.seed_two = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=SECOND_HASH_SEED,
                                          limits=replace(limits, jobs=1), results=self.results, hide_source=True,
                                          started=launched.seed_two if launched else None)
            try:
                self.seed_one = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=FIRST_HASH_SEED,
                                              limits=limits, results=self.results, hide_source=True,
                                              started=launched.seed_one if launched else None)
            except BaseException:
                self.seed_two.close()  # its sandbox user and copy are freed when the other cannot start
                raise
        except BaseException:
            if launched is not None:
                launched.close()
            raise

    def close(self) -> None:
        """Stop both workers (whatever they were doing: what they never reported comes back
        crashed)."""
        for worker in (self.seed_one, self.seed_two):
            worker.close()

    def release(self) -> None:
        """The grading is over: its own workers are stopped; a pool's are left for the next."""
        if self.owns:
            self.close()

    def _send(self, worker: WorkerProcess, run: WorkerRun, *, floor: float | None = None) -> None:
        worker.submit(run, cpu_budget=self.budget.left(), timeout_floor=floor)
        self.in_flight += 1

    def _wait(self) -> _Result | None:
        """The next result; None once the budget has run out (everything is then stopped)."""
        while True:
            try:
                item = self.results.get(timeout=_silence_limit(self.limits))
            except queue.Empty:
                self.close()  # silent too long: what they never reported comes back crashed
                continue
            self.in_flight -= 1
            self.received += 1
            stop = self.budget.charge(item.run)
            if stop is not None and self.stop is None:
                self.stop = stop
                self.close()
            return item

    def run(self) -> Matrix:
        reference = next(v for v in self.variants.values() if v.kind is VariantKind.REFERENCE)
        wheats = [v for v in self.variants.values() if v.kind is VariantKind.WHEAT]
        mutants = [v for v in self.variants.values() if v.kind is VariantKind.MUTANT]
        self._send(self.seed_two, WorkerRun(variant=reference.id, source=reference.source))
        self._send(self.seed_one, WorkerRun(variant=reference.id, source=reference.source))
        if self.owns:
            self.seed_two.finish()
        ref_run: SuiteRun | None = None
        waiting_wheats: set[str] = set()
        mutants_sent = False
        test_ids: list[str] = []
        passing: list[str] = []
        limits: dict[str, float] = {}
        while self.in_flight:
            item = self._wait()
            run = item.run
            if self.stop is not None:
                self._keep(run, item.worker)
                continue
            if item.worker is self.seed_two:
                self.second[run.variant] = run
                continue
            if run.variant == reference.id and ref_run is None:
                ref_run = run
                self.first[run.variant] = run
                test_ids = run.test_ids
                passing = [r.test_id for r in run.results if r.outcome is Outcome.PASSED]
                self.passing = passing
                limits = _time_limits(run, passing, self.limits)
                self.time_limits = limits
                if passing:
                    for wheat in wheats:
                        self._send(self.seed_one, WorkerRun(variant=wheat.id, source=wheat.source,
                                                            select=passing, time_limits=limits))
                        waiting_wheats.add(wheat.id)
            elif run.variant in waiting_wheats:
                waiting_wheats.discard(run.variant)
                self.first[run.variant] = _fill(run, test_ids, "not run: wrong on the reference")
            else:
                self._mutant_result(run)
            if ref_run is not None and not waiting_wheats and not mutants_sent:
                mutants_sent = True
                valid = [t for t in passing
                         if all(self.first[w.id].outcome(t) is Outcome.PASSED for w in wheats)]
                if valid:
                    for mutant in mutants:
                        self._send(self.seed_one, WorkerRun(
                            variant=mutant.id, source=mutant.source, select=valid,
                            time_limits={t: limits[t] for t in valid},
                            stop_at_first_kill=not self.full_matrix, brief=True,
                        ))
                self.valid = valid
            if mutants_sent and self.in_flight == 0:
                break
        self.release()
        return self._matrix(test_ids, wheats, mutants)

    def _keep(self, run: SuiteRun, worker: WorkerProcess) -> None:
        """After the budget ran out: keep what came back, as it is."""
        target = self.second if worker is self.seed_two or run.attempt == 2 else self.first
        target.setdefault(run.variant, run)

    def _mutant_result(self, run: SuiteRun) -> None:
        variant = self.variants[run.variant]
        if run.attempt == 2:
            self.second[run.variant] = run
            first = self.first[run.variant]
            unconfirmed = [r.test_id for r in first.results
                           if r.outcome.kills and not self._confirmed(first, run, r.test_id)]
            rest = [r.test_id for r in first.results if r.outcome is Outcome.NOT_RUN
                    and r.test_id in self.valid]
            if unconfirmed and len(unconfirmed) == len([r for r in first.results if r.outcome.kills]) and rest:
                # Its only kill did not hold up: carry on with the tests it stopped before.
                self._send(self.seed_one, WorkerRun(
                    variant=variant.id, source=variant.source, select=rest, attempt=3,
                    time_limits={t: self.time_limits[t] for t in rest}, stop_at_first_kill=not self.full_matrix,
                    brief=True,
                ))
            return
        if run.attempt == 3:  # a continuation of the first run
            run = _merge(self.first[run.variant], run.model_copy(update={"attempt": 1}))
        else:
            run = self._explain(run)
        self.first[run.variant] = run
        doubtful = [r.test_id for r in run.results if r.outcome.kills and _needs_confirmation(run, r.test_id)]
        if doubtful:
            self._send(self.seed_one, WorkerRun(variant=variant.id, source=variant.source, select=doubtful,
                                                time_limits={t: self.time_limits[t] for t in doubtful}, attempt=2,
                                                brief=True))

    def _explain(self, run: SuiteRun) -> SuiteRun:
        """A mutant's run with every test of the suite, each one not run saying why."""
        passing = set(self.passing)
        results = {r.test_id: r for r in run.results}
        filled = []
        for test_id in self.first["reference"].test_ids:
            result = results.get(test_id)
            if result is not None and result.outcome is not Outcome.NOT_RUN:
                filled.append(result)
                continue
            if test_id not in passing:
                why = "not run: wrong on the reference"
            elif test_id not in self.valid:
                why = "not run: brittle (fails on a correct implementation)"
            else:
                why = "not run: the mutant was already killed by an earlier test"
            filled.append(TestOutcome(test_id=test_id, outcome=Outcome.NOT_RUN, message=why))
        return run.model_copy(update={"results": tuple(filled)})

    @staticmethod
    def _confirmed(first: SuiteRun, second: SuiteRun, test_id: str) -> bool:
        return not _needs_confirmation(first, test_id) or second.outcome(test_id).kills

    def _matrix(self, test_ids: list[str], wheats: list[Variant], mutants: list[Variant]) -> Matrix:
        for variant in [*wheats, *mutants]:
            if variant.id in self.first or not test_ids:
                continue
            empty = SuiteRun(variant=variant.id, hash_seed=FIRST_HASH_SEED)
            if self.stop is not None:
                self.first[variant.id] = _fill(empty, test_ids, "not run: the grading budget ran out")
            elif variant.kind is VariantKind.MUTANT:
                self.first[variant.id] = self._explain(empty)  # no test was valid: each says why
            else:
                self.first[variant.id] = _fill(empty, test_ids, "not run: wrong on the reference")
        return Matrix(first=self.first, second=self.second, budget_stop=self.stop,
                      cpu_s=round(self.budget.spent, 3), runs=self.received)


def run_matrix(
    *,
    layout: Layout,
    tests_dir: Path,
    variants: Sequence[Variant],
    limits: RunLimits,
    full_matrix: bool = False,
    launched: Launched | None = None,
) -> Matrix:
    """Run the suite against the reference (under two hash seeds), then the wheats, then the
    mutants, each stage only with the tests still worth running (see the module's docstring).

    Args:
        full_matrix: run every valid test on every mutant, instead of stopping each mutant's
            run at its first kill (staff regrades, calibration).
        launched: the two workers, already started for ``tests_dir`` (see
            :mod:`grader.launch`); started here when None. Closed either way.

    Returns:
        The Matrix: ``first`` holds every variant's run (cells not run are NOT_RUN, with the
        reason); ``second`` the reference's run under the second hash seed and each mutant's
        confirming run (when a kill needed one); ``budget_stop`` where the budget ran out.
    """
    matrix_run = _MatrixRun(layout=layout, tests_dir=tests_dir, variants=variants, limits=limits,
                            full_matrix=full_matrix, launched=launched)
    try:
        return matrix_run.run()
    finally:
        matrix_run.release()


class WorkerPool:
    """Two workers (hash seeds 1 and 2) kept warm for one grading after another: a batch pays
    their start-up (numpy, pytest, pytest's configuration) once, not once per submission.

    Each grading stages its tests into both workers' private folders and removes them after;
    between gradings a worker empties its private temporary folder and sets pytest up afresh,
    and it never runs submitted code itself (only its children do), so nothing of one
    submission reaches the next. A grading that goes wrong (the budget ran out, a worker died
    or hung) stops both workers; the next grading starts new ones. Workers are replaced after
    ``max_gradings`` too. Close the pool when done (or use it as a context manager).

    Args:
        layout: where the reference package is (the workers grade its variants).
        limits: the sandbox mode and limits the workers start under, and their ``jobs``.
        max_gradings: how many gradings a pair of workers does before it is replaced.
    """

    def __init__(self, *, layout: Layout, limits: RunLimits, max_gradings: int = 50) -> None:
        self.layout = layout
        self.limits = limits
        self.max_gradings = max_gradings
        self._pair: tuple[WorkerProcess, WorkerProcess] | None = None
        self._gradings = 0

    def _workers(self) -> tuple[WorkerProcess, WorkerProcess]:
        pair = self._pair
        if pair is not None and (any(w.closed for w in pair) or self._gradings >= self.max_gradings):
            self.close()
            pair = None
        if pair is None:
            results: queue.Queue[_Result] = queue.Queue()
            seed_two = WorkerProcess(layout=self.layout, tests_dir=None, hash_seed=SECOND_HASH_SEED,
                                     limits=replace(self.limits, jobs=1), results=results, hide_source=True)
            try:
                seed_one = WorkerProcess(layout=self.layout, tests_dir=None, hash_seed=FIRST_HASH_SEED,
                                         limits=self.limits, results=results, hide_source=True)
            except BaseException:
                seed_two.close()
                raise
            pair = self._pair = (seed_one, seed_two)
            self._gradings = 0
        return pair

    def run_matrix(self, *, tests_dir: Path, variants: Sequence[Variant], limits: RunLimits,
                   full_matrix: bool = False) -> Matrix:
        """:func:`run_matrix` on the pool's workers (``limits.sandbox`` must be the pool's)."""
        if SandboxMode(limits.sandbox) is not SandboxMode(self.limits.sandbox):
            raise ValueError(f"the pool's workers run under sandbox mode {self.limits.sandbox}, not {limits.sandbox}")
        pair = self._workers()
        self._gradings += 1
        try:
            for worker in pair:
                worker.begin(tests_dir, limits)
            matrix_run = _MatrixRun(layout=self.layout, tests_dir=tests_dir, variants=variants, limits=limits,
                                    full_matrix=full_matrix, launched=None, pooled=pair)
            return matrix_run.run()
        except BaseException:
            self.close()
            raise
        finally:
            for worker in pair:
                worker.end()

    def close(self) -> None:
        if self._pair is not None:
            for worker in self._pair:
                worker.close()
            self._pair = None

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
