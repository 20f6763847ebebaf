"""The worker process: runs a test suite against variants, one forked child per run.

Started by :mod:`grader.runner` as ``python -m grader.worker`` in its sandbox
(:mod:`grader.sandbox`), with ``PYTHONHASHSEED`` fixed and a minimal environment. It reads one
JSON job on stdin, locks itself down (rlimits, non-dumpable, seccomp), imports numpy, pytest
and the reference ``tinyllm`` once, then forks a child per requested run (at most ``jobs`` at a
time). Each child closes every file descriptor but its own report pipe, locks itself down
further (no new processes, no signals to others), installs its variant's source as the module
``tinyllm.rnn.gru`` (always under the same file name, so only behaviour tells variants
apart), runs pytest in-process and reports each test over its own pipe, each line signed with
a token only that child was given. The worker judges the child from what arrived on that
pipe, never from its exit code, and writes one :class:`~grader.models.SuiteRun` per line on
stdout.
"""

from __future__ import annotations

import gc
import importlib
import json
import linecache
import os
import resource
import selectors
import shutil
import signal
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import pytest

from grader.models import Outcome, SuiteRun, TestOutcome, WorkerJob, WorkerRun, WorkerSandbox
from grader.sandbox import ChildHardening, SandboxError, harden_worker

__all__ = ["VARIANT_FILENAME", "install_variant", "serve"]

# The one file name every variant is compiled under.
VARIANT_FILENAME = "tinyllm/rnn/gru.py"
_MESSAGE_CAP = 2000
_PIPE_CAP = 4 * 1024 * 1024  # bytes a child may report before it is cut off
_FORK_RETRY = 2.0  # seconds to wait for the process limit to free a slot for the next child
_TAMPERED = (
    "the run wrote something that is not its own report to its result channel (a forged or "
    "corrupted report); nothing it reported after that is trusted"
)


class _TestTimeout(BaseException):
    """Raised in a test that ran past its time (a BaseException so ``except Exception``
    in the test cannot swallow it)."""


# ----------------------------------------------------------------------------- child
class _Reporter:
    """A pytest plugin that writes each event as a JSON line to the current child's pipe.

    It is registered once, before the worker forks; each child sets ``fd`` (its own pipe),
    ``token`` (which starts each of its lines: a line without it was not written by this
    reporter) and ``select`` (the node ids to run, or None for all) after the fork.
    """

    def __init__(self) -> None:
        self.fd: int | None = None
        self.token = b""
        self.select: set[str] | None = None
        self.prefix = ""  # a run of a sub-folder reports node ids relative to that folder

    def _id(self, nodeid: str) -> str:
        return nodeid[len(self.prefix):] if self.prefix and nodeid.startswith(self.prefix) else nodeid

    def send(self, **event: Any) -> None:
        if self.fd is None:
            return
        data = self.token + (json.dumps(event) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.send(collect_error=f"{self._id(report.nodeid) or '(session)'}: {_short(report.longreprtext)}")

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        if self.select is None:
            return
        kept = [item for item in items if self._id(item.nodeid) in self.select]
        dropped = [item for item in items if self._id(item.nodeid) not in self.select]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept

    def pytest_collection_finish(self, session: Any) -> None:
        self.send(collected=[self._id(item.nodeid) for item in session.items])

    def pytest_runtest_logreport(self, report: Any) -> None:
        outcome: Outcome | None = None
        if report.when == "call":
            if report.passed:
                outcome = Outcome.PASSED
            elif report.skipped:
                outcome = Outcome.SKIPPED
            else:
                timed_out = "_TestTimeout" in report.longreprtext
                outcome = Outcome.TIMEOUT if timed_out else Outcome.FAILED
        elif report.failed:  # setup or teardown
            outcome = Outcome.ERROR
        elif report.when == "setup" and report.skipped:
            outcome = Outcome.SKIPPED
        if outcome is not None:
            message = "" if outcome is Outcome.PASSED else _short(report.longreprtext)
            self.send(
                result=TestOutcome(
                    test_id=self._id(report.nodeid),
                    outcome=outcome,
                    message=message,
                    duration=round(report.duration, 6),
                ).model_dump(mode="json")
            )


class _PerTestTimeout:
    """A pytest plugin: a test body that runs past ``limit`` seconds is interrupted."""

    def __init__(self, limit: float) -> None:
        self.limit = limit

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        def _expire(signum: int, frame: Any) -> None:
            raise _TestTimeout(f"test ran past its limit of {self.limit:g} s")

        previous = signal.signal(signal.SIGALRM, _expire)
        signal.setitimer(signal.ITIMER_REAL, self.limit)
        try:
            return (yield)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _short(text: str) -> str:
    """The most telling part of a failure: its ``E`` lines, else its last lines."""
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    picked = errors or lines[-3:]
    return "\n".join(picked)[:_MESSAGE_CAP]


def install_variant(source: str) -> types.ModuleType:
    """Make ``source`` the module ``tinyllm.rnn.gru``, compiled under :data:`VARIANT_FILENAME`."""
    import tinyllm.rnn

    module = types.ModuleType("tinyllm.rnn.gru")
    module.__file__ = VARIANT_FILENAME
    module.__package__ = "tinyllm.rnn"
    # Tracebacks read source through linecache: give it the variant's text.
    linecache.cache[VARIANT_FILENAME] = (len(source), None, source.splitlines(True), VARIANT_FILENAME)
    code = compile(source, VARIANT_FILENAME, "exec", dont_inherit=True)
    sys.modules["tinyllm.rnn.gru"] = module
    exec(code, module.__dict__)
    tinyllm.rnn.gru = module  # type: ignore[attr-defined]
    return module


class _Session:
    """A pytest session configured once in the worker, then collected and run in each child.

    Configuring pytest (plugins, options, conftests) costs tens of milliseconds; doing it once
    before forking leaves each child only the collection of the test files (importing them
    with the child's variant installed) and the tests themselves.
    """

    def __init__(self, job: WorkerJob) -> None:
        from _pytest.config import _prepareconfig
        from _pytest.main import Session

        self.reporter = _Reporter()
        args = [
            job.tests,
            "-c", os.devnull,  # no ini file of the submission's is read
            "--rootdir", job.tests,
            "--import-mode=importlib",
            "--capture=no",  # the child's output already goes nowhere
            *(arg for name in _UNUSED_PLUGINS for arg in ("-p", f"no:{name}")),
        ]
        self.config = _prepareconfig(args, plugins=[self.reporter, _PerTestTimeout(job.test_timeout)])
        _rewrite_once(Path(job.tests), self.config)
        self.config._do_configure()
        self.session = Session.from_config(self.config)
        self.session.exitstatus = 0
        self.config.hook.pytest_sessionstart(session=self.session)

    def run_in_child(self, run: WorkerRun, fd: int, token: bytes, tmp: str, hardening: ChildHardening) -> None:
        """In the forked child: lock down, run the suite against one variant, report, and exit."""
        os.setpgid(0, 0)
        _only_own_descriptors(fd, tmp, hardening.settings)
        # Temporary files (pytest's tmp_path among them) go to a folder of this run's own.
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = tmp
        hardening.apply()
        self.reporter.fd = fd
        self.reporter.token = token
        self.reporter.select = set(run.select) if run.select is not None else None
        if run.tests is not None:
            # One job can hold several suites (a journal's snapshots): run just this one.
            self.reporter.prefix = run.tests.strip("/") + "/"
            self.config.args = [str(Path(self.config.rootpath) / run.tests)]
        try:
            install_variant(run.source)
        except BaseException as exc:  # noqa: BLE001 - a broken variant is a result, not a crash
            self.reporter.send(collect_error=f"{VARIANT_FILENAME}: the implementation does not import: {exc!r}"[:_MESSAGE_CAP])
            self.reporter.send(done=True)
            os._exit(0)
        hook = self.config.hook
        try:
            hook.pytest_collection(session=self.session)
            hook.pytest_runtestloop(session=self.session)
        except BaseException as exc:  # noqa: BLE001 - pytest.exit(), SystemExit outside a test, ...
            self.reporter.send(collect_error=f"the run stopped early: {exc!r}"[:_MESSAGE_CAP])
        self.reporter.send(done=True)
        os._exit(0)


def _only_own_descriptors(fd: int, tmp: str, settings: WorkerSandbox) -> None:
    """Close every descriptor the child inherited but its report pipe: the worker's stdout,
    its job pipe and the other children's pipes are out of the submission's reach. Standard
    input reads nothing; standard output and error go to an unnamed file of its own, capped by
    the file size limit (a test printing a gigabyte fails with "File too large"), or nowhere."""
    os.closerange(3, fd)
    os.closerange(fd + 1, max(fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    null = os.open(os.devnull, os.O_RDWR)
    sink = null
    if settings.file_bytes is not None:
        try:
            sink = os.open(tmp, os.O_TMPFILE | os.O_WRONLY, 0o600)
        except OSError:
            sink = null  # no O_TMPFILE on this file system: output goes nowhere
    os.dup2(null, 0)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    for extra in {null, sink} - {0, 1, 2}:
        os.close(extra)


def _rewrite_once(tests: Path, config: Any) -> None:
    """Rewrite the asserts of every test file once, here, instead of once per child.

    pytest rewrites a test module's ``assert`` statements when it is imported; each child
    imports the test files afresh (with its own variant installed), so without this every
    child would parse and compile the same files again. Rewriting only compiles: no code of
    the submission runs here.
    """
    from _pytest.assertion import rewrite

    original = rewrite._rewrite_test
    cache: dict[str, tuple[bytes, types.CodeType]] = {}

    def cached(fn: Path, config: Any) -> tuple[bytes, types.CodeType]:
        key = str(fn)
        if key not in cache:
            cache[key] = original(fn, config)
        return cache[key]

    rewrite._rewrite_test = cached
    for path in sorted(tests.rglob("*.py")):
        if path.is_file() and not path.is_symlink():
            try:
                cached(path, config)
            except (OSError, SyntaxError, ValueError):
                pass  # the child meets the same error while collecting, and reports it there


# Plugins a grading run has no use for (they cost start-up time or write files).
_UNUSED_PLUGINS = (
    "cacheprovider", "terminal", "junitxml", "pastebin", "doctest", "faulthandler",
    "legacypath", "nose", "stepwise", "lsof", "randomly",
)


# ---------------------------------------------------------------------------- worker
class _Running:
    """A child the worker is waiting on."""

    def __init__(self, run: WorkerRun, pid: int, fd: int, deadline: float, token: bytes, tmp: str) -> None:
        self.run = run
        self.pid = pid
        self.fd = fd
        self.deadline = deadline
        self.token = token
        self.tmp = tmp
        self.started = time.monotonic()
        self.buffer = bytearray()
        self.timed_out = False
        self.overflow = False


def _judge(job: WorkerJob, child: _Running, status: int) -> SuiteRun:
    """Build the SuiteRun from what the child reported, whatever it claims as exit code."""
    collected: list[str] = []
    results: dict[str, TestOutcome] = {}
    errors: list[str] = []
    done = False
    tampered = False
    for line in bytes(child.buffer).splitlines():
        if not line.startswith(child.token):
            # Not this child's reporter: a test wrote to the pipe. Stop believing the run here.
            tampered = True
            break
        try:
            event = json.loads(line[len(child.token):])
        except ValueError:
            errors.append("the child wrote a malformed report line")
            continue
        if not isinstance(event, dict):
            continue
        if "collected" in event and not collected:
            collected = [str(i) for i in event["collected"]]
        elif "result" in event:
            try:
                result = TestOutcome.model_validate(event["result"])
            except ValueError:
                errors.append("the child wrote a malformed test result")
                continue
            # The first report of a test stands; a later one cannot overwrite it.
            results.setdefault(result.test_id, result)
        elif "collect_error" in event:
            errors.append(str(event["collect_error"])[:_MESSAGE_CAP])
        elif event.get("done") is True:
            done = True
    crashed = ""
    if child.timed_out:
        crashed = f"the run passed its time limit of {job.run_timeout:g} s and was killed"
    elif child.overflow:
        crashed = "the run reported more than the output cap and was killed"
    elif tampered:
        crashed = _TAMPERED
    elif not done:
        crashed = _describe_status(status)
    final: list[TestOutcome] = []
    for test_id in collected:
        if test_id in results:
            final.append(results[test_id])
        elif child.timed_out:
            final.append(TestOutcome(test_id=test_id, outcome=Outcome.TIMEOUT, message=crashed))
        elif crashed:  # the child died (os._exit, a signal) before this test reported
            final.append(TestOutcome(test_id=test_id, outcome=Outcome.ERROR, message=crashed))
        else:  # the child said it was done, yet never reported this test
            final.append(TestOutcome(test_id=test_id, outcome=Outcome.MISSING, message="the test never reported"))
    return SuiteRun(
        variant=child.run.variant,
        hash_seed=job.hash_seed,
        attempt=child.run.attempt,
        results=tuple(final),
        collection_errors=tuple(errors),
        crashed=crashed,
        duration=round(time.monotonic() - child.started, 3),
    )


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"the run was killed by signal {signal.Signals(sig).name} before it finished"
    if os.WIFEXITED(status):
        return f"the run exited with status {os.WEXITSTATUS(status)} before it finished"
    return "the run ended before it finished"


def _start(job: WorkerJob, session: _Session, run: WorkerRun, hardening: ChildHardening) -> _Running:
    """Fork the child of ``run``, with its own pipe, token and temporary folder.

    Raises:
        OSError: if no child could be forked (the process limit stayed full).
    """
    token = os.urandom(16).hex().encode()
    tmp = tempfile.mkdtemp(prefix="run-")
    read_fd, write_fd = os.pipe()
    try:
        pid = _fork()
    except OSError:
        for fd in (read_fd, write_fd):
            os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if pid == 0:  # the child
        try:
            os.close(read_fd)
            session.run_in_child(run, write_fd, token, tmp, hardening)
        finally:
            os._exit(70)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return _Running(run, pid, read_fd, time.monotonic() + job.run_timeout, token, tmp)


def _fork() -> int:
    # A killed child's processes may hold the process limit for a moment before they are reaped.
    deadline = time.monotonic() + _FORK_RETRY
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _kill(pid: int) -> None:
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


def _confirmation(run: WorkerRun, result: SuiteRun) -> WorkerRun | None:
    """The confirming re-run a ``confirm`` run asks for: its failing tests, once more (the
    whole suite again if the run crashed, since its unreported tests need a second look)."""
    if not run.confirm or run.attempt != 1:
        return None
    failing = [r.test_id for r in result.results if r.outcome.kills]
    if not failing and not result.crashed:
        return None
    select = None if result.crashed else failing
    return WorkerRun(variant=run.variant, source=run.source, select=select, attempt=2)


def serve(job: WorkerJob, out: Any, hardening: ChildHardening | None = None) -> None:
    """Run every requested suite run, writing a SuiteRun JSON line to ``out`` as each ends;
    each child applies ``hardening`` to itself after the fork."""
    hardening = hardening or ChildHardening(settings=WorkerSandbox(), run_timeout=job.run_timeout)
    sys.path.insert(0, job.reference)
    # Import once, before forking, what every child needs: children start warm.
    import numpy  # noqa: F401
    import numpy.random  # noqa: F401 - numpy loads these lazily; once here, not in every child
    import numpy.testing  # noqa: F401
    import pytest  # noqa: F401

    for name in ("tinyllm.autograd.functional", "tinyllm.nn", "tinyllm.random", "tinyllm.rnn"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a student's package may lack it or break; each child reports that
            pass

    # The tests' folder is importable (helpers beside the tests), after the reference, and
    # only now: nothing of the submission can shadow numpy, pytest or the worker's own modules.
    sys.path.insert(1, job.tests)
    session = _Session(job)
    # Everything made so far is shared with the children copy-on-write; freezing it keeps the
    # garbage collector from touching (and so copying) those pages in every child.
    gc.freeze()
    pending = list(job.runs)
    running: dict[int, _Running] = {}
    selector = selectors.DefaultSelector()
    while pending or running:
        while pending and len(running) < max(1, job.jobs):
            run = pending.pop(0)
            try:
                child = _start(job, session, run, hardening)
            except OSError as exc:
                failed = SuiteRun(
                    variant=run.variant, hash_seed=job.hash_seed, attempt=run.attempt,
                    crashed=f"the run could not be started: {exc}",
                )
                out.write(failed.model_dump_json() + "\n")
                out.flush()
                continue
            running[child.fd] = child
            selector.register(child.fd, selectors.EVENT_READ, child)
        if not running:
            continue  # every pending run failed to start: nothing to wait for
        now = time.monotonic()
        timeout = max(0.0, min(c.deadline for c in running.values()) - now)
        for key, _ in selector.select(timeout=min(timeout, 1.0)):
            child = key.data
            try:
                chunk = os.read(child.fd, 65536)
            except BlockingIOError:
                continue
            if chunk:
                child.buffer.extend(chunk)
                if len(child.buffer) > _PIPE_CAP:
                    child.overflow = True
                    _kill(child.pid)
                continue
            # End of file: the child closed its end (it exited or died).
            selector.unregister(child.fd)
            os.close(child.fd)
            _, status = os.waitpid(child.pid, 0)
            _kill(child.pid)  # anything it left in its process group goes too
            shutil.rmtree(child.tmp, ignore_errors=True)
            del running[child.fd]
            result = _judge(job, child, status)
            out.write(result.model_dump_json() + "\n")
            out.flush()
            again = _confirmation(child.run, result)
            if again is not None:
                pending.insert(0, again)  # confirm while the variant is fresh in mind
        for child in list(running.values()):
            if time.monotonic() > child.deadline and not child.timed_out:
                child.timed_out = True
                _kill(child.pid)


def main() -> None:
    """Entry point of ``python -m grader.worker``."""
    # Import what every run needs before the job arrives: a worker started ahead of its job
    # (grader.runner.WorkerProcess) is then ready the moment the job comes.
    import _pytest.config  # noqa: F401
    import _pytest.main  # noqa: F401
    import _pytest.python  # noqa: F401
    import numpy  # noqa: F401

    job = WorkerJob.model_validate_json(sys.stdin.buffer.read())
    try:
        hardening = harden_worker(job.sandbox, memory_bytes=job.memory_bytes, run_timeout=job.run_timeout)
    except SandboxError as exc:
        sys.stderr.write(f"{exc}\n")  # the runner reports every run as crashed, with this line
        sys.exit(3)
    out = os.fdopen(os.dup(1), "w")
    serve(job, out, hardening)


if __name__ == "__main__":
    main()
