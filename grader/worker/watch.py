"""A run as the worker watches it: its events, the limits it is held to, and the judgement.

The run's test process is told nothing about the run (see :mod:`grader.worker.child`), so every
limit that differs between runs is enforced here, from outside, by what the events say:

- collection must end within the collection limit;
- each test (set-up, call and tear-down together) within its limit: ``time_limits`` where it
  names the test, the job's ``test_timeout`` elsewhere, at most ``timeout_floor`` once
  a test of the run has timed out; past it the test is interrupted (SIGALRM, raised in the test
  as ``TestTimeout``), and killed with its run if it does not stop within :data:`GRACE_S`;
- the run's CPU time (both processes) within ``cpu_budget``;
- a run that stops at its first kill is killed when a selected test fails.

The run is then judged from the events alone (a process's exit code decides nothing): tests
that never reported are ``missing``, or ``timeout`` when the run passed its deadline; tests not
reached because the run was stopped on purpose are ``not_run``.
"""

from __future__ import annotations

import os
import signal
import time

from grader.core.protocol import Budget, JobSettings, Outcome, RunEvent, RunHeader, RunResult, TestResult

__all__ = ["GRACE_S", "MEMORY_CHECK_S", "Run"]

GRACE_S = 2.0  # seconds an interrupted test has to stop before its run is killed
_MESSAGE_CAP = 2000
_ERRORS_CAP = 20  # collection errors a run keeps word for word; the rest are counted
_REPORT_CAP = 16 * 1024 * 1024  # bytes a run may report before it is cut off (500 tests of long ids fit)
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
MEMORY_CHECK_S = 0.25  # how often the memory the runs hold is looked at
_TAMPERED = (
    "the run wrote something that is not its own report to its result channel (a forged or "
    "corrupted report); nothing it reported after that is trusted"
)


class Run:
    """One run: its two processes (tests, implementation), its report socket, what it reported
    so far and which limit, if any, stopped it."""

    def __init__(self, job: JobSettings, header: RunHeader, *, fd: int, token: bytes, tmp: str, impl: int) -> None:
        self.job = job
        self.header = header
        self.fd = fd
        self.token = token
        self.tmp = tmp
        self.impl = impl  # the implementation process (the worker's child)
        self.pid: int | None = None  # the test process (the zygote's child), once it is known
        self.started = time.monotonic()
        self.deadline = self.started + job.run_timeout
        # The grading's wall-clock budget, counted from when the run was read: it ends the run
        # like the CPU budget, whatever the run is doing (sleeping, blocked, spinning).
        self.wall_deadline = None if header.wall_budget is None else self.started + header.wall_budget
        self.select = set(header.select) if header.select is not None else None
        self.buffer = bytearray()
        self.seen = 0
        self.collected: list[str] | None = None
        self.over_limit = 0  # tests collected, when more than the job allows (none of them runs)
        self.results: dict[str, TestResult] = {}
        self.errors: list[str] = []
        self.errors_omitted = 0
        # The collectors that failed (a module that raised at import), with their error: the
        # tests of theirs this run was asked for error, as pytest sees them.
        self.broken: dict[str, str] = {}
        self.phases: dict[str, float] = {}
        self.current: tuple[str, float, float] | None = None  # test, when it began, its limit
        self.began: dict[str, float] = {}  # each test's beginning, by this process's clock
        self.interrupted: dict[str, float] = {}  # test -> the limit it was interrupted at
        self.lowered = False  # a test timed out: later ones get at most the floor
        self.stopped = self.done = self.tampered = self.overflow = self.timed_out = False
        self.budget = ""  # the test running when a budget ran out
        self.budget_kind: Budget | None = None  # which ran out
        self.killed_why = ""
        self.ended: tuple[int, float] | None = None  # the test process's status and CPU time
        self.cpu_due = self.started  # when the run's CPU time is next read
        self.eof = False
        self.kill_pending = False

    # ---------------------------------------------------------------- events
    def feed(self, chunk: bytes) -> None:
        """Take what the test process wrote, acting on each complete line."""
        self.seen += len(chunk)
        if self.seen > _REPORT_CAP:
            self.overflow = True
            self.kill()
            return
        self.buffer.extend(chunk)
        while not self.tampered and (end := self.buffer.find(b"\n")) >= 0:
            line = bytes(self.buffer[:end])
            del self.buffer[:end + 1]
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line.startswith(self.token):
            # Not the run's reporter: a test wrote to the report socket. Stop believing the run here.
            self.tampered = True
            self.kill()
            return
        event = RunEvent.from_line(line[len(self.token):])
        if event is None:
            self.errors.append("the run wrote a malformed report line")
            return
        kind = event.kind
        if kind == "collected" and self.collected is None:
            self.collected = list(event.tests)
            if self.job.max_tests is not None and len(self.collected) > self.job.max_tests:
                self.over_limit, self.collected = len(self.collected), []
                self.kill(f"the suite has {self.over_limit} tests, more than the limit of {self.job.max_tests}: "
                          "none of them was run")
            elif self.header.stop_at_first_kill and self.absent():
                self.stopped = True  # a test asked for is not there: a kill, decided at collection
                self.kill()
        elif kind == "begin":
            self.current = (event.test, time.monotonic(), self._limit(event.test))
            self.began.setdefault(event.test, self.current[1])
        elif kind == "end":
            self.current = None
            if not self.killed_why and not self.stopped and not self.kill_pending:
                try:
                    os.write(self.fd, b"g")  # the next test may begin
                except OSError:
                    pass
        elif kind == "result":
            self._result(event.result)
        elif kind == "collect_error":
            self._collect_error(event)
        elif kind == "stopped":
            self.stopped = True
        elif kind == "phases":
            self.phases = dict(event.phases)
        elif kind == "done":
            self.done = True

    def _collect_error(self, event: RunEvent) -> None:
        text = event.text[:_MESSAGE_CAP]
        if len(self.errors) < _ERRORS_CAP:
            self.errors.append(text)
        else:
            self.errors_omitted += 1
        if len(self.broken) < _ERRORS_CAP * 50:
            self.broken.setdefault(event.test, text)

    def absent(self) -> list[str]:
        """The tests this run was asked for that its collection did not find (none before the
        collection is known): they were on the reference, so each is judged here."""
        if self.collected is None or self.over_limit or self.header.select is None:
            return []
        found = set(self.collected)
        return [t for t in dict.fromkeys(self.header.select) if t not in found]

    def _absent_result(self, test: str) -> TestResult:
        """A test asked for and not collected: an error where its module (or a folder above it)
        failed to import, missing where it simply is not there on this variant."""
        module = test.split("::", 1)[0]
        for collector, error in self.broken.items():
            if collector in ("", module) or module.startswith(collector.rstrip("/") + "/"):
                return _result(test, Outcome.ERROR, f"not collected on this variant: {error}")
        return _result(test, Outcome.MISSING, "collected on the reference, not on this variant")

    def _result(self, reported: TestResult | None) -> None:
        if reported is None:
            self.errors.append("the run wrote a malformed test result")
            return
        # How long the test took, by this process's clock from its beginning (a duration the
        # test process reports is the tests' to change: the grader weighs times by this one).
        began = self.began.get(reported.test_id)
        duration = round(time.monotonic() - began, 6) if began is not None else reported.duration
        result = TestResult(reported.test_id, reported.outcome, reported.message[:_MESSAGE_CAP], duration,
                            reported.raised_in[:_MESSAGE_CAP])
        test = result.test_id
        if test in self.interrupted:
            limit = self.interrupted[test]
            result = _result(test, Outcome.TIMEOUT,
                             f"the test ran past its limit of {limit:g} s{self._why_lowered(test, limit)}", result.duration)
        if test in self.results:
            return  # the first report of a test stands
        self.results[test] = result
        if self.select is not None and test not in self.select:
            return
        if self.header.stop_at_first_kill and result.outcome.kills:
            self.stopped = True
            self.kill()
        elif self.select is not None and self.select <= self.results.keys():
            self.stopped = True  # every test asked for has reported: nothing more to learn
            self.kill()

    # ---------------------------------------------------------------- limits
    def _limit(self, test: str) -> float:
        limit = (self.header.time_limits or {}).get(test, self.job.test_timeout)
        if self.lowered and self.header.timeout_floor is not None:
            limit = min(limit, self.header.timeout_floor)
        return limit

    def _why_lowered(self, test: str, limit: float) -> str:
        usual = (self.header.time_limits or {}).get(test, self.job.test_timeout)
        return f" (lowered from {usual:g} s: an earlier test of this run timed out)" if limit < usual else ""

    def next_check(self) -> float:
        """When this run's limits must next be looked at (a monotonic time)."""
        times = [self.deadline]
        if self.wall_deadline is not None:
            times.append(self.wall_deadline)
        if self.collected is None:
            times.append(self.started + self.job.collect_timeout)
        if self.current is not None:
            test, began, limit = self.current
            times.append(began + limit + (GRACE_S if test in self.interrupted else 0.0))
        if self.header.cpu_budget is not None or self.job.memory_share is not None:
            times.append(time.monotonic() + MEMORY_CHECK_S)
        return min(times)

    def check(self, now: float) -> None:
        """Enforce the run's limits at ``now``."""
        if self.killed_why or self.eof:
            return
        if now > self.deadline:
            self.timed_out = True
            self.kill(f"the run passed its time limit of {self.job.run_timeout:g} s and was killed")
            return
        if self.collected is None and now > self.started + self.job.collect_timeout:
            self.kill(f"collecting the tests ran past its limit of {self.job.collect_timeout:g} s and was stopped")
            return
        if self.current is not None:
            test, began, limit = self.current
            if test not in self.interrupted and now > began + limit:
                self.interrupted[test] = limit
                self.lowered = True
                self._signal(signal.SIGALRM)
            elif test in self.interrupted and now > began + limit + GRACE_S:
                self.results.setdefault(test, _result(
                    test, Outcome.TIMEOUT, f"the test ran past its limit of {limit:g} s and did not stop when interrupted"))
                self.kill(f"{test} ran past its limit of {limit:g} s and did not stop when interrupted; the run was killed")
                return
        if self.wall_deadline is not None and now > self.wall_deadline:
            self._out_of_budget(Budget.WALL)
        elif self.header.cpu_budget is not None and now >= self.cpu_due:
            # Read from /proc every MEMORY_CHECK_S, not at each of the run's events.
            self.cpu_due = now + MEMORY_CHECK_S
            if self.cpu_so_far() > self.header.cpu_budget:
                self._out_of_budget(Budget.CPU)

    def _out_of_budget(self, kind: Budget) -> None:
        self.budget = self.current[0] if self.current else "(collecting the tests)" if self.collected is None else "(between tests)"
        self.budget_kind = kind
        self.kill()

    def resident(self) -> int:
        """Bytes of memory both processes hold now, their own pages (from /proc; 0 for one gone)."""
        return sum(_resident_of(pid) for pid in (self.pid, self.impl) if pid is not None)

    def over_memory(self, bound: str) -> None:
        """Stop the run: the grading's processes hold more memory than ``bound`` says."""
        if self.current is not None and not self.killed_why:
            test = self.current[0]
            self.results.setdefault(test, _result(test, Outcome.ERROR, f"the test's run {bound}; the run was stopped"))
        self.kill(f"the run {bound}; the run was stopped")

    def cpu_so_far(self) -> float:
        """CPU seconds both processes have used so far (from /proc; 0 for one already gone)."""
        return sum(_cpu_of(pid) for pid in (self.pid, self.impl) if pid is not None)

    def started_as(self, pid: int) -> None:
        """The zygote forked the test process: ``pid``."""
        self.pid = pid
        if self.kill_pending:
            self.kill()

    def _signal(self, sig: int) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self, why: str = "") -> None:
        """Kill both processes of the run (``why``: the limit that stopped it, if any)."""
        if why and not self.killed_why:
            self.killed_why = why
        self.kill_pending = self.pid is None
        for pid in (self.pid, self.impl):
            if pid is None:
                continue
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except (ProcessLookupError, PermissionError):
                    pass

    # ---------------------------------------------------------------- judgement
    @property
    def over(self) -> bool:
        """Whether the run has ended: its report socket closed and its test process reaped (or never
        started)."""
        return self.eof and (self.ended is not None or self.pid is None)

    def judge(self, impl_cpu: float) -> RunResult:
        """The run's result, from what the test process reported."""
        status, cpu = self.ended if self.ended is not None else (0, 0.0)
        crashed = self.killed_why
        if self.overflow:
            crashed = f"too much output: the run reported more than {_REPORT_CAP // 1024**2} MiB and was killed"
        elif self.tampered:
            crashed = _TAMPERED
        elif not crashed and not self.done and not self.budget and not self.stopped:
            crashed = _describe_status(status) if self.pid is not None else "the run could not be started"
        final: list[TestResult] = []
        for test in self.collected or []:
            if self.select is not None and test not in self.select:
                continue
            if test in self.results:
                final.append(self.results[test])
            elif self.timed_out:
                final.append(_result(test, Outcome.TIMEOUT, crashed))
            elif crashed:  # the run died (os._exit, a signal, a limit) before this test reported
                final.append(_result(test, Outcome.ERROR, crashed))
            elif self.stopped or self.budget:  # stopped on purpose before this test
                final.append(_result(test, Outcome.NOT_RUN, "not run: the run had stopped"))
            else:  # the run said it was done, yet never reported this test
                final.append(_result(test, Outcome.MISSING, "the test never reported"))
        final += [self._absent_result(test) for test in self.absent()]
        errors = self.errors + ([f"... and {self.errors_omitted} more collection errors"] if self.errors_omitted else [])
        return RunResult(
            run_id=self.header.run_id,
            hash_seed=self.job.hash_seed,
            results=tuple(final),
            collection_errors=tuple(errors),
            crashed=crashed,
            duration=round(time.monotonic() - self.started, 3),
            cpu_s=round(cpu + impl_cpu, 3),
            stopped_early=self.stopped,
            budget_exceeded=self.budget,
            budget=self.budget_kind,
            phases=self.phases,
            tests_over_limit=self.over_limit,
        )


def _cpu_of(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def _resident_of(pid: int) -> int:
    """Resident bytes of ``pid`` not backed by a file (its heap, its arrays, the pages it
    inherited), from /proc/PID/statm."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            fields = statm.read().split()
        return max(0, int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _result(test_id: str, outcome: Outcome, message: str = "", duration: float = 0.0) -> TestResult:
    return TestResult(test_id, outcome, message, duration)


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "the run used up its CPU time and was killed (SIGXCPU)"
        return f"the run was killed by signal {signal.Signals(sig).name} before it finished"
    if os.WIFEXITED(status):
        return f"the run exited with status {os.WEXITSTATUS(status)} before it finished"
    return "the run ended before it finished"
