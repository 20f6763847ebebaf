"""A run's test process: pytest in-process over the submitted tests, reporting each event.

Forked from the zygote (:mod:`grader.worker.zygote`), which holds the worker's pytest set-up and
nothing of any run: every run's test process starts from the same memory, under the same
options, and is told nothing about the run it is (no limits, no selection, no variant). The
worker, watching the events this process writes to its report socket, enforces every limit from
outside: it interrupts a test past its time with SIGALRM (raised here as ``_TestTimeout``),
kills the process at a mutant's first kill, and stops it when the grading budget is spent.

The implementation under test is the run's implementation process, reached through the
stand-in for the module under test (:mod:`grader.worker.standin`), whether it holds a variant of the
reference or a student's own package (``tdd``, ``check``, the journal's replay): this process
holds the course's framework and the stand-in, never a line of what it judges. Only the
project's own trusted runs that are not isolated (the reference, run as it is) install the
source here, as data from that process.
"""

from __future__ import annotations

import gc
import linecache
import marshal
import os
import resource
import signal
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import pytest

from grader.core.protocol import Contract, Outcome, RunEvent, TestResult, WorkerSandbox
from grader.worker import chance

__all__ = ["TestSession", "TestTimeout", "install_variant", "only_own_descriptors", "refuse_string_conditions", "short_message"]

MESSAGE_CAP = 2000
# The outcomes a run reports, bound once, at import: the tests' own code runs in this process
# and may rebind any name it finds (a module's Outcome too), and the report must still go out.
PASSED, FAILED, ERROR, TIMEOUT, SKIPPED = Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.TIMEOUT, Outcome.SKIPPED
_MESSAGE_LINES = 12  # lines of an exception's text kept in a reason (numpy's assert messages run to about 8)


class TestTimeout(BaseException):
    """Raised in a test the worker interrupted: it ran past its limit (a BaseException so
    ``except Exception`` in the test cannot swallow it)."""

    __test__ = False  # not a test class, whatever pytest's naming rules say


def _interrupted(signum: int, frame: Any) -> None:
    raise TestTimeout("the test ran past its time limit")


def short_message(exc: BaseException) -> str:
    """A failure as a student reads it: the exception's type and the first lines of its text
    (numpy's assertion messages start on their second line)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a __str__ that raises still leaves the type to report
        text = ""
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    head = type(exc).__name__
    body = "\n".join(lines[:_MESSAGE_LINES])
    if len(lines) > _MESSAGE_LINES:
        body += f"\n... ({len(lines) - _MESSAGE_LINES} more lines)"
    return (f"{head}: {body}" if body else head)[:MESSAGE_CAP]


def _raised_in(tb: types.TracebackType | None, root: Path) -> str:
    """Where an exception was raised, as ``file.py:LINE`` relative to ``root`` (the tests
    folder) when its traceback's last frame is in a file there; "" when it is anywhere else
    (the stand-in, which raises what the implementation raised; the framework; pytest)."""
    try:
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is None:
            return ""
        where = Path(tb.tb_frame.f_code.co_filename).relative_to(root)
        return f"{where.as_posix()}:{tb.tb_lineno}"[:MESSAGE_CAP]
    except Exception:  # noqa: BLE001 - outside the suite, or a file name no path can be made of
        return ""


def _longrepr_message(text: str) -> str:
    """The most telling part of a failure pytest formatted itself (a collection error, a
    skip): its ``E`` lines, else its last lines."""
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return "\n".join(errors or lines[-3:])[:MESSAGE_CAP]


class Reporter:
    """A pytest plugin that writes each event as a JSON line to the run's report socket, and
    after each test waits there for the worker's word to go on.

    Registered once, when the worker configures pytest; the test process sets ``fd`` and
    ``token`` (which starts each of its lines: a line without it was not written here) after
    the fork. ``prefix`` makes node ids relative to a sub-folder (a journal snapshot's run).
    """

    def __init__(self) -> None:
        self.fd: int | None = None
        self.token = b""
        self.prefix = ""
        self.messages: dict[str, tuple[str, str]] = {}  # node id and phase -> message, where raised

    def _id(self, nodeid: str) -> str:
        return nodeid[len(self.prefix):] if self.prefix and nodeid.startswith(self.prefix) else nodeid

    def send(self, event: RunEvent) -> None:
        if self.fd is None:
            return
        view = memoryview(event.to_line(self.token))
        while view:
            view = view[os.write(self.fd, view):]

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            where = self._id(report.nodeid)
            text = f"{where or '(session)'}: {_longrepr_message(report.longreprtext)}"
            self.send(RunEvent("collect_error", test=where, text=text))

    def pytest_collection_finish(self, session: Any) -> None:
        self.send(RunEvent("collected", tests=tuple(self._id(item.nodeid) for item in session.items)))

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        chance.begin(self._id(nodeid))
        self.send(RunEvent("begin", test=self._id(nodeid)))

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.send(RunEvent("end", test=self._id(nodeid)))
        # Wait for the worker's word before the next test, in every run alike: a run the worker
        # stops (a mutant's first kill) does no work past the test that decided it.
        if self.fd is not None and not os.read(self.fd, 1):
            os._exit(0)  # the worker has closed the run

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        report = yield
        if call.excinfo is not None and not report.skipped:
            where = self._id(_raised_in(call.excinfo.tb, item.config.rootpath))
            self.messages[f"{item.nodeid}\0{call.when}"] = (short_message(call.excinfo.value), where)
            if call.excinfo.errisinstance(TestTimeout):
                report.timed_out = True
        return report

    def pytest_runtest_logreport(self, report: Any) -> None:
        outcome: Outcome | None = None
        if report.when == "call":
            if report.passed:
                outcome = PASSED
            elif report.skipped:
                outcome = SKIPPED
            else:
                outcome = TIMEOUT if getattr(report, "timed_out", False) else FAILED
        elif report.failed:  # setup or teardown
            outcome = TIMEOUT if getattr(report, "timed_out", False) else ERROR
        elif report.when == "setup" and report.skipped:
            outcome = SKIPPED
        if outcome is None:
            return
        message = where = ""
        if outcome != PASSED:
            message, where = self.messages.pop(f"{report.nodeid}\0{report.when}", ("", ""))
            message = message or _longrepr_message(report.longreprtext)
        self.send(RunEvent("result", result=TestResult(self._id(report.nodeid), outcome, message,
                                                        round(report.duration, 6), where)))


class TestSession:
    """A pytest session configured once in the worker, then collected and run in each test
    process.

    Configuring pytest (plugins, options) costs tens of milliseconds; doing it once before
    forking leaves each run only the collection of the test files and the tests themselves.
    Every run sees the same options. ``conftest.py`` files are not loaded unless the job trusts
    them (the course's own tests).
    """

    __test__ = False

    def __init__(self, tests: str, conftests: bool, *, seed: int = 1, contract: Contract = Contract()) -> None:
        from _pytest.config import _prepareconfig
        from _pytest.main import Session

        from grader.worker import standin

        self.seed = seed  # every source of chance in a run draws under it (grader.worker.chance)
        # The module under test as every run's tests see it, made here, before any run forks.
        self.contract = contract
        self.stand_in = standin.build(contract)
        self.reporter = Reporter()
        args = [
            tests,
            "-c", os.devnull,  # no ini file of the submission's is read
            "--rootdir", tests,
            # Nothing above the tests is collected, not even looked at: without this pytest
            # walks down from the file system's root, listing every folder on the way.
            "--confcutdir", tests,
            "--import-mode=importlib",
            "--capture=no",  # the run's output already goes nowhere
            # A module that does not import is its tests' error, as pytest reports it; the
            # other modules' tests still run, so a run is judged once (docs/grading.md).
            "--continue-on-collection-errors",
            *(() if conftests else ("--noconftest",)),
            *(arg for name in _UNUSED_PLUGINS for arg in ("-p", f"no:{name}")),
        ]
        self.config = _prepareconfig(args, plugins=[self.reporter])
        refuse_string_conditions()
        # Reasons are made from the exception itself (Reporter.messages): pytest's own
        # formatting of a traceback is not needed, and the one-line form costs least.
        self.config.option.tbstyle = "line"
        _rewrite_once(Path(tests), self.config)
        self.config._do_configure()
        self.session = Session.from_config(self.config)
        self.session.exitstatus = 0
        self.config.hook.pytest_sessionstart(session=self.session)

    def close(self) -> None:
        self.config._ensure_unconfigure()

    def run(self, *, report: int, boundary: int, tmp: str, token: bytes, tests: str | None,
            isolate: bool, hardening: Any) -> None:
        """In the forked test process: lock down, connect the implementation, run the suite,
        report, and exit."""
        clock = [time.perf_counter()]
        # Everything inherited joins the permanent generation: the collector neither scans it in
        # this run nor lists it, so what it lists is this run's own (caches the worker warmed
        # while setting up an earlier job stay out of sight, as in a worker's first job).
        gc.freeze()
        os.setpgid(0, 0)
        only_own_descriptors((report, boundary), tmp, hardening.settings)
        # Temporary files (pytest's tmp_path among them) go to a folder of this run's own.
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = tmp
        hardening.apply()
        chance.install(self.seed)
        # A clock the worker's imports left in memory (logging's start, behind
        # LogRecord.relativeCreated), started again: it tells how long this run has been going,
        # not how long the worker has.
        import logging

        logging._startTime = time.time()
        signal.signal(signal.SIGALRM, _interrupted)
        reporter = self.reporter
        reporter.fd = report
        reporter.token = token
        if tests is not None:
            # One job can hold several suites (a journal's snapshots): run just this one.
            reporter.prefix = tests.strip("/") + "/"
            self.config.args = [str(Path(self.config.rootpath) / tests)]
        problem = _connect(boundary, isolate, self.stand_in, self.contract)
        if problem:
            reporter.send(RunEvent("collect_error", text=problem[:MESSAGE_CAP]))
            reporter.send(RunEvent("done"))
            os._exit(0)
        clock.append(time.perf_counter())
        hook = self.config.hook
        try:
            hook.pytest_collection(session=self.session)
            clock.append(time.perf_counter())
            hook.pytest_runtestloop(session=self.session)
        except self.session.Interrupted:
            reporter.send(RunEvent("stopped"))
        except BaseException as exc:  # noqa: BLE001 - pytest.exit(), SystemExit outside a test, ...
            reporter.send(RunEvent("collect_error", text=f"the run stopped early: {short_message(exc)}"[:MESSAGE_CAP]))
        clock.append(time.perf_counter())
        # Where the run's time went: lock-down and connecting the implementation, collecting, running.
        phases = dict(zip(("setup", "collect", "run"), (round(b - a, 6) for a, b in zip(clock, clock[1:]))))
        reporter.send(RunEvent("phases", phases=phases))
        reporter.send(RunEvent("done"))
        os._exit(0)


def _install(module: types.ModuleType) -> None:
    """Make ``module`` importable under its name, and an attribute of its package."""
    import importlib

    sys.modules[module.__name__] = module
    parent, _, leaf = module.__name__.rpartition(".")
    if parent:
        setattr(importlib.import_module(parent), leaf, module)


def _connect(boundary: int, isolate: bool, stand_in: types.ModuleType, contract: Contract) -> str:
    """Make the module under test the run's implementation: ``stand_in`` connected to the
    implementation process (``isolate``: every variant, every student's package), or (a
    trusted run of the project's own) the source that process sends. Returns why it could
    not be, or ""."""
    from grader.worker.boundary import BoundaryError, Connection

    connection = Connection(boundary)
    try:
        hello = connection.receive()
    except BoundaryError as exc:
        return f"the implementation could not be reached: {exc}"
    if hello is None:
        return "the implementation process ended before it answered"
    if hello.header.get("ok") is not True:
        return (f"{contract.filename}: the implementation does not import: "
                f"{hello.header.get('type', 'Error')}: {hello.header.get('message', '')}")
    if isolate and not contract.module:
        return "the job names no module under test (its contract is empty)"
    if isolate:
        from grader.worker import standin

        standin.connect(connection)
        standin.take_constants(stand_in, standin.connection_constants(hello.header), contract)
        _install(stand_in)
        return ""
    try:
        source = bytes(hello.array(0)).decode("utf-8", errors="replace")
        code = bytes(hello.array(1)) if len(hello.arrays) > 1 else b""
        install_variant(source, code, contract)
    except BaseException as exc:  # noqa: BLE001 - a broken implementation is a result, not a crash
        return f"{contract.filename}: the implementation does not import: {short_message(exc)}"
    finally:
        os.close(boundary)
    return ""


def install_variant(source: str, code: bytes, contract: Contract) -> types.ModuleType:
    """Make ``source`` the module under test (``contract.module``), compiled under its file
    name (``code``: the same, compiled ahead by the grader and marshalled)."""
    import importlib

    filename = contract.filename
    parent = contract.module.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)  # as an import would: the package first, then the module
    module = types.ModuleType(contract.module)
    module.__file__ = filename
    module.__package__ = contract.module.rpartition(".")[0]
    # Tracebacks read source through linecache: give it the implementation's text.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    compiled = _loaded(code, filename) or compile(source, filename, "exec", dont_inherit=True)
    sys.modules[contract.module] = module
    exec(compiled, module.__dict__)
    _install(module)
    return module


def _loaded(code: bytes, filename: str) -> types.CodeType | None:
    """The code the grader compiled ahead, if it is a variant's module code."""
    try:
        loaded = marshal.loads(code) if code else None
    except (EOFError, ValueError, TypeError):
        return None
    return loaded if isinstance(loaded, types.CodeType) and loaded.co_filename == filename else None


def only_own_descriptors(keep: tuple[int, ...], tmp: str, settings: WorkerSandbox) -> None:
    """Close every descriptor the process inherited but ``keep``: the worker's stdout, its job
    pipe and the other runs' sockets are out of the submission's reach. Standard input reads
    nothing; standard output and error go to an unnamed file of its own, capped by the file
    size limit (a test printing a gigabyte fails with "File too large"), or nowhere."""
    last = 2
    for fd in sorted(keep):
        os.closerange(last + 1, fd)
        last = fd
    os.closerange(last + 1, max(last + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
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
    """Rewrite the asserts of every test file once, here, instead of once per run.

    pytest rewrites a test module's ``assert`` statements when it is imported; each run
    imports the test files afresh, so without this every run would parse and compile the same
    files again. Rewriting only compiles: no code of the submission runs here.
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
                pass  # the run meets the same error while collecting, and reports it there


# Plugins a grading run has no use for (they cost start-up time or write files).
_UNUSED_PLUGINS = (
    "cacheprovider", "terminal", "junitxml", "pastebin", "doctest", "faulthandler",
    "legacypath", "nose", "stepwise", "lsof", "randomly",
    "debugging", "setuponly", "setupplan",  # pdb and --setup-*: never used by a run, ~80 ms to import
)


def refuse_string_conditions() -> None:
    """Make pytest refuse the string conditions of ``skipif`` and ``xfail`` marks instead of
    evaluating them: such a condition is code in a string, which the policy check cannot read,
    evaluated with ``os``, ``sys`` and pytest's configuration at hand. The test errors in its
    set-up, saying so, on every variant alike. Called once where the worker configures pytest;
    calling it again (the next job) changes nothing."""
    from _pytest import skipping

    evaluate = getattr(skipping.evaluate_condition, "__wrapped__", skipping.evaluate_condition)

    def evaluate_condition(item: Any, mark: Any, condition: object) -> tuple[bool, str]:
        if isinstance(condition, str):
            pytest.fail(f"the string condition of {mark.name!r} is not evaluated: it is code the policy "
                        "check cannot read; pass a boolean instead, such as skipif(H > 3, reason=...)",
                        pytrace=False)
        return evaluate(item, mark, condition)

    evaluate_condition.__wrapped__ = evaluate  # type: ignore[attr-defined]
    skipping.evaluate_condition = evaluate_condition
