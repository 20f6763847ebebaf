"""The worker's wire protocol: framed messages in, JSON lines out, with no third-party import.

The worker (:mod:`grader.worker`) starts cold in its sandbox, so everything it imports costs
every grading; this module is the standard library only. The grader writes frames on the
worker's stdin: a 4-byte big-endian length, then that many bytes of JSON. The first frame is
the job (:class:`JobSettings`); each later one is a run (:class:`RunHeader`), followed by the
variant's source as ``source_bytes`` raw bytes that the worker itself never reads: the child it
forks for the run reads them, so the worker never holds any variant's source (SPEC §8: only
behaviour tells variants apart). A frame ``{"end": true}``, or the end of stdin, says no more
runs will come. The worker answers with one JSON line per run on stdout, a :class:`RunResult`
(the grader reads it as a :class:`~grader.core.models.SuiteRun`: the same fields, validated,
with the variant and purpose that only the grader knows).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

__all__ = [
    "EVENT_KINDS",
    "Budget",
    "Contract",
    "ForkReply",
    "ForkRequest",
    "FrameError",
    "JobSettings",
    "Outcome",
    "RunEvent",
    "RunHeader",
    "RunResult",
    "TestResult",
    "WorkerSandbox",
    "encode_frame",
    "read_exact",
    "read_frame",
]

_LENGTH = struct.Struct(">I")
_FRAME_CAP = 16 * 1024 * 1024  # a header is small; anything larger is a broken stream


class Outcome(StrEnum):
    """What happened to one test on one variant."""

    PASSED = "passed"
    FAILED = "failed"  # an assertion or an exception in the test body
    ERROR = "error"  # in set-up, tear-down or collection
    TIMEOUT = "timeout"
    MISSING = "missing"  # collected but never reported: the child died or lied
    SKIPPED = "skipped"
    NOT_RUN = "not_run"  # not run on this variant: already decided (see the report's reason)

    @property
    def kills(self) -> bool:
        """Whether this outcome, on a mutant, counts as the test catching it."""
        return self in (Outcome.FAILED, Outcome.ERROR, Outcome.TIMEOUT, Outcome.MISSING)


class Budget(StrEnum):
    """Which of a grading's budgets ran out."""

    CPU = "cpu"  # CPU seconds of every run together
    WALL = "wall"  # wall-clock seconds of the grading
    RUNS = "runs"  # suite runs of the grading (grader.run.scheduler.max_runs)


class FrameError(ValueError):
    """The stream does not hold a well-formed frame where one was expected."""


@dataclass(frozen=True)
class WorkerSandbox:
    """What the worker, and each child, lock down in themselves before any submitted code runs
    (see :mod:`grader.sandbox`). Every field off by default: a run with no sandbox."""

    cpu_seconds: int | None = None  # the worker's CPU time; a child gets its run's time limit
    file_bytes: int | None = None  # largest file a process may write (RLIMIT_FSIZE)
    open_files: int | None = None  # RLIMIT_NOFILE
    processes: int | None = None  # processes and threads of the sandbox uid (RLIMIT_NPROC)
    seccomp: bool = False  # install the seccomp filters (the worker fails rather than run without)
    # The size of a test process's temporary folder: a tmpfs of its own where namespaces allow
    # (grader.worker.zygote).
    tmp_bytes: int = 256 * 1024**2

    def replace(self, **changes: Any) -> WorkerSandbox:
        return WorkerSandbox(**{**asdict(self), **changes})


@dataclass(frozen=True)
class Contract:
    """The module under test as its contract stub declares it (:mod:`grader.core.contract`
    reads it): its dotted name, its public functions and its ``Module`` classes. The test
    process's stand-in offers exactly these, and the implementation process serves exactly
    these, and the constants' plain values; nothing else crosses the boundary."""

    module: str = ""
    functions: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    constants: tuple[str, ...] = ()  # annotated names (``NAME: float``): plain values, read once a run

    @property
    def filename(self) -> str:
        """The one file name every variant of the module is compiled under (its path in the
        package): a run cannot tell which variant it has."""
        return self.module.replace(".", "/") + ".py"

    @classmethod
    def from_message(cls, data: dict[str, Any] | None) -> Contract:
        data = data or {}
        return cls(module=str(data.get("module", "")), functions=tuple(data.get("functions", ())),
                   classes=tuple(data.get("classes", ())), constants=tuple(data.get("constants", ())))


@dataclass(frozen=True)
class JobSettings:
    """The first frame: where things are and the limits every run shares.

    The limits have no defaults here: the grader derives them from the assignment's, in one
    place (:func:`grader.run.runner.job_settings`), so the worker never runs under others.
    """

    reference: str  # the folder holding the ``tinyllm`` package the variants are installed into
    tests: str  # the folder of test files
    hash_seed: int
    jobs: int  # children at a time
    run_timeout: float  # one whole run (wall clock)
    test_timeout: float  # one test, unless the run names its own limit
    collect_timeout: float  # collecting the test files (wall clock)
    memory_bytes: int  # each process's address space
    memory_share: int | None  # resident bytes of every run of this worker together (None: no bound)
    memory_bound: int  # the grading's memory bound (memory_share is this worker's part of it; 0: none)
    max_tests: int | None  # a run collecting more tests runs none of them (None: no bound)
    conftests: bool = False  # load the tests' conftest.py files (trusted tests only)
    isolate: bool = False  # the package is ours: each variant runs in its own implementation process
    private_tmp: bool = False  # the temporary folder is the worker's own: emptied between jobs
    sandbox: WorkerSandbox = field(default_factory=WorkerSandbox)
    # A student's own ``tinyllm`` package (its folder, read-only): each run's implementation
    # process imports it in place of ``reference`` and serves the run with it, while the test
    # process keeps ``reference``'s framework and the stand-in (needs ``isolate``). None: the
    # variants are installed into ``reference``.
    implementation: str | None = None
    contract: Contract = field(default_factory=Contract)  # what the stand-in offers and the implementation serves

    def to_frame(self) -> bytes:
        return encode_frame({"job": asdict(self)})

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> JobSettings:
        data = dict(message["job"])
        data["sandbox"] = WorkerSandbox(**data.get("sandbox") or {})
        data["contract"] = Contract.from_message(data.get("contract"))
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class RunHeader:
    """A run's frame: which tests, under which limits; its source follows as raw bytes, then
    its code (see :mod:`grader.run.codecache`)."""

    run_id: int
    source_bytes: int
    code_bytes: int = 0  # the source compiled (marshalled), following it; 0: the child compiles it
    # What the worker reports and watches; a run's test process always runs every test.
    select: list[str] | None = None  # node ids to report, in collection order; None: all
    tests: str | None = None  # a sub-folder of the job's tests to run instead of all of it
    time_limits: dict[str, float] | None = None  # test id -> seconds, overriding test_timeout
    stop_at_first_kill: bool = False  # stop after the first test that does not pass
    cpu_budget: float | None = None  # CPU seconds this run may use before grading stops
    wall_budget: float | None = None  # seconds left of the grading's wall-clock budget, as sent
    timeout_floor: float | None = None  # after a time-out, later tests get at most this

    def to_frame(self) -> bytes:
        return encode_frame({"run": asdict(self)})

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> RunHeader:
        return cls(**_known(cls, message["run"]))


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in data.items() if key in names}


def encode_frame(message: dict[str, Any]) -> bytes:
    """One frame: the length, then the JSON."""
    body = json.dumps(message, separators=(",", ":")).encode()
    return _LENGTH.pack(len(body)) + body


def read_exact(fd: int, size: int) -> bytes:
    """Exactly ``size`` bytes from ``fd`` (never more: what follows stays in the stream for
    whoever reads next); fewer only at the end of the stream."""
    chunks = []
    left = size
    while left:
        chunk = os.read(fd, min(left, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict[str, Any] | None:
    """The next frame's message, or None at the end of the stream.

    Raises:
        FrameError: if the stream ends inside a frame, or a frame is not a JSON object.
    """
    head = read_exact(fd, _LENGTH.size)
    if not head:
        return None
    if len(head) < _LENGTH.size:
        raise FrameError("the stream ended inside a frame's length")
    (size,) = _LENGTH.unpack(head)
    if size > _FRAME_CAP:
        raise FrameError(f"a frame must be at most {_FRAME_CAP} bytes, got a length of {size}")
    body = read_exact(fd, size)
    if len(body) < size:
        raise FrameError(f"the stream ended inside a frame: expected {size} bytes, got {len(body)}")
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise FrameError(f"a frame is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError(f"a frame must be a JSON object, got {type(message).__name__}")
    return message


# ------------------------------------------------------------------ what comes back
@dataclass(frozen=True)
class TestResult:
    """One test's outcome in a run, with a short message when it did not pass, and where its
    exception was raised when that is one of the suite's own files."""

    __test__ = False  # not a pytest test class, despite the name

    test_id: str
    outcome: Outcome
    message: str = ""
    duration: float = 0.0
    # "file.py:LINE" (relative to the tests folder) when the exception's last frame is in a file
    # of the suite: an error of the test's own code, not of the implementation or the framework.
    raised_in: str = ""


@dataclass(frozen=True)
class RunResult:
    """A run as its worker reports it: one JSON line (:meth:`to_line`) on the worker's stdout."""

    run_id: int
    hash_seed: int
    results: tuple[TestResult, ...] = ()
    collection_errors: tuple[str, ...] = ()
    crashed: str = ""  # why the run ended abnormally, if it did
    duration: float = 0.0
    cpu_s: float = 0.0  # CPU seconds of the run's processes
    stopped_early: bool = False  # stopped at its first test that did not pass, as asked
    budget_exceeded: str = ""  # the test running when a grading budget ran out
    budget: Budget | None = None  # which budget ran out, with budget_exceeded
    phases: dict[str, float] = field(default_factory=dict)  # seconds: "setup", "collect", "run"
    tests_over_limit: int = 0  # tests collected, when more than the job allows (then none ran)

    def to_line(self) -> str:
        return json.dumps(asdict(self)) + "\n"


# ------------------------------------------------------------------ inside a worker
# A run's test process reports to its worker one event per line on its report socket (each line
# begins with the run's token); the worker's zygote and the worker exchange one message per
# datagram. Both sides build and read these, and nothing else.
EVENT_KINDS = ("collected", "collect_error", "begin", "end", "result", "stopped", "phases", "done")


@dataclass(frozen=True)
class RunEvent:
    """One event of a run, as its test process reports it: ``kind`` (one of
    :data:`EVENT_KINDS`) and what goes with it (``tests`` for collected; ``test`` for begin and
    end; ``result`` for result; ``text`` for collect_error, with ``test`` the collector that
    failed ("" for the session); ``phases`` for phases)."""

    kind: str
    test: str = ""
    tests: tuple[str, ...] = ()
    text: str = ""
    result: TestResult | None = None
    phases: dict[str, float] = field(default_factory=dict)

    def to_line(self, token: bytes) -> bytes:
        body: dict[str, Any] = {"kind": self.kind}
        if self.kind == "collected":
            body["tests"] = list(self.tests)
        elif self.kind in ("begin", "end"):
            body["test"] = self.test
        elif self.kind == "collect_error":
            body["text"] = self.text
            body["test"] = self.test
        elif self.kind == "result" and self.result is not None:
            body["result"] = asdict(self.result)
        elif self.kind == "phases":
            body["phases"] = self.phases
        return token + (json.dumps(body) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes) -> RunEvent | None:
        """The event a line (its token already taken off) holds, or None if it is malformed."""
        try:
            body = json.loads(line)
        except ValueError:
            return None
        if not isinstance(body, dict) or body.get("kind") not in EVENT_KINDS:
            return None
        kind = body["kind"]
        if kind == "collected":
            tests = body.get("tests")
            return cls(kind, tests=tuple(str(t) for t in tests)) if isinstance(tests, list) else None
        if kind in ("begin", "end"):
            return cls(kind, test=str(body.get("test", "")))
        if kind == "collect_error":
            return cls(kind, text=str(body.get("text", "")), test=str(body.get("test", "")))
        if kind == "result":  # a malformed one is kept as such (result None), for the worker to note
            return cls(kind, result=_test_result(body.get("result")))
        if kind == "phases":
            phases = body.get("phases")
            if not isinstance(phases, dict):
                return None
            return cls(kind, phases={str(k): float(v) for k, v in phases.items()
                                     if isinstance(v, (int, float)) and not isinstance(v, bool)})
        return cls(kind)


_OUTCOME_VALUES = frozenset(o.value for o in Outcome)


def _test_result(value: Any) -> TestResult | None:
    """A test result as a run reported it, if it is well formed."""
    if not isinstance(value, dict):
        return None
    test_id, outcome = value.get("test_id"), value.get("outcome")
    message, duration = value.get("message", ""), value.get("duration", 0.0)
    raised_in = value.get("raised_in", "")
    if not all(isinstance(text, str) for text in (test_id, outcome, message, raised_in)):
        return None
    if outcome not in _OUTCOME_VALUES:
        return None
    if not isinstance(duration, (int, float)) or isinstance(duration, bool):
        return None
    return TestResult(test_id, Outcome(outcome), message, float(duration), raised_in)


@dataclass(frozen=True)
class ForkRequest:
    """worker → zygote: a run's test process, with its two descriptors attached to the datagram
    (report socket, boundary) and its temporary folder; the same for every run."""

    tmp: str
    token: str
    tests: str | None = None

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ForkRequest | None:
        try:
            body = json.loads(data)
            return cls(tmp=str(body["tmp"]), token=str(body["token"]),
                       tests=body["tests"] if isinstance(body.get("tests"), str) else None)
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class ForkReply:
    """zygote → worker, for each request in order: the process's ``pid`` (the worker's child),
    or an ``error``; ``warm`` for the zygote's warm-up, a process to wait for and forget, and
    its folder ``tmp`` to remove."""

    pid: int | None = None
    error: str = ""
    warm: bool = False
    tmp: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ForkReply | None:
        try:
            body = json.loads(data)
            pid = body.get("pid")
            return cls(pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                       error=str(body.get("error") or ""), warm=body.get("warm") is True, tmp=str(body.get("tmp") or ""))
        except (ValueError, TypeError, AttributeError):
            return None
