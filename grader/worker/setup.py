"""How a worker sets up for a job, and an implementation process for a student's package.

A worker imports what every run needs once (:func:`import_common`), before its job arrives;
:func:`prepare_job` sets the finders up for its first job, :func:`next_job` for each later one
(nothing of the last one stays). Each job's zygote, forked afresh from the worker, configures
pytest for that job's tests (:func:`job_session`), so the worker itself never holds a job's
session, and nothing of one outlives its job. :func:`use_package`, in a run's implementation
process, makes a student's own ``tinyllm`` the only one it imports.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from importlib.machinery import PathFinder, SourceFileLoader
from importlib.util import spec_from_file_location
from pathlib import Path
from typing import Any

from grader.core.protocol import JobSettings
from grader.worker.child import TestSession

__all__ = ["SERVED_FROM", "OnlyUnder", "TestHelpers", "empty_folder", "import_common", "import_named",
           "job_session", "next_job", "prepare_job", "use_package"]


class OnlyUnder:
    """Finds ``tinyllm`` and its modules in the package under test or nowhere: the copy
    installed with the project never fills a gap in a student's package."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.partition(".")[0] != "tinyllm":
            return None
        spec = PathFinder.find_spec(name, [self.folder] if path is None else path)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


class TestHelpers:
    """Finds the helper modules beside the tests (``import helpers``), after every other finder
    (nothing of a submission shadows a module of the standard library, numpy or pytest), and
    only as source files: a compiled module or an extension in a submission is never imported."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if path is not None or not name.isidentifier():
            return None  # a submodule is found by its package's own path, as source too
        for candidate, package in ((Path(self.folder) / name / "__init__.py", True), (Path(self.folder) / f"{name}.py", False)):
            if candidate.is_file():
                loader = SourceFileLoader(name, str(candidate))
                locations = [str(candidate.parent)] if package else None
                return spec_from_file_location(name, candidate, loader=loader, submodule_search_locations=locations)
        return None


def import_common() -> None:
    """What every run needs, whatever the job: imported by a worker as soon as it starts, while
    the grader is still getting the job ready (pytest's own plugins and numpy's lazily loaded
    parts among it: once here, not in every child)."""
    import _pytest.config  # noqa: F401
    import _pytest.main  # noqa: F401
    import _pytest.python  # noqa: F401
    import numpy  # noqa: F401
    import numpy.random  # noqa: F401


def import_named(job: JobSettings) -> None:
    """numpy.testing (about 12 ms), imported ahead where a test file names it: once here
    rather than in every child; a suite that never names it does not pay for it."""
    for path in Path(job.tests).rglob("*.py"):
        try:
            if b"testing" in path.read_bytes():
                import numpy.testing  # noqa: F401

                return
        except OSError:
            continue


def prepare_job(job: JobSettings) -> None:
    """Import once, before forking, what every run needs (runs start warm). The framework is
    imported here only when it is ours (``isolate``: the reference's, every run's test process
    holds it with the stand-in): a student's package (``job.implementation``) is never
    imported by the worker, only by each run's implementation process."""
    sys.path.insert(0, job.reference)
    sys.meta_path.insert(0, OnlyUnder(job.reference))
    import_common()
    import_named(job)
    if job.isolate:
        for name in ("tinyllm.autograd.functional", "tinyllm.nn", "tinyllm.random", "tinyllm.rnn",
                     "grader.worker.standin", "grader.worker.impl"):
            importlib.import_module(name)


def job_session(job: JobSettings) -> TestSession:
    """In the job's zygote, before it forks any run: the finder of the helper modules beside the
    tests, and pytest configured for them (asserts rewritten once). The zygote lives for one
    job: its session, and whatever the submission's files made of it, dies with it."""
    sys.meta_path.append(TestHelpers(job.tests))
    return TestSession(job.tests, job.conftests, seed=job.hash_seed, contract=job.contract)


def next_job(old: JobSettings, job: JobSettings) -> None:
    """Set up for the next submission, in a worker that grades one after another: nothing of
    the last one stays (its temporary files; its session died with its zygote)."""
    if old.private_tmp:
        empty_folder(tempfile.gettempdir())
    import_named(job)


def empty_folder(folder: str) -> None:
    """Remove everything in ``folder``, whatever its permissions (it is all this uid's)."""
    for entry in os.scandir(folder):
        path = entry.path
        if entry.is_dir(follow_symlinks=False):
            try:
                os.chmod(path, 0o700)  # a folder closed to its own owner is opened first
            except OSError:
                pass
            for root, dirs, _ in os.walk(path):
                for name in dirs:
                    try:
                        os.chmod(os.path.join(root, name), 0o700)
                    except OSError:
                        pass
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


# The framework's modules an implementation process serves with (grader.worker.impl builds
# the answers with their Tensor, Parameter, Module, PCG32 and concatenate).
SERVED_FROM = ("tinyllm.autograd.tensor", "tinyllm.autograd.functional", "tinyllm.nn.module", "tinyllm.random")


def use_package(reference: str, folder: str) -> None:
    """Make ``folder``'s ``tinyllm`` the only one this process imports from now on: every
    ``tinyllm`` module the worker imported (the course's framework, which the test processes
    keep) is forgotten, and the finder looks in ``folder`` alone. A student's module under test
    then runs on their own Tensor, Module and PCG32, here, and nowhere near the tests that judge
    it."""
    for name in [n for n in sys.modules if n == "tinyllm" or n.startswith("tinyllm.")]:
        del sys.modules[name]
    sys.meta_path[:] = [OnlyUnder(folder) if isinstance(f, OnlyUnder) else f for f in sys.meta_path]
    sys.path[:] = [folder if entry == reference else entry for entry in sys.path]
    importlib.invalidate_caches()
