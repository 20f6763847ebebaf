"""The sandbox around the worker process: who it runs as, what it may see, touch and call.

Student code never runs in the grader's process or as the grader's user (SPEC §8). Every
worker is started here, in layers:

* always on (mode ``auto`` refuses to run without them): a dedicated unprivileged uid (one of
  the users ``mutagrade-sandbox-N`` made by ``scripts/setup-sandbox.sh``, one per running
  worker, so killing "every process of the uid" never touches another worker); rlimits
  (address space, CPU, file size, open files, processes); a new session whose process group,
  and every process of the uid, is killed at the end; a private temporary work directory
  holding a copy of the submission's test files; a minimal explicit environment with one
  BLAS thread; the worker's output read with a byte cap and a wall-clock timeout;
* where available (mode ``strict`` refuses to run without them): seccomp filters (in the
  worker, no internet, netlink or packet sockets, no ptrace, ``process_vm_*``, unshare, no
  namespace but those a run's test process is born in, bpf, io_uring, keyctl, perf_event_open;
  in each child, an allow-list of the system calls a
  test run needs, :data:`CHILD_SYSCALLS`, everything else refused with EPERM: no new
  processes, no signals to anything but itself) and bubblewrap (new pid, net, ipc, uts and
  mount namespaces; the system read-only; only the interpreter, the worker's code, the package
  under test and the copy of the submission visible).

A grader that is not root cannot switch uid: where the kernel allows unprivileged user
namespaces, each worker gets a user namespace of its own from bubblewrap instead, the userns
layer (:mod:`grader.sandbox.userns`), which stands in for the uid layer and the uid-based
privacy of the work directory.

:func:`start_worker` starts a worker under a :class:`SandboxMode`; :func:`sandbox_status`
says which layers this machine offers (``mutagrade doctor`` prints :func:`doctor_lines`).
The worker applies its share itself, before any submitted code runs: :func:`harden_worker`
once, then :meth:`ChildHardening.apply` in each forked child.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import math
import os
import pwd
import re
import resource
import selectors
import shutil
import signal
import site
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import AbstractSet, Callable, Iterable, Mapping, Sequence

from grader.sandbox import userns
from grader.core.protocol import WorkerSandbox

__all__ = [
    "CHILD_SYSCALLS",
    "ChildHardening",
    "Layer",
    "LayerStatus",
    "SANDBOX_USER_PREFIX",
    "SandboxError",
    "SandboxLimits",
    "SandboxMode",
    "SandboxStatus",
    "SandboxUnavailable",
    "SandboxUser",
    "SandboxedWorker",
    "WorkerOutput",
    "begin_probe",
    "check_mode",
    "child_syscalls_here",
    "close_workers",
    "doctor_lines",
    "harden_worker",
    "provisional_status",
    "sandbox_status",
    "sandbox_users",
    "start_worker",
    "user_processes",
]

SANDBOX_USER_PREFIX = "mutagrade-sandbox-"
SETUP_SCRIPT = "scripts/setup-sandbox.sh"
_USER_NAME = re.compile(re.escape(SANDBOX_USER_PREFIX) + r"(\d+)$")
_LOCK_DIR = Path("/run/mutagrade-sandbox")  # root's own: a sandboxed process cannot hold a lock
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_STDERR_TAIL = 64 * 1024
_WORKDIR_PREFIX = "mutagrade-box-"
_STAGED = Path("/grading")  # where a reused worker sees the submissions staged for it (bubblewrap)


# ------------------------------------------------------------------------ modes, errors
class SandboxMode(StrEnum):
    """How much sandbox a run needs."""

    AUTO = "auto"  # every layer this machine offers; refuse if an always-on layer is missing
    STRICT = "strict"  # every layer, seccomp and bubblewrap included, or refuse
    NONE = "none"  # no sandbox: trusted code, or a student's suite on the student's own machine


class SandboxError(RuntimeError):
    """The sandbox could not be set up for this run (the message says what and why)."""


class SandboxUnavailable(SandboxError):
    """The mode asked for needs a layer this machine does not offer; the message names it."""


class Layer(StrEnum):
    """One layer of the sandbox, as ``mutagrade doctor`` names it."""

    UID = "uid"
    USERNS = "userns"  # in place of the uid layer, for a grader that is not root
    RLIMITS = "rlimits"
    SESSION = "session"
    WORKDIR = "workdir"
    ENVIRONMENT = "environment"
    OUTPUT = "output"
    SECCOMP = "seccomp"
    BUBBLEWRAP = "bubblewrap"

    @property
    def always(self) -> bool:
        """Whether mode ``auto`` needs this layer (the rest are used where available); of the
        uid and userns layers, either one is enough (:meth:`SandboxStatus.missing`)."""
        return self not in (Layer.SECCOMP, Layer.BUBBLEWRAP, Layer.USERNS)

    @property
    def kind(self) -> str:
        """When the layer is needed, as ``mutagrade doctor`` says it."""
        if self is Layer.UID:
            return "always, or userns"
        if self is Layer.USERNS:
            return "in place of uid"
        return "always" if self.always else "where available"


@dataclass(frozen=True)
class SandboxLimits:
    """The sandbox's own limits (time and memory are the run's, in ``RunLimits``)."""

    file_bytes: int = 10 * 1024**2  # largest file a sandboxed process may write
    open_files: int = 256
    processes: int = 64  # processes and threads of the sandbox uid
    tmp_bytes: int = 256 * 1024**2  # the private /tmp (bubblewrap)
    submission_bytes: int = 64 * 1024**2  # the copy of the submission
    submission_files: int = 5000
    output_bytes: int = 64 * 1024**2  # results the worker may write before it is stopped
    claim_timeout: float = 120.0  # how long to wait for a free sandbox user


# ------------------------------------------------------------------------------ status
@dataclass(frozen=True)
class LayerStatus:
    """Whether one layer is active on this machine, and how (or why not)."""

    layer: Layer
    active: bool
    detail: str

    @property
    def always(self) -> bool:
        return self.layer.always


@dataclass(frozen=True)
class SandboxStatus:
    """Every layer of the sandbox on this machine; :meth:`lines` is ``mutagrade doctor``'s text."""

    layers: tuple[LayerStatus, ...]

    def get(self, layer: Layer) -> LayerStatus:
        return next(status for status in self.layers if status.layer is layer)

    def active(self, layer: Layer) -> bool:
        return self.get(layer).active

    def missing(self, mode: SandboxMode) -> list[LayerStatus]:
        """The inactive layers ``mode`` needs (none for mode ``none``). Of the uid and userns
        layers either one is enough; with neither, both are named."""
        if mode is SandboxMode.NONE:
            return []
        stand_in = {Layer.UID: Layer.USERNS, Layer.USERNS: Layer.UID}
        gone = []
        for status in self.layers:
            if status.active:
                continue
            other = stand_in.get(status.layer)
            needed = not self.active(other) if other is not None else status.always or mode is SandboxMode.STRICT
            if needed:
                gone.append(status)
        return gone

    def lines(self) -> list[str]:
        """One line per layer, then what each mode would do here."""
        lines = ["sandbox layers on this machine:"]
        for status in self.layers:
            mark = "on " if status.active else "OFF"
            lines.append(f"  [{mark}] {status.layer.value:<12} ({status.layer.kind}) {status.detail}")
        for mode in (SandboxMode.AUTO, SandboxMode.STRICT):
            gone = self.missing(mode)
            verdict = "ready" if not gone else "refuses to run: missing " + ", ".join(s.layer.value for s in gone)
            lines.append(f"  mode {mode.value}: {verdict}")
        lines.append("  mode none: runs submitted code with no sandbox (trusted code, or a student's own machine)")
        return lines

    def render(self) -> str:
        return "\n".join(self.lines())


def sandbox_status(*, fresh: bool = False, describe: bool = False) -> SandboxStatus:
    """Which layers this machine offers. Probing runs bubblewrap once; the answer is kept for
    the life of the process unless ``fresh`` (an answer whose bubblewrap run failed, or that
    refuses mode auto, only for :data:`RETRY_FAILED_PROBE_S`). ``describe`` (the doctor's) also
    says how each layer is set up, at a cost every grading would pay: bubblewrap's version, and
    whether the children's allow-list installs here (a throwaway child tries it). Threads asking at once (the
    service's grading threads) wait for one probe's answer."""
    return _ANSWERS.get(describe, fresh=fresh)


def doctor_lines() -> list[str]:
    """The sandbox's part of ``mutagrade doctor``: every layer, on or off and why, and whether
    modes ``auto`` and ``strict`` can run here."""
    return sandbox_status(fresh=True, describe=True).lines()


def check_mode(mode: SandboxMode | str) -> SandboxStatus:
    """Check that ``mode`` can be honoured here, before anything is run.

    Raises:
        SandboxUnavailable: naming each missing layer and why it is missing.
        ValueError: if ``mode`` is not one of auto, strict, none.
    """
    mode = SandboxMode(mode)
    status = sandbox_status()
    gone = status.missing(mode)
    if gone:
        why = "; ".join(f"{s.layer.value}: {s.detail}" for s in gone)
        raise SandboxUnavailable(
            f"sandbox mode {mode.value} needs layer(s) {', '.join(s.layer.value for s in gone)}, "
            f"unavailable here ({why}). Run {SETUP_SCRIPT} as root to set the sandbox up (a user without "
            "root needs a kernel that allows unprivileged user namespaces), or pass --sandbox none to run "
            "the code with no sandbox (trusted code only)"
        )
    return status


# A bubblewrap run that failed, or an answer that refuses mode auto (no sandbox user yet), is
# kept for this long (seconds), then asked again: in a long-running process (the service) a
# passing failure, or a setup script run while it serves, must not wait for a restart.
RETRY_FAILED_PROBE_S = 60.0


class _Answers:
    """This process's answers to "which layers are there", one for each ``describe``, with
    when the answer's bubblewrap run failed or the answer refused mode auto (None: neither)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # held for a whole probe: threads asking at once wait for it
        self._kept: dict[bool, tuple[SandboxStatus, float | None]] = {}

    def get(self, describe: bool, *, fresh: bool = False) -> SandboxStatus:
        with self._lock:
            kept = None if fresh else self._current(describe)
            if kept is None:
                kept = self._kept[describe] = _detect(describe)
            return kept[0]

    def known(self) -> SandboxStatus | None:
        """An answer still kept, if any: never probes, never waits for a probe."""
        for describe in (False, True):
            kept = self._current(describe)
            if kept is not None:
                return kept[0]
        return None

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def _current(self, describe: bool) -> tuple[SandboxStatus, float | None] | None:
        kept = self._kept.get(describe)
        if kept is not None and kept[1] is not None and time.monotonic() - kept[1] >= RETRY_FAILED_PROBE_S:
            return None  # it failed a while ago: ask again
        return kept


_ANSWERS = _Answers()


def _detect(describe: bool) -> tuple[SandboxStatus, float | None]:
    users = sandbox_users()
    seccomp = _probe_seccomp(describe)
    works, detail, ran = _probe_bubblewrap(describe)
    status = _status(users, seccomp, (works, detail))
    failed = (ran and not works) or bool(status.missing(SandboxMode.AUTO))
    return status, time.monotonic() if failed else None


def provisional_status() -> SandboxStatus:
    """What :func:`sandbox_status` will say if bubblewrap works as its probe (see
    :func:`begin_probe`) tries it; the answer itself is not waited for. Once this process has
    the answer (a service grading again), the answer itself."""
    known = _ANSWERS.known()
    if known is not None:
        return known
    command, why_not = _bubblewrap_probe()
    return _status(sandbox_users(), _probe_seccomp(False), (command is not None, why_not or "being probed"))


def _status(users: list[SandboxUser], seccomp: tuple[bool, str], bubblewrap: tuple[bool, str]) -> SandboxStatus:
    seccomp_ok, seccomp_detail = seccomp
    bwrap_ok, bwrap_detail = bubblewrap
    uid_ok, uid_detail = _probe_users(users, bwrap_ok)
    userns_ok, userns_detail = userns.layer_detail(root=os.geteuid() == 0, uid=os.geteuid(), bubblewrap=bubblewrap)
    if userns_ok:
        uid_detail += "; the userns layer stands in for it"
    limits = SandboxLimits()
    layers = (
        LayerStatus(layer=Layer.UID, active=uid_ok, detail=uid_detail),
        LayerStatus(layer=Layer.USERNS, active=userns_ok, detail=userns_detail),
        LayerStatus(
            layer=Layer.RLIMITS, active=True,
            detail=f"address space and CPU time per run, files up to {_mib(limits.file_bytes)}, "
            f"{limits.open_files} open files, {limits.processes} processes, no core files",
        ),
        LayerStatus(
            layer=Layer.SESSION, active=True,
            detail="each worker in a new session; its process group and every process of its uid "
            "(or of its namespaces) killed at the end",
        ),
        LayerStatus(layer=Layer.WORKDIR, active=uid_ok or userns_ok, detail=_workdir_detail(uid_ok, userns_ok)),
        LayerStatus(
            layer=Layer.ENVIRONMENT, active=True,
            detail="a minimal explicit environment, one BLAS thread, a fixed hash seed",
        ),
        LayerStatus(
            layer=Layer.OUTPUT, active=True,
            detail=f"worker output read up to {_mib(limits.output_bytes)}, a wall-clock limit per worker, "
            f"each child's output capped at {_mib(limits.file_bytes)}",
        ),
        LayerStatus(layer=Layer.SECCOMP, active=seccomp_ok, detail=seccomp_detail),
        LayerStatus(layer=Layer.BUBBLEWRAP, active=bwrap_ok, detail=bwrap_detail),
    )
    return SandboxStatus(layers=layers)


def _mib(n: int) -> str:
    return f"{n / 1024**2:g} MiB"


def _workdir_detail(uid: bool, namespaces: bool) -> str:
    if uid:
        return f"a private copy of the submission under {tempfile.gettempdir()}, readable by the worker's uid only"
    if namespaces:
        return (
            f"a private copy of the submission under {tempfile.gettempdir()}, readable by uid {os.geteuid()} "
            "only, read-only in the worker's namespaces"
        )
    return "needs the uid or the userns layer (the copy is made readable by the sandbox user only)"


# ------------------------------------------------------------------------------- users
@dataclass(frozen=True)
class SandboxUser:
    """One of the sandbox's users: each running worker has one to itself."""

    name: str
    uid: int
    gid: int


def sandbox_users() -> list[SandboxUser]:
    """The users ``mutagrade-sandbox-N`` of this machine, in order of N (never root, never
    the user this process runs as)."""
    found = []
    for entry in pwd.getpwall():
        match = _USER_NAME.match(entry.pw_name)
        if match and entry.pw_uid not in (0, os.getuid(), os.geteuid()) and entry.pw_gid != 0:
            found.append((int(match.group(1)), SandboxUser(entry.pw_name, entry.pw_uid, entry.pw_gid)))
    return [user for _, user in sorted(found)]


def _probe_users(users: list[SandboxUser], bwrap_ok: bool) -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, f"the grader runs as uid {os.geteuid()}, not root: it cannot switch to a sandbox user"
    if not users:
        return False, f"no user {SANDBOX_USER_PREFIX}N on this machine (run {SETUP_SCRIPT} as root)"
    span = f"{users[0].name}..{users[-1].name.rsplit('-', 1)[1]}" if len(users) > 1 else users[0].name
    uids = sorted(u.uid for u in users)
    detail = f"{len(users)} sandbox user(s) {span} (uids {uids[0]}-{uids[-1]}), one per running worker"
    if bwrap_ok:
        return True, detail
    blocked = _unreachable(_interpreter_paths(), users[0])
    if blocked:
        return False, f"{detail}, but {blocked}; install bubblewrap (it mounts the interpreter in)"
    return True, detail


def _interpreter_paths() -> list[Path]:
    paths = [Path(sys.executable).resolve(), Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    paths.append(_grader_dir())
    return paths


def _grader_dir() -> Path:
    return Path(__file__).absolute().parents[1]


def _unreachable(paths: Iterable[Path], user: SandboxUser) -> str:
    """Why ``user`` cannot reach one of ``paths`` by the permission bits (ACLs aside), or ""."""
    for path in paths:
        for folder in [*reversed(path.parents), path]:
            try:
                info = os.stat(folder)
            except OSError as exc:
                return f"{folder} cannot be read ({exc.strerror})"
            if info.st_uid == user.uid:
                bits = stat.S_IXUSR
            elif info.st_gid == user.gid:
                bits = stat.S_IXGRP
            else:
                bits = stat.S_IXOTH
            if stat.S_ISDIR(info.st_mode) and not info.st_mode & bits:
                return f"{folder} (mode {stat.S_IMODE(info.st_mode):04o}) is not searchable by {user.name}"
    return ""


@dataclass
class _Claim:
    """A sandbox user held by one worker (an exclusive lock), released by :meth:`release`."""

    user: SandboxUser
    lock: int

    def release(self) -> None:
        if self.lock >= 0:
            os.close(self.lock)  # closing drops the flock
            self.lock = -1


def _claim_user(users: Sequence[SandboxUser], wait: float) -> _Claim:
    """Lock a free sandbox user for one worker; first kill whatever a grader that died (killed
    before it could close its worker) left running under it, and remove what it left on disk."""
    claim = _lock_user(users, wait)
    try:
        _kill_user(claim.user.uid)
        _remove_stale_workdirs(claim.user)
    except BaseException:
        claim.release()
        raise
    return claim


def _remove_stale_workdirs(user: SandboxUser) -> None:
    """Remove the work directories of ``user`` (root's, in the user's group): under the user's
    lock none of them belongs to a live worker."""
    base = Path(tempfile.gettempdir())
    for entry in base.glob(f"{_WORKDIR_PREFIX}*"):
        try:
            info = entry.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and info.st_gid == user.gid:
            shutil.rmtree(entry, ignore_errors=True)


def _lock_user(users: Sequence[SandboxUser], wait: float) -> _Claim:
    """Lock the first free user of ``users``, waiting up to ``wait`` seconds for one."""
    _LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    while True:
        for user in users:
            lock = os.open(_LOCK_DIR / f"{user.uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock)
                continue
            return _Claim(user, lock)
        if time.monotonic() > deadline:
            raise SandboxError(
                f"all {len(users)} sandbox users were busy for {wait:g} s: expected one free "
                f"(add users with {SETUP_SCRIPT} SANDBOX_USERS=N, or run fewer gradings at once)"
            )
        time.sleep(0.05)


def user_processes(uid: int) -> list[int]:
    """The live (not zombie) processes whose real, effective or saved uid is ``uid``."""
    return _processes_of({uid})


def _processes_of(uids: AbstractSet[int]) -> list[int]:
    """The live processes whose real, effective or saved uid is one of ``uids``: one pass over
    /proc, whatever the number of users (a machine runs a hundred processes and more)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and not uids.isdisjoint(_uids_of(int(entry))):
            found.append(int(entry))
    return found


def _uids_of(pid: int) -> tuple[int, ...]:
    """The real, effective and saved uids of a live process; () for a process that is gone,
    or a zombie with no thread left (one whose first thread ended, ``exit`` rather than
    ``exit_group``, while others run on reads as a zombie: it is alive, and killed like any
    other). From /proc/<pid>/status, not the folder's owner: a non-dumpable process's folder
    is root's."""
    try:
        fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
    except OSError:
        return ()
    try:
        # The first lines are enough (Name, Umask, State, ..., Uid: about 300 bytes; a name
        # is at most 64 once escaped); one read, not the whole file through a buffered reader.
        # Read on only for a zombie (its Threads line comes later) or, never seen, a Uid line
        # past the first read.
        status = os.read(fd, _STATUS_HEAD)
        if _status_field(status, b"Uid") is None or _dead(_status_field(status, b"State")):
            status += os.read(fd, 1 << 16)
    except OSError:
        return ()
    finally:
        os.close(fd)
    state, uids, threads = (_status_field(status, name) for name in (b"State", b"Uid", b"Threads"))
    if state is None or uids is None:
        return ()  # not the layout of any kernel this runs on: treated as gone
    if _dead(state) and not (threads and int(threads[0]) > 1):
        return ()
    return tuple(int(value) for value in uids[:3])


def _dead(state: list[bytes] | None) -> bool:
    """Whether a status file's State field says zombie or dead."""
    return state is not None and state[:1] in ([b"Z"], [b"X"])


def _status_field(status: bytes, name: bytes) -> list[bytes] | None:
    """The words of one field of a /proc status file (never its first line), or None."""
    at = status.find(b"\n" + name + b":")
    end = status.find(b"\n", at + 1)
    if at < 0 or end < 0:
        return None
    return status[at + len(name) + 2:end].split()


_STATUS_HEAD = 1024


def _kill_user(uid: int, *, rounds: int = 200) -> None:
    """SIGKILL every process of ``uid`` until none is left."""
    _kill_users({uid}, rounds=rounds)


def _kill_users(uids: AbstractSet[int], *, rounds: int = 200) -> None:
    """SIGKILL every process of each of ``uids`` until none is left (a fork bomb refills the
    table while it is being emptied, hence the rounds)."""
    if not uids:
        return
    for _ in range(rounds):
        alive = _processes_of(uids)
        if not alive:
            return
        for pid in alive:
            _kill_pid(pid, uids)
        time.sleep(0.002)
    raise SandboxError(f"processes of sandbox uids {sorted(uids)} survived {rounds} rounds of SIGKILL: {_processes_of(uids)}")


def _kill_pid(pid: int, uids: AbstractSet[int]) -> None:
    # A pidfd pins the process: the pid cannot be reused by an innocent one between the
    # check of its uid and the signal.
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return
    try:
        if not uids.isdisjoint(_uids_of(pid)):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(pidfd)


# ----------------------------------------------------------------------------- seccomp
_ACT_ALLOW = 0x7FFF0000
_CMP_NE, _CMP_EQ, _CMP_MASKED_EQ = 1, 4, 7
_ATTR_TSYNC = 4  # SCMP_FLTATR_CTL_TSYNC: the filter covers every thread of the process
_CLONE_THREAD = 0x00010000
_CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_LOW32 = 0xFFFFFFFF
# The namespaces a run's test process is born in (grader.worker.zygote): the worker may make
# them (and mount in them, which needs them), never its children.
_RUN_NAMESPACES = 0x10000000 | 0x20000000 | 0x00020000

# No grading run needs these; each is a way out of the sandbox, into another process or into
# a large attack surface of the kernel.
_DENIED_IN_WORKER = (
    "ptrace", "process_vm_readv", "process_vm_writev", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "bpf", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "perf_event_open", "userfaultfd", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
    "name_to_handle_at", "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd",
    "lookup_dcookie", "fanotify_init", "kcmp", "pidfd_getfd", "syslog", "vhangup", "iopl",
    "ioperm", "move_pages", "migrate_pages", "uselib",
)
# The children's allow-list: the system calls a numpy + pytest test run makes (measured with
# `strace -f` on graded runs of the course tests and of the bundled student's suite), and their
# harmless kin, so that no test using tmp_path, tempfile, warnings, clocks, random numbers,
# signals to itself or threads meets a refusal. Everything else fails with EPERM: no new
# process or program, no socket, no new session, no device node, no namespace, no mount.
# Names this architecture lacks (the 32-bit spellings, or calls newer than libseccomp) are
# skipped. A few more calls are allowed with some arguments only (_ALLOWED_WITH).
CHILD_SYSCALLS: frozenset[str] = frozenset((
    # Ending: the process's and a thread's exit, returning from a signal handler, resuming a
    # call a signal interrupted.
    "exit", "exit_group", "rt_sigreturn", "restart_syscall",
    # Memory: the allocator, numpy's buffers, thread stacks, OpenBLAS's NUMA-aware buffers.
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "membarrier",
    "mbind", "get_mempolicy", "set_mempolicy",
    # Reading and writing what is open: the test files, fixtures, the report pipe, tmp_path.
    "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev",
    "pwritev2", "lseek", "_llseek", "sendfile", "copy_file_range", "fsync", "fdatasync",
    "ftruncate", "fallocate", "fadvise64", "readahead", "flock",
    # Opening, closing and duplicating descriptors; pipes inside the process; waiting on them.
    "open", "openat", "openat2", "creat", "close", "close_range", "dup", "dup2", "dup3", "pipe",
    "pipe2", "select", "pselect6", "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    # Looking at the file system: stat, folder listings, links, the working directory.
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "getcwd", "chdir", "fchdir",
    # Changing files where the process may write (its own temporary folder): what tmp_path,
    # tempfile and shutil's copies do.
    "mkdir", "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link",
    "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "umask",
    "truncate", "utime", "utimes", "utimensat", "futimesat", "getxattr", "lgetxattr", "fgetxattr",
    "listxattr", "llistxattr", "flistxattr", "setxattr", "lsetxattr", "fsetxattr", "removexattr",
    "lremovexattr", "fremovexattr",
    # Clocks, sleeping and timers: time, the per-test time limit (setitimer and SIGALRM).
    "clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "time", "nanosleep",
    "times", "getitimer", "setitimer", "alarm", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime", "timerfd_gettime",
    # Randomness: os.urandom, random's seeding, numpy's default_rng.
    "getrandom",
    # What the process may ask about itself and the machine, and its own limits.
    "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
    "getresgid", "getgroups", "getpgid", "getpgrp", "getsid", "getrlimit", "setrlimit",
    "getrusage", "sysinfo", "uname", "getpriority", "getcpu", "capget", "sched_getaffinity",
    "sched_getparam", "sched_getscheduler", "sched_getattr", "sched_get_priority_max",
    "sched_get_priority_min", "sched_rr_get_interval", "sched_yield",
    # Signals inside the process: handlers, masks, alternate stacks, waiting for one.
    "rt_sigaction", "rt_sigprocmask", "rt_sigpending", "rt_sigsuspend", "rt_sigtimedwait",
    "sigaltstack", "pause", "signalfd", "signalfd4",
    # Threads (clone itself only for a thread, below): locks, thread-local state, stacks.
    "futex", "futex_waitv", "set_robust_list", "set_tid_address", "rseq", "arch_prctl",
    "map_shadow_stack",
))
# Commands of fcntl, ioctl and prctl a child may use: descriptor flags, locks, pipe sizes and
# seals; the terminal and non-blocking queries Python makes on every file it opens; thread and
# memory-area names and read-only questions. Not among them: F_SETOWN, F_SETSIG, F_SETOWN_EX,
# F_SETLEASE, F_NOTIFY, FIOSETOWN, SIOCSPGRP, FIOASYNC (each makes the kernel signal a chosen
# process), TIOCSTI (types into a terminal), or any prctl that changes the process.
_FCNTL_COMMANDS = (0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 16, 36, 37, 38, 1025, 1030, 1031, 1032, 1033, 1034)
_IOCTL_REQUESTS = (0x5401, 0x5413, 0x540F, 0x541B, 0x5421, 0x5450, 0x5451)  # TCGETS, TIOCGWINSZ, ...
_PRCTL_OPTIONS = (2, 3, 15, 16, 21, 23, 30, 39, 0x53564D41)  # PR_GET_PDEATHSIG, ..., PR_SET_VMA
# In a child, running the tests: no new process, no new program, no new session or group.
_DENIED_IN_CHILD = (
    "fork", "vfork", "execve", "execveat", "setsid", "setpgid", "pidfd_open", "pidfd_send_signal",
    "mount",  # the worker may mount in a run's own namespaces; a child never
)
# Calls that reach another process by pid (argument index of the pid): only the child itself.
_OWN_PID_ONLY = (("kill", 0), ("tkill", 0), ("tgkill", 0), ("rt_sigqueueinfo", 0), ("rt_tgsigqueueinfo", 0))
# Calls where pid 0 means "myself": any other pid (the worker, a sibling) is refused.
_SELF_ZERO_ONLY = (
    ("prlimit64", 0), ("setpriority", 1), ("sched_setaffinity", 0), ("sched_setscheduler", 0),
    ("sched_setparam", 0), ("sched_setattr", 0), ("ioprio_set", 1),
)
_F_SETOWN, _F_SETSIG, _F_SETOWN_EX = 8, 10, 15  # make the kernel signal a chosen process
_FIOSETOWN, _SIOCSPGRP, _TIOCSTI = 0x8901, 0x8902, 0x5412
_AF_UNIX = 1


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


@functools.cache
def _libseccomp() -> ctypes.CDLL:
    """libseccomp through ctypes (the Debian package libseccomp2): no compiler, no PyPI
    package, and the same library inside bubblewrap (it is under /usr)."""
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_api_get.restype = ctypes.c_uint
    lib.seccomp_version.restype = ctypes.POINTER(_Version)
    return lib


class _Filter:
    """A seccomp filter built with libseccomp: by default one that allows everything but the
    calls denied; with ``default`` an errno action, an allow-list of the calls allowed."""

    def __init__(self, lib: ctypes.CDLL, default: int = _ACT_ALLOW) -> None:
        self.lib = lib
        self.ctx = lib.seccomp_init(default)
        if not self.ctx:
            raise SandboxError("seccomp_init failed: expected a seccomp context, got none")

    def deny(self, name: str, *conditions: tuple[int, int, int, int], code: int = errno.EPERM) -> None:
        self._rule(_errno_action(code), name, conditions)

    def allow(self, name: str, *conditions: tuple[int, int, int, int]) -> None:
        self._rule(_ACT_ALLOW, name, conditions)

    def _rule(self, action: int, name: str, conditions: tuple[tuple[int, int, int, int], ...]) -> None:
        number = _syscall_number(self.lib, name)
        if number < 0:  # not a system call of this architecture, or newer than libseccomp
            return
        array = (_ArgCmp * len(conditions))(*(_ArgCmp(*c) for c in conditions)) if conditions else None
        rc = self.lib.seccomp_rule_add_array(self.ctx, action, number, len(conditions), array)
        if rc < 0:
            self.lib.seccomp_release(self.ctx)
            raise SandboxError(f"seccomp rule for {name} {conditions}: expected 0, libseccomp returned {rc}")

    def load(self, *, all_threads: bool = False) -> None:
        try:
            if all_threads:
                self.lib.seccomp_attr_set(self.ctx, _ATTR_TSYNC, 1)
            rc = self.lib.seccomp_load(self.ctx)
            if rc < 0:
                raise SandboxError(f"seccomp_load: expected 0, got {rc} ({os.strerror(-rc)})")
        finally:
            self.lib.seccomp_release(self.ctx)


def _worker_filter(lib: ctypes.CDLL) -> _Filter:
    rules = _Filter(lib)
    for name in _DENIED_IN_WORKER:
        rules.deny(name)
    rules.deny("socket", (0, _CMP_NE, _AF_UNIX, 0))  # AF_UNIX only: no internet, netlink, packet
    for flag in _CLONE_NAMESPACES:
        if not flag & _RUN_NAMESPACES:
            rules.deny("clone", (0, _CMP_MASKED_EQ, flag, flag))
    rules.deny("clone3", code=errno.ENOSYS)  # its flags sit in memory a filter cannot read; libc falls back to clone
    rules.deny("ioctl", (1, _CMP_MASKED_EQ, _LOW32, _TIOCSTI))
    return rules


def _syscall_number(lib: ctypes.CDLL, name: str) -> int:
    """The call's number on this architecture; negative if it has none here."""
    return lib.seccomp_syscall_resolve_name(name.encode())


def child_syscalls_here() -> frozenset[str]:
    """The names of :data:`CHILD_SYSCALLS` this architecture has: the allow-list as installed."""
    lib = _libseccomp()
    return frozenset(name for name in CHILD_SYSCALLS if _syscall_number(lib, name) >= 0)


def _child_allow_filter(lib: ctypes.CDLL, pid: int) -> _Filter:
    """The children's allow-list, with the argument rules of the deny-list turned around: a
    thread but no process, signals to itself only, the harmless commands of fcntl, ioctl and
    prctl only. The worker's filter still applies beneath it (filters stack)."""
    rules = _Filter(lib, default=_errno_action(errno.EPERM))
    for name in sorted(CHILD_SYSCALLS):
        rules.allow(name)
    # clone for a thread, never with a new namespace (the worker refuses those too).
    rules.allow("clone", (0, _CMP_MASKED_EQ, _CLONE_THREAD | sum(_CLONE_NAMESPACES), _CLONE_THREAD))
    rules.deny("clone3", code=errno.ENOSYS)  # as in the worker: libc then falls back to clone
    for name, arg in _OWN_PID_ONLY:
        rules.allow(name, (arg, _CMP_EQ, pid, 0))
    for name, arg in _SELF_ZERO_ONLY:
        rules.allow(name, (arg, _CMP_EQ, 0, 0))
    for name, values in (("fcntl", _FCNTL_COMMANDS), ("ioctl", _IOCTL_REQUESTS)):
        for value in values:
            rules.allow(name, (1, _CMP_MASKED_EQ, _LOW32, value))
    for option in _PRCTL_OPTIONS:
        rules.allow("prctl", (0, _CMP_MASKED_EQ, _LOW32, option))
    return rules


def _child_filter(lib: ctypes.CDLL, pid: int) -> _Filter:
    """The children's deny-list: the fallback where the allow-list cannot be installed."""
    rules = _Filter(lib)
    for name in _DENIED_IN_CHILD:
        rules.deny(name)
    rules.deny("clone", (0, _CMP_MASKED_EQ, _CLONE_THREAD, 0))  # threads yes, processes no
    for flag in _CLONE_NAMESPACES:
        rules.deny("clone", (0, _CMP_MASKED_EQ, flag, flag))  # and no namespaces
    for name, arg in _OWN_PID_ONLY:
        rules.deny(name, (arg, _CMP_NE, pid, 0))
    for name, arg in _SELF_ZERO_ONLY:
        rules.deny(name, (arg, _CMP_NE, 0, 0))
    for command in (_F_SETOWN, _F_SETSIG, _F_SETOWN_EX):
        rules.deny("fcntl", (1, _CMP_MASKED_EQ, _LOW32, command))
    for command in (_FIOSETOWN, _SIOCSPGRP):
        rules.deny("ioctl", (1, _CMP_MASKED_EQ, _LOW32, command))
    return rules


def _export_bpf(rules: _Filter) -> bytes:
    """The filter as the kernel loads it: an array of ``struct sock_filter`` (8 bytes each:
    code, jt, jf, k). The rules are released."""
    fd = os.memfd_create("mutagrade-seccomp")
    try:
        rc = rules.lib.seccomp_export_bpf(rules.ctx, fd)
        if rc < 0:
            raise SandboxError(f"seccomp_export_bpf: expected 0, got {rc} ({os.strerror(-rc)})")
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)
        rules.lib.seccomp_release(rules.ctx)


# Stands for the child's pid in the compiled allow-list: above any pid Linux hands out
# (at most 2**22), and no other constant of the filter.
_PID_PLACEHOLDER = 0x5EC0_1D5F
_BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: "is the loaded word equal to k"


@dataclass(frozen=True)
class ChildProgram:
    """The children's allow-list compiled once, in the worker: each child only writes its own
    pid into ``slots`` (the offsets of the comparisons with the placeholder) and loads it,
    instead of building the filter again (about 3 ms a child)."""

    code: bytes
    slots: tuple[int, ...]

    def for_pid(self, pid: int) -> bytes:
        program = bytearray(self.code)
        for offset in self.slots:
            struct.pack_into("<I", program, offset, pid)
        return bytes(program)


def child_allow_program(lib: ctypes.CDLL) -> ChildProgram | None:
    """The allow-list of :func:`_child_allow_filter`, compiled with a placeholder pid; None if
    it cannot be compiled here or the placeholder shows up anywhere but in an equality test
    (the children then build the filter themselves)."""
    try:
        code = _export_bpf(_child_allow_filter(lib, _PID_PLACEHOLDER))
    except (OSError, SandboxError, AttributeError):
        return None
    if not code or len(code) % 8:
        return None
    slots = []
    for offset in range(0, len(code), 8):
        op, _, _, k = struct.unpack_from("<HBBI", code, offset)
        if k == _PID_PLACEHOLDER:
            if op != _BPF_JEQ_K:
                return None
            slots.append(offset + 4)
    return ChildProgram(code=code, slots=tuple(slots)) if slots else None


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _load_program(code: bytes) -> None:
    """Install a compiled filter in this (single-threaded) process, as ``seccomp_load`` does:
    no new privileges, then the filter."""
    _libc_prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.addressof(buffer))
    _libc_prctl(22, 2, ctypes.byref(fprog))  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def _probe_seccomp(describe: bool = True) -> tuple[bool, str]:
    if not Path("/proc/self/status").read_text().count("Seccomp:"):
        return False, "the kernel has no seccomp support"
    try:
        lib = _libseccomp()
    except OSError as exc:
        return False, f"libseccomp.so.2 cannot be loaded ({exc}); install the Debian package libseccomp2"
    level = lib.seccomp_api_get()
    if level < 1:
        return False, f"libseccomp found, but the kernel offers no seccomp filters (API level {level})"
    version = lib.seccomp_version().contents
    why_not = _probe_allow_list(lib) if describe else None
    if why_not is None:
        children = "in each child the allow-list where it installs, else the deny-list (mutagrade doctor says which)"
    elif why_not:
        children = (
            "in each child the deny-list: no fork or exec, no signal to any other process (the allow-list "
            f"could not be installed here: {why_not})"
        )
    else:
        children = (
            f"in each child an allow-list of {len(child_syscalls_here())} system calls (threads but no "
            "processes, signals to itself only), everything else fails with EPERM"
        )
    return True, (
        f"libseccomp {version.major}.{version.minor}.{version.micro} (API level {level}): in the worker no "
        "internet, netlink or packet sockets, ptrace, process_vm_*, unshare, bpf, io_uring, keyctl, "
        f"perf_event_open; {children}"
    )


def _probe_allow_list(lib: ctypes.CDLL) -> str:
    """Why the children's allow-list cannot be installed here, or "" if it can: a throwaway
    child installs it, then checks that an unlisted call (personality) fails with EPERM."""
    libc = ctypes.CDLL(None, use_errno=True)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the throwaway child: ctypes and raw descriptors only, then _exit
        why = "the probe did not finish"
        try:
            os.close(read_end)
            _child_allow_filter(lib, os.getpid()).load()
            refused = libc.personality(-1) == -1 and ctypes.get_errno() == errno.EPERM
            why = "" if refused else "an unlisted call (personality) was not refused with EPERM"
        except BaseException as exc:  # noqa: BLE001 - the reason goes to the parent
            why = str(exc) or type(exc).__name__
        finally:
            os.write(write_end, why.encode()[:4096])
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        why = reader.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return why


# ------------------------------------------------------------------- worker-side hardening
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
        _libc_prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
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
                    _child_allow_filter(self.libseccomp, os.getpid()).load()
                return
            except SandboxError:
                pass  # the deny-list below; `mutagrade doctor` says which one this machine gets
        _child_filter(self.libseccomp, os.getpid()).load()


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
    _libc_prctl(4, 0)  # PR_SET_DUMPABLE, 0: inherited by every child across fork
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
            library = _libseccomp()
            _worker_filter(library).load(all_threads=True)
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


def _libc_prctl(option: int, value: int, pointer: object = None) -> None:
    """``prctl(option, value, pointer or 0, 0, 0)``, raising SandboxError if it fails."""
    third = ctypes.c_ulong(0) if pointer is None else pointer
    if _libc().prctl(option, ctypes.c_ulong(value), third, ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        code = ctypes.get_errno()
        raise SandboxError(f"prctl({option}, {value}): expected 0, got errno {code} ({os.strerror(code)})")


# --------------------------------------------------------------------------- bubblewrap
_NAMESPACES = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The few files of /etc a Python process reads; the rest of /etc (the grader's configuration
# among it) stays out of sight.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "passwd", "group", "nsswitch.conf", "localtime")


def _tool(name: str) -> str | None:
    return shutil.which(name, path=_SYSTEM_PATH)


# The uid the probe drops to: nobody's, never a sandbox user's. Starting a worker kills every
# process of the sandbox user it claims (whatever a dead grader left there), so a probe running
# as one could be killed by another grading's start, and "bubblewrap fails here" would be kept
# as this process's answer.
_PROBE_UID = 65534


def _bubblewrap_probe() -> tuple[list[str] | None, str]:
    """The command that tries bubblewrap as a worker uses it (namespaces, mounts, then setpriv
    to an unprivileged uid; for a grader that is not root, in a user namespace of its own), or
    None and why it cannot."""
    bwrap, setpriv = _tool("bwrap"), _tool("setpriv")
    if bwrap is None:
        return None, "bwrap not found; install the Debian package bubblewrap"
    if os.geteuid() != 0:
        return [bwrap, *userns.BWRAP_ARGS, *_bwrap_base(privileged=False), "--", "/bin/true"], ""
    if setpriv is None:
        return None, "setpriv not found; install the Debian package util-linux"
    return [bwrap, *_bwrap_base(), "--", *_drop(setpriv, _PROBE_UID, _PROBE_UID), "/bin/true"], ""


# The bubblewrap probe, started by begin_probe() and answered by the next _probe_bubblewrap().
_PROBING: dict[tuple[str, ...], subprocess.Popen[bytes]] = {}


def begin_probe() -> None:
    """Start probing bubblewrap now, without waiting for it: the next :func:`check_mode` only
    collects the answer. A grading starts its workers meanwhile (they run nothing until the
    check has passed)."""
    if _ANSWERS.known() is not None:
        return
    command, _ = _bubblewrap_probe()
    if command is None or tuple(command) in _PROBING:
        return
    try:
        _PROBING[tuple(command)] = _start_probe(command)
    except OSError:
        pass  # the probe itself runs it again, and says why it cannot


def _start_probe(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={"PATH": _SYSTEM_PATH})


def _probe_bubblewrap(describe: bool = True) -> tuple[bool, str, bool]:
    """Whether bubblewrap works here, how it is set up or why not, and whether it was run at
    all (a run that failed is tried again later: see RETRY_FAILED_PROBE_S)."""
    command, why_not = _bubblewrap_probe()
    if command is None:
        return False, why_not, False
    bwrap = command[0]
    try:
        running = _PROBING.pop(tuple(command), None) or _start_probe(command)
        try:
            _, stderr = running.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            running.kill()
            running.wait()
            raise
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{bwrap} could not be run: {exc}", True
    if running.returncode != 0:
        why = stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {running.returncode}"]
        return False, f"{bwrap} fails here: {why[0]}", True
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip() if describe else ""
    user = "" if os.geteuid() == 0 else "user, "
    return True, (
        f"{version or bwrap}: new {user}pid, net, ipc, uts and mount namespaces; system read-only; only the "
        "interpreter, the worker's code, the package under test and the submission's copy visible; private /tmp"
    ), True


def _drop(setpriv: str, uid: int, gid: int) -> list[str]:
    """setpriv, run by root inside the namespaces, becomes the sandbox user for good."""
    return [
        setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--",
    ]


def _bwrap_base(*, privileged: bool = True) -> list[str]:
    """The namespaces and the system's mounts; ``privileged`` (root's bubblewrap) keeps the two
    capabilities setpriv needs to switch to the sandbox user (it drops them with the uid)."""
    args = [*_NAMESPACES, "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if privileged:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    return args


def _bwrap_args(
    *,
    readonly: Sequence[tuple[Path, Path]],
    tmp_bytes: int,
    chdir: Path,
    hidden: Sequence[Path] = (),
    privileged: bool = True,
) -> list[str]:
    """bubblewrap's arguments: the system, a private /tmp, then each (source, destination)
    bound read-only, the folders above each destination made first, searchable by all; each
    ``hidden`` file is replaced by an empty one."""
    args = [*_bwrap_base(privileged=privileged), "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/"), Path("/tmp"), Path("/etc"), Path("/usr")}
    bound: list[Path] = [Path("/usr")]
    for source, dest in sorted(readonly, key=lambda pair: len(pair[1].parts)):
        if source == dest and any(dest.is_relative_to(b) for b in bound):
            continue  # already in sight (a system Python under /usr)
        for folder in reversed(dest.parents):
            if folder in made or any(folder.is_relative_to(b) for b in bound):
                continue
            args += ["--perms", "0755", "--dir", str(folder)]
            made.add(folder)
        args += ["--ro-bind", str(source), str(dest)]
        bound.append(dest)
        made.add(dest)
    for path in _with_bytecode(hidden):
        args += ["--ro-bind", "/dev/null", str(path)]
    args += ["--chdir", str(chdir)]
    return args


def _with_bytecode(hidden: Sequence[Path]) -> list[Path]:
    """Each hidden source file and its compiled forms beside it (``__pycache__/NAME.*.pyc``):
    bytecode gives the source away as well."""
    files: list[Path] = []
    for path in hidden:
        files.append(path)
        files += sorted(path.parent.joinpath("__pycache__").glob(f"{path.stem}.*.pyc"))
    return files


# ------------------------------------------------------------------------------ workdir
def _copy_submission(tests_dir: Path, dest: Path, limits: SandboxLimits) -> None:
    """Copy the regular files and folders of ``tests_dir`` (never a link, a device or a
    ``__pycache__``) into ``dest``: the worker reads the copy, never the original.

    Raises:
        SandboxError: if the submission holds more than the limits allow.
    """
    total, count = 0, 0
    for folder, dirs, files in os.walk(tests_dir, followlinks=False):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(folder, d))]
        target = dest / os.path.relpath(folder, tests_dir)
        target.mkdir(mode=0o755, exist_ok=True)
        for name in files:
            count += 1
            if count > limits.submission_files:
                raise SandboxError(
                    f"{tests_dir}: expected at most {limits.submission_files} files, found more"
                )
            copied = _copy_file(Path(folder) / name, target / name, limits.submission_bytes - total)
            if copied is None:
                raise SandboxError(
                    f"{tests_dir}: expected at most {_mib(limits.submission_bytes)} of files, found more"
                )
            total += copied


def _copy_file(source: Path, dest: Path, budget: int) -> int | None:
    """Copy one regular file; its size, 0 if it is not a regular file, None if it is larger
    than ``budget`` bytes (checked before anything is copied)."""
    # O_NOFOLLOW and a check of what was opened: a file swapped for a link to a root-only file
    # during the copy is refused, not read by root into the sandbox.
    try:
        handle = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0  # a link or something unreadable: not part of the copy
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return 0
        if info.st_size > budget:
            return None
        with os.fdopen(os.dup(handle), "rb") as reader, open(dest, "wb") as writer:
            shutil.copyfileobj(reader, writer)
        os.chmod(dest, 0o644)
        return info.st_size
    finally:
        os.close(handle)


# ---------------------------------------------------------------------------- the worker
@dataclass(frozen=True)
class WorkerOutput:
    """What came back from a worker: its results (stdout), the tail of its stderr, and, when
    it did not end normally, why."""

    stdout: bytes
    stderr: bytes
    problem: str


class SandboxedWorker:
    """A started worker, in its sandbox. Send it its job with :meth:`communicate`; always
    :meth:`close` it (idempotent): that kills its session and every process of its uid (or
    of its namespaces), frees its sandbox user and removes its work directory.

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
        claim: _Claim | None = None,
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

    def communicate(self, data: bytes, *, timeout: float) -> WorkerOutput:
        """Send ``data`` on the worker's stdin, read its stdout up to the output cap and the last
        64 KiB of its stderr, until it exits or ``timeout`` seconds pass (then it is killed)."""
        return _exchange(self.process, data, timeout=timeout, cap=self._limits.output_bytes, kill=self.close)

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
            _copy_submission(tests_dir, dest, self._limits)
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
                stream.close()
        return True

    def _free(self) -> None:
        # The copy goes before the user is freed: the next holder finds nothing of ours.
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        if self._claim is not None:
            self._claim.release()
        if self._namespaces is not None:
            self._namespaces.close()

    def __enter__(self) -> SandboxedWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
            _kill_users({worker._claim.user.uid for worker in closing if worker._claim is not None})
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
        package_dir: the ``tinyllm`` package under test (visible read-only).
        readonly: other folders the tests may read (the shipped fixtures), visible read-only.
        env: the worker's environment (the sandbox adds TMPDIR and HOME).
        limits: the sandbox's limits.
        hidden: files under ``package_dir`` the worker must not read (the reference's
            ``gru.py`` while variants are graded: a run compares with nothing but behaviour);
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
    claim = _claim_user(sandbox_users(), limits.claim_timeout)
    workdir: Path | None = None
    try:
        workdir = _make_workdir(tests_dir, claim.user, limits)
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
    userns.remove_stale_workdirs(Path(tempfile.gettempdir()), _WORKDIR_PREFIX)
    namespaces = userns.Namespaces()
    workdir: Path | None = None
    try:
        workdir = _make_workdir(tests_dir, None, limits)
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
    extra = {"MUTAGRADE_SITE_PACKAGES": os.pathsep.join(packages), "MUTAGRADE_GRADER": str(_grader_dir())}
    return [sys.executable, "-P", "-S", "-c", _WORKER_BOOTSTRAP], {**env, **extra}


def _make_workdir(tests_dir: Path | None, user: SandboxUser | None, limits: SandboxLimits) -> Path:
    """A fresh folder: ``tests`` (the copy, root's, read-only to the user; empty for a worker
    that grades submissions one after another) and ``tmp`` (the user's); the folder itself
    root's and the user's group's, closed to everyone else. With no ``user`` (a grader that is
    not root) only ``tests``, in a folder only the grader's own user may enter (the worker sees
    the copy read-only, in its namespaces)."""
    workdir = Path(tempfile.mkdtemp(prefix=_WORKDIR_PREFIX))  # mode 0700
    try:
        if tests_dir is not None:
            _copy_submission(tests_dir, workdir / "tests", limits)
        else:
            (workdir / "tests").mkdir()
        (workdir / "tests").chmod(0o755)
        if user is None:
            return workdir
        tmp = workdir / "tmp"
        tmp.mkdir(mode=0o700)
        os.chown(tmp, user.uid, user.gid)
        os.chown(workdir, 0, user.gid)
        workdir.chmod(0o750)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return workdir


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
    bwrap = _tool("bwrap")
    assert bwrap is not None  # checked by the probe  # noqa: S101
    mounts = [(path.resolve(), path) for path in _visible(readonly)] + [(copy, tests_dir)]
    privileged = isinstance(user, SandboxUser)
    options = _bwrap_args(readonly=mounts, tmp_bytes=limits.tmp_bytes, chdir=tests_dir, hidden=hidden, privileged=privileged)
    private = {**env, "TMPDIR": "/tmp", "HOME": "/tmp"}
    if isinstance(user, SandboxUser):
        setpriv = _tool("setpriv")
        assert setpriv is not None  # checked by the probe  # noqa: S101
        args = [bwrap, *options, "--", *_drop(setpriv, user.uid, user.gid), *command]
        return tests_dir, _popen(args, env=private, cwd=Path("/"))
    args = [bwrap, *user.bwrap_args(), *options, "--", *command]
    try:
        return tests_dir, _popen(args, env=private, cwd=Path("/"), pass_fds=(user.info_fd,))
    finally:
        user.started()


def _visible(readonly: Sequence[Path]) -> list[Path]:
    """The folders the worker needs to see, outermost only: the interpreter and its packages,
    the worker's code, and ``readonly``. Each appears at the path the worker knows it by."""
    wanted = [Path(sys.prefix), Path(sys.base_prefix), _grader_dir(), *map(Path, site.getsitepackages()), *readonly]
    absolute = {Path(os.path.abspath(path)) for path in wanted if os.path.exists(path)}
    kept: list[Path] = []
    for path in sorted(absolute, key=lambda p: len(p.parts)):
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return kept


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


def _exchange(
    process: subprocess.Popen[bytes], data: bytes, *, timeout: float, cap: int, kill: Callable[[], None]
) -> WorkerOutput:
    """communicate() with a cap: stdout beyond ``cap`` bytes stops the worker; of stderr only
    the last 64 KiB are kept."""
    assert process.stdin and process.stdout and process.stderr  # noqa: S101 - started with pipes
    deadline = time.monotonic() + timeout
    stdout, stderr = bytearray(), bytearray()
    pending = memoryview(data)
    problem = ""
    with selectors.DefaultSelector() as selector:
        for stream, events in ((process.stdin, selectors.EVENT_WRITE), (process.stdout, selectors.EVENT_READ), (process.stderr, selectors.EVENT_READ)):
            os.set_blocking(stream.fileno(), False)
            selector.register(stream, events)
        if not pending:
            selector.unregister(process.stdin)
            process.stdin.close()
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                problem = f"the worker passed its time limit of {timeout:g} s"
                break
            for key, _ in selector.select(timeout=min(left, 1.0)):
                stream = key.fileobj
                if stream is process.stdin:
                    try:
                        written = os.write(process.stdin.fileno(), pending[:65536])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        written = len(pending)
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(process.stdin)
                        process.stdin.close()
                    continue
                try:
                    chunk = os.read(stream.fileno(), 65536)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(stream)
                    continue
                if stream is process.stdout:
                    stdout += chunk
                    if len(stdout) > cap:
                        problem = f"the worker wrote more than {_mib(cap)} of results and was stopped"
                        del stdout[cap:]
                        break
                else:
                    stderr += chunk
                    del stderr[:-_STDERR_TAIL]
            if problem:
                break
    if problem:
        kill()
    else:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill()
            problem = f"the worker passed its time limit of {timeout:g} s"
        else:
            problem = f"the worker exited with status {process.returncode}"
    return WorkerOutput(stdout=bytes(stdout), stderr=bytes(stderr), problem=problem)

