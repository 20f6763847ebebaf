"""Starting workers early: what a worker's process needs, with no third-party import.

A worker spends most of its start-up importing numpy and pytest. The command line starts a
grading's two workers (:func:`launch_grading`) before it imports the rest of the grader (pydantic
among it) and before the policy check, so that both happen while the workers warm up: a worker
only waits for its job until runs come, and nothing of the submission runs before the policy
check has passed (the worker compiles the test files; only its children run them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from grader.core.paths import Layout
from grader.sandbox.base import Layer, SandboxLimits, SandboxMode, SandboxStatus
from grader.sandbox.process import SandboxedWorker, close_workers, start_worker
from grader.sandbox.status import begin_probe, check_mode, provisional_status

__all__ = ["FIRST_HASH_SEED", "SECOND_HASH_SEED", "Launched", "launch_grading", "launch_worker", "worker_env"]

FIRST_HASH_SEED = 1
SECOND_HASH_SEED = 2


def worker_env(hash_seed: int, layout: Layout) -> dict[str, str]:
    """The whole environment of a worker: nothing of the grader's own."""
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


def launch_worker(
    *, layout: Layout, tests_dir: Path | None, hash_seed: int, mode: SandboxMode | str,
    limits: SandboxLimits = SandboxLimits(), hide_source: bool = False, status: SandboxStatus | None = None,
) -> SandboxedWorker:
    """Start one worker in its sandbox; it imports what it needs, then waits for its job
    (``tests_dir`` None: a worker of a pool, given one submission after another).

    The reference's framework is always in sight (a run's tests use it, around the stand-in);
    a student's package (``layout.implementation``) too, read-only, for the runs'
    implementation processes. ``hide_source``: every reference module of the course (the one
    under test and the other assignments') reads as empty.

    Raises:
        SandboxUnavailable: if ``mode`` needs a layer this machine lacks.
        SandboxError: if the sandbox cannot be set up for these tests.
    """
    fixtures = [layout.goldens.parent] if layout.goldens.is_file() else []
    student = [layout.implementation] if layout.implementation is not None else []
    return start_worker(
        mode=mode,
        tests_dir=Path(tests_dir).resolve() if tests_dir is not None else None,
        package_dir=layout.reference,
        readonly=[*fixtures, *student],
        env=worker_env(hash_seed, layout),
        limits=limits,
        # The student package ships the framework without the reference modules: nothing to hide there.
        hidden=layout.answer_files if hide_source else (),
        status=status,
    )


@dataclass
class Launched:
    """A grading's two workers, started: hash seed 1 (every variant) and 2 (the reference
    again). Whoever takes them closes them; :meth:`close` is safe to call twice."""

    tests_dir: Path
    mode: SandboxMode
    seed_one: SandboxedWorker
    seed_two: SandboxedWorker

    def close(self) -> None:
        close_workers((self.seed_one, self.seed_two))


def launch_grading(*, layout: Layout, tests_dir: Path, mode: SandboxMode | str,
                   limits: SandboxLimits = SandboxLimits()) -> Launched:
    """Start both workers of a grading of ``tests_dir`` (see :func:`grader.run.scheduler.run_matrix`).

    Raises:
        SandboxUnavailable: if ``mode`` needs a layer this machine lacks.
        SandboxError: if the sandbox cannot be set up for these tests.
    """
    mode = SandboxMode(mode)
    common = dict(layout=layout, tests_dir=tests_dir, mode=mode, limits=limits, hide_source=True)
    expected: SandboxStatus | None = None
    if mode is not SandboxMode.NONE:
        # Bubblewrap is probed alongside the workers' start, not before it: they are started
        # with the layers the probe should confirm, and given nothing before it has.
        begin_probe()
        expected = provisional_status()
        if expected.missing(mode):
            expected = None  # check_mode says what is missing, before anything starts
    launched = _launch_pair(common, expected)
    if expected is None:
        return launched
    try:
        found = check_mode(mode)
    except BaseException:
        launched.close()
        raise
    if _same_layers(found, expected):
        return launched
    launched.close()  # the probe disagreed (bubblewrap fails here): start them as it says
    return _launch_pair(common, found)


def _launch_pair(common: dict, status: SandboxStatus | None) -> Launched:
    seed_two = launch_worker(hash_seed=SECOND_HASH_SEED, status=status, **common)
    try:
        seed_one = launch_worker(hash_seed=FIRST_HASH_SEED, status=status, **common)
    except BaseException:
        seed_two.close()  # its sandbox user and copy are freed when the other cannot start
        raise
    return Launched(tests_dir=Path(common["tests_dir"]).resolve(), mode=common["mode"], seed_one=seed_one, seed_two=seed_two)


def _same_layers(one: SandboxStatus, other: SandboxStatus) -> bool:
    return all(one.active(layer) == other.active(layer) for layer in Layer)
