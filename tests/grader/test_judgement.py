"""The worker's judgement of a run (grader.worker.watch), driven by the events a run reports.

No process is started: the run's processes are given a pid above the kernel's limit
(PID_MAX_LIMIT, 2**22), which no process can have, so that stopping the run signals nobody;
the time is passed to ``check`` as a number.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from grader.core.protocol import JobSettings, Outcome, RunEvent, RunHeader, TestResult
from grader.worker.watch import (
    _MESSAGE_CAP,
    _REPORT_CAP,
    _TAMPERED,
    GRACE_S,
    Run,
    _describe_status,
)

NO_PROCESS = 2**22 + 1
TOKEN = b"0123456789abcdef"
TESTS = ["t.py::a", "t.py::b", "t.py::c"]


def _job(**changes: Any) -> JobSettings:
    """The job every run here belongs to: the one place this file sets its limits."""
    job = JobSettings(reference="/nowhere", tests="/nowhere", hash_seed=1, jobs=1, run_timeout=120.0,
                      test_timeout=10.0, collect_timeout=20.0, memory_bytes=1 << 31, memory_share=None,
                      memory_bound=0, max_tests=500)
    return replace(job, **changes)


@pytest.fixture
def channel() -> Iterator[tuple[int, int]]:
    """The run's report channel as the worker sees it: (where it writes "go on", where the test
    process would read it)."""
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield write, read
    os.close(read)
    os.close(write)


def _run(channel: tuple[int, int], *, job: JobSettings | None = None, **header: Any) -> Run:
    run = Run(job or _job(), RunHeader(run_id=5, source_bytes=0, **header), fd=channel[0], token=TOKEN,
              tmp="/nowhere", impl=NO_PROCESS)
    run.pid = NO_PROCESS
    return run


_PAYLOAD = {"collected": "tests", "begin": "test", "end": "test", "result": "result",
            "collect_error": "text", "phases": "phases"}


def _line(**event: Any) -> bytes:
    """One event as a run's reporter writes it: ``_line(begin="t.py::a")``, ``_line(done=True)``."""
    [(kind, value)] = event.items()
    body = {"kind": kind, **({_PAYLOAD[kind]: value} if kind in _PAYLOAD else {})}
    return TOKEN + json.dumps(body).encode() + b"\n"


def _result(test: str, outcome: str, message: str = "", duration: float = 0.01) -> bytes:
    return _line(result={"test_id": test, "outcome": outcome, "message": message, "duration": duration})


def _test(test: str, outcome: str, message: str = "") -> bytes:
    return _line(begin=test) + _result(test, outcome, message) + _line(end=test)


def _go_ons(channel: tuple[int, int]) -> bytes:
    try:
        return os.read(channel[1], 100)
    except BlockingIOError:
        return b""


def _ended(run: Run, status: int = 0, *, done: bool = True) -> dict[str, Any]:
    """The run's result as the grader reads it: the worker's JSON line."""
    if done:
        run.feed(_line(done=True))
    run.eof = True
    run.ended = (status, 0.25)
    assert run.over
    return json.loads(run.judge(impl_cpu=0.5).to_line())


def _outcomes(judged: dict[str, Any]) -> dict[str, str]:
    return {r["test_id"]: r["outcome"] for r in judged["results"]}


def test_a_clean_run_reports_every_test_in_collection_order(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS))
    run.feed(_test("t.py::b", "failed", "AssertionError: no") + _test("t.py::a", "passed"))
    # Events may arrive cut anywhere: only whole lines count.
    chunk = _test("t.py::c", "skipped")
    run.feed(chunk[:7])
    assert "t.py::c" not in run.results
    run.feed(chunk[7:] + _line(phases={"setup": 0.1, "collect": 0.2, "run": True}))
    assert _go_ons(channel) == b"ggg"  # one "go on" after each test
    judged = _ended(run)
    assert [r["test_id"] for r in judged["results"]] == TESTS
    assert _outcomes(judged) == {"t.py::a": "passed", "t.py::b": "failed", "t.py::c": "skipped"}
    assert judged["results"][1]["message"] == "AssertionError: no"
    assert judged["crashed"] == "" and judged["run_id"] == 5 and judged["hash_seed"] == 1
    assert judged["cpu_s"] == 0.75 and not judged["stopped_early"] and judged["budget"] is None
    assert judged["phases"] == {"setup": 0.1, "collect": 0.2}  # a non-number is dropped


def test_the_first_report_of_a_test_stands(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS[:1]) + _result("t.py::a", "failed", "first") + _result("t.py::a", "passed"))
    assert _outcomes(_ended(run)) == {"t.py::a": "failed"}


def test_a_line_without_the_token_is_tampering(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS) + _test("t.py::a", "passed"))
    forged = json.dumps({"result": {"test_id": "t.py::b", "outcome": "passed"}}).encode() + b"\n"
    run.feed(forged + _test("t.py::c", "passed"))
    assert run.tampered and run.kill_pending is False  # killed at once: its pid is known
    judged = _ended(run, done=False)
    assert judged["crashed"] == _TAMPERED
    # What came before stands; nothing after is believed, not even a genuine-looking line.
    assert _outcomes(judged) == {"t.py::a": "passed", "t.py::b": "error", "t.py::c": "error"}


def test_a_wrong_token_is_tampering_too(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS[:1]) + b"f" * len(TOKEN) + json.dumps({"done": True}).encode() + b"\n")
    assert run.tampered and not run.done


def test_messages_are_capped(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collect_error="x" * 10_000) + _line(collected=TESTS[:1])
             + _result("t.py::a", "failed", "y" * 10_000))
    judged = _ended(run)
    assert judged["collection_errors"] == ["x" * _MESSAGE_CAP]
    assert judged["results"][0]["message"] == "y" * _MESSAGE_CAP


def test_malformed_lines_and_results_are_noted_not_believed(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS[:2]) + TOKEN + b"{not json\n" + TOKEN + b"[1, 2]\n"
             + _line(result={"test_id": "t.py::a", "outcome": "won"}) + _result("t.py::b", "passed"))
    assert not run.tampered
    judged = _ended(run)
    assert judged["collection_errors"] == ["the run wrote a malformed report line",
                                           "the run wrote a malformed report line",
                                           "the run wrote a malformed test result"]
    assert _outcomes(judged) == {"t.py::a": "missing", "t.py::b": "passed"}
    assert judged["results"][0]["message"] == "the test never reported"


@pytest.mark.parametrize(
    "value",
    [
        None,
        ["t", "passed"],
        {"outcome": "passed"},
        {"test_id": 3, "outcome": "passed"},
        {"test_id": "t", "outcome": "PASSED"},
        {"test_id": "t", "outcome": "passed", "message": 1},
        {"test_id": "t", "outcome": "passed", "duration": "1"},
        {"test_id": "t", "outcome": "passed", "duration": True},
        {"test_id": "t", "outcome": ["passed"]},
        {"test_id": "t", "outcome": {"passed": 1}},
        {"test_id": "t", "outcome": "failed", "raised_in": 3},
    ],
)
def test_a_malformed_result_is_read_as_none(value: Any) -> None:
    event = RunEvent.from_line(json.dumps({"kind": "result", "result": value}).encode())
    assert event is not None and event.kind == "result" and event.result is None


def test_a_good_result_is_read_with_only_its_fields() -> None:
    line = json.dumps({"kind": "result", "result": {"test_id": "t", "outcome": "timeout", "duration": 2, "extra": "dropped"}})
    checked = RunEvent.from_line(line.encode()).result
    assert checked == TestResult(test_id="t", outcome=Outcome.TIMEOUT, message="", duration=2.0)
    assert isinstance(checked.duration, float)


def test_where_a_failure_was_raised_in_the_tests_own_files_is_read_back() -> None:
    result = {"test_id": "t", "outcome": "failed", "message": "NameError: name 'x' is not defined",
              "raised_in": "test_gru.py:7"}
    checked = RunEvent.from_line(json.dumps({"kind": "result", "result": result}).encode()).result
    assert checked == TestResult("t", Outcome.FAILED, "NameError: name 'x' is not defined", 0.0, "test_gru.py:7")


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (signal.SIGKILL, "killed by signal SIGKILL before it finished"),
        (signal.SIGSEGV, "killed by signal SIGSEGV"),
        (signal.SIGXCPU, "used up its CPU time and was killed (SIGXCPU)"),
        (3 << 8, "exited with status 3 before it finished"),
        (0, "exited with status 0 before it finished"),
    ],
)
def test_describe_status(status: int, words: str) -> None:
    assert words in _describe_status(status)


def test_a_tests_duration_is_the_workers_clock_not_what_the_test_process_says(channel: tuple[int, int]) -> None:
    """A test process may report any duration (pytest's clock is the tests' to patch): the run
    keeps the time it saw between the test's beginning and its result."""
    run = _run(channel)
    run.feed(_line(collected=TESTS) + _line(begin="t.py::a"))
    time.sleep(0.2)
    run.feed(_result("t.py::a", "passed", duration=0.001) + _line(end="t.py::a"))
    assert run.results["t.py::a"].duration >= 0.2


def test_a_run_that_dies_leaves_its_unreported_tests_errors(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS) + _test("t.py::a", "passed") + _line(begin="t.py::b"))
    judged = _ended(run, signal.SIGSEGV, done=False)
    assert "SIGSEGV" in judged["crashed"]
    assert _outcomes(judged) == {"t.py::a": "passed", "t.py::b": "error", "t.py::c": "error"}
    assert judged["results"][1]["message"] == judged["crashed"]


def test_a_run_that_never_started_says_so(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.pid = None
    run.eof = True
    assert run.over
    assert run.judge(impl_cpu=0.0).crashed == "the run could not be started"


def test_a_clean_exit_code_does_not_make_an_unfinished_run_fine(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS[:1]))
    judged = _ended(run, 0, done=False)
    assert judged["crashed"] == "the run exited with status 0 before it finished"
    assert _outcomes(judged) == {"t.py::a": "error"}


def test_stop_at_first_kill_stops_and_leaves_the_rest_not_run(channel: tuple[int, int]) -> None:
    run = _run(channel, stop_at_first_kill=True)
    run.feed(_line(collected=TESTS) + _test("t.py::a", "passed"))
    assert not run.stopped
    run.feed(_test("t.py::b", "timeout"))
    assert run.stopped
    assert _go_ons(channel) == b"g"  # after a, not after the test that decided the run
    judged = _ended(run, signal.SIGKILL, done=False)
    assert judged["crashed"] == "" and judged["stopped_early"]  # stopped on purpose: no crash
    assert _outcomes(judged) == {"t.py::a": "passed", "t.py::b": "timeout", "t.py::c": "not_run"}


def test_only_selected_tests_are_reported_and_the_run_stops_once_they_have(channel: tuple[int, int]) -> None:
    run = _run(channel, select=["t.py::b"], stop_at_first_kill=True)
    run.feed(_line(collected=TESTS) + _test("t.py::a", "failed"))
    assert not run.stopped  # a test not selected decides nothing
    run.feed(_test("t.py::b", "passed"))
    assert run.stopped
    judged = _ended(run, signal.SIGKILL, done=False)
    assert judged["crashed"] == ""
    assert _outcomes(judged) == {"t.py::b": "passed"}


def test_a_test_past_its_limit_is_interrupted_then_times_out(channel: tuple[int, int]) -> None:
    run = _run(channel, time_limits={"t.py::a": 2.0}, timeout_floor=0.5)
    run.feed(_line(collected=TESTS) + _line(begin="t.py::a"))
    _, began, limit = run.current
    assert limit == 2.0 and run.next_check() <= began + limit
    run.check(began + limit - 0.01)
    assert run.interrupted == {}
    run.check(began + limit + 0.01)
    assert run.interrupted == {"t.py::a": 2.0} and run.lowered and not run.killed_why
    # It stopped when interrupted and reported (a failure, as the exception looked to it): a time-out.
    run.feed(_result("t.py::a", "failed", "TestTimeout") + _line(end="t.py::a"))
    assert run.results["t.py::a"].outcome is Outcome.TIMEOUT
    assert "its limit of 2 s" in run.results["t.py::a"].message
    # Later tests of the run get at most the floor.
    run.feed(_line(begin="t.py::b"))
    assert run.current[2] == 0.5
    run.check(run.current[1] + 0.6)
    run.feed(_result("t.py::b", "failed"))
    assert "lowered from 10 s" in run.results["t.py::b"].message


def test_a_test_that_ignores_its_interruption_is_killed_with_its_run(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS) + _line(begin="t.py::a"))
    _, began, limit = run.current
    run.check(began + limit + 0.01)
    assert run.next_check() == pytest.approx(began + limit + GRACE_S)
    run.check(began + limit + GRACE_S - 0.01)
    assert not run.killed_why
    run.check(began + limit + GRACE_S + 0.01)
    assert "did not stop when interrupted" in run.killed_why
    judged = _ended(run, signal.SIGKILL, done=False)
    assert _outcomes(judged) == {"t.py::a": "timeout", "t.py::b": "error", "t.py::c": "error"}


def test_a_run_past_its_deadline_times_out_every_test_left(channel: tuple[int, int]) -> None:
    run = _run(channel, job=_job(run_timeout=30.0))
    run.feed(_line(collected=TESTS) + _test("t.py::a", "passed"))
    run.check(run.started + 29.0)
    assert not run.timed_out
    run.check(run.started + 30.5)
    assert run.timed_out and "time limit of 30 s" in run.killed_why
    judged = _ended(run, signal.SIGKILL, done=False)
    assert _outcomes(judged) == {"t.py::a": "passed", "t.py::b": "timeout", "t.py::c": "timeout"}


def test_collection_past_its_limit_stops_the_run(channel: tuple[int, int]) -> None:
    run = _run(channel, job=_job(collect_timeout=5.0))
    run.check(run.started + 5.5)
    assert "collecting the tests ran past its limit of 5 s" in run.killed_why
    assert run.kill_pending is False


def test_the_wall_budget_stops_the_run_without_a_crash(channel: tuple[int, int]) -> None:
    run = _run(channel, wall_budget=3.0)
    run.feed(_line(collected=TESTS) + _test("t.py::a", "failed") + _line(begin="t.py::b"))
    run.check(run.started + 2.0)
    assert run.budget == ""
    run.check(run.started + 3.5)
    assert (run.budget, run.budget_kind) == ("t.py::b", "wall")
    judged = _ended(run, signal.SIGKILL, done=False)
    assert judged["crashed"] == "" and judged["budget_exceeded"] == "t.py::b" and judged["budget"] == "wall"
    assert _outcomes(judged) == {"t.py::a": "failed", "t.py::b": "not_run", "t.py::c": "not_run"}


def test_the_wall_budget_while_collecting(channel: tuple[int, int]) -> None:
    run = _run(channel, wall_budget=1.0)
    run.check(run.started + 1.5)
    assert run.budget == "(collecting the tests)"


def test_a_suite_over_the_test_limit_runs_nothing(channel: tuple[int, int]) -> None:
    run = _run(channel, job=_job(max_tests=2))
    run.feed(_line(collected=TESTS))
    assert run.over_limit == 3 and run.collected == []
    assert "3 tests, more than the limit of 2" in run.killed_why
    judged = _ended(run, signal.SIGKILL, done=False)
    assert judged["results"] == [] and judged["tests_over_limit"] == 3


def test_a_run_reporting_past_the_cap_is_cut_off(channel: tuple[int, int]) -> None:
    run = _run(channel)
    run.feed(_line(collected=TESTS[:1]))
    run.feed(b"x" * _REPORT_CAP)
    assert run.overflow and not run.buffer.endswith(b"x")
    judged = _ended(run, signal.SIGKILL, done=False)
    assert judged["crashed"].startswith("too much output: ")
    assert _outcomes(judged) == {"t.py::a": "error"}


def test_a_kill_before_the_test_process_is_known_waits_for_it(channel: tuple[int, int]) -> None:
    run = _run(channel, job=_job(max_tests=1))
    run.pid = None
    run.feed(_line(collected=TESTS))
    assert run.kill_pending
    run.started_as(NO_PROCESS)
    assert run.pid == NO_PROCESS and not run.kill_pending
