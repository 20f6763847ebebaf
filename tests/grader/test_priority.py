"""Grading yields the CPU to the service: workers and the children that run student tests
run at a lower scheduling priority, so the API and the staff pages stay quick on a machine
busy grading (``tests/api/test_burst.py`` measures that side)."""

from __future__ import annotations

from pathlib import Path

from grader.core.assignment import load_assignment
from grader.flows.grading import grade_suite
from grader.core.models import Outcome
from grader.core.paths import default_layout
from grader.worker import NICENESS

LAYOUT = default_layout()
ASSIGNMENT = load_assignment(LAYOUT.assignment)

RECORDS = '''
import os


def test_runs_at_a_lower_priority():
    assert os.nice(0) >= {niceness}, os.nice(0)
'''


def test_student_tests_run_at_the_workers_lower_priority(tmp_path: Path) -> None:
    assert NICENESS >= 10
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "test_nice.py").write_text(RECORDS.format(niceness=NICENESS))
    report = grade_suite(tests, layout=LAYOUT, assignment=ASSIGNMENT, audience="staff", policy=False)
    [test] = report.tests
    assert test.outcomes["reference"] is Outcome.PASSED, test.reason
