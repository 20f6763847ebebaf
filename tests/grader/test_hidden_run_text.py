"""A hidden mutant's run tells a student nothing: a suite (``tests/hidden_run_text.py``) that,
on the hidden mutants only, prints, warns, skips, fails, raises, calls ``pytest.exit`` and fails
to import, each with a marked message saying what the mutant computes wrongly, is graded through
the real grader with the policy check off (the attack must fail without it). No marked text
reaches any format a student reads, and the student's cells of a hidden mutant say only whether
the test caught it; staff's report keeps the text. Every assignment has such a suite (the GRU's
and the LSTM's), and each test here runs over both.

The service's pages: ``tests/api/test_hidden_run_text_pages.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from grader.core.assignment import Assignment, load_assignment
from grader.core.models import Audience, Outcome, Report
from grader.core.paths import Layout, default_layout, layout_for
from grader.core.scoring import shown_ids, student_view
from grader.core.variants import Variant, VariantKind, build_variants
from grader.flows.grading import grade_suite
from grader.report import RENDERERS, render
from grader.report.gradescope import GradescopeOptions, render_gradescope
from tests.hidden_run_text import FILE, MARK, SPIES, Spy

# The cells of a mutant that every attack of the file fires on, as a student reads them.
SAID = {
    "test_warns": Outcome.PASSED, "test_prints": Outcome.PASSED,
    "test_skips": Outcome.PASSED,  # skipped, with its message: not caught, said so
    "test_asserts": Outcome.FAILED, "test_raises": Outcome.FAILED,
    "test_exits": Outcome.FAILED,  # no result (the run ended): caught, said so
}


@dataclass(frozen=True)
class Case:
    """One assignment, its variants and its spying suite."""

    layout: Layout
    assignment: Assignment
    variants: list[Variant]
    spy: Spy

    @property
    def hidden(self) -> set[str]:
        return {v.id for v in self.variants if v.kind is VariantKind.MUTANT and v.spec.hidden}


@pytest.fixture(scope="module", params=list(SPIES))
def case(request: pytest.FixtureRequest) -> Case:
    layout = default_layout()  # the GRU's, the course's default
    if layout.assignment_name != request.param:
        layout = layout_for(layout.root, request.param)
    assert layout.assignment_name == request.param
    # A short wall-clock budget bounds what the grading spends on the runs that spin or exit.
    assignment = load_assignment(layout.assignment)
    assignment = assignment.model_copy(update={"limits": assignment.limits.model_copy(update={"budget_wall_s": 30.0})})
    return Case(layout, assignment, build_variants(layout), SPIES[request.param])


@pytest.fixture(scope="module")
def staff(case: Case, tmp_path_factory: pytest.TempPathFactory) -> Report:
    tests = tmp_path_factory.mktemp("spy")
    (tests / FILE).write_text(case.spy.suite)
    # A full matrix: every test of the suite runs on every mutant, pytest.exit last.
    return grade_suite(tests, layout=case.layout, assignment=case.assignment, policy=False, audience="staff",
                       full_matrix=True)


@pytest.fixture(scope="module")
def student(case: Case, staff: Report) -> Report:
    return student_view(staff, case.variants)


def test_the_spies_cover_both_assignments() -> None:
    assert set(SPIES) == {"l3-3-gru", "l3-2-lstm"}
    assert SPIES["l3-3-gru"].hidden == {"s04", "s12"}
    assert SPIES["l3-2-lstm"].hidden == {"s08", "s13", "s14"}
    assert "tinyllm.rnn.gru import" in SPIES["l3-3-gru"].suite
    assert "tinyllm.rnn.lstm import" in SPIES["l3-2-lstm"].suite


def test_the_manifest_hides_the_mutants_the_suite_spies_on(case: Case) -> None:
    assert case.hidden == case.spy.hidden
    # The suite spies on the module under test of this assignment.
    assert f"\nfrom {case.layout.module_under_test} import " in case.spy.suite


def test_staff_read_every_text_the_hidden_runs_produced(case: Case, staff: Report) -> None:
    """The attack worked: the run text is there, in staff's report, for staff to see."""
    problems = [str(p) for p in staff.problems]
    for mutant in case.spy.by_output:
        assert any(p.startswith(f"{mutant}: ") and f"{MARK}EXIT" in p for p in problems), (mutant, problems)
        cells = {t.id.rsplit("::", 1)[1]: t.outcomes[mutant] for t in staff.tests}
        assert cells["test_skips"] is Outcome.SKIPPED and cells["test_raises"] is Outcome.FAILED, (mutant, cells)
        assert cells["test_exits"] is Outcome.MISSING, (mutant, cells)
    assert any(p.startswith(f"{case.spy.by_gradient}: ") and f"{MARK}COLLECT" in p for p in problems), problems
    assert all(t.valid for t in staff.tests), [(t.id, t.reason) for t in staff.tests]
    assert {m.id for m in staff.mutants if m.killed} >= set(case.spy.by_output)


def test_a_student_reads_nothing_of_a_hidden_run_in_any_format(staff: Report, student: Report) -> None:
    document = student.model_dump_json()
    assert MARK not in document
    for fmt in RENDERERS:
        assert MARK not in render(student, fmt), fmt
    revealing = GradescopeOptions(hidden_hints="after_due_date")
    assert MARK not in render_gradescope(student, revealing, revealed=staff)
    # Nothing of the hidden runs is counted among the problems a student is told were left out.
    assert student.problems == [] and student.problems_omitted == 0


def test_a_students_cells_of_a_hidden_mutant_say_only_whether_it_was_caught(case: Case, student: Report) -> None:
    # Those detected by output caught by some tests; the one detected by its gradient by every
    # test of the file, which does not import on it (its tests error, as pytest sees them:
    # docs/grading.md).
    killed = [m for m in student.mutants if m.hidden and m.killed]
    assert len(killed) == len(case.spy.hidden), student.mutants
    cells = [{t.id.rsplit("::", 1)[1]: t.outcomes[m.id] for t in student.tests} for m in killed]
    assert SAID in cells, cells
    assert {name: Outcome.FAILED for name in cells[0]} in cells, cells
    # Each hidden mutant's cells, under the name a student reads it by, are those its detection gives.
    names = shown_ids(case.variants, Audience.STUDENT)
    by_name = {m.id: c for m, c in zip(killed, cells)}
    assert set(by_name) == {names[mutant] for mutant in case.spy.hidden}, (names, by_name)
    for mutant in case.spy.by_output:
        assert by_name[names[mutant]] == SAID, (mutant, by_name)
    assert by_name[names[case.spy.by_gradient]] == dict.fromkeys(SAID, Outcome.FAILED), by_name
    hidden_names = {m.id for m in student.mutants if m.hidden}
    for test in student.tests:
        assert {test.outcomes[name] for name in hidden_names} <= {Outcome.PASSED, Outcome.FAILED, Outcome.NOT_RUN}


def test_a_report_stored_under_the_old_schema_holds_nothing_of_a_hidden_run_either(case: Case, staff: Report) -> None:
    """A report stored as ``mutagrade.report/1`` holds every line as a sentence ("s04: ...")."""
    stored = json.loads(staff.model_dump_json(by_alias=True))
    stored["schema"] = "mutagrade.report/1"
    stored["problems"] = [str(p) for p in staff.problems]
    stored["reasons"] = [str(r) for r in staff.reasons]
    old = Report.model_validate_json(json.dumps(stored))
    assert MARK in old.model_dump_json()
    seen = student_view(old, case.variants)
    for fmt in RENDERERS:
        assert MARK not in render(seen, fmt), fmt
