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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
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
        """Send the job and wait for every result.

        Returns:
            The first attempt of each requested run, in the order asked (a run the worker
            never reported, because it crashed or hung, comes back as a crashed run), then
            the confirming attempts the worker made, in the order they finished.
        """
        job = WorkerJob(
            reference=str(self.layout.package_dir),
            tests=str(self.tests_dir),
            runs=list(runs),
            hash_seed=self.hash_seed,
            jobs=self.limits.jobs,
            run_timeout=self.limits.run_timeout,
            test_timeout=self.limits.test_timeout,
            memory_bytes=self.limits.memory_bytes,
        )
        attempts = sum(2 if run.confirm else 1 for run in runs)
        waves = -(-attempts // max(1, self.limits.jobs))
        budget = self.limits.run_timeout * waves + 60.0
        try:
            stdout, stderr = self.process.communicate(job.model_dump_json().encode(), timeout=budget)
            problem = f"the worker exited with status {self.process.returncode}"
        except subprocess.TimeoutExpired:
            stdout, stderr = b"", b""
            problem = f"the worker passed its time limit of {budget:g} s"
        finally:
            self.close()

        first: dict[str, SuiteRun] = {}
        confirming: list[SuiteRun] = []
        for line in stdout.decode(errors="replace").splitlines():
            try:
                run = SuiteRun.model_validate_json(line)
            except ValueError:
                continue
            if run.attempt == 1:
                first.setdefault(run.variant, run)
            else:
                confirming.append(run)
        detail = stderr.decode(errors="replace").strip().splitlines()[-1:] if stderr else []
        missing = f"{problem} without reporting this run" + (f": {detail[0]}" if detail else "")
        return [
            first.get(run.variant) or SuiteRun(variant=run.variant, hash_seed=self.hash_seed, crashed=missing)
            for run in runs
        ] + confirming

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
    seed_one = WorkerProcess(layout=layout, tests_dir=tests_dir, hash_seed=FIRST_HASH_SEED, limits=limits)
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
