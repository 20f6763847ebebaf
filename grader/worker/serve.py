"""The worker process: runs a test suite against variants, two processes per run.

Started by :mod:`grader.run.runner` as ``python -m grader.worker`` in its sandbox
(:mod:`grader.sandbox`), with ``PYTHONHASHSEED`` fixed and a minimal environment. It reads the
job (:class:`~grader.core.protocol.JobSettings`, the first frame on stdin; see :mod:`grader.core.protocol`),
locks itself down (rlimits, non-dumpable, seccomp), imports numpy and pytest once, and for each
job forks a zygote (:mod:`grader.worker.zygote`), which configures pytest for the job's tests and
then forks every run's test process from a memory that holds nothing of any run. The worker
itself never holds a job's pytest session: what the submission's files make of it (rewritten
asserts, collected helpers) lives in that job's zygote and its runs, and dies with them. Then it reads runs as they come (at
most ``jobs`` at a time). Each run has two processes:

- the implementation process, forked here: it reads the variant's source, which follows the
  run's frame on stdin (the worker never holds it), locks itself down and answers the test
  process's requests with data (:mod:`grader.worker.impl`);
- the test process, forked by the zygote: it runs pytest over the submitted tests against the
  stand-in for the module under test (:mod:`grader.worker.standin`), which reaches the
  implementation through a socket that carries data only (:mod:`grader.worker.boundary`).

So no test shares a process with any variant, and every test process looks alike from inside.
The worker watches each run's events and enforces its limits from outside
(:mod:`grader.worker.watch`), judges it from what arrived, never from an exit code, and writes
one result per line on stdout. A student's own package (the journal's runs) is never imported
here: its source reaches the test process as data, and both sides run there.

Nothing here imports pydantic or the grader's models: the worker starts cold for every
grading, and the standard library, numpy and pytest are all it needs.
"""

from __future__ import annotations

import gc
import importlib
import os
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

from grader.sandbox.base import SandboxError
from grader.sandbox.harden import ChildHardening, harden_worker
from grader.core.protocol import FrameError, JobSettings, RunHeader, RunResult, WorkerSandbox, read_exact, read_frame
from grader.worker.boundary import BoundaryError, Connection
from grader.worker.setup import SERVED_FROM, import_common, job_session, next_job, prepare_job, use_package
from grader.worker.watch import MEMORY_CHECK_S, Run
from grader.worker.zygote import Zygote, private_view

__all__ = ["NICENESS", "main", "serve"]

NICENESS = 10  # at least this nice: grading yields the CPU to the service it runs beside
_SOURCE_WAIT = 30.0  # seconds a new implementation process may take to read its source from stdin
_FORK_RETRY = 2.0  # seconds to wait for the process limit to free a slot for the next process


class _Reap:
    """A process of the run the worker waits for: born its child (the zygote clones it so), it
    is reaped here, its exit status and CPU time read by the worker alone."""

    __slots__ = ("pid", "fd", "run", "tmp")

    def __init__(self, pid: int, fd: int, run: Run | None, tmp: str = "") -> None:
        self.pid, self.fd, self.run, self.tmp = pid, fd, run, tmp


class _Worker:
    """The worker's loop over one job: frames in, runs started and watched, results out, until
    the next job arrives (:meth:`loop` returns it) or the job stream ends."""

    def __init__(self, job: JobSettings, out: Any, hardening: ChildHardening, stdin: int, *, after_job: bool) -> None:
        self.job = job
        self.out = out
        self.hardening = hardening
        self.stdin = stdin
        self.selector = selectors.DefaultSelector()
        self.zygote: Zygote | None = None
        # Nothing of an earlier job is left for the zygote to inherit: the worker froze its
        # imports once (serve), never a job's objects, so what the last job left here (its
        # runs' bookkeeping) is collected now without walking the frozen heap.
        if after_job:
            gc.collect()
        gc.enable()
        self.zygote_problem = self._ensure_zygote()  # before any run is read: it must never hold one
        self.runs: list[Run] = []  # a run's report pipe is closed (and its number reused) before it ends
        self.asked: list[Run] = []  # runs whose test process the zygote has not reported yet
        self.reaping: list[_Reap] = []  # test processes (and the zygote's warm-up) not yet waited for
        self.waiting: list[JobSettings] = []  # the next job, once every run of this one has ended
        self.reading = True
        self.memory_due = 0.0  # when the runs' memory is next read

    def _ensure_zygote(self) -> str:
        """Start the zygote if it is not running; returns why it cannot be, or ""."""
        if self.zygote is None:
            try:
                self.zygote = self._start_zygote()
            except OSError as exc:
                return str(exc)
        return ""

    def _start_zygote(self) -> Zygote:
        job, hardening = self.job, self.hardening

        def make_runs() -> Callable[[int, int, str, bytes, str | None], None]:
            session = job_session(job)  # in the zygote: the worker never holds it

            def start_run(report: int, boundary: int, tmp: str, token: bytes, tests: str | None) -> None:
                session.run(report=report, boundary=boundary, tmp=tmp, token=token, tests=tests,
                            isolate=job.isolate, hardening=hardening)

            return start_run

        tests, tmp_bytes, uid, gid = job.tests, hardening.settings.tmp_bytes, os.getuid(), os.getgid()
        zygote = Zygote.start(make_runs, lambda tmp: private_view(tests, tmp, tmp_bytes, uid, gid))
        self.selector.register(zygote.control, selectors.EVENT_READ, zygote)
        return zygote

    def _drop_zygote(self) -> None:
        if self.zygote is not None:
            self.selector.unregister(self.zygote.control)
            self.zygote.close()
            self.zygote = None

    def loop(self) -> JobSettings | None:
        """Run this job's runs; returns the next job once they have all ended (None: the job
        stream has ended)."""
        watching_input = False
        while self.reading or self.runs:
            if self.waiting and not self.runs:
                break
            want_input = self.reading and not self.waiting and len(self.runs) < max(1, self.job.jobs)
            if want_input != watching_input:
                if want_input:
                    self.selector.register(self.stdin, selectors.EVENT_READ, None)
                else:
                    self.selector.unregister(self.stdin)
                watching_input = want_input
            timeout = 1.0
            if self.runs:
                timeout = min(timeout, max(0.0, min(r.next_check() for r in self.runs) - time.monotonic()))
            for key, _ in self.selector.select(timeout=timeout):
                if key.data is None:
                    self.reading = self._next_run()
                    if not self.reading:
                        self.selector.unregister(self.stdin)
                        watching_input = False
                    break  # the set of runs changed: select again
                if key.data is self.zygote:
                    self._from_zygote()
                elif isinstance(key.data, _Reap):
                    self._reap(key.data)
                else:
                    self._read(key.data)
            now = time.monotonic()
            if now >= self.memory_due:  # every MEMORY_CHECK_S, not at each event of each run
                self.memory_due = now + MEMORY_CHECK_S
                self._check_memory()
            for run in list(self.runs):
                run.check(now)
                if run.over:
                    self._finish(run)
        self._drop_zygote()
        for left in list(self.reaping):  # the warm-up, if it was never waited for: it exits at once
            self._reap(left)
        self.selector.close()
        return self.waiting.pop() if self.waiting else None

    def _check_memory(self) -> None:
        """Stop the run holding the most memory while this worker's runs together hold more than
        its share of the grading's memory bound (each process's address space is bounded too,
        but that alone lets several processes hold the bound each)."""
        share = self.job.memory_share
        if share is None or not self.runs:
            return
        held = {run: run.resident() for run in self.runs if not run.killed_why and not run.eof}
        if held and sum(held.values()) > share:
            biggest = max(held, key=held.__getitem__)
            biggest.over_memory(
                f"held more memory than the grading's memory bound of {self.job.memory_bound // 2**20} MB allows "
                f"({share // 2**20} MB for the runs of one worker together)"
            )

    def _next_run(self) -> bool:
        """Read one frame and start its run (or keep the next job). Returns whether more frames may come."""
        try:
            message = read_frame(self.stdin)
        except FrameError as exc:
            sys.stderr.write(f"the job stream is broken: {exc}\n")
            return False
        if message is None or message.get("end"):
            return False
        if "job" in message:
            try:
                self.waiting.append(JobSettings.from_message(message))
            except (KeyError, TypeError) as exc:
                sys.stderr.write(f"the job stream is broken: a job frame is malformed: {exc!r}\n")
                return False
            return True
        try:
            header = RunHeader.from_message(message)
        except (KeyError, TypeError) as exc:
            sys.stderr.write(f"the job stream is broken: a run frame is malformed: {exc!r}\n")
            return False
        return self._start(header)

    def _start(self, header: RunHeader) -> bool:
        """Fork the run's implementation process, wait until it has read its source from stdin,
        then ask the zygote for its test process. Returns whether stdin can still be read."""
        job = self.job
        problem = self.zygote_problem if self.zygote is None else ""
        if problem or self.zygote is None:
            _skip(self.stdin, header.source_bytes + header.code_bytes)
            _write(self.out, _failed_start(job, header, f"the run could not be started: {problem or 'the zygote is gone'}"))
            return True
        token = os.urandom(16).hex().encode()
        tmp = tempfile.mkdtemp(prefix="run-")
        report_r, report_w = (s.detach() for s in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
        test_end, impl_end = (s.detach() for s in socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
        ready_r, ready_w = os.pipe()
        try:
            pid = _fork()
        except OSError as exc:
            for fd in (report_r, report_w, test_end, impl_end, ready_r, ready_w):
                os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
            _skip(self.stdin, header.source_bytes + header.code_bytes)
            _write(self.out, _failed_start(job, header, f"the run could not be started: {exc}"))
            return True
        if pid == 0:  # the implementation process
            try:
                for fd in (report_r, report_w, test_end, ready_r):
                    os.close(fd)
                _implementation(job, header, impl_end, ready_w, tmp, self.hardening, self.stdin)
            finally:
                os._exit(70)
        os.close(impl_end)
        os.close(ready_w)
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(ready_r, selectors.EVENT_READ)
                took = selector.select(timeout=_SOURCE_WAIT) and os.read(ready_r, 1)
        finally:
            os.close(ready_r)
        run = Run(job, header, fd=report_r, token=token, tmp=tmp, impl=pid)
        os.set_blocking(report_r, False)
        self.runs.append(run)
        self.selector.register(report_r, selectors.EVENT_READ, run)
        try:
            self.zygote.request(report=report_w, boundary=test_end, tmp=tmp, token=token, tests=header.tests)
            self.asked.append(run)
        except OSError as exc:
            run.kill(f"the run could not be started: {exc}")
        finally:
            os.close(report_w)
            os.close(test_end)
        if not took:
            # The implementation process died before it read its source: the stream cannot be read any further.
            sys.stderr.write("a run died before it read its source; no further run can be read\n")
            run.kill("the run's implementation process died before it read its source")
            return False
        return True

    def _from_zygote(self) -> None:
        message = self.zygote.receive()
        if message is None:  # the zygote is gone: no run asked of it will start
            self._drop_zygote()
            for run in self.asked:
                run.kill("the run could not be started: the worker's zygote is gone")
            self.asked.clear()
            return
        if message.warm:
            if message.pid is not None:
                self._wait_for(message.pid, None, message.tmp)
            return
        run = self.asked.pop(0) if self.asked else None
        if run is None:
            return
        if message.pid is not None:
            run.started_as(message.pid)
            self._wait_for(message.pid, run)
        else:
            run.kill(f"the run could not be started: {message.error[:200] or 'the zygote said nothing'}")

    def _wait_for(self, pid: int, run: Run | None, tmp: str = "") -> None:
        """Watch ``pid``, a child of this process, until it ends."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # not ours after all: nothing to wait for
            if run is not None:
                run.ended = (0, 0.0)
            return
        reap = _Reap(pid, fd, run, tmp)
        self.reaping.append(reap)
        self.selector.register(fd, selectors.EVENT_READ, reap)

    def _reap(self, reap: _Reap) -> None:
        """``reap``'s process has ended (or will at once): its status and CPU time."""
        self.reaping.remove(reap)
        self.selector.unregister(reap.fd)
        os.close(reap.fd)
        try:
            _, status, usage = os.wait4(reap.pid, 0)
        except ChildProcessError:
            status, usage = 0, None
        if reap.tmp:
            shutil.rmtree(reap.tmp, ignore_errors=True)
        if reap.run is not None:
            reap.run.ended = (status, round(usage.ru_utime + usage.ru_stime, 6) if usage else 0.0)

    def _read(self, run: Run) -> None:
        try:
            chunk = os.read(run.fd, 65536)
        except BlockingIOError:
            return
        except ConnectionResetError:
            # The test process is gone with a "go on" of ours unread (killed at its first kill,
            # say): the end of its report, as for any process that died.
            chunk = b""
        if chunk:
            run.feed(chunk)
            return
        # End of file: the test process closed its end (it exited or died).
        self.selector.unregister(run.fd)
        os.close(run.fd)
        run.eof = True
        if run.pid is None and run not in self.asked:
            run.ended = (0, 0.0)

    def _finish(self, run: Run) -> None:
        self.runs.remove(run)
        run.kill()  # the implementation process, and anything left of the test process
        _, _, usage = os.wait4(run.impl, 0)
        shutil.rmtree(run.tmp, ignore_errors=True)
        _write(self.out, run.judge(usage.ru_utime + usage.ru_stime))


def _implementation(job: JobSettings, header: RunHeader, fd: int, ready: int, tmp: str,
                    hardening: ChildHardening, stdin: int) -> None:
    """In the run's implementation process: take the source from stdin, lock down, install it
    as the module under test (in a student's own package, when the job names one) and serve the
    test process (or, for the project's own trusted runs that are not isolated, hand it the
    source as data)."""
    from grader.worker.child import only_own_descriptors, install_variant
    from grader.worker.impl import constant_values, error_message, serve_implementation

    from grader.sandbox.harden import prctl

    prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: never outlive the worker, from the start
    # The variant makes no reference cycles that matter in one run's life, and every collection
    # would copy pages of the worker's heap: no collector here.
    gc.disable()
    source = read_exact(stdin, header.source_bytes)
    code = read_exact(stdin, header.code_bytes)
    os.write(ready, b"1")  # the worker may read stdin again: the source is ours
    os.close(ready)
    only_own_descriptors((fd,), tmp, hardening.settings)
    hardening.apply()
    connection = Connection(fd)
    if len(source) < header.source_bytes or len(code) < header.code_bytes:
        connection.send({"ok": False, "type": "RuntimeError", "message": "the run's source did not arrive whole"})
        os._exit(0)
    if not job.isolate:
        connection.send({"ok": True}, [np.frombuffer(source, dtype=np.uint8), np.frombuffer(code, dtype=np.uint8)])
        os._exit(0)
    try:
        if job.implementation is not None:
            use_package(job.reference, job.implementation)
        module = install_variant(source.decode("utf-8", errors="replace"), code, job.contract)
        for name in SERVED_FROM:  # a package without one fails here, in a word, not at each request
            importlib.import_module(name)
    except BaseException as exc:  # noqa: BLE001 - a broken variant is a result, sent as data
        connection.send(error_message(exc))
        os._exit(0)
    del source, code
    try:
        connection.send({"ok": True, "constants": constant_values(module, job.contract)})
    except (BoundaryError, ValueError):  # constants too large to send: the stand-in then lacks them
        connection.send({"ok": True})
    serve_implementation(connection, module, job.contract)
    os._exit(0)


def _skip(fd: int, size: int) -> None:
    """Read past ``size`` bytes of ``fd`` through one small buffer, wiped afterwards: a source
    no run took never lies whole in the worker's memory."""
    buffer = bytearray(4096)
    left = size
    while left:
        got = os.readv(fd, [memoryview(buffer)[: min(left, len(buffer))]])
        if not got:
            break
        left -= got
    buffer[:] = bytes(len(buffer))


def _fork() -> int:
    # A killed run's processes may hold the process limit for a moment before they are reaped.
    deadline = time.monotonic() + _FORK_RETRY
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _write(out: Any, result: RunResult) -> None:
    out.write(result.to_line())
    out.flush()


def _failed_start(job: JobSettings, run: RunHeader, why: str) -> RunResult:
    return RunResult(run_id=run.run_id, hash_seed=job.hash_seed, crashed=why)


def serve(job: JobSettings, out: Any, hardening: ChildHardening | None = None, *, stdin: int = 0) -> None:
    """Run every run that arrives on ``stdin``, writing a result line to ``out`` as each ends;
    each run's processes apply ``hardening`` to themselves after the fork. A job frame, once the
    last job's runs have all ended, sets the worker up for the next submission, with a zygote
    forked afresh from here, where nothing of the last job's runs is held."""
    hardening = hardening or ChildHardening(settings=WorkerSandbox(), run_timeout=job.run_timeout)
    prepare_job(job)
    tempfile._get_candidate_names()  # made lazily by the first mkdtemp: made once, before every job
    # Everything imported so far is shared with every job's zygote and runs copy-on-write;
    # frozen once, the collector never touches (and so copies) those pages, here or there.
    gc.freeze()
    after_job = False
    while job is not None:
        following = _Worker(job, out, hardening, stdin, after_job=after_job).loop()
        if following is not None:
            next_job(job, following)
        job, after_job = following, True


def main() -> None:
    """Entry point of ``python -m grader.worker``."""
    # Grading is background work: the API, the staff pages and the queue on the same cores go
    # first (the children that run the tests inherit this).
    os.nice(max(0, NICENESS - os.nice(0)))
    # Import what every run needs before the job arrives: a worker started ahead of its job
    # (grader.run.runner.WorkerProcess) is then ready the moment the job comes.
    import_common()
    try:
        message = read_frame(0)
        if message is None or "job" not in message:
            raise FrameError("expected the job as the first frame")
        job = JobSettings.from_message(message)
    except (FrameError, KeyError, TypeError) as exc:
        sys.stderr.write(f"the job stream is broken: {exc}\n")
        sys.exit(3)
    try:
        hardening = harden_worker(job.sandbox, memory_bytes=job.memory_bytes, run_timeout=job.run_timeout)
    except SandboxError as exc:
        sys.stderr.write(f"{exc}\n")  # the runner reports every run as crashed, with this line
        sys.exit(3)
    out = os.fdopen(os.dup(1), "w")
    serve(job, out, hardening)
    # Every result is written and flushed; tearing the interpreter down (numpy, pytest) would
    # only cost CPU that the other worker's runs could use.
    out.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
