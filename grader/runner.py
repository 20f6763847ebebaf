"""Runs a test suite against variants in a separate worker process, and back.

The grader never runs student code in its own process: :func:`run_suites` starts
``python -m grader.worker`` in the sandbox (:mod:`grader.sandbox`: its own uid, rlimits, a new
session, a private copy of the tests, seccomp and bubblewrap where available) with a minimal
environment and one BLAS thread, sends it the job, and reads one :class:`~grader.models.SuiteRun`
per line, up to a byte cap. Whatever the worker does not report (it crashed, it hung) comes
back as a crashed run with every test missing.
:func:`run_matrix` runs the reference twice under different hash seeds and confirms each
failure on a mutant with a second run.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from grader.models import Outcome, SuiteRun, WorkerJob, WorkerRun
from grader.paths import Layout
from grader.sandbox import SandboxLimits, SandboxMode, start_worker
from grader.variants import Variant, VariantKind

__all__ = ["Matrix", "RunLimits", "WorkerProcess", "run_matrix", "run_suites"]

FIRST_HASH_SEED = 1
SECOND_HASH_SEED = 2


@dataclass(frozen=True)
class RunLimits:
    """Time and size limits of one suite run, and the sandbox it runs in.

    ``sandbox`` is :attr:`SandboxMode.AUTO` by default: a machine without the always-on layers
    refuses to run (:class:`~grader.sandbox.SandboxUnavailable`) unless told ``none``.
    """

    run_timeout: float = 120.0
    test_timeout: float = 20.0
    memory_bytes: int = 2 * 1024**3
    jobs: int = field(default_factory=lambda: max(1, len(os.sched_getaffinity(0))))
    sandbox: SandboxMode = SandboxMode.AUTO
    sandbox_limits: SandboxLimits = SandboxLimits()


def _worker_env(hash_seed: int, layout: Layout) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONHASHSEED": str(hash_seed),
        # Only pytest's own plugins: a plugin installed beside the grader (hypothesis,
        # schemathesis, ...) would cost start-up time and could change how tests run.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "LANG": "C.UTF-8",
    }
    # OpenBLAS needs these on some processors to compute right; keep them if set.
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if name in os.environ:
            env[name] = os.environ[name]
    # The course tests find the goldens beside themselves; a sandbox may run them from a copy.
    if layout.goldens.is_file():
        env["MUTAGRADE_GOLDENS"] = str(layout.goldens)
    return env


class WorkerProcess:
    """A worker started ahead of its job, in its sandbox: it imports numpy, pytest and the
    reference while the grader is still busy, then runs the job :meth:`run` sends it.

    Args:
        layout: where the reference package is.
        tests_dir: the folder of test files.
        hash_seed: ``PYTHONHASHSEED`` of the worker.
        limits: time, memory and parallelism limits, and the sandbox mode.

    Raises:
        SandboxUnavailable: if ``limits.sandbox`` needs a layer this machine lacks.
        SandboxError: if the sandbox cannot be set up for these tests.
    """

    def __init__(self, *, layout: Layout, tests_dir: Path, hash_seed: int, limits: RunLimits) -> None:
        self.layout = layout
        self.tests_dir = tests_dir.resolve()
        self.hash_seed = hash_seed
        self.limits = limits
        fixtures = [layout.goldens.parent] if layout.goldens.is_file() else []
        self.sandbox = start_worker(
            mode=limits.sandbox,
            tests_dir=self.tests_dir,
            package_dir=layout.package_dir,
            readonly=fixtures,
            env=_worker_env(hash_seed, layout),
            limits=limits.sandbox_limits,
        )
        self.process = self.sandbox.process

    def run(self, runs: Sequence[WorkerRun]) -> list[SuiteRun]:
        """Send the job and wait for every result.

        Returns:
            The first attempt of each requested run, in the order asked (a run the worker
            never reported, because it crashed or hung, comes back as a crashed run), then
            the confirming attempts the worker made, in the order they finished.
        """
        attempts = sum(2 if run.confirm else 1 for run in runs)
        waves = -(-attempts // max(1, self.limits.jobs))
        budget = self.limits.run_timeout * waves + 60.0
        job = WorkerJob(
            reference=str(self.layout.package_dir),
            tests=str(self.sandbox.tests),
            runs=list(runs),
            hash_seed=self.hash_seed,
            jobs=self.limits.jobs,
            run_timeout=self.limits.run_timeout,
            test_timeout=self.limits.test_timeout,
            memory_bytes=self.limits.memory_bytes,
            sandbox=self.sandbox.settings(budget=budget),
        )
        try:
            output = self.sandbox.communicate(job.model_dump_json().encode(), timeout=budget)
        finally:
            self.close()

        first: dict[str, SuiteRun] = {}
        confirming: list[SuiteRun] = []
        for line in output.stdout.decode(errors="replace").splitlines():
            try:
                run = SuiteRun.model_validate_json(line)
            except ValueError:
                continue
            if run.attempt == 1:
                first.setdefault(run.variant, run)
            else:
                confirming.append(run)
        stderr = output.stderr.decode(errors="replace").strip().splitlines()
        detail = stderr[-1:]
        missing = f"{output.problem} without reporting this run" + (f": {detail[0]}" if detail else "")
        return [
            first.get(run.variant) or SuiteRun(variant=run.variant, hash_seed=self.hash_seed, crashed=missing)
            for run in runs
        ] + confirming

    def close(self) -> None:
        """Kill the worker's whole session and every process of its sandbox user; free the
        user and remove the private copy of the tests."""
        self.sandbox.close()


def run_suites(
    *,
    layout: Layout,
    tests_dir: Path,
    runs: Sequence[WorkerRun],
    hash_seed: int,
    limits: RunLimits,
) -> list[SuiteRun]:
    """Run each requested suite run in one new worker process; first attempts, in the order
    asked, then any confirming attempts."""
    worker = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=hash_seed, limits=limits)
    return worker.run(runs)


@dataclass(frozen=True)
class Matrix:
    """Every test on every variant: a first run of all, and confirming second runs."""

    first: dict[str, SuiteRun]
    second: dict[str, SuiteRun]

    @property
    def test_ids(self) -> list[str]:
        reference = self.first["reference"]
        return reference.test_ids

    def outcome(self, test_id: str, variant: str) -> Outcome:
        return self.first[variant].outcome(test_id)

    def confirmed_failure(self, test_id: str, variant: str) -> bool:
        """Whether ``test_id`` failed on ``variant`` in both runs."""
        first = self.first[variant].outcome(test_id)
        if not first.kills:
            return False
        second = self.second.get(variant)
        return second is not None and second.outcome(test_id).kills


def run_matrix(
    *,
    layout: Layout,
    tests_dir: Path,
    variants: Sequence[Variant],
    limits: RunLimits,
) -> Matrix:
    """Run the suite against every variant, the reference again under another hash seed,
    and, for each mutant, the tests that failed on it once more.

    Returns:
        The Matrix: ``first`` holds every variant's run; ``second`` the reference's run under
        the second hash seed and each mutant's confirming run (when anything failed on it).
    """
    # Two workers under two hash seeds: the second runs only the reference again, alongside
    # the first, which runs every variant and confirms each failure on a mutant as it comes.
    seed_two = WorkerProcess(
        layout=layout, tests_dir=tests_dir, hash_seed=SECOND_HASH_SEED, limits=replace(limits, jobs=1)
    )
    try:
        seed_one = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=FIRST_HASH_SEED, limits=limits)
    except BaseException:
        seed_two.close()  # its sandbox user and copy are freed when the other cannot start
        raise
    reference = next(v for v in variants if v.kind is VariantKind.REFERENCE)
    with ThreadPoolExecutor(max_workers=1) as pool:
        again = pool.submit(seed_two.run, [WorkerRun(variant=reference.id, source=reference.source)])
        try:
            runs = seed_one.run(
                [
                    WorkerRun(variant=v.id, source=v.source, confirm=v.kind is VariantKind.MUTANT)
                    for v in variants
                ]
            )
        finally:
            seed_one.close()
        reference_again = again.result()
    first = {run.variant: run for run in runs if run.attempt == 1}
    second = {run.variant: run for run in runs if run.attempt == 2}
    second[reference.id] = reference_again[0]
    return Matrix(first=first, second=second)
