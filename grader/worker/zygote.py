"""The zygote: forks every run's test process from one memory that knows nothing of any run.

Each test process is also born in namespaces of its own, where the kernel allows unprivileged
ones (:func:`clone_process`): a user namespace, a pid namespace in which it is pid 1 (so its
pid does not count the runs before it), and a mount namespace in which ``/proc`` is empty, ``/tmp``
is read-only but for the run's own temporary folder, a new empty file system, and the tests are a
fresh copy (so no file tells how long ago the submission was staged, and no run leaves anything
for a later one).

The worker reads each run's frame (which variant kind, which tests, which limits) and so holds
what a run must not learn. The zygote is forked from the worker once the job is set up and
before any run is read; from then on it only forks: each request carries the new process's two
descriptors (report socket, boundary) and its temporary folder, the same kind of request for
every run. The zygote keeps nothing between requests: each is read and forked in a frame of its
own, gone before the next, and a test process is born the worker's child (``CLONE_PARENT``), so
the worker, not the zygote, waits for it: no exit status, resource usage or pid of an earlier
run is ever in the zygote's memory, and so never in a later run's. Before the first request the
zygote forks one process that exits at once, through the same path, so that the first run
starts from the same state as every later one.

Messages on the control socket (SOCK_SEQPACKET, one message each), defined in
:mod:`grader.core.protocol`: worker → zygote a :class:`~grader.core.protocol.ForkRequest` with two
descriptors attached; zygote → worker a :class:`~grader.core.protocol.ForkReply` for each request,
in order, after the warm-up's (a process for the worker to wait for and forget, and a folder
to remove).
"""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import signal
import socket
import tempfile
import time
from typing import Callable

from grader.core.protocol import ForkReply, ForkRequest

__all__ = ["Zygote", "clone_process", "private_view"]

_MESSAGE = 64 * 1024
_FORK_RETRY = 2.0  # seconds to wait for the process limit to free a slot for the next run
SHARED_TMP = "/tmp"  # read-only in a test process's own mount namespace

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_CLONE_PARENT = 0x00008000
NAMESPACES = _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 1 << 14, 1 << 18
# Refusals that mean "no unprivileged namespaces here" (a plain fork is used instead).
_NO_NAMESPACES = (errno.EPERM, errno.EINVAL, errno.ENOSPC, errno.EUSERS, errno.ENOSYS, errno.EACCES)
# Made once, here, not at each fork (a library handle made per call is garbage that would pile
# up in the zygote between runs). PyDLL: the call keeps the interpreter's lock, as os.fork does
# around its fork.
_SYSCALL = ctypes.PyDLL(None, use_errno=True).syscall
_LIBC = ctypes.CDLL(None, use_errno=True)


def clone_process(*, namespaces: bool = True, sibling: bool = False) -> int:
    """``fork()`` through the clone system call: with ``namespaces`` the child is born in new
    user, pid and mount namespaces (it is pid 1 of its own); with ``sibling`` it is the caller's
    parent's child (``CLONE_PARENT``), which then waits for it, not the caller.

    The interpreter's own fork hooks run around the system call, as ``os.fork`` runs them.

    Raises:
        OSError: if the kernel refuses (no unprivileged namespaces, an unknown architecture).
    """
    number = _SYS_CLONE.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"no clone system call number known for {os.uname().machine}")
    flags = signal.SIGCHLD | (NAMESPACES if namespaces else 0) | (_CLONE_PARENT if sibling else 0)
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = _SYSCALL(
        ctypes.c_long(number), ctypes.c_ulong(flags), ctypes.c_ulong(0),
        ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0),
    )
    if pid == 0:
        api.PyOS_AfterFork_Child()
        from grader.sandbox.harden import prctl

        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive its parent, from the start
        return 0
    code = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(code, os.strerror(code))
    return pid


def _mount(source: str | None, target: str, kind: str | None, flags: int, options: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    if _LIBC.mount(encode(source), encode(target), encode(kind), ctypes.c_ulong(flags), encode(options)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {kind or 'bind'} on {target}: {os.strerror(code)}")


def private_view(tests: str, tmp: str, tmp_bytes: int, uid: int, gid: int) -> None:
    """In a test process born in namespaces of its own (:func:`clone_process`): its own uid and gid mapped to themselves
    (so it can create files), ``/tmp`` read-only with a new empty file system at ``tmp`` (its
    temporary folder), a fresh copy of the tests at their own path (read before the copy's file
    system hides them), and an empty ``/proc``.

    Raises:
        OSError: if a mapping or a mount is refused.
    """
    from grader.sandbox.harden import prctl

    # A non-dumpable process's /proc files are root's: dumpable just long enough to write its
    # own maps (it holds nothing of any run yet), then not again.
    prctl(4, 1)  # PR_SET_DUMPABLE
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    finally:
        prctl(4, 0)
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
    def start(cls, make_runs: Callable[[], Callable[[int, int, str, bytes, str | None], None]],
              view: Callable[[str], None]) -> Zygote:
        """Fork the zygote, which first calls ``make_runs()`` (the job's set-up, made there and
        nowhere else); what it returns, ``start_run(report, boundary, tmp, token, tests)``, is
        what each of its children does (it never returns), after ``view()`` where the child has
        namespaces of its own (``view(tmp)``: :func:`private_view` for the job's tests). A
        set-up that fails ends the zygote, its reason on stderr: no run of the job starts."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                from grader.sandbox.harden import prctl

                prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the worker, from the start
                try:
                    start_run = make_runs()
                except BaseException as exc:  # noqa: BLE001 - said once, here; the runs then fail to start
                    os.write(2, f"the job could not be set up: {type(exc).__name__}: {exc}\n".encode(errors="replace"))
                    os._exit(1)
                # What the set-up made is shared with every run copy-on-write: frozen, the
                # collector never touches those pages, here or in a run.
                gc.freeze()
                _serve(theirs, start_run, view)
            finally:
                os._exit(0)
        theirs.close()
        return cls(pid, ours)

    def request(self, *, report: int, boundary: int, tmp: str, token: bytes, tests: str | None) -> None:
        """Ask for a run's test process (its pid comes back as a :class:`ForkReply`)."""
        request = ForkRequest(tmp=tmp, token=token.decode(), tests=tests)
        socket.send_fds(self.control, [request.to_bytes()], [report, boundary])

    def receive(self) -> ForkReply | None:
        """The next reply from the zygote, or None if it is gone (or wrote something else)."""
        try:
            data = self.control.recv(_MESSAGE)
        except OSError:
            return None
        return ForkReply.from_bytes(data) if data else None

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
        pid = clone_process()
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
    """The zygote's loop: fork on each request; leave when the worker closes its end. Nothing
    of one request outlives it (see the module's docstring)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the job stream is the worker's alone
    os.close(devnull)
    space = view if _namespaces_work(view) else None
    _warm_up(control, space)
    while _one(control, start_run, space):
        pass


def _warm_up(control: socket.socket, view: Callable[[str], None] | None) -> None:
    """One fork through the same path as a run's, of a process that exits at once: the first
    run then starts from the state every later one does."""
    tmp = tempfile.mkdtemp(prefix="run-")  # the same length of name as a run's folder
    ends = [os.open(os.devnull, os.O_RDWR) for _ in range(2)]
    body = ForkRequest(tmp=tmp, token=os.urandom(16).hex()).to_bytes()
    _fork(control, body, ends, lambda *_: None, view, warm=True)


def _one(control: socket.socket, start_run: Callable[[int, int, str, bytes, str | None], None],
         view: Callable[[str], None] | None) -> bool:
    """Read one request and fork its process; False once the worker has closed its end."""
    try:
        body, fds, _, _ = socket.recv_fds(control, _MESSAGE, 2)
    except OSError:
        return False
    if not body:
        return False
    _fork(control, body, fds, start_run, view)
    return True


def _fork(control: socket.socket, body: bytes, fds: list[int],
          start_run: Callable[[int, int, str, bytes, str | None], None],
          view: Callable[[str], None] | None, *, warm: bool = False) -> None:
    request = ForkRequest.from_bytes(body)
    if request is None or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        _send(control, ForkReply(error="a malformed request"))
        return
    report, boundary = fds
    gc.collect()  # nothing this request, or an earlier one, left behind goes with the fork
    deadline = time.monotonic() + _FORK_RETRY
    while True:
        try:
            pid = clone_process(namespaces=view is not None, sibling=True)
            break
        except BlockingIOError:  # a killed run's processes may hold the process limit a moment
            if time.monotonic() > deadline:
                for fd in fds:
                    os.close(fd)
                _send(control, ForkReply(error="no process could be started (the process limit is full)"))
                return
            time.sleep(0.01)
    if pid == 0:
        try:
            control.close()
            if view is not None:
                view(request.tmp)
            if warm:
                os._exit(0)
            start_run(report, boundary, request.tmp, request.token.encode(), request.tests)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    _send(control, ForkReply(pid=pid, warm=warm, tmp=request.tmp if warm else ""))


def _send(control: socket.socket, reply: ForkReply) -> None:
    try:
        control.send(reply.to_bytes())
    except OSError:
        pass
