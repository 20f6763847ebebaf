"""Runs a test suite against variants in a separate worker process, and back.

The grader never runs student code in its own process: :func:`run_suites` starts
``python -m grader.worker`` in a new session with a minimal environment and one BLAS thread,
sends it the job, and reads one :class:`~grader.models.SuiteRun` per line. Whatever the worker
does not report (it crashed, it hung) comes back as a crashed run with every test missing.
:func:`run_matrix` runs the reference twice under different hash seeds and confirms each
failure on a mutant with a second run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from grader.models import Outcome, SuiteRun, WorkerJob, WorkerRun
from grader.paths import Layout
from grader.variants import Variant, VariantKind

__all__ = ["Matrix", "RunLimits", "WorkerProcess", "run_matrix", "run_suites"]

FIRST_HASH_SEED = 1
SECOND_HASH_SEED = 2


@dataclass(frozen=True)
class RunLimits:
    """Time and size limits of one suite run."""

    run_timeout: float = 120.0
    test_timeout: float = 20.0
    memory_bytes: int = 2 * 1024**3
    jobs: int = field(default_factory=lambda: max(1, len(os.sched_getaffinity(0))))


def _worker_env(hash_seed: int) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONHASHSEED": str(hash_seed),
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
    return env


class WorkerProcess:
    """A worker started ahead of its job: it imports numpy, pytest and the reference while the
    grader is still busy, then runs the job :meth:`run` sends it.

    Args:
        layout: where the reference package is.
        tests_dir: the folder of test files.
        hash_seed: ``PYTHONHASHSEED`` of the worker.
        limits: time, memory and parallelism limits.
    """

    def __init__(self, *, layout: Layout, tests_dir: Path, hash_seed: int, limits: RunLimits) -> None:
        self.layout = layout
        self.tests_dir = tests_dir.resolve()
        self.hash_seed = hash_seed
        self.limits = limits
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_worker_env(hash_seed),
            cwd=str(self.tests_dir),
            start_new_session=True,
        )

    def run(self, runs: Sequence[WorkerRun]) -> list[SuiteRun]:
        """Send the job, wait for every result; results in the order asked.

        A run the worker never reported (it crashed, it hung) comes back as a crashed run.
        """
        job = WorkerJob(
            reference=str(self.layout.reference),
            tests=str(self.tests_dir),
            runs=list(runs),
            hash_seed=self.hash_seed,
            jobs=self.limits.jobs,
            run_timeout=self.limits.run_timeout,
            test_timeout=self.limits.test_timeout,
            memory_bytes=self.limits.memory_bytes,
        )
        waves = -(-len(runs) // max(1, self.limits.jobs))
        budget = self.limits.run_timeout * waves + 60.0
        try:
            stdout, stderr = self.process.communicate(job.model_dump_json().encode(), timeout=budget)
            problem = f"the worker exited with status {self.process.returncode}"
        except subprocess.TimeoutExpired:
            stdout, stderr = b"", b""
            problem = f"the worker passed its time limit of {budget:g} s"
        finally:
            self.close()

        reported: dict[str, SuiteRun] = {}
        for line in stdout.decode(errors="replace").splitlines():
            try:
                run = SuiteRun.model_validate_json(line)
            except ValueError:
                continue
            reported.setdefault(run.variant, run)
        detail = stderr.decode(errors="replace").strip().splitlines()[-1:] if stderr else []
        return [
            reported.get(run.variant)
            or SuiteRun(
                variant=run.variant,
                hash_seed=self.hash_seed,
                crashed=f"{problem} without reporting this run" + (f": {detail[0]}" if detail else ""),
            )
            for run in runs
        ]

    def close(self) -> None:
        """Kill the worker's whole session, whatever it left running."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def run_suites(
    *,
    layout: Layout,
    tests_dir: Path,
    runs: Sequence[WorkerRun],
    hash_seed: int,
    limits: RunLimits,
) -> list[SuiteRun]:
    """Run each requested suite run in one new worker process; results in the order asked."""
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
    """Run the suite against every variant, then the reference again under another hash
    seed and, for each mutant, the tests that failed on it once more.

    Returns:
        The Matrix; ``second`` holds the reference's second run under ``"reference"``.
    """
    # Both workers start now; the second imports and configures while the first runs.
    confirm = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=SECOND_HASH_SEED, limits=limits)
    try:
        first_runs = run_suites(
            layout=layout,
            tests_dir=tests_dir,
            runs=[WorkerRun(variant=v.id, source=v.source) for v in variants],
            hash_seed=FIRST_HASH_SEED,
            limits=limits,
        )
        first = {run.variant: run for run in first_runs}
        again: list[WorkerRun] = []
        for variant in variants:
            if variant.kind is VariantKind.REFERENCE:
                again.append(WorkerRun(variant=variant.id, source=variant.source))
                continue
            if variant.kind is not VariantKind.MUTANT:
                continue
            run = first[variant.id]
            failing = [r.test_id for r in run.results if r.outcome.kills]
            if failing and not run.crashed:
                again.append(WorkerRun(variant=variant.id, source=variant.source, select=failing))
            elif failing:  # a crashed run is repeated whole: its missing tests need a second look
                again.append(WorkerRun(variant=variant.id, source=variant.source))
        second_runs = confirm.run(again)
    finally:
        confirm.close()
    return Matrix(first=first, second={run.variant: run for run in second_runs})
