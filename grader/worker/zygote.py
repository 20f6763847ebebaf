"""The zygote: forks every run's test process from one memory that knows nothing of any run.

Each test process is also born in namespaces of its own, where the kernel allows unprivileged
ones (:func:`isolated_fork`): a user namespace, a pid namespace in which it is pid 1 (so its
pid does not count the runs before it), and a mount namespace in which ``/proc`` is empty, ``/tmp``
is read-only but for the run's own temporary folder, a new empty file system, and the tests are a
fresh copy (so no file tells how long ago the submission was staged, and no run leaves anything
for a later one).

The worker reads each run's frame (which variant kind, which tests, which limits) and so holds
what a run must not learn. The zygote is forked from the worker once the job is set up and
before any run is read; from then on it only forks: each request carries the new process's two
descriptors (report socket, boundary) and its temporary folder, the same kind of request for
every run. It reports each fork's pid and, when the process has ended, its exit status and CPU
time, since only a parent can wait for a process.

Messages on the control socket (SOCK_SEQPACKET, one message each):

- worker → zygote: ``{"tmp": ..., "token": ..., "tests": ...}`` with two descriptors attached;
- zygote → worker: ``{"pid": N}`` (or ``{"error": ...}``) for each request, in order, and
  ``{"exited": N, "status": S, "cpu": seconds}`` as each process ends.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import selectors
import signal
import socket
import tempfile
import time
from typing import Any, Callable

__all__ = ["Zygote", "isolated_fork", "private_view"]

_MESSAGE = 64 * 1024
_FORK_RETRY = 2.0  # seconds to wait for the process limit to free a slot for the next run
SHARED_TMP = "/tmp"  # read-only in a test process's own mount namespace

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
NAMESPACES = _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 1 << 14, 1 << 18
# Refusals that mean "no unprivileged namespaces here" (a plain fork is used instead).
_NO_NAMESPACES = (errno.EPERM, errno.EINVAL, errno.ENOSPC, errno.EUSERS, errno.ENOSYS, errno.EACCES)


def isolated_fork() -> int:
    """``fork()``, with the child in new user, pid and mount namespaces (it is pid 1 of its own).

    The interpreter's own fork hooks run around the system call, as ``os.fork`` runs them.

    Raises:
        OSError: if the kernel refuses (no unprivileged namespaces, an unknown architecture).
    """
    number = _SYS_CLONE.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"no clone system call number known for {os.uname().machine}")
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    # PyDLL: the call keeps the interpreter's lock, as os.fork does around its fork.
    pid = ctypes.PyDLL(None, use_errno=True).syscall(
        ctypes.c_long(number), ctypes.c_ulong(NAMESPACES | signal.SIGCHLD), ctypes.c_ulong(0),
        ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0),
    )
    if pid == 0:
        api.PyOS_AfterFork_Child()
        from grader.sandbox.harden import _libc_prctl

        _libc_prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the zygote, from the start
        return 0
    code = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(code, os.strerror(code))
    return pid


def _mount(source: str | None, target: str, kind: str | None, flags: int, options: str | None = None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    if libc.mount(encode(source), encode(target), encode(kind), ctypes.c_ulong(flags), encode(options)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {kind or 'bind'} on {target}: {os.strerror(code)}")


def private_view(tests: str, tmp: str, tmp_bytes: int, uid: int, gid: int) -> None:
    """In a test process born by :func:`isolated_fork`: its own uid and gid mapped to themselves
    (so it can create files), ``/tmp`` read-only with a new empty file system at ``tmp`` (its
    temporary folder), a fresh copy of the tests at their own path (read before the copy's file
    system hides them), and an empty ``/proc``.

    Raises:
        OSError: if a mapping or a mount is refused.
    """
    from grader.sandbox.harden import _libc_prctl

    # A non-dumpable process's /proc files are root's: dumpable just long enough to write its
    # own maps (it holds nothing of any run yet), then not again.
    _libc_prctl(4, 1)  # PR_SET_DUMPABLE
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    finally:
        _libc_prctl(4, 0)
    files = _read_tree(tests)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    # Nothing an earlier run wrote into the shared /tmp can be there: this run writes only into
    # a file system of its own, gone with it.
    _mount(SHARED_TMP, SHARED_TMP, None, _MS_BIND | _MS_REC)
    _mount(None, SHARED_TMP, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _kept_flags(SHARED_TMP))
    _mount("none", tmp, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={tmp_bytes},mode=700")
    size = max(1 << 20, sum(len(data or b"") for _, data in files) * 2 + (1 << 20))
    _mount("none", tests, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size},mode=755")
    for rel, data in files:
        target = os.path.normpath(os.path.join(tests, rel))
        if data is None:
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            with open(target, "wb") as handle:
                handle.write(data)
    _mount(None, tests, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)  # read-only, as staged
    _mount("none", "/proc", "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=555")


def _kept_flags(path: str) -> int:
    """The flags of the mount at ``path`` that a remount in a user namespace must keep."""
    flags = os.statvfs(path).f_flag
    kept = 0
    for st, ms in ((os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC),
                   (os.ST_NOATIME, 1024), (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21)):
        if flags & st:
            kept |= ms
    return kept


def _read_tree(root: str) -> list[tuple[str, bytes | None]]:
    """Every folder (None) and regular file (its bytes) under ``root``, links left out."""
    files: list[tuple[str, bytes | None]] = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(folder, d)))
        rel = os.path.relpath(folder, root)
        files.append((rel, None))
        for name in sorted(names):
            path = os.path.join(folder, name)
            if not os.path.islink(path) and os.path.isfile(path):
                with open(path, "rb") as handle:
                    files.append((os.path.join(rel, name), handle.read()))
    return files


class Zygote:
    """The worker's handle on its zygote process."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self.control = control

    @classmethod
    def start(cls, start_run: Callable[[int, int, str, bytes, str | None], None], view: Callable[[str], None]) -> Zygote:
        """Fork the zygote; ``start_run(report, boundary, tmp, token, tests)`` is what each of
        its children does (it never returns), after ``view()`` where the child has namespaces of
        its own (``view(tmp)``: :func:`private_view` for the job's tests)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _serve(theirs, start_run, view)
            finally:
                os._exit(0)
        theirs.close()
        return cls(pid, ours)

    def request(self, *, report: int, boundary: int, tmp: str, token: bytes, tests: str | None) -> None:
        """Ask for a run's test process (its pid comes back as a message)."""
        body = json.dumps({"tmp": tmp, "token": token.decode(), "tests": tests}).encode()
        socket.send_fds(self.control, [body], [report, boundary])

    def receive(self) -> dict[str, Any] | None:
        """The next message from the zygote, or None if it is gone."""
        try:
            data = self.control.recv(_MESSAGE)
        except OSError:
            return None
        if not data:
            return None
        try:
            message = json.loads(data)
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    def close(self) -> None:
        """Stop the zygote (its running children are the worker's to kill) and wait for it."""
        try:
            self.control.close()
        except OSError:
            pass
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _namespaces_work(view: Callable[[str], None]) -> bool:
    """Whether a child can be born in namespaces of its own and set its view up there."""
    folder = tempfile.mkdtemp(prefix="probe-")
    try:
        pid = isolated_fork()
    except OSError as exc:
        os.rmdir(folder)
        if exc.errno in _NO_NAMESPACES:
            return False
        raise
    if pid == 0:
        try:
            view(folder)
        except BaseException:  # noqa: BLE001 - any failure means: not here
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    os.rmdir(folder)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _serve(control: socket.socket, start_run: Callable[[int, int, str, bytes, str | None], None],
           view: Callable[[str], None]) -> None:
    """The zygote's loop: fork on each request, report each child's end; leave when the worker
    closes its end."""
    from grader.sandbox.harden import _libc_prctl

    _libc_prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the worker
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the job stream is the worker's alone
    os.close(devnull)
    isolated = _namespaces_work(view)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, None)
    children: dict[int, int] = {}  # pidfd -> pid
    while True:
        for key, _ in selector.select():
            if key.data is None:
                try:
                    body, fds, _, _ = socket.recv_fds(control, _MESSAGE, 2)
                except OSError:
                    return
                if not body:
                    return
                _fork(control, body, fds, selector, children, start_run, view if isolated else None)
            else:
                pidfd = key.fd
                pid = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status, usage = os.wait4(pid, 0)
                _send(control, {"exited": pid, "status": status, "cpu": round(usage.ru_utime + usage.ru_stime, 6)})


def _fork(control: socket.socket, body: bytes, fds: list[int], selector: selectors.BaseSelector,
          children: dict[int, int], start_run: Callable[[int, int, str, bytes, str | None], None],
          view: Callable[[str], None] | None) -> None:
    try:
        request = json.loads(body)
        report, boundary = fds
        tmp, token, tests = str(request["tmp"]), str(request["token"]).encode(), request.get("tests")
    except (ValueError, KeyError, TypeError):
        for fd in fds:
            os.close(fd)
        _send(control, {"error": "a malformed request"})
        return
    deadline = time.monotonic() + _FORK_RETRY
    while True:
        try:
            pid = isolated_fork() if view is not None else os.fork()
            break
        except BlockingIOError:  # a killed run's processes may hold the process limit a moment
            if time.monotonic() > deadline:
                for fd in fds:
                    os.close(fd)
                _send(control, {"error": "no process could be started (the process limit is full)"})
                return
            time.sleep(0.01)
    if pid == 0:
        try:
            control.close()
            if view is not None:
                view(tmp)
            start_run(report, boundary, tmp, token, tests if isinstance(tests, str) else None)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pidfd] = pid
    selector.register(pidfd, selectors.EVENT_READ, pid)
    _send(control, {"pid": pid})


def _send(control: socket.socket, message: dict[str, Any]) -> None:
    try:
        control.send(json.dumps(message).encode())
    except OSError:
        pass
