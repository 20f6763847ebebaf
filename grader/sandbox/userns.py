"""The sandbox of a grader that is not root: user namespaces in place of the sandbox users.

Root starts each worker as a sandbox user of its own (:mod:`grader.sandbox.users`, the uid
layer). A user without root cannot switch uid; where the kernel allows unprivileged user
namespaces, bubblewrap gives each worker new user, pid, net, ipc, uts and mount namespaces
instead (the userns layer): the worker keeps the grader's uid, but sees no process but its own
(and nothing of the machine's network), and no file but the system, read-only, the few folders
it needs, read-only, and a private ``/tmp``. Its copy of the tests lives in a folder only the
grader's user may read, mounted read-only in its namespaces. Seccomp and the rlimits are the
same as root's: the kernel counts the processes of a user namespace against the limit set in
it, so the process limit is the worker's own, whatever else the user runs. Everything in the
namespaces dies with its first process, which dies with bubblewrap (:class:`Namespaces` waits
for that); what a grader killed outright leaves goes with the same user's next worker
(:func:`remove_stale_workdirs`).

This module knows nothing of the rest of the sandbox: :mod:`grader.sandbox.status` asks it what
the kernel allows, :mod:`grader.sandbox.bubblewrap` which arguments bubblewrap takes, and
:mod:`grader.sandbox.process` hands it each worker's teardown.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

__all__ = ["BWRAP_ARGS", "Namespaces", "kernel_refusal", "layer_detail", "remove_stale_workdirs"]

# Before the namespaces and mounts of grader.sandbox.bubblewrap. With no --cap-add the worker
# holds no capability anywhere, its bounding set empty; nested user namespaces stay allowed (each
# run's test process is born in namespaces of its own, see grader.worker.zygote).
BWRAP_ARGS = ("--unshare-user",)

# The switches of a kernel that refuse user namespaces to a process without privileges, with
# the value that refuses (Debian's and Ubuntu's own, then every kernel's).
_SWITCHES = (
    ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
    ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
    ("/proc/sys/user/max_user_namespaces", "0"),
)
_TEARDOWN_S = 10.0  # how long a closed worker's namespaces may take to empty
_STALE_AFTER_S = 60.0  # a work directory no grader holds, this old, is a dead grader's


def kernel_refusal() -> str:
    """Why this kernel refuses user namespaces to a user without root (the switch and its
    value), or "" where nothing says it does."""
    for path, refuses in _SWITCHES:
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue  # no such switch on this kernel
        if value == refuses:
            name = path.removeprefix("/proc/sys/").replace("/", ".")
            return f"{name} is {value}"
    if not Path("/proc/self/ns/user").exists():
        return "the kernel has no user namespaces"
    return ""


def layer_detail(*, root: bool, uid: int, bubblewrap: tuple[bool, str]) -> tuple[bool, str]:
    """Whether the userns layer holds for a grader of ``uid`` (``root`` or not), given whether
    bubblewrap runs in a user namespace of its own here and why not; and what doctor says."""
    works, why_not = bubblewrap
    if root:
        return False, "not used: root starts each worker as a sandbox user of its own (the uid layer)"
    if works:
        return True, (
            f"each worker in a user namespace of its own (uid {uid} there, no capability), with new pid, "
            "net, ipc, uts and mount namespaces: no other process, no network, only its own files in sight"
        )
    refusal = kernel_refusal()
    hint = f"; the kernel refuses unprivileged user namespaces ({refusal})" if refusal else ""
    return False, f"bubblewrap cannot give a worker a user namespace here: {why_not}{hint}"


class Namespaces:
    """One worker's namespaces, seen from the grader: bubblewrap tells, on a pipe of its
    own, which process is their first; :meth:`pin` holds that process before bubblewrap is
    killed, :meth:`wait_empty` waits for it to be gone (the kernel kills every other process
    of a pid namespace when its first one ends, before that one is reported gone)."""

    def __init__(self) -> None:
        self._read, self.info_fd = os.pipe2(os.O_CLOEXEC)  # bubblewrap's end is passed by number
        self._first = -1  # a pidfd of the namespaces' first process, once pinned
        self._data = b""  # what bubblewrap has told so far
        self._lock = threading.Lock()  # a grading's watchdog may kill the worker while it is closed
        self._held = -1  # the work directory, locked while the worker lives

    def hold(self, workdir: Path) -> None:
        """Lock ``workdir`` for the worker's life: :func:`remove_stale_workdirs` leaves it alone."""
        self._held = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fcntl.flock(self._held, fcntl.LOCK_EX)

    def bwrap_args(self) -> list[str]:
        """bubblewrap's arguments for a user namespace, with the pipe it tells on."""
        return [*BWRAP_ARGS, "--info-fd", str(self.info_fd)]

    def started(self) -> None:
        """Once bubblewrap is started: only it keeps the pipe's other end."""
        if self.info_fd >= 0:
            os.close(self.info_fd)
            self.info_fd = -1

    def pin(self, bwrap: subprocess.Popen[bytes]) -> None:
        """Before ``bwrap`` is killed: hold the first process of its namespaces (its own child),
        if it has one yet."""
        with self._lock:
            if self._first < 0 and self._read >= 0 and bwrap.poll() is None:
                self._pin(bwrap)

    def _pin(self, bwrap: subprocess.Popen[bytes]) -> None:
        info = self._info(deadline=time.monotonic() + 1.0)
        child = info.get("child-pid")
        if not isinstance(child, int) or child <= 0:
            return
        try:
            pidfd = os.pidfd_open(child)
        except OSError:
            return
        if _parent(child) == bwrap.pid:  # not another process that took a reused pid
            self._first = pidfd
        else:
            os.close(pidfd)

    def wait_empty(self, timeout: float = _TEARDOWN_S) -> bool:
        """Once bubblewrap is killed: wait until no process of the namespaces is left; False if
        that took longer than ``timeout`` seconds."""
        return self._first < 0 or _readable(self._first, timeout)

    def close(self) -> None:
        with self._lock:
            for fd in (self._read, self.info_fd, self._first, self._held):
                if fd >= 0:
                    os.close(fd)  # the work directory's lock goes with its descriptor
            self._read = self.info_fd = self._first = self._held = -1

    def _info(self, *, deadline: float) -> dict:
        """bubblewrap's JSON, read to its end (it closes the pipe once written), or {}."""
        while True:
            if not _readable(self._read, deadline - time.monotonic()):
                return {}
            chunk = os.read(self._read, 4096)
            if not chunk:
                break
            self._data += chunk
        try:
            info = json.loads(self._data)
        except ValueError:
            return {}
        return info if isinstance(info, dict) else {}


def remove_stale_workdirs(base: Path, prefix: str, *, older_than: float = _STALE_AFTER_S) -> None:
    """Remove the work directories under ``base`` that this user's graders killed before they
    could close their workers left behind (this user's own, older than ``older_than`` seconds:
    one just made is not locked yet; locked by no live grader), and kill the bubblewrap each
    was started with, if it is still there (a grader killed while its bubblewrap was setting the
    namespaces up leaves one waiting for ever)."""
    now = time.time()
    for entry in base.glob(f"{prefix}*"):
        try:
            info = entry.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or now - info.st_mtime < older_than:
                continue
            fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live grader's
        else:
            _kill_started_with(f"{entry}/tests")
            shutil.rmtree(entry, ignore_errors=True)
        finally:
            os.close(fd)


def _kill_started_with(argument: str) -> None:
    """SIGKILL each process this user may signal whose command line holds ``argument`` (a work
    directory's unique path: only the bubblewrap of that work directory's worker)."""
    needle = b"\0" + os.fsencode(argument) + b"\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            pidfd = os.pidfd_open(int(entry))  # pinned: the pid cannot be another's by the signal
        except OSError:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if needle in handle.read():
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass  # gone, or not this user's
        finally:
            os.close(pidfd)


def _readable(fd: int, timeout: float) -> bool:
    """Whether ``fd`` is readable within ``timeout`` seconds (a pidfd: its process has ended)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000))))


def _parent(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return -1
    for line in status.splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return -1
