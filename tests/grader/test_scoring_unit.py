"""score_suite on hand-built matrices: which tests count, what they kill, and the verdict (SPEC §5)."""

from __future__ import annotations

import json

import pytest

from grader.core.assignment import Assignment, load_assignment
from grader.core.matrix import Matrix
from grader.core.models import Outcome, Report, SuiteRun, TestOutcome, TestStatus
from grader.core.paths import default_layout
from grader.core.scoring import HIDDEN_HINT, score_suite, shown_ids, student_view
from grader.core.variants import Variant, VariantKind, build_variants

P, F, T = Outcome.PASSED, Outcome.FAILED, Outcome.TIMEOUT


@pytest.fixture(scope="module")
def variants() -> list[Variant]:
    return build_variants(default_layout())


@pytest.fixture(scope="module")
def assignment() -> Assignment:
    return load_assignment(default_layout().assignment)


def _ids(variants: list[Variant], kind: VariantKind) -> list[str]:
    return [v.id for v in variants if v.kind is kind]


def _run(variant: str, outcomes: dict[str, Outcome], *, seed: int = 1, attempt: int = 1,
         crashed: str = "") -> SuiteRun:
    return SuiteRun(
        variant=variant, hash_seed=seed, attempt=attempt, crashed=crashed,
        results=tuple(TestOutcome(test_id=t, outcome=o, message="" if o is P else f"{o.value} here")
                      for t, o in outcomes.items()),
    )


def _matrix(variants: list[Variant], tests: list[str], *, cells: dict[tuple[str, str], Outcome] | None = None,
            second_reference: dict[str, Outcome] | None = None,
            confirmations: dict[str, dict[str, Outcome]] | None = None,
            rechecks: tuple[SuiteRun, ...] = ()) -> Matrix:
    """Every test passes everywhere unless ``cells`` says otherwise ((test, variant) -> outcome)."""
    cells = cells or {}
    first = {v.id: _run(v.id, {t: cells.get((t, v.id), P) for t in tests}) for v in variants}
    second = {"reference": _run("reference", {t: (second_reference or {}).get(t, P) for t in tests}, seed=2)}
    for mutant, outcomes in (confirmations or {}).items():
        second[mutant] = _run(mutant, outcomes, attempt=2)
    return Matrix(first=first, second=second, rechecks=rechecks)


def _kills(test: str, mutants: list[str], outcome: Outcome = F) -> dict[tuple[str, str], Outcome]:
    return {(test, m): outcome for m in mutants}


def test_manifest_has_what_these_tests_assume(variants: list[Variant], assignment: Assignment) -> None:
    mutants = [v for v in variants if v.kind is VariantKind.MUTANT]
    assert variants[0].id == "reference"
    assert len(mutants) == 12 and len(_ids(variants, VariantKind.WHEAT)) >= 3
    assert [m.id for m in mutants if m.spec.required] == ["s02"]
    assert [m.id for m in mutants if m.spec.hidden] == ["s04", "s12"]
    assert assignment.threshold == 0.70 and not assignment.allow_invalid_tests


def test_a_suite_killing_every_mutant_passes(variants: list[Variant], assignment: Assignment) -> None:
    mutants = _ids(variants, VariantKind.MUTANT)
    matrix = _matrix(variants, ["t_all", "t_none"], cells=_kills("t_all", mutants))
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff")
    assert report.passed, report.reasons
    assert (report.score.killed, report.score.total, report.score.kill_rate) == (12, 12, 1.0)
    assert report.score.threshold == 0.70
    assert report.score.required == ["s02"] and report.score.required_missing == []
    by_id = {t.id: t for t in report.tests}
    assert by_id["t_all"].status is TestStatus.VALID and sorted(by_id["t_all"].kills) == sorted(mutants)
    assert by_id["t_none"].valid and by_id["t_none"].kills == []
    assert all(m.killed and m.killed_by == ["t_all"] and m.hint == "" for m in report.mutants)


def test_a_test_failing_on_a_wheat_is_brittle_and_kills_nothing(variants: list[Variant], assignment: Assignment) -> None:
    mutants = _ids(variants, VariantKind.MUTANT)
    wheat = _ids(variants, VariantKind.WHEAT)[-1]
    cells = {**_kills("t_brittle", mutants), ("t_brittle", wheat): F}
    matrix = _matrix(variants, ["t_brittle", "t_fine"], cells=cells)
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff")
    brittle = next(t for t in report.tests if t.id == "t_brittle")
    assert brittle.status is TestStatus.BRITTLE and not brittle.valid
    assert brittle.kills == [] and wheat in brittle.reason
    assert report.score.killed == 0 and not any(m.killed for m in report.mutants)
    assert not report.passed
    assert any("not valid" in r and "t_brittle: brittle" in r for r in report.reasons)
    # Even where invalid tests are allowed, a brittle test's failures on the mutants count for nothing.
    lenient = assignment.model_copy(update={"allow_invalid_tests": True})
    again = score_suite(submission="s", matrix=matrix, variants=variants, assignment=lenient, audience="staff")
    assert again.score.killed == 0 and not any("not valid" in r for r in again.reasons)


def test_a_test_failing_only_on_the_second_reference_run_is_flaky(variants: list[Variant],
                                                                   assignment: Assignment) -> None:
    mutants = _ids(variants, VariantKind.MUTANT)
    matrix = _matrix(variants, ["t_flaky"], cells=_kills("t_flaky", mutants), second_reference={"t_flaky": F})
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment)
    (verdict,) = report.tests
    assert verdict.status is TestStatus.FLAKY and not verdict.valid and verdict.kills == []
    assert report.score.killed == 0 and not report.passed
    assert any("no test is valid" in r for r in report.reasons)


def test_a_test_failing_on_the_reference_is_wrong(variants: list[Variant], assignment: Assignment) -> None:
    matrix = _matrix(variants, ["t_wrong"], cells={("t_wrong", "reference"): F},
                     second_reference={"t_wrong": F})
    (verdict,) = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment).tests
    assert verdict.status is TestStatus.WRONG and not verdict.valid


def test_a_test_failing_when_the_reference_is_run_again_late_is_flaky(variants: list[Variant],
                                                                      assignment: Assignment) -> None:
    mutants = _ids(variants, VariantKind.MUTANT)
    late = _run("reference", {"t_late": F}, attempt=4)
    matrix = _matrix(variants, ["t_late"], cells=_kills("t_late", mutants), rechecks=(late,))
    (verdict,) = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment).tests
    assert verdict.status is TestStatus.FLAKY and verdict.kills == []


@pytest.mark.parametrize(("killed", "passed"), [(9, True), (8, False)])
def test_the_kill_rate_against_the_threshold(variants: list[Variant], assignment: Assignment,
                                             killed: int, passed: bool) -> None:
    # s02 first, so every suite here kills the required mutant: only the rate decides.
    mutants = sorted(_ids(variants, VariantKind.MUTANT), key=lambda m: m != "s02")[:killed]
    matrix = _matrix(variants, ["t"], cells=_kills("t", mutants))
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment)
    assert report.score.killed == killed and report.score.kill_rate == pytest.approx(killed / 12, abs=1e-6)
    assert report.score.required_missing == []
    assert report.passed is passed
    assert any("below the threshold" in r for r in report.reasons) is not passed


def test_a_kill_rate_equal_to_the_threshold_passes(variants: list[Variant], assignment: Assignment) -> None:
    mutants = sorted(_ids(variants, VariantKind.MUTANT), key=lambda m: m != "s02")[:9]
    matrix = _matrix(variants, ["t"], cells=_kills("t", mutants))
    exact = assignment.model_copy(update={"threshold": 0.75})  # 9 of 12
    assert score_suite(submission="s", matrix=matrix, variants=variants, assignment=exact).passed


def test_missing_the_required_mutant_fails_whatever_the_rate(variants: list[Variant], assignment: Assignment) -> None:
    mutants = [m for m in _ids(variants, VariantKind.MUTANT) if m != "s02"]
    matrix = _matrix(variants, ["t"], cells=_kills("t", mutants))
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment)
    assert report.score.killed == 11 and report.score.kill_rate >= assignment.threshold
    assert report.score.required_missing == ["s02"]
    assert not report.passed
    assert any("required" in str(r) and "s02" in str(r) for r in report.reasons)
    s02 = next(m for m in report.mutants if m.id == "s02")
    assert not s02.killed and s02.required and s02.hint == next(v for v in variants if v.id == "s02").spec.pitfall


@pytest.mark.parametrize(
    ("first", "crashed", "confirmation", "killed"),
    [
        (T, "", None, False),  # a time-out alone is not a kill
        (T, "", T, True),  # ... confirmed by its second run it is
        (T, "", P, False),  # ... and passing the second time it is not
        (Outcome.MISSING, "the run died", Outcome.MISSING, True),
        (Outcome.MISSING, "the run died", None, False),
        (F, "", None, True),  # a failed assertion needs no second run
    ],
)
def test_a_time_out_kills_only_when_confirmed(variants: list[Variant], assignment: Assignment, first: Outcome,
                                              crashed: str, confirmation: Outcome | None, killed: bool) -> None:
    matrix = _matrix(variants, ["t"], cells={("t", "s05"): first},
                     confirmations={"s05": {"t": confirmation}} if confirmation else None)
    if crashed:
        matrix.first["s05"] = matrix.first["s05"].model_copy(update={"crashed": crashed})
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment)
    s05 = next(m for m in report.mutants if m.id == "s05")
    assert s05.killed is killed
    assert report.tests[0].kills == (["s05"] if killed else [])


def test_shown_ids_hide_hidden_mutants_from_students(variants: list[Variant]) -> None:
    student = shown_ids(variants, "student")
    assert student["s04"] == "hidden mutant 1" and student["s12"] == "hidden mutant 2"
    assert all(student[v.id] == v.id for v in variants if v.id not in ("s04", "s12"))
    assert shown_ids(variants, "staff") == {v.id: v.id for v in variants}


def test_the_student_report_never_names_a_hidden_mutant(variants: list[Variant], assignment: Assignment) -> None:
    # t kills s04 (hidden) and s01; s12 (hidden) survives.
    matrix = _matrix(variants, ["t"], cells=_kills("t", ["s04", "s01"]))
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="student")
    text = report.model_dump_json()
    hidden = [v for v in variants if v.spec.hidden]
    for variant in hidden:
        assert f'"{variant.id}"' not in text and variant.spec.title not in text
        assert variant.spec.pitfall not in text
    by_id = {m.id: m for m in report.mutants}
    assert by_id["hidden mutant 1"].killed and by_id["hidden mutant 1"].title == "hidden mutant 1"
    assert not by_id["hidden mutant 2"].killed and by_id["hidden mutant 2"].hint == HIDDEN_HINT
    assert sorted(report.tests[0].kills) == ["hidden mutant 1", "s01"]
    assert "hidden mutant 2" in report.variants and "s12" not in report.variants
    # A staff report turned into a student's says the same as the student's report.
    staff = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff")
    assert "s04" in staff.variants and staff.mutants[3].title == hidden[0].spec.title
    assert student_view(staff, variants) == report


def test_the_student_view_renames_hidden_mutants_but_never_a_test_named_like_one(
    variants: list[Variant], assignment: Assignment
) -> None:
    """Only the names that stand for variants are renamed: a test id or a message that holds a
    hidden mutant's id (s04 is hidden) reads the same in the staff and the student report."""
    from dataclasses import replace

    from grader.core.matrix import BudgetStop

    wheat = _ids(variants, VariantKind.WHEAT)[-1]
    matrix = _matrix(variants, ["test_s04_shape", "t"], cells={("test_s04_shape", wheat): F})
    crash = "the child died in test_s04_shape: s04: killed"
    first = {**matrix.first, "s04": matrix.first["s04"].model_copy(update={"crashed": crash})}
    matrix = replace(matrix, first=first, budget_stop=BudgetStop(budget=2.0, test="test_s04_shape", variant="s04"))
    staff = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff")
    student = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="student")
    seen = student_view(staff, variants)
    assert seen == student
    reasons = [str(r) for r in seen.reasons]
    assert any("on variant hidden mutant 1" in r and "in test test_s04_shape " in r for r in reasons), reasons
    assert any("(test_s04_shape: brittle)" in r for r in reasons), reasons
    assert [str(p) for p in seen.problems] == [f"hidden mutant 1: {crash}"]
    assert [str(p) for p in staff.problems] == [f"s04: {crash}"]
    # The staff report names s04 where it means the mutant, and keeps the test's id whole too.
    assert any("on variant s04" in str(r) and "test_s04_shape" in str(r) for r in staff.reasons)


def test_a_students_report_holds_sentences_that_every_reader_of_the_old_schema_parses(
    variants: list[Variant], assignment: Assignment
) -> None:
    """A student's lines are plain strings (a student package of the old schema reads them as
    ``list[str]``); a staff report keeps the variants it names as data."""
    from grader.core.matrix import BudgetStop

    matrix = _matrix(variants, ["t"])
    matrix = Matrix(first=matrix.first, second=matrix.second,
                    budget_stop=BudgetStop(budget=2.0, test="t", variant="s04"))
    student = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="student")
    staff = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff")
    document = json.loads(student.model_dump_json(by_alias=True))
    assert document["reasons"] and all(isinstance(r, str) for r in document["reasons"] + document["problems"])
    assert any(isinstance(r, dict) for r in json.loads(staff.model_dump_json(by_alias=True))["reasons"])


def test_a_report_stored_under_the_old_schema_shows_a_student_no_hidden_mutant(variants: list[Variant]) -> None:
    """Reports stored before lines named variants as data hold them as sentences: the student's
    view still replaces every hidden mutant's id (s04 and s12 are hidden)."""
    stored = {
        "schema": "mutagrade.report/1", "submission": "s", "audience": "staff", "passed": False,
        "reasons": ["required mutant(s) not killed: s04, s12", "the grading budget ran out on variant s12: stopped"],
        "problems": ["s04: the run crashed", "s12: the run crashed"],
        "score": {"kill_rate": 0.5, "killed": 6, "total": 12, "threshold": 0.7,
                  "required": ["s02", "s04"], "required_missing": ["s04"]},
        "tests": [], "mutants": [], "variants": [v.id for v in variants],
    }
    report = Report.model_validate_json(json.dumps(stored))
    seen = json.loads(student_view(report, variants).model_dump_json(by_alias=True))
    lines = seen["reasons"] + seen["problems"]
    assert all(isinstance(line, str) for line in lines)
    assert not [line for line in lines if "s04" in line or "s12" in line], lines
    assert seen["problems"] == ["hidden mutant 1: the run crashed", "hidden mutant 2: the run crashed"]
