"""A sandboxed worker's process from start to end: the layers put together in the order they
apply, the session and everything of the worker killed at its end (the session layer).

:func:`start_worker` checks the mode (:mod:`grader.sandbox.status`), claims a sandbox user
(:mod:`grader.sandbox.users`) or makes the worker's user namespace
(:mod:`grader.sandbox.userns`), copies the submission into a private folder
(:mod:`grader.sandbox.workdir`), and starts ``python -m grader.worker`` in a new session with a
minimal environment, inside bubblewrap where it is on (:mod:`grader.sandbox.bubblewrap`). The
worker hardens itself (:mod:`grader.sandbox.harden`). :class:`SandboxedWorker` is the process
started; closing it (:func:`close_workers` for several at once) kills its session and every
process of its uid or namespaces, frees its user and removes its folder.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import site
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from grader.core.protocol import WorkerSandbox
from grader.sandbox import userns
from grader.sandbox.base import (
    WORKDIR_PREFIX,
    Layer,
    SandboxError,
    SandboxLimits,
    SandboxMode,
    SandboxStatus,
    grader_dir,
)
from grader.sandbox.bubblewrap import bwrap_options, setpriv_args, system_tool, visible_folders
from grader.sandbox.status import check_mode
from grader.sandbox.users import SandboxUser, UserClaim, claim_user, kill_users, sandbox_users
from grader.sandbox.workdir import copy_submission, make_workdir

__all__ = ["SandboxedWorker", "close_workers", "start_worker"]

_STAGED = Path("/grading")  # where a reused worker sees the submissions staged for it (bubblewrap)


class SandboxedWorker:
    """A started worker, in its sandbox. Its job goes to :attr:`process`'s stdin, in frames
    (:mod:`grader.run.runner`); always :meth:`close` it (idempotent): that kills its session
    and every process of its uid (or of its namespaces), frees its sandbox user and removes its
    work directory.

    Attributes:
        process: the process started (bubblewrap, or the worker itself).
        tests: the folder of test files as the worker sees it (the job names this one).
        layers: the layers this worker runs under.
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        *,
        tests: Path,
        hardening: WorkerSandbox,
        limits: SandboxLimits,
        layers: tuple[Layer, ...],
        claim: UserClaim | None = None,
        workdir: Path | None = None,
        namespaces: userns.Namespaces | None = None,
    ) -> None:
        self.process = process
        self.tests = tests
        self.layers = layers
        self._hardening = hardening
        self._limits = limits
        self._claim = claim
        self._workdir = workdir
        self._namespaces = namespaces
        self._closed = False
        self._staged = 0

    @property
    def user(self) -> SandboxUser | None:
        """The sandbox user the worker runs as (None with no sandbox, or in a user namespace)."""
        return self._claim.user if self._claim is not None else None

    @property
    def workdir(self) -> Path | None:
        """The private work directory (the copy of the tests; None with no sandbox)."""
        return self._workdir

    def settings(self, *, budget: float) -> WorkerSandbox:
        """What the worker and its children lock down in themselves, for a job of ``budget``
        seconds (the worker's CPU limit); all off when there is no sandbox."""
        if self._workdir is None:
            return self._hardening
        return self._hardening.replace(cpu_seconds=math.ceil(budget) + 5)

    def stage(self, tests_dir: Path) -> Path:
        """Copy a submission's tests in for a worker that grades one after another; the
        folder as the worker sees it. With no sandbox, the tests themselves.

        Raises:
            SandboxError: if the submission holds more than the limits allow.
        """
        tests_dir = Path(tests_dir).absolute()
        if self._workdir is None:
            return tests_dir
        self._staged += 1
        name = f"job-{self._staged}"
        dest = self._workdir / "tests" / name
        try:
            copy_submission(tests_dir, dest, self._limits)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        dest.chmod(0o755)
        return self.tests / name

    def unstage(self, staged: Path) -> None:
        """Remove a staged submission (the next one never sees it)."""
        if self._workdir is not None and staged.parent == self.tests:
            shutil.rmtree(self._workdir / "tests" / staged.name, ignore_errors=True)

    def kill(self) -> None:
        """Kill the worker's session now, without waiting (:meth:`close` does the rest); once
        closed, nothing (its process is reaped, and its pid may be another's)."""
        if self._closed:
            return
        if self._namespaces is not None:
            self._namespaces.pin(self.process)  # its namespaces' first process, before bubblewrap goes
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        """Kill the worker's session and every process of its uid; free the user; remove the copy."""
        close_workers([self])

    def _reap(self) -> bool:
        """Kill the session and wait for it (the first step of closing); False if closed already."""
        if self._closed:
            return False
        self.kill()
        self._closed = True
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                try:
                    stream.close()
                except BrokenPipeError:  # a frame still in the input's buffer, flushed into a dead pipe
                    pass  # the stream is closed all the same: nobody was left to read it
        return True

    def _free(self) -> None:
        # The copy goes before the user is freed: the next holder finds nothing of ours.
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        if self._claim is not None:
            self._claim.release()
        if self._namespaces is not None:
            self._namespaces.close()


def close_workers(workers: Iterable[SandboxedWorker]) -> None:
    """Close several workers: each one's session is killed first, so that they all go down
    at once rather than one after another; then every process of their users (one pass over
    /proc for all of them), or of their namespaces, and each user is freed with its copy
    removed."""
    workers = list(workers)
    for worker in workers:
        worker.kill()
    closing: list[SandboxedWorker] = []
    try:
        for worker in workers:
            if worker._reap():
                closing.append(worker)
    finally:
        # Even if another one could not be waited for: each worker waited for is cleared and freed.
        try:
            kill_users({worker._claim.user.uid for worker in closing if worker._claim is not None})
            _wait_namespaces(closing)
        finally:
            for worker in closing:
                worker._free()


def _wait_namespaces(workers: Iterable[SandboxedWorker]) -> None:
    """Wait until the namespaces of each worker (a grader that is not root) hold no process."""
    held = [w.process.pid for w in workers if w._namespaces is not None and not w._namespaces.wait_empty()]
    if held:
        raise SandboxError(f"the namespaces of workers {held} still held processes after they were killed")


def start_worker(
    *,
    mode: SandboxMode | str,
    tests_dir: Path | None,
    package_dir: Path,
    readonly: Sequence[Path] = (),
    env: Mapping[str, str],
    limits: SandboxLimits,
    hidden: Sequence[Path] = (),
    status: SandboxStatus | None = None,
) -> SandboxedWorker:
    """Start ``python -m grader.worker`` under ``mode``.

    Args:
        mode: how much sandbox the run needs (``auto`` refuses without the always-on layers).
        tests_dir: the submission's test files (copied; the worker reads the copy), or None
            for a worker that grades one submission after another: each is copied in by
            :meth:`SandboxedWorker.stage` (under bubblewrap they appear under ``/grading``).
        package_dir: the reference's ``tinyllm`` package, the framework every run's tests use
            (visible read-only).
        readonly: other folders the runs may read (the shipped fixtures; a student's own
            package, for the runs' implementation processes), visible read-only.
        env: the worker's environment (the sandbox adds TMPDIR and HOME).
        limits: the sandbox's limits.
        hidden: files under ``package_dir`` the worker must not read (the reference modules
            while variants are graded: a run compares with nothing but behaviour);
            they read as empty under bubblewrap.
        status: the layers to start it with, checked for ``mode`` by the caller (who then
            checks :func:`check_mode` before the worker is given anything to run); by default
            :func:`check_mode` is asked first.

    Raises:
        SandboxUnavailable: if ``mode`` needs a layer this machine does not offer.
        SandboxError: if the submission is too large, or no sandbox user is free.
    """
    mode = SandboxMode(mode)
    tests_dir = Path(tests_dir).absolute() if tests_dir is not None else None
    command, env = _worker_command(env)
    if mode is SandboxMode.NONE:
        process = _popen(command, env=dict(env), cwd=tests_dir or Path("/"))
        return SandboxedWorker(
            process, tests=tests_dir or Path("/"), hardening=WorkerSandbox(tmp_bytes=limits.tmp_bytes), limits=limits,
            layers=(Layer.SESSION, Layer.OUTPUT),
        )
    status = status or check_mode(mode)
    bubblewrap = status.active(Layer.BUBBLEWRAP)
    hardening = WorkerSandbox(
        file_bytes=limits.file_bytes,
        open_files=limits.open_files,
        processes=limits.processes,
        seccomp=status.active(Layer.SECCOMP),
        tmp_bytes=limits.tmp_bytes,
    )
    layers = tuple(layer for layer in Layer if status.active(layer))
    if status.active(Layer.USERNS):  # a grader that is not root: namespaces instead of a sandbox user
        return _start_in_namespaces(
            command, env, tests_dir=tests_dir, readonly=[package_dir, *readonly], limits=limits, hidden=hidden,
            hardening=hardening, layers=layers,
        )
    claim = claim_user(sandbox_users(), limits.claim_timeout)
    workdir: Path | None = None
    try:
        workdir = make_workdir(tests_dir, claim.user, limits)
        copy = workdir / "tests"
        if bubblewrap:
            tests, process = _start_in_bubblewrap(
                command, claim.user, copy=copy, tests_dir=tests_dir or _STAGED,
                readonly=[package_dir, *readonly], env=env, limits=limits, hidden=hidden,
            )
        else:
            tests = copy
            private = {**env, "TMPDIR": str(workdir / "tmp"), "HOME": str(workdir / "tmp")}
            process = _popen(command, env=private, cwd=copy, user=claim.user)
    except BaseException:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        claim.release()
        raise
    return SandboxedWorker(
        process, tests=tests, hardening=hardening, limits=limits, layers=layers, claim=claim, workdir=workdir
    )


def _start_in_namespaces(
    command: list[str], env: Mapping[str, str], *, tests_dir: Path | None, readonly: Sequence[Path],
    limits: SandboxLimits, hidden: Sequence[Path], hardening: WorkerSandbox, layers: tuple[Layer, ...],
) -> SandboxedWorker:
    """A worker of a grader that is not root, in a user namespace of its own (the userns layer
    holds, and bubblewrap with it)."""
    userns.remove_stale_workdirs(Path(tempfile.gettempdir()), WORKDIR_PREFIX)
    namespaces = userns.Namespaces()
    workdir: Path | None = None
    try:
        workdir = make_workdir(tests_dir, None, limits)
        namespaces.hold(workdir)
        tests, process = _start_in_bubblewrap(
            command, namespaces, copy=workdir / "tests", tests_dir=tests_dir or _STAGED, readonly=readonly,
            env=env, limits=limits, hidden=hidden,
        )
    except BaseException:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
        namespaces.close()
        raise
    return SandboxedWorker(
        process, tests=tests, hardening=hardening, limits=limits, layers=layers, workdir=workdir, namespaces=namespaces
    )


# The worker's first lines. It starts with no `site` (-S): no .pth file of the environment runs
# (the editable install's import hook among them, about 20 ms a start), and the packages it
# needs are named one by one: the interpreter's site-packages, and the grader package alone,
# bound by its folder, so that neither the grader's other packages (the service) nor the
# checkout around it can be imported from a test. -P: the tests' folder never shadows a module.
_WORKER_BOOTSTRAP = (
    "import gc, os, sys\n"
    "gc.disable()\n"  # while importing (the worker turns it on again once set up)
    "sys.path += os.environ.pop('MUTAGRADE_SITE_PACKAGES').split(os.pathsep)\n"
    "import importlib.util as u\n"
    "d = os.environ.pop('MUTAGRADE_GRADER')\n"
    "s = u.spec_from_file_location('grader', os.path.join(d, '__init__.py'), submodule_search_locations=[d])\n"
    "m = sys.modules['grader'] = u.module_from_spec(s)\n"
    "s.loader.exec_module(m)\n"
    # pytest names importlib.metadata at its start but a worker never uses it: not imported
    # unless a test does (see grader.core.lazymodule).
    "from grader.core.lazymodule import defer\n"
    "defer('importlib.metadata')\n"
    "from grader.worker import main\n"
    "main()\n"
)


def _worker_command(env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """``python -m grader.worker`` without `site`: the command and its environment."""
    packages = [path for path in site.getsitepackages() if os.path.isdir(path)]
    extra = {"MUTAGRADE_SITE_PACKAGES": os.pathsep.join(packages), "MUTAGRADE_GRADER": str(grader_dir())}
    return [sys.executable, "-P", "-S", "-c", _WORKER_BOOTSTRAP], {**env, **extra}


def _start_in_bubblewrap(
    command: list[str],
    user: SandboxUser | userns.Namespaces,
    *,
    copy: Path,
    tests_dir: Path,
    readonly: Sequence[Path],
    env: Mapping[str, str],
    limits: SandboxLimits,
    hidden: Sequence[Path] = (),
) -> tuple[Path, subprocess.Popen[bytes]]:
    """The copy appears at the original tests path (messages name the student's own paths,
    and a conftest finding files beside it still finds them), read-only. Root's bubblewrap
    drops to the sandbox ``user``; another's gives the worker a user namespace of its own
    (``user`` is then its :class:`~grader.sandbox.userns.Namespaces`)."""
    bwrap = system_tool("bwrap")
    assert bwrap is not None  # checked by the probe  # noqa: S101
    mounts = [(path.resolve(), path) for path in visible_folders(readonly)] + [(copy, tests_dir)]
    privileged = isinstance(user, SandboxUser)
    options = bwrap_options(readonly=mounts, tmp_bytes=limits.tmp_bytes, chdir=tests_dir, hidden=hidden, privileged=privileged)
    private = {**env, "TMPDIR": "/tmp", "HOME": "/tmp"}
    if isinstance(user, SandboxUser):
        setpriv = system_tool("setpriv")
        assert setpriv is not None  # checked by the probe  # noqa: S101
        args = [bwrap, *options, "--", *setpriv_args(setpriv, user.uid, user.gid), *command]
        return tests_dir, _popen(args, env=private, cwd=Path("/"))
    args = [bwrap, *user.bwrap_args(), *options, "--", *command]
    try:
        return tests_dir, _popen(args, env=private, cwd=Path("/"), pass_fds=(user.info_fd,))
    finally:
        user.started()


def _popen(
    command: list[str], *, env: dict[str, str], cwd: Path, user: SandboxUser | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    extra: dict[str, object] = {"user": user.uid, "group": user.gid, "extra_groups": []} if user is not None else {}
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(cwd),
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            **extra,
        )
    except OSError as exc:
        who = f" as {user.name}" if user is not None else ""
        raise SandboxError(f"the worker could not be started{who}: {command[0]}: {exc}") from exc
