"""A grading's runs: the staged protocol over two workers, and the pool that keeps them warm.

:func:`run_matrix` grades in stages, so that a broken or hostile suite costs little. First the
reference (twice, under two hash seeds, one run in each worker), one worker's first run being,
by chance, one of its wheats instead (with every test, the reference run beside it), so that no
kind of variant always comes first on a worker. As soon as the first reference run is in, the
other wheats (each under a seed of its own: the wheats take the two seeds in turn) and the
mutants, in a random order, counting only the tests that passed it, each under a time limit
derived from the test's time on the reference, and each mutant's run stopping at its first
kill (unless the full matrix is asked for). A wheat's run is weighed once both reference runs
are in: a test that took longer on it than its limit from the reference (by the worker's
clock) ran past it. A test that could tell how far the grading has gone (by the clock, say)
learns nothing from it: a wheat is as likely as a mutant to come late. A test a wheat fails is run on it again under the other seed: a failure that
does not hold there is chance's (the test is flaky), not the wheat's. The mutants' results are
weighed once both reference runs and every wheat are in: a mutant whose run stopped at a test
that turned out not to be valid carries on with the valid tests it had not reached (at most
:data:`MAX_CONTINUATIONS` times). Every kill is confirmed by running the test that made it again
under the other seed (with the tests the mutant passed before it, reported again: one that passed
and failed on one variant is chance's, a clock's say); once the grading has shown such a test,
every kill must hold in one more run under each seed too (:data:`UNDER_CHANCE`). The confirming
and continuing runs come late and are mostly mutants', so
the reference is run again among them now and then, at random (:data:`RECHECK_EVERY`): a test
that fails late fails there too, and is not valid. A CPU and a wall-clock budget bound the whole
grading, and so does a cap on its runs (:func:`max_runs`).
Runs with no seed of their own go to whichever worker is free, never more at once than ``jobs``.
:class:`grader.run.pool.WorkerPool` keeps the two workers for one grading after another.
"""

from __future__ import annotations

import queue
import random
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from grader.run.cells import charge, fill, held_to, limits_from_reference, merge, passed_tests
from grader.run.launch import FIRST_HASH_SEED, SECOND_HASH_SEED, Launched
from grader.core.matrix import BudgetStop, Matrix, chance_shown
from grader.core.models import Budget, Outcome, Purpose, SuiteRun, WorkerRun
from grader.core.paths import Layout
from grader.run.runner import GradingBudget, RunLimits, WorkerLost, WorkerProcess, WorkerResult, close_all, silence_limit
from grader.core.variants import Variant, VariantKind

if TYPE_CHECKING:
    from grader.run.pool import WorkerPool

__all__ = ["MAX_CONTINUATIONS", "MAX_RUNS_PER_VARIANT", "RECHECK_EVERY", "UNDER_CHANCE", "MatrixRun", "max_runs",
           "run_matrix"]

RECHECK_EVERY = 3  # about one such run for every this many confirming or continuing runs
MAX_CONTINUATIONS = 2  # a mutant's run carried on after a kill that did not hold, at most this often
# Confirming runs a kill needs once the grading has shown chance (a test passed and failed on one
# variant): the first under the other seed, then one more under each seed.
UNDER_CHANCE = 3
MAX_RUNS_PER_VARIANT = 6  # a grading's runs, at most this many per variant (see max_runs)
_WALL_SLACK = 10.0  # seconds the workers have to report their runs stopped by the wall-clock budget


def _reported_again(run: SuiteRun) -> list[str]:
    """What a confirming run of a mutant reports: the tests that killed it in ``run``, then those
    it passed before them (they run before the kill anyway, so the run is no longer)."""
    return ([r.test_id for r in run.results if r.outcome.kills]
            + [r.test_id for r in run.results if r.outcome is Outcome.PASSED])


def max_runs(variants: int) -> int:
    """The most suite runs one grading of ``variants`` variants makes, whatever the suite.

    An honest suite needs two reference runs, one run of each other variant, a confirming run
    per killed mutant and a recheck now and then (about ``2.2 ×`` the variants); a suite whose
    kills do not hold needs continuations too, at most :data:`MAX_CONTINUATIONS` a mutant. Past
    the cap the grading stops, and its report says so.
    """
    return 2 + MAX_RUNS_PER_VARIANT * variants


class MatrixRun:
    """The staged protocol of :func:`run_matrix`, over two workers sharing one result queue."""

    def __init__(self, *, layout: Layout, tests_dir: Path, variants: Sequence[Variant], limits: RunLimits,
                 full_matrix: bool, launched: Launched | None,
                 pooled: tuple[WorkerProcess, WorkerProcess] | None = None,
                 not_counted: Callable[[str], str | None] | None = None) -> None:
        self.variants = {v.id: v for v in variants}
        self.limits = limits
        self.full_matrix = full_matrix
        self.not_counted = not_counted or (lambda test_id: None)
        self.owns = pooled is None  # a pool's workers outlive this grading, unless it goes wrong
        self.launched = launched  # started by the caller, who also closes them
        self.results: queue.Queue[WorkerResult] = pooled[0].results if pooled else queue.Queue()
        self.budget = GradingBudget(limits.limits)
        self.first: dict[str, SuiteRun] = {}
        self.second: dict[str, SuiteRun] = {}
        self.stop: BudgetStop | None = None
        self.in_flight = 0
        self.received = 0
        self.sent = 0
        self.max_runs = max_runs(len(self.variants))
        self.slots = max(1, limits.jobs)  # runs at once, over both workers
        self.pending: deque[WorkerRun] = deque()  # decided, waiting for a free slot
        self.busy: dict[WorkerProcess, int] = {}  # runs in flight, by worker
        self.ready: set[WorkerProcess] = set()  # the workers that have reported a run: set up and waiting
        self.valid: list[str] = []  # ... and on every wheat: the tests a mutant's kill counts by
        self.settled = False  # both reference runs and every wheat are in: self.valid is known
        self.held: list[SuiteRun] = []  # mutants' first runs that came in before that
        self.unweighed: list[SuiteRun] = []  # wheats' first runs in before both reference runs
        self.later_wheats: list[Variant] = []  # the wheats sent among the mutants
        self.nothing_passed = False  # no test that counts passed the first reference run in
        self.rechecks: list[SuiteRun] = []
        self.late = 0  # confirming and continuing runs sent
        self.carried: dict[str, int] = {}  # continuations sent, by mutant
        self.more: dict[str, list[SuiteRun]] = {}  # a mutant's further confirming runs (UNDER_CHANCE)
        self.held_once: set[str] = set()  # mutants whose kills held in their first confirming run only
        self.chancy = False  # a test passed and failed on one variant: every kill needs UNDER_CHANCE confirmations
        self.chance = random.SystemRandom()
        self.time_limits: dict[str, float] = {}  # each test's limit away from the reference
        # Two workers under two hash seeds, each running the reference at once, so that a test
        # whose result depends on the hash seed shows up as flaky; then both run what follows.
        if pooled is not None:
            self.seed_one, self.seed_two = pooled
            return
        try:
            self.seed_two = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=SECOND_HASH_SEED,
                                          limits=limits, results=self.results, hide_source=True,
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
        close_all((self.seed_one, self.seed_two))

    def release(self) -> None:
        """The grading is over: its own workers are stopped; a pool's are left for the next.
        Workers the caller launched are only killed here: the caller, which closes them, waits
        for them to be gone once its report is out, while they go down alongside."""
        if not self.owns:
            return
        if self.launched is not None:
            for worker in (self.seed_one, self.seed_two):
                worker.sandbox.kill()
        else:
            self.close()

    def _send_to(self, worker: WorkerProcess, run: WorkerRun) -> None:
        worker.submit(run, cpu_budget=self.budget.cpu_left(), wall_budget=self.budget.wall_left())
        self.sent += 1
        self.in_flight += 1
        self.busy[worker] = self.busy.get(worker, 0) + 1

    def _send(self, run: WorkerRun) -> None:
        """Run ``run`` on whichever worker is free first."""
        self.pending.append(run)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand waiting runs out while a slot is free: to a worker known to be set up (the
        one with fewer runs in flight), or to the first-seed worker while neither has
        reported yet."""
        while self.pending and self.stop is None and self.in_flight < self.slots:
            if self.sent >= self.max_runs:
                # Whatever the suite does, a grading ends: what is left is not run, and says why.
                self.stop = BudgetStop(self.max_runs, "(the next run)", "", Budget.RUNS)
                return
            run = self.pending.popleft()
            if run.seed is not None:
                worker = self.seed_one if run.seed == self.seed_one.hash_seed else self.seed_two
            else:
                ready = [w for w in (self.seed_one, self.seed_two) if w in self.ready]
                worker = min(ready, key=lambda w: self.busy.get(w, 0)) if ready else self.seed_one
            self._send_to(worker, run)

    def _wait(self) -> WorkerResult:
        """The next result (once the budget has run out, everything is stopped and what was
        running comes back as it is)."""
        while True:
            wall_left = self.budget.wall_left()
            timeout = silence_limit(self.limits)
            if wall_left is not None and self.stop is None:
                timeout = min(timeout, wall_left + _WALL_SLACK)
            try:
                item = self.results.get(timeout=timeout)
            except queue.Empty:
                if self.stop is None and self.budget.wall_left() == 0.0:
                    # The workers stop their runs when the wall-clock budget runs out; they did
                    # not answer in time either: every run still out is stopped from here.
                    self.stop = BudgetStop(self.budget.wall or 0.0, "(a run that did not report)", "", Budget.WALL)
                self.close()  # silent too long: what they never reported comes back crashed
                continue
            self.in_flight -= 1
            self.received += 1
            self.busy[item.worker] -= 1
            if item.lost and self.stop is None:
                # Not the budget's stop: a worker died or hung. What it lost would read as the
                # tests' doing (every test brittle on a wheat, a mutant left alive): judge nothing.
                raise WorkerLost(f"a grading worker was lost, nothing of this grading is judged: {item.run.crashed}")
            self.ready.add(item.worker)
            stop = charge(self.budget, item.run)
            if stop is not None and self.stop is None:
                self.stop = stop
                self.close()
            return item

    def run(self) -> Matrix:
        reference = next(v for v in self.variants.values() if v.kind is VariantKind.REFERENCE)
        wheats = [v for v in self.variants.values() if v.kind is VariantKind.WHEAT]
        mutants = [v for v in self.variants.values() if v.kind is VariantKind.MUTANT]
        self.budget.start()
        self._start(reference, wheats)
        references: dict[int, SuiteRun] = {}  # by hash seed
        waiting_wheats = {w.id for w in wheats}  # their first runs, or a rejection's second, not weighed yet
        rest_sent = False
        while self.in_flight or (self.pending and self.stop is None):
            item = self._wait()
            run = item.run
            if self.stop is not None:
                self._keep(run, item.worker, reference.id)
                continue
            if run.purpose is Purpose.RECHECK:
                self.rechecks.append(run)
            elif run.variant == reference.id and run.purpose in (Purpose.FIRST, Purpose.SECOND_SEED):
                references[item.worker.hash_seed] = run
                (self.second if run.purpose is Purpose.SECOND_SEED else self.first)[reference.id] = run
                if not rest_sent:
                    # The first reference run in: the wheats and the mutants need not wait for
                    # the other, and count the tests that passed it (one failing under the
                    # other hash seed is flaky, and counts for nothing either way).
                    rest_sent = True
                    if not self._send_the_rest(run, wheats, mutants):
                        # No test passed it: nothing is weighed, and the wheat that may have
                        # started beside the reference counts for nothing (what its run met,
                        # the reference's runs met first).
                        self.nothing_passed = True
                        self.unweighed.clear()
                if len(references) == 2:
                    unweighed, self.unweighed = self.unweighed, []
                    for wheat_run in unweighed:
                        if self._wheat_result(wheat_run, list(references.values())):
                            waiting_wheats.discard(wheat_run.variant)
            elif self.nothing_passed and self.variants[run.variant].kind is VariantKind.WHEAT:
                pass  # the wheat that started beside a reference no test passed: weighed for nothing
            elif run.variant in waiting_wheats:
                if len(references) < 2 and run.purpose is Purpose.FIRST:
                    self.unweighed.append(run)  # weighed once both reference runs (and their times) are in
                elif self._wheat_result(run, list(references.values())):
                    waiting_wheats.discard(run.variant)
            elif not self.settled and run.purpose is Purpose.FIRST:
                self.held.append(run)
            else:
                self._mutant_result(run)
            if not self.settled and len(references) == 2 and not waiting_wheats:
                self._settle(list(references.values()), wheats)
            if not self.chancy and self.stop is None and self._chance_shown(run.variant):
                self.chancy = True
                for held in sorted(self.held_once):
                    self._confirm_again(self.variants[held])
            self._dispatch()
        self.release()
        return self._matrix(wheats, mutants)

    def _start(self, reference: Variant, wheats: list[Variant]) -> None:
        """The first runs: the reference under both hash seeds, one run in each worker, both at
        once. One worker, chosen by chance, starts with its reference run; the other starts
        with its reference run or, by chance, with one of its wheats (under the seed
        :meth:`_wheat_seed` gives it), its reference run at once beside it: no kind of variant
        always comes first on a worker. Such a wheat runs every test under the test limit (its
        limits from the reference are applied once the reference's times are in,
        :meth:`_wheat_result`); the other wheats go later, among the mutants."""
        runs = {self.seed_one.hash_seed: WorkerRun(variant=reference.id, source=reference.source,
                                                   purpose=Purpose.FIRST, seed=self.seed_one.hash_seed),
                self.seed_two.hash_seed: WorkerRun(variant=reference.id, source=reference.source,
                                                   purpose=Purpose.SECOND_SEED, seed=self.seed_two.hash_seed)}
        lead, other = self.chance.sample(sorted(runs), 2)
        heads = [runs[other]] + [WorkerRun(variant=w.id, source=w.source, seed=other)
                                 for w in wheats if self._wheat_seed(w, wheats) == other]
        head = self.chance.choice(heads)
        self.later_wheats = [w for w in wheats if w.id != head.variant]
        for run in [runs[lead], head] + ([runs[other]] if head is not heads[0] else []):
            self._send_to(self.seed_one if run.seed == self.seed_one.hash_seed else self.seed_two, run)

    def _wheat_seed(self, wheat: Variant, wheats: list[Variant]) -> int:
        """The hash seed a wheat's first run is made under: the same in every grading (so a test
        whose verdict on it is chance's is found the same way each time), half the wheats under
        each seed, by their order in the manifest."""
        index = [w.id for w in wheats].index(wheat.id)
        return self.seed_one.hash_seed if index % 2 == 0 else self.seed_two.hash_seed

    def _send_the_rest(self, first: SuiteRun, wheats: list[Variant], mutants: list[Variant]) -> bool:
        """Send the wheats not sent yet and every mutant at once, in a random order (a wheat is
        as likely as a mutant to come late), counting the tests that passed the first reference
        run; False, with nothing sent, when no test that counts passed it."""
        passing = [t for t in passed_tests(first) if self.not_counted(t) is None]
        if not passing:
            return False
        limits = limits_from_reference([first], passing, self.limits)
        runs = [WorkerRun(variant=w.id, source=w.source, select=passing, time_limits=limits,
                          seed=self._wheat_seed(w, wheats)) for w in self.later_wheats]
        runs += [WorkerRun(variant=m.id, source=m.source, select=passing, time_limits=limits,
                           stop_at_first_kill=not self.full_matrix) for m in mutants]
        self.chance.shuffle(runs)
        for run in runs:
            self._send(run)
        return True

    def _settle(self, references: list[SuiteRun], wheats: list[Variant]) -> None:
        """Both reference runs and every wheat are in: the valid tests are known, and the
        mutants' runs that came in meanwhile are weighed."""
        both = set(passed_tests(references[0])) & set(passed_tests(references[1]))
        self.valid = [t for t in self.first["reference"].test_ids
                      if t in both and self.not_counted(t) is None
                      and all(self.first[w.id].outcome(t) is Outcome.PASSED for w in wheats)]
        self.time_limits = limits_from_reference(references, self.valid, self.limits)
        self.settled = True
        held, self.held = self.held, []
        for run in held:
            self._mutant_result(run)

    def _send_late(self, run: WorkerRun) -> None:
        """A confirming or continuing run (a mutant's, or a wheat's): now and then the reference
        goes with it, at random, so that coming late says nothing about the variant."""
        self.late += 1
        # Once the grading has shown chance, every late run has the reference beside it: a test
        # that fails by the clock once the grading runs late fails there too.
        recheck = self.chancy or self.chance.randrange(RECHECK_EVERY) == 0 or self.late == 2
        reference = next(v for v in self.variants.values() if v.kind is VariantKind.REFERENCE)
        again = WorkerRun(variant=reference.id, source=reference.source, purpose=Purpose.RECHECK,
                          time_limits=run.time_limits, select=run.select, seed=run.seed)
        for item in ([run, again] if self.chance.random() < 0.5 else [again, run]) if recheck else [run]:
            self._send(item)

    def _wheat_result(self, run: SuiteRun, references: list[SuiteRun]) -> bool:
        """A wheat's run, once both reference runs are in: whether the wheat is done. Its first
        run had every test under the test limit (it may go before the reference); a test that
        took longer than its limit from the reference runs ran past it. Its rejections (tests
        it failed that passed both reference runs) are run on it again under the other seed:
        one that does not fail there is chance's (the test is flaky), not the wheat's (brittle)."""
        if run.purpose is Purpose.CONFIRMING:
            self.second[run.variant] = run
            return True
        passing = [t for t in run.test_ids if self.not_counted(t) is None
                   and all(ref.outcome(t) is Outcome.PASSED for ref in references)]
        limits = limits_from_reference(references, passing, self.limits)
        run = self.first[run.variant] = held_to(run, limits)
        rejected = [r.test_id for r in run.results if r.outcome not in (Outcome.PASSED, Outcome.NOT_RUN)
                    and r.test_id in limits]
        if not rejected:
            return True
        wheat = self.variants[run.variant]
        self._send_late(WorkerRun(variant=wheat.id, source=wheat.source, select=rejected,
                                  time_limits={t: limits[t] for t in rejected},
                                  purpose=Purpose.CONFIRMING, seed=self._other_seed(run.hash_seed)))
        return False

    def _keep(self, run: SuiteRun, worker: WorkerProcess, reference: str) -> None:
        """After the budget ran out: keep what came back, as it is."""
        if run.purpose is Purpose.RECHECK:
            self.rechecks.append(run)
            return
        if run.purpose is Purpose.CONFIRMING_AGAIN:
            self.more.setdefault(run.variant, []).append(run)
            return
        second = run.purpose in (Purpose.CONFIRMING, Purpose.SECOND_SEED)
        (self.second if second else self.first).setdefault(run.variant, run)

    def _mutant_result(self, run: SuiteRun) -> None:
        variant = self.variants[run.variant]
        if run.purpose is Purpose.CONFIRMING_AGAIN:
            # Whether its kills held once more is read from the matrix; a kill that did not is
            # not carried on from: the grading has shown chance, which earns no more tries.
            self.more.setdefault(run.variant, []).append(run)
            return
        if run.purpose is Purpose.CONFIRMING:
            self.second[run.variant] = run
            self.more.pop(run.variant, None)
            first = self.first[run.variant]
            kills = [r.test_id for r in first.results if r.outcome.kills]
            unconfirmed = [t for t in kills if not run.outcome(t).kills]
            rest = [r.test_id for r in first.results if r.outcome is Outcome.NOT_RUN
                    and r.test_id in self.valid]
            if unconfirmed and len(unconfirmed) == len(kills):
                if rest:
                    # Its only kill did not hold up under the other seed: carry on with the
                    # tests it stopped before, a bounded number of times.
                    self._carry_on(variant, rest)
            elif self.chancy:
                self._confirm_again(variant)
            else:
                self.held_once.add(variant.id)
            return
        seed = run.hash_seed  # the seed its kills were found under
        if run.purpose is Purpose.CONTINUING:
            run = merge(self.first[run.variant], self._explain(run).model_copy(update={"purpose": Purpose.FIRST}))
        else:
            run = self._explain(run)
        self.first[run.variant] = run
        killed = [r.test_id for r in run.results if r.outcome.kills]
        rest = [r.test_id for r in run.results if r.outcome is Outcome.NOT_RUN and r.test_id in self.valid]
        if run.stopped_early and not killed and rest:
            # It stopped at a test that turned out not to be valid: carry on with the rest.
            self._carry_on(variant, rest)
            return
        if killed:
            # Every kill counts only once it fails again under the other seed (a test that draws
            # chance draws the same under one seed on every variant: this is the second wall).
            # The tests it passed are reported again too (they ran before the kill, so the run
            # is no longer): one whose result changed on the same mutant depends on chance, a
            # clock say, and counts for nothing (grader.core.matrix.Matrix.differs_between_runs).
            self._send_late(WorkerRun(variant=variant.id, source=variant.source, select=_reported_again(run),
                                      time_limits=self.time_limits, purpose=Purpose.CONFIRMING,
                                      seed=self._other_seed(seed)))

    def _other_seed(self, seed: int) -> int:
        return self.seed_two.hash_seed if seed == self.seed_one.hash_seed else self.seed_one.hash_seed

    def _chance_shown(self, variant: str) -> bool:
        """Whether some test has passed and failed on ``variant``, whose run just came in (the
        reference's runs and its rechecks; a wheat's or a mutant's first and confirming runs)."""
        if variant == "reference":
            runs = [self.first.get("reference"), self.second.get("reference"), *self.rechecks]
        else:
            runs = [self.first.get(variant), self.second.get(variant), *self.more.get(variant, ())]
        return chance_shown([run for run in runs if run is not None])

    def _confirm_again(self, variant: Variant) -> None:
        """The grading has shown chance: ``variant``'s kills, which held in its first confirming
        run, count only if they hold in one more run under each seed (:data:`UNDER_CHANCE`)."""
        self.held_once.discard(variant.id)
        select = _reported_again(self.first[variant.id])
        for seed in (self.seed_one.hash_seed, self.seed_two.hash_seed)[:UNDER_CHANCE - 1]:
            self._send_late(WorkerRun(variant=variant.id, source=variant.source, select=select,
                                      time_limits=self.time_limits, purpose=Purpose.CONFIRMING_AGAIN, seed=seed))

    def _carry_on(self, variant: Variant, rest: list[str]) -> None:
        carried = self.carried.get(variant.id, 0)
        if carried >= MAX_CONTINUATIONS:
            return  # what it did not reach stays not run, and says why
        self.carried[variant.id] = carried + 1
        self._send_late(WorkerRun(
            variant=variant.id, source=variant.source, select=rest, purpose=Purpose.CONTINUING,
            time_limits=self.time_limits, stop_at_first_kill=not self.full_matrix,
        ))

    def _explain(self, run: SuiteRun, kind: VariantKind = VariantKind.MUTANT) -> SuiteRun:
        """A wheat's or mutant's run with every test of the suite, each one not run saying why.

        A test the reference runs did not all pass counts for nothing on any variant, and its
        cell says so whether or not this run had it: a wheat runs the tests that passed the
        first reference run in (or every test, the one that may start a worker), so whether a
        hash-seed-dependent test ran on a wheat (and under which worker's seed) depends on
        timing and chance, and the report must not."""
        counted = set(self.valid) if kind is VariantKind.MUTANT and self.settled else None
        results = tuple(r for r in run.results
                        if r.outcome is not Outcome.NOT_RUN and self._reference_reason(r.test_id) is None
                        and (counted is None or r.test_id in counted))
        return fill(run.model_copy(update={"results": results}), self.first["reference"].test_ids,
                     lambda test_id: self._why_not_run(test_id, kind))

    def _reference_reason(self, test_id: str) -> str | None:
        """Why ``test_id`` counts on no variant, from the reference runs in: None if it passed them all."""
        references = [r for r in (self.first.get("reference"), self.second.get("reference")) if r is not None]
        if self.stop is not None:  # a reference run the budget stopped says nothing of the tests it never ran
            references = [r for r in references if r.outcome(test_id) is not Outcome.NOT_RUN]
        passed = [r.outcome(test_id) is Outcome.PASSED for r in references]
        if any(passed) and not all(passed):
            return "not counted: flaky (passed on the reference under one hash seed only)"
        if not all(passed):
            return "not run: wrong on the reference"
        return None

    def _why_not_run(self, test_id: str, kind: VariantKind) -> str | None:
        reason = self._reference_reason(test_id) or self.not_counted(test_id)
        if reason is not None:
            return reason
        if self.stop is not None:
            return "not run: the grading budget ran out"
        if kind is VariantKind.WHEAT:
            return None  # every such test was run on the wheats: what it never reported is missing
        if test_id not in self.valid:
            if self._by_chance(test_id):
                return "not counted: flaky (failed on a correct implementation under one seed only)"
            return "not run: brittle (fails on a correct implementation)"
        return "not run: the mutant's run stopped at an earlier test that failed"

    def _by_chance(self, test_id: str) -> bool:
        """Whether every wheat that failed ``test_id`` passed it when run again under the other seed."""
        wheats = [v.id for v in self.variants.values() if v.kind is VariantKind.WHEAT and v.id in self.first]
        failed = [w for w in wheats if self.first[w].outcome(test_id) not in (Outcome.PASSED, Outcome.NOT_RUN)]
        return bool(failed) and all(w in self.second and self.second[w].outcome(test_id) is Outcome.PASSED
                                    for w in failed)

    def _matrix(self, wheats: list[Variant], mutants: list[Variant]) -> Matrix:
        first, second = self.first.get("reference"), self.second.get("reference")
        if second is not None and (first is None or not first.test_ids):
            # The budget ran out before the first-seed reference run was made (or while it was):
            # the suite's tests are the second run's, each not run in the first.
            self.first["reference"] = fill(first or SuiteRun(variant="reference", hash_seed=FIRST_HASH_SEED),
                                            second.test_ids, lambda _: "not run: the grading budget ran out")
        for run in self.unweighed:  # wheats' runs in before the budget ran out, never weighed
            self.first.setdefault(run.variant, run)
        for run in self.held:  # came in before the budget ran out, never weighed
            self.first.setdefault(run.variant, self._explain(run))
        reference = self.first.get("reference")
        no_tests = reference is None or not reference.test_ids
        for variant in [] if no_tests else [*wheats, *mutants]:
            run = self.first.get(variant.id)
            if run is None or variant.kind is VariantKind.WHEAT:
                # A variant not run (no test was valid, or the budget ran out), or a wheat's
                # tests not run: each says why.
                empty = SuiteRun(variant=variant.id, hash_seed=FIRST_HASH_SEED)
                self.first[variant.id] = self._explain(run or empty, variant.kind)
        return Matrix(first=self.first, second=self.second, rechecks=tuple(self.rechecks), budget_stop=self.stop,
                      cpu_s=round(self.budget.spent, 3), runs=self.received,
                      more={v: tuple(runs) for v, runs in self.more.items()},
                      confirmations=UNDER_CHANCE if self.chancy else 1)


def run_matrix(
    *,
    layout: Layout,
    tests_dir: Path,
    variants: Sequence[Variant],
    limits: RunLimits,
    full_matrix: bool = False,
    launched: Launched | None = None,
    pool: WorkerPool | None = None,
    not_counted: Callable[[str], str | None] | None = None,
) -> Matrix:
    """Run the suite against the reference (under two hash seeds), then the wheats and the
    mutants, each stage only with the tests still worth running (see the module's docstring).

    Args:
        full_matrix: run every valid test on every mutant, instead of stopping each mutant's
            run at its first kill (staff regrades, calibration).
        launched: the two workers, already started for ``tests_dir`` (see
            :mod:`grader.run.launch`); started here (and closed) when None. Launched workers
            are killed when the runs are done; the caller closes them (:meth:`Launched.close`
            waits until they are gone and frees their sandbox users).
        pool: warm workers to run on instead (a batch, the service); ``launched`` must then
            be None.
        not_counted: why a test counts on no variant whatever its runs (a copy of a course
            test), None for one that may count: it is run on the reference only, and its cells
            elsewhere say why.

    Returns:
        The Matrix: ``first`` holds every variant's run (cells not run are NOT_RUN, with the
        reason); ``second`` the reference's run under the second hash seed and each mutant's
        confirming run (when a kill needed one); ``budget_stop`` where the budget ran out.
    """
    if pool is not None:
        if launched is not None:
            raise ValueError("a grading runs on its launched workers or on a pool's, not both")
        return pool.run_matrix(tests_dir=tests_dir, variants=variants, limits=limits, full_matrix=full_matrix,
                               not_counted=not_counted)
    matrix_run = MatrixRun(layout=layout, tests_dir=tests_dir, variants=variants, limits=limits,
                           full_matrix=full_matrix, launched=launched, not_counted=not_counted)
    try:
        return matrix_run.run()
    finally:
        matrix_run.release()
