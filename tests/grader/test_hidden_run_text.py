"""A hidden mutant's run tells a student nothing: a suite (``tests/hidden_run_text.py``) that,
on the hidden mutants only, prints, warns, skips, fails, raises, calls ``pytest.exit`` and fails
to import, each with a marked message saying what the mutant computes wrongly, is graded through
the real grader with the policy check off (the attack must fail without it). No marked text
reaches any format a student reads, and the student's cells of a hidden mutant say only whether
the test caught it; staff's report keeps the text.

The service's pages: ``tests/api/test_hidden_run_text_pages.py``.
"""

from __future__ import annotations

import json

import pytest

from grader.core.assignment import load_assignment
from grader.core.models import Outcome, Report
from grader.core.paths import default_layout
from grader.core.scoring import student_view
from grader.core.variants import VariantKind, build_variants
from grader.flows.grading import grade_suite
from grader.report import RENDERERS, render
from grader.report.gradescope import GradescopeOptions, render_gradescope
from tests.hidden_run_text import FILE, MARK, SUITE

LAYOUT = default_layout()
VARIANTS = build_variants(LAYOUT)
HIDDEN = {v.id for v in VARIANTS if v.kind is VariantKind.MUTANT and v.spec.hidden}
# A short wall-clock budget bounds what the grading spends on the runs that spin or exit.
ASSIGNMENT = load_assignment(LAYOUT.assignment)
ASSIGNMENT = ASSIGNMENT.model_copy(update={"limits": ASSIGNMENT.limits.model_copy(update={"budget_wall_s": 30.0})})


@pytest.fixture(scope="module")
def staff(tmp_path_factory: pytest.TempPathFactory) -> Report:
    tests = tmp_path_factory.mktemp("spy")
    (tests / FILE).write_text(SUITE)
    # A full matrix: every test of the suite runs on every mutant, pytest.exit last.
    return grade_suite(tests, layout=LAYOUT, assignment=ASSIGNMENT, policy=False, audience="staff",
                       full_matrix=True)


@pytest.fixture(scope="module")
def student(staff: Report) -> Report:
    return student_view(staff, VARIANTS)


def test_the_manifest_hides_the_mutants_the_suite_spies_on() -> None:
    assert HIDDEN == {"s04", "s12"}


def test_staff_read_every_text_the_hidden_runs_produced(staff: Report) -> None:
    """The attack worked: the run text is there, in staff's report, for staff to see."""
    problems = [str(p) for p in staff.problems]
    assert any(p.startswith("s04: ") and f"{MARK}EXIT" in p for p in problems), problems
    assert any(p.startswith("s12: ") and f"{MARK}COLLECT" in p for p in problems), problems
    cells = {t.id.rsplit("::", 1)[1]: t.outcomes["s04"] for t in staff.tests}
    assert cells["test_skips"] is Outcome.SKIPPED and cells["test_raises"] is Outcome.FAILED, cells
    assert cells["test_exits"] is Outcome.MISSING, cells
    assert all(t.valid for t in staff.tests), [(t.id, t.reason) for t in staff.tests]
    assert {m.id for m in staff.mutants if m.killed} >= {"s04"}


def test_a_student_reads_nothing_of_a_hidden_run_in_any_format(staff: Report, student: Report) -> None:
    document = student.model_dump_json()
    assert MARK not in document
    for fmt in RENDERERS:
        assert MARK not in render(student, fmt), fmt
    revealing = GradescopeOptions(hidden_hints="after_due_date")
    assert MARK not in render_gradescope(student, revealing, revealed=staff)
    # Nothing of the hidden runs is counted among the problems a student is told were left out.
    assert student.problems == [] and student.problems_omitted == 0


def test_a_students_cells_of_a_hidden_mutant_say_only_whether_it_was_caught(student: Report) -> None:
    # s04 caught by some tests; s12 by every test of the file, which does not import on it
    # (its tests error, as pytest sees them: docs/grading.md).
    killed = [m for m in student.mutants if m.hidden and m.killed]
    assert len(killed) == 2, student.mutants
    cells = [{t.id.rsplit("::", 1)[1]: t.outcomes[m.id] for t in student.tests} for m in killed]
    assert {
        "test_warns": Outcome.PASSED, "test_prints": Outcome.PASSED,
        "test_skips": Outcome.PASSED,  # skipped, with its message: not caught, said so
        "test_asserts": Outcome.FAILED, "test_raises": Outcome.FAILED,
        "test_exits": Outcome.FAILED,  # no result (the run ended): caught, said so
    } in cells, cells
    assert {name: Outcome.FAILED for name in cells[0]} in cells, cells
    hidden_names = {m.id for m in student.mutants if m.hidden}
    for test in student.tests:
        assert {test.outcomes[name] for name in hidden_names} <= {Outcome.PASSED, Outcome.FAILED, Outcome.NOT_RUN}


def test_a_report_stored_under_the_old_schema_holds_nothing_of_a_hidden_run_either(staff: Report) -> None:
    """A report stored as ``mutagrade.report/1`` holds every line as a sentence ("s04: ...")."""
    stored = json.loads(staff.model_dump_json(by_alias=True))
    stored["schema"] = "mutagrade.report/1"
    stored["problems"] = [str(p) for p in staff.problems]
    stored["reasons"] = [str(r) for r in staff.reasons]
    old = Report.model_validate_json(json.dumps(stored))
    assert MARK in old.model_dump_json()
    seen = student_view(old, VARIANTS)
    for fmt in RENDERERS:
        assert MARK not in render(seen, fmt), fmt
