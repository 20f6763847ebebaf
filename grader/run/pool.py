"""Warm workers for one grading after another: a batch, the service's queue and each Celery
process pay the workers' start-up once, not once per submission (the grading's runs are
:mod:`grader.run.scheduler`'s)."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Callable, Sequence

from grader.core.matrix import Matrix
from grader.core.paths import Layout
from grader.core.variants import Variant
from grader.run.launch import FIRST_HASH_SEED, SECOND_HASH_SEED
from grader.run.runner import RunLimits, WorkerProcess, WorkerResult, close_all
from grader.run.scheduler import MatrixRun
from grader.sandbox.base import SandboxMode

__all__ = ["WorkerPool"]


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
            results: queue.Queue[WorkerResult] = queue.Queue()
            seed_two = WorkerProcess(layout=self.layout, tests_dir=None, hash_seed=SECOND_HASH_SEED,
                                     limits=self.limits, results=results, hide_source=True)
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
                   full_matrix: bool = False, not_counted: Callable[[str], str | None] | None = None) -> Matrix:
        """:func:`run_matrix` on the pool's workers (``limits.sandbox`` must be the pool's)."""
        if SandboxMode(limits.sandbox) is not SandboxMode(self.limits.sandbox):
            raise ValueError(f"the pool's workers run under sandbox mode {self.limits.sandbox}, not {limits.sandbox}")
        pair = self._workers()
        self._gradings += 1
        try:
            for worker in pair:
                worker.begin(tests_dir, limits)
            matrix_run = MatrixRun(layout=self.layout, tests_dir=tests_dir, variants=variants, limits=limits,
                                    full_matrix=full_matrix, launched=None, pooled=pair, not_counted=not_counted)
            return matrix_run.run()
        except BaseException:
            self.close()
            raise
        finally:
            for worker in pair:
                worker.end()

    def close(self) -> None:
        if self._pair is not None:
            close_all(self._pair)
            self._pair = None

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
