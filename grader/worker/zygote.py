"""The zygote: forks every run's test process from one memory that knows nothing of any run.

The worker reads each run's frame (which variant kind, which tests, which limits) and so holds
what a run must not learn. The zygote is forked from the worker once the job is set up and
before any run is read; from then on it only forks: each request carries the new process's two
descriptors (report pipe, boundary) and its temporary folder, the same kind of request for
every run. It reports each fork's pid and, when the process has ended, its exit status and CPU
time, since only a parent can wait for a process.

Messages on the control socket (SOCK_SEQPACKET, one message each):

- worker → zygote: ``{"tmp": ..., "token": ..., "tests": ...}`` with two descriptors attached;
- zygote → worker: ``{"pid": N}`` (or ``{"error": ...}``) for each request, in order, and
  ``{"exited": N, "status": S, "cpu": seconds}`` as each process ends.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import time
from typing import Any, Callable

__all__ = ["Zygote"]

_MESSAGE = 64 * 1024
_FORK_RETRY = 2.0  # seconds to wait for the process limit to free a slot for the next run


class Zygote:
    """The worker's handle on its zygote process."""

    def __init__(self, pid: int, control: socket.socket) -> None:
        self.pid = pid
        self.control = control

    @classmethod
    def start(cls, start_run: Callable[[int, int, str, bytes, str | None], None]) -> Zygote:
        """Fork the zygote; ``start_run(report, boundary, tmp, token, tests)`` is what each of
        its children does (it never returns)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                _serve(theirs, start_run)
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


def _serve(control: socket.socket, start_run: Callable[[int, int, str, bytes, str | None], None]) -> None:
    """The zygote's loop: fork on each request, report each child's end; leave when the worker
    closes its end."""
    from grader.sandbox import _libc_prctl

    _libc_prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the worker
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the job stream is the worker's alone
    os.close(devnull)
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
                _fork(control, body, fds, selector, children, start_run)
            else:
                pidfd = key.fd
                pid = children.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status, usage = os.wait4(pid, 0)
                _send(control, {"exited": pid, "status": status, "cpu": round(usage.ru_utime + usage.ru_stime, 6)})


def _fork(control: socket.socket, body: bytes, fds: list[int], selector: selectors.BaseSelector,
          children: dict[int, int], start_run: Callable[[int, int, str, bytes, str | None], None]) -> None:
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
            pid = os.fork()
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
