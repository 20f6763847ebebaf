"""Runs a test suite against variants in separate worker processes, and back.

The grader never runs student code in its own process: a :class:`WorkerProcess` is
``python -m grader.worker`` in the sandbox (:mod:`grader.sandbox`: its own uid, rlimits, a new
session, a private copy of the tests, seccomp and bubblewrap where available) with a minimal
environment and one BLAS thread. Runs are sent to it as they are decided (:mod:`grader.core.protocol`:
each run's source goes to the run's own child, never to the worker) and results come back,
one :class:`~grader.core.models.SuiteRun` per line, up to a byte cap. Whatever the worker does not
report (it crashed, it hung) comes back as a crashed run with every test missing.

How a grading uses its workers (the stages, limits, budget) is :mod:`grader.run.scheduler`.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from grader.core.assignment import Assignment, Limits
from grader.core.caps import MAX_TESTS
from grader.run.codecache import variant_code
from grader.run.launch import launch_worker
from grader.core.models import SuiteRun, WorkerRun
from grader.core.paths import Layout
from grader.sandbox.base import SandboxLimits, SandboxMode
from grader.sandbox.process import SandboxedWorker, close_workers
from grader.core.contract import read_contract
from grader.core.protocol import Budget, Contract, JobSettings, RunHeader, WorkerSandbox, encode_frame

__all__ = [
    "GradingBudget",
    "RunLimits",
    "WorkerLost",
    "WorkerProcess",
    "WorkerResult",
    "close_all",
    "job_settings",
    "run_suites",
    "silence_limit",
]

_STDERR_TAIL = 64 * 1024
_SILENCE_SLACK = 30.0  # seconds past a run's own limit before a silent worker is given up
_POOL_WORKER_CPU = 3600.0  # CPU seconds of a pooled worker's own process (its children have their own)
# Seconds past the wall-clock budget before a worker still running is closed from here. A run
# is sent with what is left, but its worker counts that from when it reads the run: the first
# runs of a worker just started are read once it has imported what it needs, about a second on.
_WALL_SLACK = 1.0


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class RunLimits:
    """The assignment's limits (:class:`~grader.core.assignment.Limits`: time, memory, budgets),
    and how suite runs are made under them: children at a time, the sandbox and its own limits,
    whether the tests' conftest is loaded.

    ``limits`` has no default: every command takes its assignment's (:meth:`of`), so a test is
    judged under the same limit by ``tdd``, ``check``, ``calibrate``, grading and the journal's
    replay. ``sandbox`` is :attr:`SandboxMode.AUTO` by default: a machine without the always-on
    layers refuses to run (:class:`~grader.sandbox.base.SandboxUnavailable`) unless told ``none``.
    """

    limits: Limits
    jobs: int = field(default_factory=_cores)
    sandbox: SandboxMode = SandboxMode.AUTO
    sandbox_limits: SandboxLimits = SandboxLimits()
    conftests: bool = False  # load the tests' conftest.py (the course's own tests only)
    max_tests: int | None = MAX_TESTS  # a run collecting more tests runs none (grader.core.caps)

    @classmethod
    def of(
        cls,
        assignment: Assignment,
        *,
        jobs: int | None = None,
        sandbox: SandboxMode | str = SandboxMode.AUTO,
        conftests: bool = False,
    ) -> RunLimits:
        """The assignment's limits, runs made ``jobs`` at a time (default: one per core) in
        ``sandbox``; ``conftests`` for the course's own tests only."""
        return cls(limits=assignment.limits, jobs=jobs or _cores(), sandbox=SandboxMode(sandbox), conftests=conftests)


def job_settings(
    limits: RunLimits,
    *,
    reference: str,
    tests: str,
    hash_seed: int,
    isolate: bool = False,
    private_tmp: bool = False,
    sandbox: WorkerSandbox | None = None,
    implementation: str | None = None,
    contract: Contract | None = None,
) -> JobSettings:
    """The worker's job: every limit in it comes from ``limits`` (the assignment's), here only."""
    bound = limits.limits
    return JobSettings(
        reference=reference,
        tests=tests,
        hash_seed=hash_seed,
        jobs=limits.jobs,
        run_timeout=bound.run_timeout_s,
        test_timeout=bound.test_timeout_s,
        collect_timeout=bound.test_timeout_s,
        memory_bytes=bound.memory_bytes,
        # The grading's two workers share its memory bound half and half.
        memory_share=None if bound.budget_memory_bytes is None else bound.budget_memory_bytes // 2,
        memory_bound=bound.budget_memory_bytes or 0,
        max_tests=limits.max_tests,
        conftests=limits.conftests,
        isolate=isolate,
        private_tmp=private_tmp,
        sandbox=sandbox if sandbox is not None else WorkerSandbox(),
        implementation=implementation,
        contract=contract if contract is not None else Contract(),
    )


class GradingBudget:
    """A grading's CPU and wall-clock budgets (the assignment's ``budget_cpu_s`` and
    ``budget_wall_s``) as its runs spend them: the journal's replay first, then the matrix
    (:func:`grader.run.scheduler.run_matrix`), which gets what is left (:meth:`remaining`).

    The wall clock starts with the first run sent (:meth:`start`); every run is sent with what
    is left of both, and the worker stops it there.
    """

    def __init__(self, limits: Limits) -> None:
        self.cpu = limits.budget_cpu_s
        self.wall = limits.budget_wall_s
        self.spent = 0.0  # CPU seconds of every run so far
        self.deadline: float | None = None
        self.stop: Budget | None = None  # which budget ran out, once one has

    def start(self) -> None:
        """The first run is sent: the wall clock starts."""
        if self.deadline is None and self.wall is not None:
            self.deadline = time.monotonic() + self.wall

    def spent_before(self, *, wall_s: float, cpu_s: float) -> None:
        """Count what runs of this grading spent before it was handed this budget (a journal
        replayed ahead of the grading, as a batch does)."""
        self.start()
        if self.deadline is not None:
            self.deadline -= wall_s
        self.spent += cpu_s

    def cpu_left(self) -> float | None:
        return None if self.cpu is None else max(0.0, self.cpu - self.spent)

    def wall_left(self) -> float | None:
        if self.deadline is None:
            return self.wall
        return max(0.0, self.deadline - time.monotonic())

    def charge(self, run: SuiteRun) -> Budget | None:
        """Count ``run``'s CPU time; returns the budget that ran out, if one has."""
        self.spent += run.cpu_s
        if self.stop is None and run.budget_exceeded:
            self.stop = run.budget or Budget.CPU
        return self.exhausted()

    def exhausted(self) -> Budget | None:
        """The budget that has run out (None while both last)."""
        if self.stop is None:
            if self.wall_left() == 0.0:
                self.stop = Budget.WALL
            elif self.cpu_left() == 0.0:
                self.stop = Budget.CPU
        return self.stop

    def describe(self, kind: Budget) -> str:
        """The budget in words, as the assignment sets it."""
        if kind is Budget.WALL:
            return f"the grading's wall-clock budget of {self.wall or 0.0:g} s"
        return f"the grading's budget of {self.cpu or 0.0:g} CPU s"

    def remaining(self, limits: Limits) -> Limits:
        """``limits`` with the budgets that are left (as they are, while nothing was spent)."""
        return limits.model_copy(update={"budget_cpu_s": self.cpu_left(), "budget_wall_s": self.wall_left()})

    def cut(self, run: WorkerRun, hash_seed: int, test: str = "") -> SuiteRun:
        """``run``, not run (or stopped before it reported) because a budget ran out."""
        kind = self.exhausted() or Budget.WALL
        return SuiteRun(variant=run.variant, hash_seed=hash_seed, purpose=run.purpose,
                        crashed=f"not run to its end: {self.describe(kind)} ran out",
                        budget_exceeded=test or "(not run)", budget=kind)


class WorkerLost(RuntimeError):
    """A worker died or went silent with runs it never reported: nothing of them is evidence
    about the tests (an internal error, graded again), unlike a run whose own processes died."""


@dataclass(frozen=True)
class WorkerResult:
    """One run as a worker hands it back on its results queue: the worker, the run's result,
    and whether the worker was lost before it reported the run (the result then says how)."""

    worker: WorkerProcess
    run: SuiteRun
    lost: bool = False  # the worker is gone without reporting this run (``run.crashed`` says how)


class WorkerProcess:
    """A worker started ahead of its runs, in its sandbox: it imports numpy, pytest and the
    ``tinyllm`` package while the grader is still busy, then runs whatever :meth:`submit`
    sends it, and reports each result to ``results`` (its own queue unless one is shared).

    Args:
        layout: where the reference's ``tinyllm`` package is, and a student's own package
            (``layout.implementation``) when the runs are of theirs: each run's implementation
            process then imports that package, and the test process holds the reference's
            framework and the stand-in, as when variants are graded.
        tests_dir: the folder of test files.
        hash_seed: ``PYTHONHASHSEED`` of the worker.
        limits: the assignment's limits, parallelism and the sandbox mode.
        results: where results go, as ``WorkerResult`` items (several workers may share one).
        hide_source: hide the package's reference modules from the runs (when grading
            variants of the reference: a run then has nothing to compare its variant with).
        started: the worker, already started by :func:`grader.run.launch.launch_worker` (for
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
        results: queue.Queue[WorkerResult] | None = None,
        hide_source: bool = False,
        started: SandboxedWorker | None = None,
    ) -> None:
        self.layout = layout
        self.contract = read_contract(layout.contract_stub, layout.module_under_test)
        # Grading our variants, or running a student's own package: the implementation in a
        # process of its own, the tests beside a stand-in (no reference module in sight either way).
        hide_source = hide_source or layout.implementation is not None
        self.isolate = hide_source
        self.tests_dir = tests_dir.resolve() if tests_dir is not None else None
        self.hash_seed = hash_seed
        self.limits = limits
        self.results: queue.Queue[WorkerResult] = results if results is not None else queue.Queue()
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
        self._gone = ""  # why the worker stopped answering, once it has
        self._staged: Path | None = None
        self.closed = False
        if self.tests_dir is not None:
            # A generous CPU limit for the worker process itself (its children have their own).
            cpu = limits.limits.budget_cpu_s
            budget = cpu if cpu is not None else limits.limits.run_timeout_s * 8
            self._outbox.put(self._job(self.sandbox.tests, limits, worker_cpu=budget + 60.0).to_frame())
        self._threads = [
            threading.Thread(target=self._write_loop, daemon=True),
            threading.Thread(target=self._read_loop, daemon=True),
            threading.Thread(target=self._stderr_loop, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _job(self, tests: Path, limits: RunLimits, *, worker_cpu: float) -> JobSettings:
        return job_settings(
            limits, reference=str(self.layout.reference), tests=str(tests), hash_seed=self.hash_seed,
            isolate=self.isolate, private_tmp=self.sandbox.workdir is not None,
            sandbox=self.sandbox.settings(budget=worker_cpu),
            implementation=str(self.layout.implementation) if self.layout.implementation is not None else None,
            contract=self.contract,
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

    def submit(self, run: WorkerRun, *, cpu_budget: float | None = None, wall_budget: float | None = None,
               timeout_floor: float | None = None) -> None:
        """Send one run: its frame names it by a number only, and its source follows for the
        run's child to read, then its code compiled ahead (:mod:`grader.run.codecache`)."""
        source = run.source.encode("utf-8")
        code = variant_code(run.source, self.contract.filename) or b""
        with self._lock:
            if self._finished:
                raise RuntimeError("the worker was told no more runs would come")
            if self._gone:  # nobody will answer: the run comes back crashed at once
                self.results.put(WorkerResult(self, self._lost(run, self._gone), lost=True))
                return
            run_id = self._next_id
            self._next_id += 1
            self._outstanding[run_id] = run
        header = RunHeader(
            run_id=run_id,
            source_bytes=len(source),
            code_bytes=len(code),
            select=run.select,
            tests=run.tests,
            time_limits=run.time_limits,
            stop_at_first_kill=run.stop_at_first_kill,
            cpu_budget=cpu_budget,
            wall_budget=wall_budget,
            timeout_floor=timeout_floor if timeout_floor is not None else self.limits.limits.floor_s,
        )
        self._outbox.put(header.to_frame() + source + code)

    def finish(self) -> None:
        """Say that no more runs will come: the worker exits once the last one has ended."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        self._outbox.put(encode_frame({"end": True}))
        self._outbox.put(None)

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
        # Each line is one run's result, bounded by the worker (a run's tests, messages and
        # collection errors are capped there); the cap is per line, so a pool's worker may
        # report any number of runs.
        cap = self.limits.sandbox_limits.output_bytes
        problem = ""
        while line := stdout.readline(cap + 1):
            if len(line) > cap:
                problem = f"the worker wrote a result of more than {cap / 1024**2:g} MiB and was stopped"
                self.close()
                break
            run = self._parse(line)
            if run is not None:
                self.results.put(WorkerResult(self, run))
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
            return SuiteRun.model_validate({**data, "variant": run.variant, "purpose": run.purpose})
        except ValueError:
            return self._lost(run, "the worker reported this run in a malformed line")

    def _report_lost(self, problem: str) -> None:
        stderr = self._stderr.decode(errors="replace").strip().splitlines()
        detail = f": {stderr[-1]}" if stderr else ""
        with self._lock:
            self._gone = f"{problem} without reporting this run{detail}"
            lost = list(self._outstanding.values())
            self._outstanding.clear()
        for run in lost:
            self.results.put(WorkerResult(self, self._lost(run, self._gone), lost=True))

    def _lost(self, run: WorkerRun, why: str) -> SuiteRun:
        return SuiteRun(variant=run.variant, hash_seed=self.hash_seed, purpose=run.purpose, crashed=why)

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
            got = self.collect(len(runs), timeout=silence_limit(self.limits))
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


def close_all(workers: Iterable[WorkerProcess]) -> None:
    """Close several workers, all going down at once (:func:`grader.sandbox.process.close_workers`)."""
    workers = list(workers)
    for worker in workers:
        worker.closed = True
    close_workers(w.sandbox for w in workers)


def silence_limit(limits: RunLimits) -> float:
    """How long (seconds) a worker may send nothing while it has runs in hand before it is taken
    as lost: a run's time limit and some slack."""
    return limits.limits.run_timeout_s + _SILENCE_SLACK


def run_suites(
    *,
    layout: Layout,
    tests_dir: Path,
    runs: Sequence[WorkerRun],
    hash_seed: int,
    limits: RunLimits,
    budget: GradingBudget | None = None,
) -> list[SuiteRun]:
    """Run each requested suite run in one new worker process.

    ``layout.implementation`` names a student's own package: each run's implementation
    process imports it, and its tests run beside the stand-in, on the reference's framework.
    With a ``budget``, runs are sent as slots free up, each with what is left of it; once one
    runs out, what is running is stopped and nothing more is sent.

    Returns:
        One result per run, in the order asked (a run the worker never reported, because it
        crashed or hung, comes back as a crashed run; one the budget stopped or never let
        start has ``budget`` set).
    """
    if budget is not None and budget.exhausted():
        return [budget.cut(run, hash_seed) for run in runs]  # no worker started for nothing
    worker = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=hash_seed, limits=limits)
    if budget is None:
        return worker.run(runs)
    return _run_within(worker, runs, budget)


def _run_within(worker: WorkerProcess, runs: Sequence[WorkerRun], budget: GradingBudget) -> list[SuiteRun]:
    """Send ``runs`` to ``worker`` as its slots free up, each with what is left of ``budget``,
    until it runs out; then close the worker (what it was running comes back cut)."""
    slots = max(1, worker.limits.jobs)
    got: dict[int, SuiteRun] = {}
    sent: dict[str, list[int]] = {}  # variant -> the indexes of its runs in flight, oldest first
    count = 0
    budget.start()
    try:
        while True:
            while count < len(runs) and count - len(got) < slots and not budget.exhausted():
                run = runs[count]
                worker.submit(run, cpu_budget=budget.cpu_left(), wall_budget=budget.wall_left())
                sent.setdefault(run.variant, []).append(count)
                count += 1
            if len(got) == count:
                break  # every run sent is in, and no more will be
            timeout = silence_limit(worker.limits)
            wall = budget.wall_left()
            if wall is not None:
                timeout = min(timeout, wall + _WALL_SLACK)
            try:
                item = worker.results.get(timeout=timeout)
            except queue.Empty:
                budget.exhausted()
                worker.close()  # silent too long: what it never reported comes back lost
                continue
            index = sent[item.run.variant].pop(0)
            if item.lost and budget.exhausted():
                got[index] = budget.cut(runs[index], worker.hash_seed, "(stopped with the grading)")
                continue
            got[index] = item.run
            if budget.charge(item.run):
                worker.close()
    finally:
        worker.finish()
        worker.close()
    return [got[i] if i in got else budget.cut(run, worker.hash_seed) for i, run in enumerate(runs)]
