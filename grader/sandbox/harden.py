"""The worker's share of the sandbox, applied to itself before any submitted code runs: no
core dumps and no memory readable by its children, its rlimits and its seccomp filter
(:func:`harden_worker`, once), then in each forked child a death signal tied to the worker, a
CPU limit and the children's filter (:meth:`ChildHardening.apply`).

Standard library only: this is the part of the sandbox the worker itself imports.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import resource
import signal
from dataclasses import dataclass

from grader.core.protocol import WorkerSandbox
from grader.sandbox.base import SandboxError
from grader.sandbox.seccomp import (
    ChildProgram,
    child_allow_filter,
    child_allow_program,
    child_deny_filter,
    load_libseccomp,
    worker_filter,
)

__all__ = ["ChildHardening", "harden_worker", "prctl"]


@dataclass(frozen=True)
class ChildHardening:
    """What each forked child applies to itself, right after the fork (see :func:`harden_worker`)."""

    settings: WorkerSandbox
    run_timeout: float
    libseccomp: ctypes.CDLL | None = None
    allow_list: bool = True  # False: the deny-list only
    allow_program: ChildProgram | None = None  # the allow-list compiled once in the worker

    def apply(self) -> None:
        """In the child, before any submitted code: die with the worker (even with no sandbox,
        a child never outlives it), a CPU limit for the run and, with seccomp, the child
        filter: the allow-list, or where it cannot be installed the deny-list (both: no new
        processes, no signals to anything but itself)."""
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if self.settings.cpu_seconds is not None:
            seconds = math.ceil(self.run_timeout) + 1  # the worker's wall-clock kill comes first
            _set_limit(resource.RLIMIT_CPU, seconds, seconds + 1)
        if self.libseccomp is None:
            return
        if self.allow_list:
            try:
                if self.allow_program is not None:
                    _load_program(self.allow_program.for_pid(os.getpid()))
                else:
                    child_allow_filter(self.libseccomp, os.getpid()).load()
                return
            except SandboxError:
                pass  # the deny-list below; `mutagrade doctor` says which one this machine gets
        child_deny_filter(self.libseccomp, os.getpid()).load()


def harden_worker(settings: WorkerSandbox, *, memory_bytes: int, run_timeout: float) -> ChildHardening:
    """In the worker, before it reads any submitted file: make it non-dumpable (its children,
    same uid, can then neither read nor write its memory, nor reopen its file descriptors
    through /proc), set its rlimits and install the worker's seccomp filter.

    Returns:
        What each child applies to itself after the fork.

    Raises:
        SandboxError: if seccomp was asked for and could not be installed (a worker never
            runs with fewer layers than the grader was promised).
    """
    prctl(4, 0)  # PR_SET_DUMPABLE, 0: inherited by every child across fork
    _set_limit(resource.RLIMIT_AS, memory_bytes, memory_bytes)
    if settings.cpu_seconds is not None:
        _set_limit(resource.RLIMIT_CPU, settings.cpu_seconds, settings.cpu_seconds + 5)
        _set_limit(resource.RLIMIT_CORE, 0, 0)
    for limit, value in (
        (resource.RLIMIT_FSIZE, settings.file_bytes),
        (resource.RLIMIT_NOFILE, settings.open_files),
        (resource.RLIMIT_NPROC, settings.processes),
    ):
        if value is not None:
            _set_limit(limit, value, value)
    library = None
    if settings.seccomp:
        try:
            library = load_libseccomp()
            worker_filter(library).load(all_threads=True)
        except (OSError, SandboxError) as exc:
            raise SandboxError(f"the worker could not install its seccomp filter: {exc}") from exc
    program = child_allow_program(library) if library is not None else None
    return ChildHardening(settings=settings, run_timeout=run_timeout, libseccomp=library, allow_program=program)


def _set_limit(which: int, soft: int, hard: int) -> None:
    current_soft, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)  # an unprivileged process can only lower its hard limit
        soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, opened once (each child calls prctl right after the fork)."""
    return ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int, pointer: object = None) -> None:
    """``prctl(option, value, pointer or 0, 0, 0)``, raising SandboxError if it fails."""
    third = ctypes.c_ulong(0) if pointer is None else pointer
    if _libc().prctl(option, ctypes.c_ulong(value), third, ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        code = ctypes.get_errno()
        raise SandboxError(f"prctl({option}, {value}): expected 0, got errno {code} ({os.strerror(code)})")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_program(code: bytes) -> None:
    """Install a compiled filter in this (single-threaded) process, as ``seccomp_load`` does:
    no new privileges, then the filter."""
    prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.addressof(buffer))
    prctl(22, 2, ctypes.byref(fprog))  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
