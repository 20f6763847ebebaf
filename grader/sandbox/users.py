"""The uid layer: the sandbox users ``mutagrade-sandbox-N``, one locked to each running worker,
and clearing a user out (every process of its uid, found through /proc, killed).

A worker's start claims a free user (:func:`claim_user`), killing whatever a grader that died
left under it; its close kills every process of the user again and frees it. Only root can
switch to a sandbox user: a grader that is not root uses the userns layer
(:mod:`grader.sandbox.userns`) instead.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import shutil
import signal
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Iterable, Sequence

from grader.sandbox.base import (
    SANDBOX_USER_PREFIX,
    SETUP_SCRIPT,
    WORKDIR_PREFIX,
    SandboxError,
    grader_dir,
)

__all__ = [
    "SandboxUser",
    "UserClaim",
    "claim_user",
    "kill_users",
    "probe_users",
    "sandbox_users",
    "user_processes",
]

_USER_NAME = re.compile(re.escape(SANDBOX_USER_PREFIX) + r"(\d+)$")
_LOCK_DIR = Path("/run/mutagrade-sandbox")  # root's own: a sandboxed process cannot hold a lock


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


def probe_users(users: list[SandboxUser], bwrap_ok: bool) -> tuple[bool, str]:
    """Whether the uid layer works here, and how it is set up or why not: the grader is root,
    ``users`` is not empty, and (without bubblewrap, ``bwrap_ok`` false) the first of them can
    reach the interpreter and the grader's code by the permission bits."""
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
    paths.append(grader_dir())
    return paths


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
class UserClaim:
    """A sandbox user held by one worker (an exclusive lock), released by :meth:`release`."""

    user: SandboxUser
    lock: int

    def release(self) -> None:
        if self.lock >= 0:
            os.close(self.lock)  # closing drops the flock
            self.lock = -1


def claim_user(users: Sequence[SandboxUser], wait: float) -> UserClaim:
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
    for entry in base.glob(f"{WORKDIR_PREFIX}*"):
        try:
            info = entry.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and info.st_gid == user.gid:
            shutil.rmtree(entry, ignore_errors=True)


def _lock_user(users: Sequence[SandboxUser], wait: float) -> UserClaim:
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
            return UserClaim(user, lock)
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
    kill_users({uid}, rounds=rounds)


def kill_users(uids: AbstractSet[int], *, rounds: int = 200) -> None:
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

