"""A broken or hostile suite costs little: reference first, limits derived from the reference,
a CPU budget, and each mutant's run stopping at its first kill.

Each grading here is timed with the wall clock only as a bound far above what it needs (the
issue's own ceilings), never as a benchmark: bench/grade_speed.py measures speed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.core.assignment import load_assignment
from grader.flows.grading import grade_suite
from grader.core.models import Outcome, TestStatus
from grader.core.paths import default_layout
from grader.run.scheduler import run_matrix
from grader.run.runner import RunLimits
from grader.core.variants import build_variants
from tests.limits import unbudgeted

LAYOUT = default_layout()
ASSIGNMENT = load_assignment(LAYOUT.assignment)
EXAMPLE = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"

SPIN = '''
def test_spins_{n}():
    n = 0
    while True:
        n += 1
'''

HAND = '''
import math
import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def hand(h=0.5):
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    return gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[h]], dtype=np.float64), *w)


def right():
    return np.allclose(hand().data, [[0.25 * np.tanh(0.75) + 0.375]])
'''


def _suite(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "tests"
    folder.mkdir()
    (folder / "test_suite.py").write_text(body)
    return folder


def _grade(tests: Path, **kwargs):
    started = time.monotonic()
    report = grade_suite(tests, layout=LAYOUT, assignment=kwargs.pop("assignment", ASSIGNMENT), **kwargs)
    return report, time.monotonic() - started


@pytest.fixture(scope="module")
def example_report():
    report, _ = _grade(EXAMPLE, audience="staff")
    return report


def _the_next_grading_is_right(example_report) -> None:
    """A grading after a hostile one gives the bundled example its usual report."""
    report, _ = _grade(EXAMPLE, audience="staff")
    assert report.passed and report.score == example_report.score
    assert [(t.id, t.status, t.kills) for t in report.tests] == [
        (t.id, t.status, t.kills) for t in example_report.tests
    ]


def _wrong_and_run_nowhere_else(report, test) -> None:
    assert test.status is TestStatus.WRONG and not test.valid
    assert "not run on the wheats or mutants" in test.reason
    others = {v: o for v, o in test.outcomes.items() if v != "reference"}
    assert others and set(others.values()) == {Outcome.NOT_RUN}


def test_one_spinning_test_costs_one_time_limit(tmp_path, example_report):
    report, took = _grade(_suite(tmp_path, SPIN.format(n=0)), audience="staff")
    [test] = report.tests
    assert test.outcomes["reference"] is Outcome.TIMEOUT
    _wrong_and_run_nowhere_else(report, test)
    assert not report.passed and report.score.killed == 0
    # The reference under two hash seeds, and at most one wheat's run that went beside them.
    assert report.timing.runs in (2, 3)
    assert took <= 25, f"a one-test spinning suite took {took:.1f} s to grade"
    _the_next_grading_is_right(example_report)


def test_ten_spinning_tests_cost_one_limit_then_the_floor(tmp_path, example_report):
    report, took = _grade(_suite(tmp_path, "".join(SPIN.format(n=n) for n in range(10))), audience="staff")
    assert len(report.tests) == 10
    for test in report.tests:
        assert test.outcomes["reference"] is Outcome.TIMEOUT
        _wrong_and_run_nowhere_else(report, test)
    later = [t for t in report.tests if "lowered from" in t.reason]
    assert len(later) == 9  # after the first time-out, the others get the floor
    assert took <= 30, f"a ten-test spinning suite took {took:.1f} s to grade"
    _the_next_grading_is_right(example_report)


def test_a_test_that_allocates_without_bound_is_wrong_and_cheap(tmp_path, example_report):
    body = '''
def test_hoards():
    hoard = []
    while True:
        hoard.append(bytearray(64 * 1024 * 1024))
'''
    report, took = _grade(_suite(tmp_path, body), audience="staff")
    [test] = report.tests
    assert test.outcomes["reference"] in (Outcome.FAILED, Outcome.ERROR)
    _wrong_and_run_nowhere_else(report, test)
    assert took <= 30
    _the_next_grading_is_right(example_report)


def test_a_suite_that_errors_at_import_is_graded_at_once(tmp_path, example_report):
    report, took = _grade(_suite(tmp_path, "raise RuntimeError('broken at import')\n\ndef test_x():\n    pass\n"))
    assert not report.passed and report.tests == []
    assert "no test was collected: a test file could not be collected (see the problems while running)" in report.reasons
    assert any("broken at import" in str(p) for p in report.problems)
    assert report.timing.runs in (2, 3)  # the reference twice, at most one wheat beside it
    assert took <= 30
    _the_next_grading_is_right(example_report)


def test_a_mutant_that_loops_is_killed_by_a_limit_derived_from_the_reference(tmp_path):
    body = HAND + '''

def test_waits_for_the_right_answer():
    while not right():
        pass
'''
    report, took = _grade(_suite(tmp_path, body), audience="staff")
    [test] = report.tests
    assert test.valid
    assert test.outcomes["s03"] is Outcome.TIMEOUT and "s03" in test.kills
    # Each looping mutant costs its derived limit (the floor, 1 s), twice (the kill is
    # confirmed), not the 10 s test limit: five of them would take 100 s otherwise.
    looping = [v for v, o in test.outcomes.items() if o is Outcome.TIMEOUT]
    assert len(looping) >= 5
    # The kill and its confirmation each cost about the floor; the test limit would be 10 s each.
    assert report.timing.tests_s < 3.0 * len(looping), report.timing
    assert took < 5 * 10


def test_the_budget_stops_a_grading_with_a_clear_report(tmp_path):
    body = '''
import time
from dataclasses import replace


def test_burns_cpu():
    started = time.process_time()
    while time.process_time() - started < 2.0:
        pass
'''
    tight = ASSIGNMENT.model_copy(update={"limits": ASSIGNMENT.limits.model_copy(update={"budget_cpu_s": 3.0})})
    report, took = _grade(_suite(tmp_path, body), assignment=tight, policy=False)  # `time`: a trusted suite
    assert not report.passed
    assert str(report.reasons[0]).startswith(
        "grading budget of 3 CPU s exceeded in test test_suite.py::test_burns_cpu on variant"
    ), report.reasons
    assert took < 30


def test_the_cli_exits_1_when_the_budget_runs_out(tmp_path):
    tests = _suite(tmp_path, "import time\n\ndef test_burns():\n    t = time.process_time()\n"
                             "    while time.process_time() - t < 2.0:\n        pass\n")
    assignment = tmp_path / "assignment.toml"
    assignment.write_text(LAYOUT.assignment.read_text().replace("budget_cpu_s = 300.0", "budget_cpu_s = 3.0"))
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(tests), "--assignment", str(assignment), "--policy", "off"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "grading budget of 3 CPU s exceeded in test test_suite.py::test_burns" in done.stdout


def test_each_mutant_stops_at_its_first_kill_unless_the_full_matrix_is_asked(example_report):
    full, _ = _grade(EXAMPLE, audience="staff", full_matrix=True)
    assert example_report.timing.not_run > 0
    assert full.timing.not_run == 0
    assert full.score == example_report.score
    # Early exit drops cells, never kills: every kill it reports, the full matrix has too.
    for quick, whole in zip(example_report.tests, full.tests, strict=True):
        assert set(quick.kills) <= set(whole.kills)
        for variant, outcome in quick.outcomes.items():
            assert outcome is Outcome.NOT_RUN or outcome is whole.outcomes[variant]


def test_a_test_failing_a_wheat_is_not_run_on_the_mutants(tmp_path):
    body = '''
from tinyllm.rnn.gru import GRU


def test_insists_on_one_error_message():
    try:
        GRU(0, 4)
    except ValueError as exc:
        assert str(exc) == "d_in must be a positive int, got 0"
'''
    variants = build_variants(LAYOUT)
    limits = unbudgeted(test_timeout_s=10.0, sandbox="auto")
    matrix = run_matrix(layout=LAYOUT, tests_dir=_suite(tmp_path, body), variants=variants, limits=limits)
    [test_id] = matrix.test_ids
    wheat_outcomes = {v.id: matrix.outcome(test_id, v.id) for v in variants if v.kind.value == "wheat"}
    if all(o is Outcome.PASSED for o in wheat_outcomes.values()):
        pytest.fail(f"the test was meant to reject a wheat's wording; it passed on all of them: {wheat_outcomes}")
    for variant in (v for v in variants if v.kind.value == "mutant"):
        [cell] = [r for r in matrix.first[variant.id].results if r.test_id == test_id]
        assert cell.outcome is Outcome.NOT_RUN
        assert cell.message in ("not run: brittle (fails on a correct implementation)", "not run: wrong on the reference")


def test_both_workers_take_wheats_and_mutants_once_their_reference_run_is_in(example_report):
    """The worker under the second hash seed does not sit idle after its reference run: the two
    share the mutants (a run's result is the same under either seed, since every test it is run
    with passed the reference under both); the wheats take the two seeds in turn."""
    variants = build_variants(LAYOUT)
    limits = RunLimits.of(ASSIGNMENT, jobs=2, sandbox="auto")
    matrix = run_matrix(layout=LAYOUT, tests_dir=EXAMPLE, variants=variants, limits=limits)
    assert (matrix.first["reference"].hash_seed, matrix.second["reference"].hash_seed) == (1, 2)
    others = [v for v in variants if v.kind.value != "reference"]
    assert {matrix.first[v.id].hash_seed for v in others if v.kind.value == "mutant"} == {1, 2}
    assert {matrix.first[v.id].hash_seed for v in others if v.kind.value == "wheat"} == {1, 2}
    valid = {t.id for t in example_report.tests if t.valid}
    mutants = [v for v in others if v.kind.value == "mutant"]
    killed = {v.id for v in mutants if any(matrix.confirmed_failure(t, v.id) for t in valid)}
    assert killed == {v for t in example_report.tests for v in t.kills}


# Suites that hold a grading without spinning: each is stopped by a limit of its own, with the
# default assignment. The blocked fixture waits forever on a barrier no other thread reaches,
# using only modules the policy check allows (numpy's own thread helper).
_BLOCKED_FIXTURE = '''
import numpy as np
import pytest
from tinyllm.rnn.gru import gru_cell


@pytest.fixture
def blocked():
    np.testing.run_threaded(lambda i, b: [b.wait() for _ in range(1 + (i == 0))],
                            max_workers=2, pass_count=True, pass_barrier=True)
''' + "".join(f'''

def test_waits_{n}(blocked):
    assert gru_cell is not None
''' for n in range(9))

_ENDLESS_FIXTURE = '''
import pytest
from tinyllm.rnn.gru import gru_cell


@pytest.fixture
def forever():
    while True:
        pass


def test_never_starts(forever):
    assert gru_cell is not None
'''

_ENDLESS_IMPORT = '''
while True:
    pass


def test_never_collected():
    assert True
'''


@pytest.mark.parametrize("body, stopped_by", [
    (_BLOCKED_FIXTURE, "ran past its limit of 10 s"),
    (_ENDLESS_FIXTURE, "ran past its limit of 10 s"),
    (_ENDLESS_IMPORT, "collecting the tests ran past its limit of 10 s"),
], ids=["blocked-fixture", "endless-fixture", "endless-import"])
def test_a_suite_that_never_gets_to_its_tests_is_graded_in_25_s(tmp_path, body, stopped_by):
    report, took = _grade(_suite(tmp_path, body), audience="staff")
    assert not report.passed
    # The report says what stopped it, for the student reading it.
    said = " ".join([*map(str, report.problems), *(t.reason for t in report.tests)])
    assert stopped_by in said, said
    assert took <= 25, f"graded in {took:.1f} s"


def test_the_wall_budget_stops_a_sleeping_suite_with_a_clear_report(tmp_path, example_report):
    # Each test sleeps under the test limit and burns almost no CPU: only the wall-clock
    # budget sees the grading as a whole.
    body = "import time\n" + "".join(f"\n\ndef test_sleeps_{n:02d}():\n    time.sleep(1.5)\n" for n in range(20))
    tight = ASSIGNMENT.model_copy(update={"limits": ASSIGNMENT.limits.model_copy(update={"budget_wall_s": 4.0})})
    report, took = _grade(_suite(tmp_path, body), assignment=tight, policy=False)  # `time`: a trusted suite
    assert not report.passed
    assert str(report.reasons[0]).startswith("grading wall-clock budget of 4 s ran out in test test_suite.py::test_sleeps_"), report.reasons
    # The first runs are the reference's and a wheat's, at once: any of them may report it.
    assert re.search(r" on variant (reference|w0\d):", str(report.reasons[0])), report.reasons
    assert took < 15, f"graded in {took:.1f} s"
    _the_next_grading_is_right(example_report)


def test_the_memory_bound_covers_the_whole_grading(tmp_path, example_report):
    # 300 MB held in each of the two reference runs at once: under the address-space limit of
    # each process (1 GB), over the grading's bound of 512 MB together (256 MB a worker).
    body = '''
import time
import numpy as np


def test_holds_300_mb():
    held = np.ones(300 * 1024 * 1024 // 8)
    time.sleep(3)
    assert held.sum() > 0
'''
    bounded = ASSIGNMENT.model_copy(update={"limits": ASSIGNMENT.limits.model_copy(update={"memory_mb": 1024})})
    bounded = bounded.model_copy(update={"limits": bounded.limits.model_copy(update={"budget_memory_mb": 512})})
    report, took = _grade(_suite(tmp_path, body), assignment=bounded, policy=False, audience="staff")
    [test] = report.tests
    assert test.outcomes["reference"] in (Outcome.ERROR, Outcome.FAILED)
    assert "memory bound of 512 MB" in test.reason, test.reason
    assert took <= 30
    _the_next_grading_is_right(example_report)
