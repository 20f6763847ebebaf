"""Runs a test suite against variants in separate worker processes, and back.

The grader never runs student code in its own process: a :class:`WorkerProcess` is
``python -m grader.worker`` in the sandbox (:mod:`grader.sandbox`: its own uid, rlimits, a new
session, a private copy of the tests, seccomp and bubblewrap where available) with a minimal
environment and one BLAS thread. Runs are sent to it as they are decided (:mod:`grader.wire`:
each run's source goes to the run's own child, never to the worker) and results come back,
one :class:`~grader.models.SuiteRun` per line, up to a byte cap. Whatever the worker does not
report (it crashed, it hung) comes back as a crashed run with every test missing.

:func:`run_matrix` grades in stages, so that a broken or hostile suite costs little: the
reference first (twice, under two hash seeds); then the wheats, only with the tests that passed
on the reference; then the mutants, only with the tests that passed on the reference and every
wheat, each under a time limit derived from the test's time on the reference, and each mutant's
run stopping at its first kill (unless the full matrix is asked for). A kill by a time-out, or
by a run that died, is confirmed by running that test again; a failed assertion is not (the
second reference run already guards against chance). A CPU budget bounds the whole grading.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from grader.models import Outcome, SuiteRun, TestOutcome, WorkerRun
from grader.paths import Layout
from grader.launch import FIRST_HASH_SEED, SECOND_HASH_SEED, Launched, launch_worker
from grader.sandbox import SandboxedWorker, SandboxLimits, SandboxMode
from grader.variants import Variant, VariantKind
from grader.wire import JobSettings, RunHeader, encode_frame

__all__ = ["BudgetStop", "Matrix", "RunLimits", "WorkerPool", "WorkerProcess", "run_matrix", "run_suites"]

_STDERR_TAIL = 64 * 1024
_SILENCE_SLACK = 30.0  # seconds past a run's own limit before a silent worker is given up
_POOL_WORKER_CPU = 3600.0  # CPU seconds of a pooled worker's own process (its children have their own)


@dataclass(frozen=True)
class RunLimits:
    """Time and size limits of suite runs, and the sandbox they run in.

    ``sandbox`` is :attr:`SandboxMode.AUTO` by default: a machine without the always-on layers
    refuses to run (:class:`~grader.sandbox.SandboxUnavailable`) unless told ``none``.

    A test's limit is ``test_timeout`` on the reference; on wheats and mutants it is
    ``max(timeout_floor, timeout_factor × its time on the reference)``, at most
    ``test_timeout``. Once a test of a run has timed out, later tests of that run get at most
    ``timeout_floor``. ``cpu_budget`` (CPU seconds of every run together, None for no bound)
    stops a grading that would cost more.
    """

    run_timeout: float = 120.0
    test_timeout: float = 20.0
    memory_bytes: int = 2 * 1024**3
    jobs: int = field(default_factory=lambda: max(1, len(os.sched_getaffinity(0))))
    sandbox: SandboxMode = SandboxMode.AUTO
    sandbox_limits: SandboxLimits = SandboxLimits()
    timeout_factor: float = 10.0
    timeout_floor: float = 1.0
    cpu_budget: float | None = None
    conftests: bool = False  # load the tests' conftest.py (the course's own tests only)


@dataclass(frozen=True)
class _Result:
    worker: WorkerProcess
    run: SuiteRun


class WorkerProcess:
    """A worker started ahead of its runs, in its sandbox: it imports numpy, pytest and the
    ``tinyllm`` package while the grader is still busy, then runs whatever :meth:`submit`
    sends it, and reports each result to ``results`` (its own queue unless one is shared).

    Args:
        layout: where the ``tinyllm`` package is.
        tests_dir: the folder of test files.
        hash_seed: ``PYTHONHASHSEED`` of the worker.
        limits: time, memory and parallelism limits, and the sandbox mode.
        results: where results go, as ``_Result`` items (several workers may share one).
        hide_source: hide the package's own ``rnn/gru.py`` from the runs (when grading
            variants of the reference: a run then has nothing to compare its variant with).
        started: the worker, already started by :func:`grader.launch.launch_worker` (for
            these tests and this hash seed); started here when None.

    Raises:
        SandboxUnavailable: if ``limits.sandbox`` needs a layer this machine lacks.
        SandboxError: if the sandbox cannot be set up for these tests.
    """

    def __init__(
        self,
        *,
        layout: Layout,
        tests_dir: Path | None,
        hash_seed: int,
        limits: RunLimits,
        results: queue.Queue[_Result] | None = None,
        hide_source: bool = False,
        started: SandboxedWorker | None = None,
    ) -> None:
        self.layout = layout
        self.tests_dir = tests_dir.resolve() if tests_dir is not None else None
        self.hash_seed = hash_seed
        self.limits = limits
        self.results: queue.Queue[_Result] = results if results is not None else queue.Queue()
        self.sandbox = started or launch_worker(
            layout=layout, tests_dir=self.tests_dir, hash_seed=hash_seed, mode=limits.sandbox,
            limits=limits.sandbox_limits, hide_source=hide_source,
        )
        self.process = self.sandbox.process
        self._lock = threading.Lock()
        self._outstanding: dict[int, WorkerRun] = {}
        self._next_id = 0
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._stderr = bytearray()
        self._finished = False
        self._staged: Path | None = None
        self.closed = False
        if self.tests_dir is not None:
            # A generous CPU limit for the worker process itself (its children have their own).
            budget = limits.cpu_budget if limits.cpu_budget is not None else limits.run_timeout * 8
            self._outbox.put(self._job(self.sandbox.tests, limits, worker_cpu=budget + 60.0).to_frame())
        self._threads = [
            threading.Thread(target=self._write_loop, daemon=True),
            threading.Thread(target=self._read_loop, daemon=True),
            threading.Thread(target=self._stderr_loop, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _job(self, tests: Path, limits: RunLimits, *, worker_cpu: float) -> JobSettings:
        return JobSettings(
            reference=str(self.layout.package_dir),
            tests=str(tests),
            hash_seed=self.hash_seed,
            jobs=limits.jobs,
            run_timeout=limits.run_timeout,
            test_timeout=limits.test_timeout,
            memory_bytes=limits.memory_bytes,
            conftests=limits.conftests,
            private_tmp=self.sandbox.workdir is not None,
            sandbox=self.sandbox.settings(budget=worker_cpu),
        )

    # ------------------------------------------------------------------ sending
    def begin(self, tests_dir: Path, limits: RunLimits) -> None:
        """For a worker started with no tests (one of a :class:`WorkerPool`): stage the next
        submission and send its job. Call only once every run of the last one has come back.

        Raises:
            SandboxError: if the submission holds more than the sandbox allows.
        """
        self.end()
        self.limits = replace(limits, jobs=self.limits.jobs)
        self._staged = self.sandbox.stage(tests_dir)
        self._outbox.put(self._job(self._staged, self.limits, worker_cpu=_POOL_WORKER_CPU).to_frame())

    def end(self) -> None:
        """Remove the staged submission, if any (the next one never sees it)."""
        if self._staged is not None:
            self.sandbox.unstage(self._staged)
            self._staged = None

    def submit(self, run: WorkerRun, *, cpu_budget: float | None = None, timeout_floor: float | None = None) -> None:
        """Send one run: its frame names it by a number only, and its source follows for the
        run's child to read."""
        source = run.source.encode("utf-8")
        with self._lock:
            if self._finished:
                raise RuntimeError("the worker was told no more runs would come")
            run_id = self._next_id
            self._next_id += 1
            self._outstanding[run_id] = run
        header = RunHeader(
            run_id=run_id,
            source_bytes=len(source),
            select=run.select,
            tests=run.tests,
            time_limits=run.time_limits,
            stop_at_first_kill=run.stop_at_first_kill,
            brief=run.brief,
            cpu_budget=cpu_budget,
            timeout_floor=timeout_floor if timeout_floor is not None else self.limits.timeout_floor,
        )
        self._outbox.put(header.to_frame() + source)

    def finish(self) -> None:
        """Say that no more runs will come: the worker exits once the last one has ended."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        self._outbox.put(encode_frame({"end": True}))
        self._outbox.put(None)

    @property
    def outstanding(self) -> int:
        with self._lock:
            return len(self._outstanding)

    def _write_loop(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None  # noqa: S101 - started with pipes
        try:
            while (data := self._outbox.get()) is not None:
                stdin.write(data)
                stdin.flush()
            stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the worker is gone: its reader reports every outstanding run

    # ------------------------------------------------------------------ receiving
    def _read_loop(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None  # noqa: S101
        cap = self.limits.sandbox_limits.output_bytes
        seen = 0
        problem = ""
        for line in stdout:
            seen += len(line)
            if seen > cap:
                problem = f"the worker wrote more than {cap / 1024**2:g} MiB of results and was stopped"
                self.close()
                break
            run = self._parse(line)
            if run is not None:
                self.results.put(_Result(self, run))
        if not problem:
            try:
                code = self.process.wait(timeout=5.0)
            except Exception:  # noqa: BLE001 - still running after closing its output: stop it
                self.close()
                code = self.process.returncode
            problem = f"the worker exited with status {code}"
        self._report_lost(problem)

    def _parse(self, line: bytes) -> SuiteRun | None:
        try:
            data = json.loads(line)
            run_id = data.pop("run_id")
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        with self._lock:
            run = self._outstanding.pop(run_id, None) if isinstance(run_id, int) else None
        if run is None:
            return None
        try:
            return SuiteRun.model_validate({**data, "variant": run.variant, "attempt": run.attempt})
        except ValueError:
            return SuiteRun(variant=run.variant, hash_seed=self.hash_seed, attempt=run.attempt,
                            crashed="the worker reported this run in a malformed line")

    def _report_lost(self, problem: str) -> None:
        stderr = self._stderr.decode(errors="replace").strip().splitlines()
        detail = f": {stderr[-1]}" if stderr else ""
        with self._lock:
            lost = list(self._outstanding.values())
            self._outstanding.clear()
        for run in lost:
            crashed = f"{problem} without reporting this run{detail}"
            self.results.put(_Result(self, SuiteRun(variant=run.variant, hash_seed=self.hash_seed,
                                                    attempt=run.attempt, crashed=crashed)))

    def _stderr_loop(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None  # noqa: S101
        for chunk in iter(lambda: stderr.read1(65536), b""):
            self._stderr += chunk
            del self._stderr[:-_STDERR_TAIL]

    def collect(self, count: int, *, timeout: float) -> list[SuiteRun]:
        """The next ``count`` results of this worker; a worker silent for ``timeout`` seconds
        is stopped, and what it never reported comes back crashed."""
        got: list[SuiteRun] = []
        while len(got) < count:
            try:
                item = self.results.get(timeout=timeout)
            except queue.Empty:
                self.close()
                continue
            got.append(item.run)
        return got

    def run(self, runs: Sequence[WorkerRun]) -> list[SuiteRun]:
        """Send every run, say no more will come, wait for them all and close the worker.

        Returns:
            One result per run, in the order asked (a run the worker never reported, because
            it crashed or hung, comes back as a crashed run).
        """
        try:
            for run in runs:
                self.submit(run)
            self.finish()
            got = self.collect(len(runs), timeout=_silence_limit(self.limits))
        finally:
            self.close()
        by_variant: dict[str, list[SuiteRun]] = {}
        for result in got:
            by_variant.setdefault(result.variant, []).append(result)
        return [by_variant[run.variant].pop(0) for run in runs]

    def close(self) -> None:
        """Kill the worker's whole session and every process of its sandbox user; free the
        user and remove the private copy of the tests."""
        self.closed = True
        self.sandbox.close()


def _silence_limit(limits: RunLimits) -> float:
    return limits.run_timeout + _SILENCE_SLACK


def run_suites(
    *,
    layout: Layout,
    tests_dir: Path,
    runs: Sequence[WorkerRun],
    hash_seed: int,
    limits: RunLimits,
) -> list[SuiteRun]:
    """Run each requested suite run in one new worker process.

    Returns:
        One result per run, in the order asked (a run the worker never reported, because it
        crashed or hung, comes back as a crashed run).
    """
    worker = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=hash_seed, limits=limits)
    return worker.run(runs)


# --------------------------------------------------------------------------- the matrix
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
