"""The worker process: runs a test suite against variants, one forked child per run.

Started by :mod:`grader.runner` as ``python -m grader.worker`` in its sandbox
(:mod:`grader.sandbox`), with ``PYTHONHASHSEED`` fixed and a minimal environment. It reads the
job (:class:`~grader.wire.JobSettings`, the first frame on stdin; see :mod:`grader.wire`),
locks itself down (rlimits, non-dumpable, seccomp), imports numpy, pytest and the ``tinyllm``
package once, then reads runs as they come and forks a child per run (at most ``jobs`` at a
time). The variant's source follows each run's frame on stdin, and the child reads it there
itself: the worker never holds a variant's source, so no child can find another variant in the
memory it inherits. Each child then closes every file descriptor but its own report pipe, locks
itself down further (no new processes, no signals to others), installs its source as the module
``tinyllm.rnn.gru`` (always under the same file name, so only behaviour tells variants apart),
runs pytest in-process under per-test time limits and reports each test over its own pipe,
each line signed with a token only that child was given. The worker judges the child from
what arrived on that pipe, never from its exit code, and writes one result per line on stdout.

Nothing here imports pydantic or the grader's models: the worker starts cold for every
grading, and the standard library, numpy and pytest are all it needs.
"""

from __future__ import annotations

import gc
import importlib
import json
import linecache
import marshal
import os
import resource
import selectors
import shutil
import signal
import sys
import tempfile
import time
import types
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

import pytest

from grader.sandbox import ChildHardening, SandboxError, harden_worker
from grader.wire import VARIANT_FILENAME, FrameError, JobSettings, RunHeader, WorkerSandbox, read_exact, read_frame

__all__ = ["NICENESS", "VARIANT_FILENAME", "install_variant", "serve"]

NICENESS = 10  # at least this nice: grading yields the CPU to the service it runs beside
_MESSAGE_CAP = 2000
_PIPE_CAP = 4 * 1024 * 1024  # bytes a child may report before it is cut off
_FORK_RETRY = 2.0  # seconds to wait for the process limit to free a slot for the next child
_SOURCE_WAIT = 30.0  # seconds a new child may take to read its source from stdin
_TAMPERED = (
    "the run wrote something that is not its own report to its result channel (a forged or "
    "corrupted report); nothing it reported after that is trusted"
)
# Outcome values, as grader.models.Outcome spells them (the worker does not import the models).
PASSED, FAILED, ERROR, TIMEOUT, MISSING, SKIPPED, NOT_RUN = (
    "passed", "failed", "error", "timeout", "missing", "skipped", "not_run",
)
_OUTCOMES = frozenset((PASSED, FAILED, ERROR, TIMEOUT, MISSING, SKIPPED, NOT_RUN))
_KILLS = frozenset((FAILED, ERROR, TIMEOUT, MISSING))


class _TestTimeout(BaseException):
    """Raised in a test that ran past its time (a BaseException so ``except Exception``
    in the test cannot swallow it)."""


class _BudgetExceeded(BaseException):
    """Raised where the run's share of the grading budget (CPU seconds) ran out."""


# ----------------------------------------------------------------------------- child
class _Reporter:
    """A pytest plugin that writes each event as a JSON line to the current child's pipe.

    It is registered once, before the worker forks; each child sets ``fd`` (its own pipe),
    ``token`` (which starts each of its lines: a line without it was not written by this
    reporter), ``select`` (the node ids to run, or None for all) and ``stop_at_first_kill``
    after the fork.
    """

    def __init__(self) -> None:
        self.fd: int | None = None
        self.token = b""
        self.select: set[str] | None = None
        self.prefix = ""  # a run of a sub-folder reports node ids relative to that folder
        self.stop_at_first_kill = False
        self.session: Any = None

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
        self.session = session
        self.send(collected=[self._id(item.nodeid) for item in session.items])

    def pytest_runtest_logreport(self, report: Any) -> None:
        outcome: str | None = None
        text = report.longreprtext if not report.passed else ""
        if "_BudgetExceeded" in text:
            self.send(budget_exceeded=self._id(report.nodeid))
            self._stop("the grading budget ran out")
            return
        if report.when == "call":
            if report.passed:
                outcome = PASSED
            elif report.skipped:
                outcome = SKIPPED
            else:
                outcome = TIMEOUT if "_TestTimeout" in text else FAILED
        elif report.failed:  # setup or teardown
            outcome = ERROR
        elif report.when == "setup" and report.skipped:
            outcome = SKIPPED
        if outcome is None:
            return
        self.send(
            result={
                "test_id": self._id(report.nodeid),
                "outcome": outcome,
                "message": "" if outcome == PASSED else _short(text),
                "duration": round(report.duration, 6),
            }
        )
        if self.stop_at_first_kill and outcome in _KILLS:
            self._stop("stopped at the first test that did not pass")

    def _stop(self, why: str) -> None:
        if self.session is not None:
            self.session.shouldstop = why


class _PerTestTimeout:
    """A pytest plugin: a test body that runs past its limit is interrupted.

    Each child sets ``limits`` (test id -> seconds; others get ``default``) and ``floor``:
    once a test of the run has timed out, every later test gets at most ``floor`` seconds, so
    a suite of spinning tests costs one full limit, not one per test.
    """

    def __init__(self, default: float, reporter: _Reporter) -> None:
        self.default = default
        self.reporter = reporter
        self.limits: dict[str, float] = {}
        self.floor: float | None = None
        self.timed_out = False

    def limit(self, test_id: str) -> float:
        limit = self.limits.get(test_id, self.default)
        if self.timed_out and self.floor is not None:
            limit = min(limit, self.floor)
        return limit

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        test_id = self.reporter._id(item.nodeid)
        limit = self.limit(test_id)
        usual = self.limits.get(test_id, self.default)
        why = f" (lowered from {usual:g} s: an earlier test of this run timed out)" if limit < usual else ""

        def _expire(signum: int, frame: Any) -> None:
            self.timed_out = True
            raise _TestTimeout(f"test ran past its limit of {limit:g} s{why}")

        previous = signal.signal(signal.SIGALRM, _expire)
        signal.setitimer(signal.ITIMER_REAL, limit)
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


class _OnlyUnder:
    """Finds ``tinyllm`` and its modules in the package under test or nowhere: the copy
    installed with the project never fills a gap in a student's package."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.partition(".")[0] != "tinyllm":
            return None
        spec = PathFinder.find_spec(name, [self.folder] if path is None else path)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec


def install_variant(source: str, code: bytes = b"") -> types.ModuleType:
    """Make ``source`` the module ``tinyllm.rnn.gru``, compiled under :data:`VARIANT_FILENAME`
    (``code``: the same, compiled ahead by the grader and marshalled)."""
    import tinyllm.rnn

    module = types.ModuleType("tinyllm.rnn.gru")
    module.__file__ = VARIANT_FILENAME
    module.__package__ = "tinyllm.rnn"
    # Tracebacks read source through linecache: give it the variant's text.
    linecache.cache[VARIANT_FILENAME] = (len(source), None, source.splitlines(True), VARIANT_FILENAME)
    compiled = _loaded(code) or compile(source, VARIANT_FILENAME, "exec", dont_inherit=True)
    sys.modules["tinyllm.rnn.gru"] = module
    exec(compiled, module.__dict__)
    tinyllm.rnn.gru = module  # type: ignore[attr-defined]
    return module


def _loaded(code: bytes) -> types.CodeType | None:
    """The code the grader compiled ahead, if it is a variant's module code."""
    try:
        loaded = marshal.loads(code) if code else None
    except (EOFError, ValueError, TypeError):
        return None
    return loaded if isinstance(loaded, types.CodeType) and loaded.co_filename == VARIANT_FILENAME else None


class _Session:
    """A pytest session configured once in the worker, then collected and run in each child.

    Configuring pytest (plugins, options) costs tens of milliseconds; doing it once before
    forking leaves each child only the collection of the test files (importing them with the
    child's variant installed) and the tests themselves. ``conftest.py`` files are not loaded
    unless the job trusts them (the course's own tests): a submission's code never runs in the
    worker, only in children.
    """

    def __init__(self, job: JobSettings) -> None:
        from _pytest.config import _prepareconfig
        from _pytest.main import Session

        self.reporter = _Reporter()
        self.timeout = _PerTestTimeout(job.test_timeout, self.reporter)
        args = [
            job.tests,
            "-c", os.devnull,  # no ini file of the submission's is read
            "--rootdir", job.tests,
            # Nothing above the tests is collected, not even looked at: without this pytest
            # walks down from the file system's root, listing every folder on the way.
            "--confcutdir", job.tests,
            "--import-mode=importlib",
            "--capture=no",  # the child's output already goes nowhere
            *(() if job.conftests else ("--noconftest",)),
            *(arg for name in _UNUSED_PLUGINS for arg in ("-p", f"no:{name}")),
        ]
        self.config = _prepareconfig(args, plugins=[self.reporter, self.timeout])
        _rewrite_once(Path(job.tests), self.config)
        self.config._do_configure()
        self.session = Session.from_config(self.config)
        self.session.exitstatus = 0
        self.config.hook.pytest_sessionstart(session=self.session)

    def run_in_child(self, run: RunHeader, fd: int, token: bytes, tmp: str, hardening: ChildHardening, ready: int) -> None:
        """In the forked child: take its source from stdin, lock down, run the suite against
        it, report, and exit."""
        clock = [time.perf_counter()]
        os.setpgid(0, 0)
        source = read_exact(0, run.source_bytes)
        code = read_exact(0, run.code_bytes)
        os.write(ready, b"1")  # the worker may read stdin again: the source is ours
        _only_own_descriptors(fd, tmp, hardening.settings)
        # Temporary files (pytest's tmp_path among them) go to a folder of this run's own.
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = tmp
        hardening.apply()
        reporter = self.reporter
        reporter.fd = fd
        reporter.token = token
        reporter.select = set(run.select) if run.select is not None else None
        reporter.stop_at_first_kill = run.stop_at_first_kill
        # Formatting a full traceback costs tens of milliseconds a failure; on a mutant only the
        # outcome matters, so its failures are told in one line.
        self.config.option.tbstyle = "line" if run.brief else "auto"
        self.timeout.limits = dict(run.time_limits or {})
        self.timeout.floor = run.timeout_floor
        if run.tests is not None:
            # One job can hold several suites (a journal's snapshots): run just this one.
            reporter.prefix = run.tests.strip("/") + "/"
            self.config.args = [str(Path(self.config.rootpath) / run.tests)]
        if len(source) < run.source_bytes or len(code) < run.code_bytes:
            reporter.send(collect_error="the run's source did not arrive whole")
            reporter.send(done=True)
            os._exit(0)
        if run.cpu_budget is not None:
            signal.signal(signal.SIGPROF, _out_of_budget)
            signal.setitimer(signal.ITIMER_PROF, max(0.01, run.cpu_budget))
        try:
            install_variant(source.decode("utf-8", errors="replace"), code)
        except _BudgetExceeded:
            reporter.send(budget_exceeded="(installing the implementation)")
            reporter.send(done=True)
            os._exit(0)
        except BaseException as exc:  # noqa: BLE001 - a broken variant is a result, not a crash
            reporter.send(collect_error=f"{VARIANT_FILENAME}: the implementation does not import: {exc!r}"[:_MESSAGE_CAP])
            reporter.send(done=True)
            os._exit(0)
        del source, code
        clock.append(time.perf_counter())
        hook = self.config.hook
        try:
            hook.pytest_collection(session=self.session)
            clock.append(time.perf_counter())
            hook.pytest_runtestloop(session=self.session)
        except self.session.Interrupted:
            reporter.send(stopped=True)
        except _BudgetExceeded:
            reporter.send(budget_exceeded="(collecting the tests)")
        except BaseException as exc:  # noqa: BLE001 - pytest.exit(), SystemExit outside a test, ...
            reporter.send(collect_error=f"the run stopped early: {exc!r}"[:_MESSAGE_CAP])
        clock.append(time.perf_counter())
        # Where the run's time went: lock-down and installing the variant, collecting, running.
        reporter.send(phases=dict(zip(("setup", "collect", "run"), (round(b - a, 6) for a, b in zip(clock, clock[1:])))))
        reporter.send(done=True)
        os._exit(0)


def _out_of_budget(signum: int, frame: Any) -> None:
    signal.setitimer(signal.ITIMER_PROF, 0)
    raise _BudgetExceeded("the grading budget ran out")


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

    original = getattr(rewrite._rewrite_test, "__wrapped__", rewrite._rewrite_test)  # a job before set one
    cache: dict[str, tuple[bytes, types.CodeType]] = {}

    def cached(fn: Path, config: Any) -> tuple[bytes, types.CodeType]:
        key = str(fn)
        if key not in cache:
            cache[key] = original(fn, config)
        return cache[key]

    cached.__wrapped__ = original  # type: ignore[attr-defined]
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
    "debugging", "setuponly", "setupplan",  # pdb and --setup-*: never used by a run, ~80 ms to import
)


# ---------------------------------------------------------------------------- worker
class _Running:
    """A child the worker is waiting on."""

    def __init__(self, run: RunHeader, pid: int, fd: int, deadline: float, token: bytes, tmp: str) -> None:
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


def _result(test_id: str, outcome: str, message: str = "", duration: float = 0.0) -> dict[str, Any]:
    return {"test_id": test_id, "outcome": outcome, "message": message, "duration": duration}


def _checked_result(value: Any) -> dict[str, Any] | None:
    """A test result as a child reported it, if it is well formed."""
    if not isinstance(value, dict):
        return None
    test_id, outcome = value.get("test_id"), value.get("outcome")
    message, duration = value.get("message", ""), value.get("duration", 0.0)
    if not (isinstance(test_id, str) and outcome in _OUTCOMES and isinstance(message, str)):
        return None
    if not isinstance(duration, (int, float)) or isinstance(duration, bool):
        return None
    return _result(test_id, outcome, message[:_MESSAGE_CAP], float(duration))


def _judge(job: JobSettings, child: _Running, status: int, cpu: float) -> dict[str, Any]:
    """The run's result (a SuiteRun's fields) from what the child reported, whatever it
    claims as exit code."""
    collected: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    done = stopped = tampered = False
    budget = ""
    phases: dict[str, float] = {}
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
            result = _checked_result(event["result"])
            if result is None:
                errors.append("the child wrote a malformed test result")
                continue
            # The first report of a test stands; a later one cannot overwrite it.
            results.setdefault(result["test_id"], result)
        elif "collect_error" in event:
            errors.append(str(event["collect_error"])[:_MESSAGE_CAP])
        elif "budget_exceeded" in event and not budget:
            budget = str(event["budget_exceeded"])[:_MESSAGE_CAP] or "(unknown)"
        elif event.get("stopped") is True:
            stopped = True
        elif isinstance(event.get("phases"), dict):
            phases = {str(k): float(v) for k, v in event["phases"].items() if isinstance(v, (int, float))}
        elif event.get("done") is True:
            done = True
    crashed = ""
    if child.timed_out:
        crashed = f"the run passed its time limit of {job.run_timeout:g} s and was killed"
    elif child.overflow:
        crashed = "the run reported more than the output cap and was killed"
    elif tampered:
        crashed = _TAMPERED
    elif not done and not budget:
        crashed = _describe_status(status)
    final: list[dict[str, Any]] = []
    for test_id in collected:
        if test_id in results:
            final.append(results[test_id])
        elif child.timed_out:
            final.append(_result(test_id, TIMEOUT, crashed))
        elif crashed:  # the child died (os._exit, a signal) before this test reported
            final.append(_result(test_id, ERROR, crashed))
        elif stopped or budget:  # stopped on purpose before this test
            final.append(_result(test_id, NOT_RUN, "not run: the run had stopped"))
        else:  # the child said it was done, yet never reported this test
            final.append(_result(test_id, MISSING, "the test never reported"))
    return {
        "run_id": child.run.run_id,
        "hash_seed": job.hash_seed,
        "results": final,
        "collection_errors": errors,
        "crashed": crashed,
        "duration": round(time.monotonic() - child.started, 3),
        "cpu_s": round(cpu, 3),
        "stopped_early": stopped,
        "budget_exceeded": budget,
        "phases": phases,
    }


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "the run used up its CPU time and was killed (SIGXCPU)"
        return f"the run was killed by signal {signal.Signals(sig).name} before it finished"
    if os.WIFEXITED(status):
        return f"the run exited with status {os.WEXITSTATUS(status)} before it finished"
    return "the run ended before it finished"


class _Desynchronised(RuntimeError):
    """A child did not take its source from stdin: the stream can no longer be read."""


def _start(job: JobSettings, session: _Session, run: RunHeader, hardening: ChildHardening) -> _Running:
    """Fork the child of ``run``, with its own pipe, token and temporary folder, and wait
    until it has read its source from stdin.

    Raises:
        OSError: if no child could be forked (the process limit stayed full); the source was
            skipped, so the stream stays readable.
        _Desynchronised: if the child died before it read its source.
    """
    token = os.urandom(16).hex().encode()
    tmp = tempfile.mkdtemp(prefix="run-")
    read_fd, write_fd = os.pipe()
    ready_read, ready_write = os.pipe()
    try:
        pid = _fork()
    except OSError:
        for fd in (read_fd, write_fd, ready_read, ready_write):
            os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
        _skip(0, run.source_bytes + run.code_bytes)
        raise
    if pid == 0:  # the child
        try:
            os.close(read_fd)
            os.close(ready_read)
            session.run_in_child(run, write_fd, token, tmp, hardening, ready_write)
        finally:
            os._exit(70)
    os.close(write_fd)
    os.close(ready_write)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(ready_read, selectors.EVENT_READ)
            took = selector.select(timeout=_SOURCE_WAIT) and os.read(ready_read, 1)
    finally:
        os.close(ready_read)
    os.set_blocking(read_fd, False)
    child = _Running(run, pid, read_fd, time.monotonic() + job.run_timeout, token, tmp)
    if not took:
        raise _Desynchronised(child)
    return child


def _skip(fd: int, size: int) -> None:
    """Read past ``size`` bytes of ``fd`` through one small buffer, wiped afterwards: a source
    no child took never lies whole in the worker's memory."""
    buffer = bytearray(4096)
    left = size
    while left:
        got = os.readv(fd, [memoryview(buffer)[: min(left, len(buffer))]])
        if not got:
            break
        left -= got
    buffer[:] = bytes(len(buffer))


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


def _write(out: Any, result: dict[str, Any]) -> None:
    out.write(json.dumps(result) + "\n")
    out.flush()


def _failed_start(job: JobSettings, run: RunHeader, why: str) -> dict[str, Any]:
    return {"run_id": run.run_id, "hash_seed": job.hash_seed, "crashed": why}


def _import_common() -> None:
    """What every run needs, whatever the job: imported by a worker as soon as it starts, while
    the grader is still getting the job ready (pytest's own plugins and numpy's lazily loaded
    parts among it: once here, not in every child)."""
    import _pytest.config  # noqa: F401
    import _pytest.main  # noqa: F401
    import _pytest.python  # noqa: F401
    import numpy  # noqa: F401
    import numpy.random  # noqa: F401


def _import_named(job: JobSettings) -> None:
    """numpy.testing (about 12 ms), imported ahead where a test file names it: once here
    rather than in every child; a suite that never names it does not pay for it."""
    for path in Path(job.tests).rglob("*.py"):
        try:
            if b"testing" in path.read_bytes():
                import numpy.testing  # noqa: F401

                return
        except OSError:
            continue


def _prepare(job: JobSettings) -> _Session:
    """Import once, before forking, what every child needs (children start warm), and
    configure pytest."""
    sys.path.insert(0, job.reference)
    sys.meta_path.insert(0, _OnlyUnder(job.reference))
    _import_common()
    _import_named(job)
    for name in ("tinyllm.autograd.functional", "tinyllm.nn", "tinyllm.random", "tinyllm.rnn"):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a student's package may lack it or break; each child reports that
            pass
    # The tests' folder is importable (helpers beside the tests), after the reference, and
    # only now: nothing of the submission can shadow numpy, pytest or the worker's own modules.
    sys.path.insert(1, job.tests)
    return _Session(job)


def _next_job(session: _Session, old: JobSettings, job: JobSettings) -> _Session:
    """Set up for the next submission, in a worker that grades one after another: nothing of
    the last one stays (its temporary files, its pytest configuration, its folder on the path)."""
    session.config._ensure_unconfigure()
    if old.private_tmp:
        _empty(tempfile.gettempdir())
    if old.tests in sys.path:
        sys.path.remove(old.tests)
    sys.path.insert(1, job.tests)
    _import_named(job)
    return _Session(job)


def _empty(folder: str) -> None:
    """Remove everything in ``folder``, whatever its permissions (it is all this uid's)."""
    for entry in os.scandir(folder):
        path = entry.path
        if entry.is_dir(follow_symlinks=False):
            try:
                os.chmod(path, 0o700)  # a folder closed to its own owner is opened first
            except OSError:
                pass
            for root, dirs, _ in os.walk(path):
                for name in dirs:
                    try:
                        os.chmod(os.path.join(root, name), 0o700)
                    except OSError:
                        pass
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def serve(job: JobSettings, out: Any, hardening: ChildHardening | None = None, *, stdin: int = 0) -> None:
    """Run every run that arrives on ``stdin``, writing a result line to ``out`` as each ends;
    each child applies ``hardening`` to itself after the fork. A job frame, once the last job's
    runs have all ended, sets the worker up for the next submission."""
    hardening = hardening or ChildHardening(settings=WorkerSandbox(), run_timeout=job.run_timeout)
    session = _prepare(job)
    # Everything made so far is shared with the children copy-on-write; freezing it keeps the
    # garbage collector from touching (and so copying) those pages in every child. The
    # collector was off while the worker imported (about 12 ms of collections that freed
    # nothing); the children run with it on.
    gc.freeze()
    gc.enable()
    reading = True
    running: dict[int, _Running] = {}
    selector = selectors.DefaultSelector()
    watching_input = False
    waiting: list[JobSettings] = []  # the next job, once every run of this one has ended
    while reading or running:
        if waiting and not running:
            following = waiting.pop()
            session = _next_job(session, job, following)
            job = following
            gc.freeze()
        want_input = reading and not waiting and len(running) < max(1, job.jobs)
        if want_input != watching_input:
            if want_input:
                selector.register(stdin, selectors.EVENT_READ, None)
            else:
                selector.unregister(stdin)
            watching_input = want_input
        timeout = 1.0
        if running:
            timeout = min(timeout, max(0.0, min(c.deadline for c in running.values()) - time.monotonic()))
        for key, _ in selector.select(timeout=timeout):
            if key.data is None:
                reading = _next_run(job, session, hardening, out, running, selector, stdin, waiting)
                if not reading:
                    selector.unregister(stdin)
                    watching_input = False
                break  # the set of children changed: select again
            _read_child(job, key.data, running, selector, out)
        for child in list(running.values()):
            if time.monotonic() > child.deadline and not child.timed_out:
                child.timed_out = True
                _kill(child.pid)


def _next_run(
    job: JobSettings, session: _Session, hardening: ChildHardening, out: Any,
    running: dict[int, _Running], selector: selectors.BaseSelector, stdin: int, waiting: list[JobSettings],
) -> bool:
    """Read one frame and start its run (or keep the next job). Returns whether more frames may come."""
    try:
        message = read_frame(stdin)
    except FrameError as exc:
        sys.stderr.write(f"the job stream is broken: {exc}\n")
        return False
    if message is None or message.get("end"):
        return False
    if "job" in message:
        try:
            waiting.append(JobSettings.from_message(message))
        except (KeyError, TypeError) as exc:
            sys.stderr.write(f"the job stream is broken: a job frame is malformed: {exc!r}\n")
            return False
        return True
    try:
        run = RunHeader.from_message(message)
    except (KeyError, TypeError) as exc:
        sys.stderr.write(f"the job stream is broken: a run frame is malformed: {exc!r}\n")
        return False
    try:
        child = _start(job, session, run, hardening)
    except OSError as exc:
        _write(out, _failed_start(job, run, f"the run could not be started: {exc}"))
        return True
    except _Desynchronised as exc:
        # The child died before it read its source: the stream cannot be read any further.
        child = exc.args[0]
        running[child.fd] = child
        selector.register(child.fd, selectors.EVENT_READ, child)
        sys.stderr.write("a run died before it read its source; no further run can be read\n")
        return False
    running[child.fd] = child
    selector.register(child.fd, selectors.EVENT_READ, child)
    return True


def _read_child(job: JobSettings, child: _Running, running: dict[int, _Running], selector: selectors.BaseSelector, out: Any) -> None:
    try:
        chunk = os.read(child.fd, 65536)
    except BlockingIOError:
        return
    if chunk:
        child.buffer.extend(chunk)
        if len(child.buffer) > _PIPE_CAP:
            child.overflow = True
            _kill(child.pid)
        return
    # End of file: the child closed its end (it exited or died).
    selector.unregister(child.fd)
    os.close(child.fd)
    _, status, usage = os.wait4(child.pid, 0)
    _kill(child.pid)  # anything it left in its process group goes too
    shutil.rmtree(child.tmp, ignore_errors=True)
    del running[child.fd]
    _write(out, _judge(job, child, status, usage.ru_utime + usage.ru_stime))


def main() -> None:
    """Entry point of ``python -m grader.worker``."""
    # Grading is background work: the API, the staff pages and the queue on the same cores go
    # first (the children that run the tests inherit this).
    os.nice(max(0, NICENESS - os.nice(0)))
    # Import what every run needs before the job arrives: a worker started ahead of its job
    # (grader.runner.WorkerProcess) is then ready the moment the job comes.
    _import_common()
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
