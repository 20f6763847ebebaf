"""Gradescope's ``results.json``: the score follows the verdict (or counts kills, as the
assignment says), every field is one Gradescope documents, and hidden mutants are revealed only
after the due date, and only where the assignment asks for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr

from grader.core.assignment import AssignmentError, load_assignment
from grader.core.models import JournalSummary, MutantVerdict, PolicySummary, Report, Score, Timing
from grader.core.paths import default_layout
from grader.report import render
from grader.report.gradescope import GradescopeOptions, gradescope_options, gradescope_points, render_gradescope
from grader.core.variants import VariantKind, build_variants
from tests.grader.test_report import HIDDEN_HINT, HIDDEN_REAL_TITLE, S02_HINT, failing_report, passing_report

LAYOUT = default_layout()
EXAMPLE = LAYOUT.examples / "student"
VISIBILITY = Literal["visible", "hidden", "after_due_date", "after_published"]


class _Test(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: StrictStr
    score: StrictFloat
    max_score: StrictFloat
    status: Literal["passed", "failed"]
    output: StrictStr
    visibility: VISIBILITY


class _Results(BaseModel):
    """Gradescope's fields, and only those (its autograder specification, "Output format")."""

    model_config = ConfigDict(extra="forbid", strict=True)
    score: StrictFloat
    max_score: StrictFloat
    execution_time: StrictInt
    output: StrictStr
    visibility: VISIBILITY
    stdout_visibility: VISIBILITY
    tests: list[_Test]


def _results(report: Report, options: GradescopeOptions | None = None, **kwargs) -> _Results:
    return _Results.model_validate_json(render_gradescope(report, options, **kwargs))


def _suite(killed: int, *, passed: bool, total: int = 12, reasons: list[str] | None = None) -> Report:
    """``total`` mutants, the first ``killed`` of them killed by one valid test; s02 required."""
    mutants = [
        MutantVerdict(
            id=f"s{n:02d}", title=f"Mutant {n}", required=n == 2, hidden=False, killed=n <= killed,
            killed_by=["test_gru.py::test_all"] if n <= killed else [], hint="" if n <= killed else f"Hint {n}.",
        )
        for n in range(1, total + 1)
    ]
    return Report(
        submission="s",
        passed=passed,
        reasons=reasons or ([] if passed else ["1 test is brittle"]),
        score=Score(
            kill_rate=killed / total, killed=killed, total=total, threshold=0.7, required=["s02"],
            required_missing=[] if killed >= 2 else ["s02"],
        ),
        tests=[],
        mutants=mutants,
        variants=["reference", *(m.id for m in mutants)],
        timing=Timing(total_s=3.6),
    )


# ------------------------------------------------------------------- the score (verdict)
def test_by_default_a_passed_suite_gets_full_points_and_one_that_is_not_passed_less() -> None:
    passed = _results(_suite(12, passed=True))
    invalid_test = _results(_suite(12, passed=False, reasons=["1 test is brittle"]))
    required_missed = _results(_suite(10, passed=False, reasons=["required mutant s02 was not killed"]))
    assert (passed.score, passed.max_score) == (12.0, 12.0)
    assert invalid_test.max_score == 12.0 and invalid_test.score == pytest.approx(6.0)
    assert required_missed.score == pytest.approx(5.0)
    assert invalid_test.score < passed.score


def test_a_passed_suite_gets_full_points_whatever_it_killed_beyond_the_threshold() -> None:
    results = _results(_suite(9, passed=True))
    assert results.score == results.max_score == 12.0


def test_the_verdict_carries_the_points_and_the_mutants_are_checks() -> None:
    results = _results(_suite(10, passed=False))
    verdict = results.tests[0]
    assert verdict.name == "Verdict" and verdict.status == "failed"
    assert (verdict.score, verdict.max_score) == (results.score, results.max_score)
    assert "NOT PASSED" in verdict.output and "0.5 point per killed mutant" in verdict.output
    mutants = results.tests[1:13]
    assert [t.max_score for t in mutants] == [0.0] * 12
    assert [t.status for t in mutants] == ["passed"] * 10 + ["failed"] * 2
    assert sum(t.score for t in results.tests) == pytest.approx(results.score)
    assert sum(t.max_score for t in results.tests) == pytest.approx(results.max_score)


def test_the_share_a_suite_that_does_not_pass_may_earn_is_the_assignments() -> None:
    options = GradescopeOptions(not_passed_share=0.25)
    assert _results(_suite(10, passed=False), options).score == pytest.approx(2.5)
    assert _results(_suite(10, passed=True), options).score == 12.0
    with pytest.raises(ValueError, match="not_passed_share"):
        GradescopeOptions(not_passed_share=1.0)


# ---------------------------------------------------------------------- the score (kills)
def test_kills_mode_scores_one_point_per_killed_mutant(passing: Report, failing: Report) -> None:
    for report in (passing, failing):
        results = _results(report, GradescopeOptions(score="kills"))
        assert results.score == report.score.killed and results.max_score == report.score.total
        per_mutant = results.tests[: len(report.mutants)]
        assert [t.score for t in per_mutant] == [1.0 if m.killed else 0.0 for m in report.mutants]
        assert [t.max_score for t in per_mutant] == [1.0] * len(report.mutants)
        assert sum(t.score for t in results.tests) == results.score
        assert results.output.startswith("PASSED" if report.passed else "NOT PASSED")
        assert "The score counts killed mutants only." in results.output


# ---------------------------------------------------------------------- the points
def test_max_score_is_the_points_staff_set_on_gradescope_one_per_mutant(passing: Report, failing: Report) -> None:
    """``mutagrade bundle gradescope`` tells staff this number: it must be what results.json
    scores out of, whatever the mode and the verdict."""
    for report in (passing, failing, _suite(3, passed=False, total=7)):
        for mode in ("verdict", "kills"):
            results = _results(report, GradescopeOptions(score=mode))
            assert results.max_score == gradescope_points(report.score.total) == float(report.score.total)
    assert gradescope_points(12) == 12.0 and type(gradescope_points(12)) is float


# ---------------------------------------------------------------------- the fields
def test_every_field_is_one_gradescope_documents_with_its_type(passing: Report, failing: Report) -> None:
    for report in (passing, failing):
        for mode in ("verdict", "kills"):
            data = json.loads(render_gradescope(report, GradescopeOptions(score=mode)))
            for entry in [data, *data["tests"]]:  # ints pass for floats in pydantic, not here
                assert type(entry["score"]) is float and type(entry["max_score"]) is float, entry
            results = _Results.model_validate(data)
            assert 0 <= results.score <= results.max_score
            assert all(0 <= t.score <= t.max_score for t in results.tests)


def test_execution_time_is_the_gradings_time_journal_included_in_whole_seconds(passing: Report) -> None:
    assert _results(passing).execution_time == 12  # timing.total_s = 12.5
    suite = _suite(1, passed=False)
    assert _results(suite).execution_time == 4  # 3.6 s
    # The grading's total holds the journal's replay (timing.journal_s), counted once.
    replayed = suite.model_copy(update={"journal": JournalSummary(checked=True, ok=True, replay_s=2.1),
                                        "timing": Timing(total_s=5.7, journal_s=2.1)})
    assert _results(replayed).execution_time == 6  # 5.7 s


def test_the_autograders_own_output_is_for_staff_only(passing: Report) -> None:
    results = _results(passing)
    assert results.stdout_visibility == "hidden" and results.visibility == "visible"
    assert all(t.visibility == "visible" for t in results.tests)


def test_the_registry_renders_the_default_options(failing: Report) -> None:
    assert render(failing, "gradescope") == render_gradescope(failing, GradescopeOptions())


# ------------------------------------------------------------------------ the checks
def test_a_journal_not_checked_is_never_shown_as_passed(passing: Report) -> None:
    assert not passing.journal.checked
    results = _results(passing)
    assert not any(t.name == "Journal" for t in results.tests)
    assert "Journal: not checked" in results.output


def test_a_policy_not_checked_is_never_shown_as_passed(passing: Report) -> None:
    results = _results(passing.model_copy(update={"policy": PolicySummary(checked=False)}))
    assert not any(t.name == "Policy" for t in results.tests)
    assert "Policy: not checked" in results.output


def test_checked_journal_and_policy_show_what_they_found(passing: Report, failing: Report) -> None:
    verified = passing.model_copy(update={"journal": JournalSummary(checked=True, ok=True, entries=4)})
    checks = {t.name: t for t in _results(verified).tests}
    assert checks["Journal"].status == "passed" and checks["Policy"].status == "passed"
    checks = {t.name: t for t in _results(failing).tests}
    assert checks["Journal"].status == "failed" and "green before red" in checks["Journal"].output
    assert checks["Policy"].status == "failed" and checks["Test validity"].status == "failed"
    assert "brittle" in checks["Test validity"].output


def test_survivors_show_their_hints_and_the_output_the_reasons(failing: Report) -> None:
    for mode in ("verdict", "kills"):
        results = _results(failing, GradescopeOptions(score=mode))
        outputs = "\n".join(t.output for t in results.tests)
        assert S02_HINT in outputs and HIDDEN_HINT in outputs
        assert "required mutant s02 was not killed" in results.output
        assert results.output.startswith("NOT PASSED")


# ------------------------------------------------------------------- hidden mutants
def _staff_of(student: Report) -> Report:
    """The staff report ``failing_report()`` was derived from: its hidden mutant is s12."""
    hidden = student.mutants[-1].model_copy(
        update={"id": "s12", "title": HIDDEN_REAL_TITLE, "hint": "Dropout must be off in eval()."}
    )
    return student.model_copy(
        update={"audience": "staff", "mutants": [*student.mutants[:-1], hidden], "variants": [*student.variants[:-1], "s12"]}
    )


def test_hidden_mutants_are_revealed_after_the_due_date_when_the_assignment_asks(failing: Report) -> None:
    staff = _staff_of(failing)
    options = GradescopeOptions(hidden_hints="after_due_date")
    results = _results(failing, options, revealed=staff)
    now = [t for t in results.tests if t.visibility == "visible"]
    later = [t for t in results.tests if t.visibility != "visible"]
    assert [t.visibility for t in later] == ["after_due_date"]
    assert later[0].name == f"hidden mutant 1, revealed: s12: {HIDDEN_REAL_TITLE}"
    assert "Dropout must be off in eval()." in later[0].output and later[0].max_score == 0.0
    shown_now = json.dumps([t.model_dump() for t in now]) + results.output
    assert HIDDEN_REAL_TITLE not in shown_now and "s12" not in shown_now
    published = _results(failing, GradescopeOptions(hidden_hints="after_published"), revealed=staff)
    assert [t.visibility for t in published.tests if t.visibility != "visible"] == ["after_published"]


def test_nothing_is_revealed_unless_the_assignment_asks(failing: Report) -> None:
    results = _results(failing, GradescopeOptions(), revealed=_staff_of(failing))
    assert HIDDEN_REAL_TITLE not in render_gradescope(failing, GradescopeOptions(), revealed=_staff_of(failing))
    assert all(t.visibility == "visible" for t in results.tests)


def test_what_is_revealed_must_be_the_staff_report_of_the_same_grading(failing: Report, passing: Report) -> None:
    options = GradescopeOptions(hidden_hints="after_due_date")
    with pytest.raises(ValueError, match="revealed must be the staff report"):
        render_gradescope(failing, options, revealed=failing)
    with pytest.raises(ValueError, match="the same mutants"):
        render_gradescope(failing, options, revealed=passing.model_copy(update={"audience": "staff"}))
    with pytest.raises(ValueError, match="a student report"):
        render_gradescope(_staff_of(failing), options, revealed=_staff_of(failing))


# ------------------------------------------------------------------------ the assignment
def _assignment_text(**replace: str) -> str:
    text = LAYOUT.assignment.read_text()
    for key, value in replace.items():
        line = next(line for line in text.splitlines() if line.startswith(f"{key} ="))
        text = text.replace(line, f"{key} = {value}")
    return text


def test_the_courses_assignment_says_how_gradescope_scores(tmp_path: Path) -> None:
    assignment = load_assignment(LAYOUT.assignment)
    assert gradescope_options(assignment) == GradescopeOptions(score="verdict", not_passed_share=0.5, hidden_hints="never")
    path = tmp_path / "assignment.toml"
    path.write_text(_assignment_text(gradescope_score='"kills"', gradescope_hidden_hints='"after_due_date"'))
    options = gradescope_options(load_assignment(path))
    assert options.score == "kills" and options.hidden_hints == "after_due_date"


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("gradescope_score", '"points"', "gradescope_score"),
        ("gradescope_not_passed_share", "1.0", "gradescope_not_passed_share"),
        ("gradescope_hidden_hints", '"before_due_date"', "gradescope_hidden_hints"),
    ],
)
def test_a_bad_gradescope_setting_names_the_file_and_the_field(tmp_path: Path, key: str, value: str, expected: str) -> None:
    path = tmp_path / "assignment.toml"
    path.write_text(_assignment_text(**{key: value}))
    with pytest.raises(AssignmentError) as caught:
        load_assignment(path)
    assert str(path) in str(caught.value) and expected in str(caught.value)


# ------------------------------------------------------------- the command, end to end
def _grade(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(EXAMPLE / "python" / "tests" / "l3-3-gru"),
         "--format", "gradescope", "--output", str(tmp_path / "results.json"), *args],
        capture_output=True, text=True, timeout=300, cwd=LAYOUT.root,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")},
    )


def test_grade_reveals_the_hidden_mutants_to_gradescope_after_the_due_date_only(tmp_path: Path) -> None:
    hidden = [v for v in build_variants(LAYOUT) if v.kind is VariantKind.MUTANT and v.spec.hidden]
    assert hidden
    path = tmp_path / "assignment.toml"
    path.write_text(_assignment_text(gradescope_hidden_hints='"after_due_date"'))
    done = _grade(tmp_path, "--assignment", str(path), "--journal", str(EXAMPLE / ".tdd" / "journal.jsonl"))
    assert done.returncode == 0, done.stderr
    results = _Results.model_validate_json((tmp_path / "results.json").read_text())
    assert results.score == results.max_score == 12.0
    later = [t for t in results.tests if t.visibility == "after_due_date"]
    assert len(later) == len(hidden)
    assert all(v.spec.title in "\n".join(t.name for t in later) for v in hidden)
    shown_now = json.dumps([t.model_dump() for t in results.tests if t.visibility == "visible"]) + results.output
    shown_now += (tmp_path / "summary.md").read_text()  # the job summary is the students' view too
    for variant in hidden:
        assert variant.spec.title not in shown_now and f"{variant.id}:" not in shown_now
    assert "hidden mutant 1" in shown_now
    checks = {t.name: t.status for t in results.tests}
    assert checks["Journal"] == "passed"


def test_grade_without_the_setting_reveals_nothing(tmp_path: Path) -> None:
    done = _grade(tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "results.json").read_text()
    results = _Results.model_validate_json(text)
    assert all(t.visibility == "visible" for t in results.tests)
    for variant in build_variants(LAYOUT):
        if variant.kind is VariantKind.MUTANT and variant.spec.hidden:
            assert variant.spec.title not in text


@pytest.fixture
def passing() -> Report:
    return passing_report()


@pytest.fixture
def failing() -> Report:
    return failing_report()
