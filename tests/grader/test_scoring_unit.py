"""score_suite on hand-built matrices: which tests count, what they kill, and the verdict (SPEC §5)."""

from __future__ import annotations

import json

import pytest

from grader.core.assignment import Assignment, load_assignment
from grader.core.matrix import Matrix
from grader.core.models import Outcome, Purpose, Report, SuiteRun, TestOutcome, TestStatus
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


def _run(variant: str, outcomes: dict[str, Outcome], *, seed: int = 1, purpose: Purpose = Purpose.FIRST,
         crashed: str = "") -> SuiteRun:
    return SuiteRun(
        variant=variant, hash_seed=seed, purpose=purpose, crashed=crashed,
        results=tuple(TestOutcome(test_id=t, outcome=o, message="" if o is P else f"{o.value} here")
                      for t, o in outcomes.items()),
    )


def _matrix(variants: list[Variant], tests: list[str], *, cells: dict[tuple[str, str], Outcome] | None = None,
            second_reference: dict[str, Outcome] | None = None,
            confirmations: dict[str, dict[str, Outcome]] | None = None,
            rechecks: tuple[SuiteRun, ...] = ()) -> Matrix:
    """Every test passes everywhere unless ``cells`` says otherwise ((test, variant) -> outcome);
    each mutant's kills fail again in its confirming run, unless ``confirmations`` says otherwise."""
    cells = cells or {}
    first = {v.id: _run(v.id, {t: cells.get((t, v.id), P) for t in tests}) for v in variants}
    second = {"reference": _run("reference", {t: (second_reference or {}).get(t, P) for t in tests}, seed=2,
                                purpose=Purpose.SECOND_SEED)}
    for variant in variants:
        kills = {r.test_id: r.outcome for r in first[variant.id].results if r.outcome.kills}
        if variant.kind is VariantKind.MUTANT and kills:
            second[variant.id] = _run(variant.id, kills, seed=2, purpose=Purpose.CONFIRMING)
    for mutant, outcomes in (confirmations or {}).items():
        second[mutant] = _run(mutant, outcomes, seed=2, purpose=Purpose.CONFIRMING)
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
    late = _run("reference", {"t_late": F}, purpose=Purpose.RECHECK)
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
        (T, "", T, True),  # ... confirmed by its run under the other seed it is
        (T, "", P, False),  # ... and passing the second time it is not
        (Outcome.MISSING, "the run died", Outcome.MISSING, True),
        (Outcome.MISSING, "the run died", None, False),
        (F, "", None, False),  # a failed assertion too: chance could have failed it
        (F, "", F, True),
        (F, "", P, False),
        (Outcome.ERROR, "", Outcome.ERROR, True),
    ],
)
def test_a_kill_counts_only_when_confirmed(variants: list[Variant], assignment: Assignment, first: Outcome,
                                           crashed: str, confirmation: Outcome | None, killed: bool) -> None:
    matrix = _matrix(variants, ["t"], cells={("t", "s05"): first},
                     confirmations={"s05": {"t": confirmation}} if confirmation else None)
    if confirmation is None:
        del matrix.second["s05"]
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
    first = {**matrix.first, "s05": matrix.first["s05"].model_copy(update={"crashed": crash})}
    matrix = replace(matrix, first=first, budget_stop=BudgetStop(budget=2.0, test="test_s04_shape", variant="s04"))
    staff = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff")
    student = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="student")
    seen = student_view(staff, variants)
    assert seen == student
    reasons = [str(r) for r in seen.reasons]
    assert any("on variant hidden mutant 1" in r and "in test test_s04_shape " in r for r in reasons), reasons
    assert any("(test_s04_shape: brittle)" in r for r in reasons), reasons
    assert [str(p) for p in seen.problems] == [f"s05: {crash}"]  # a message is not renamed
    assert [str(p) for p in staff.problems] == [f"s05: {crash}"]
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
        "problems": ["s04: the run crashed", "s05: the run crashed", "s12: the run crashed"],
        "score": {"kill_rate": 0.5, "killed": 6, "total": 12, "threshold": 0.7,
                  "required": ["s02", "s04"], "required_missing": ["s04"]},
        "tests": [], "mutants": [], "variants": [v.id for v in variants],
    }
    report = Report.model_validate_json(json.dumps(stored))
    seen = json.loads(student_view(report, variants).model_dump_json(by_alias=True))
    lines = seen["reasons"] + seen["problems"]
    assert all(isinstance(line, str) for line in lines)
    assert not [line for line in lines if "s04" in line or "s12" in line], lines
    # A hidden mutant's run is not the student's to read of, in an old report either.
    assert seen["problems"] == ["s05: the run crashed"]


def test_a_students_report_holds_nothing_of_a_hidden_mutants_run(variants: list[Variant],
                                                                 assignment: Assignment) -> None:
    """What a hidden mutant's run produced (its crash, its collection errors, how each test
    ended) is the suite's own text: staff read it, a student reads only what was killed."""
    from dataclasses import replace

    from grader.core.caps import MAX_LISTED

    secret = "SECRET: the reset gate leaves b_hn out"
    outcomes = {"t_error": Outcome.ERROR, "t_timeout": T, "t_skip": Outcome.SKIPPED, "t_pass": P,
                "t_not_run": Outcome.NOT_RUN}
    matrix = _matrix(variants, list(outcomes), cells={(t, "s04"): o for t, o in outcomes.items()},
                     confirmations={"s04": {"t_timeout": T}})
    first = dict(matrix.first)
    first["s04"] = first["s04"].model_copy(update={
        "crashed": f"{secret} (crash)", "collection_errors": tuple(f"{secret} {n}" for n in range(MAX_LISTED + 5)),
    })
    first["s05"] = first["s05"].model_copy(update={"collection_errors": tuple(f"s05 error {n}" for n in range(60))})
    matrix = replace(matrix, first=first)
    staff = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff")
    student = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="student")
    assert student_view(staff, variants) == student
    assert "SECRET" not in student.model_dump_json()
    # The student's list and count are of the visible mutants' problems alone.
    assert [str(p) for p in student.problems] == [f"s05: s05 error {n}" for n in range(MAX_LISTED)]
    assert student.problems_omitted == 10
    # Staff read the hidden runs' problems too, after the others, under a cap of their own.
    staff_lines = [str(p) for p in staff.problems]
    assert staff.problems_omitted == 10 and len(staff_lines) == 2 * MAX_LISTED + 1
    assert staff_lines[MAX_LISTED] == f"s04: {secret} (crash)"
    assert staff_lines[-1] == "... and 6 more of s04"  # its crash and 55 collection errors: 56
    # A cell of a hidden mutant: caught (failed), not caught (passed) or not run; never how.
    cells = {t.id: t.outcomes["hidden mutant 1"] for t in student.tests}
    assert cells == {"t_error": F, "t_timeout": F, "t_skip": P, "t_pass": P, "t_not_run": Outcome.NOT_RUN}
    assert {t.id: t.outcomes["s04"] for t in staff.tests} == outcomes
    assert next(t for t in student.tests if t.id == "t_skip").outcomes["s05"] is P


def test_a_report_stored_under_the_old_schema_shows_no_hidden_mutants_cell_as_it_ended(variants: list[Variant]) -> None:
    stored = {
        "schema": "mutagrade.report/1", "submission": "s", "audience": "staff", "passed": False,
        "score": {"kill_rate": 0.0, "killed": 0, "total": 12, "threshold": 0.7, "required": ["s02"],
                  "required_missing": ["s02"]},
        "tests": [{"id": "t", "valid": True, "status": "valid", "kills": [],
                   "outcomes": {"reference": "passed", "s04": "timeout", "s12": "skipped", "s05": "skipped"}}],
        "mutants": [], "variants": ["reference", "s04", "s05", "s12"],
    }
    seen = student_view(Report.model_validate_json(json.dumps(stored)), variants)
    assert seen.tests[0].outcomes == {"reference": P, "hidden mutant 1": F, "hidden mutant 2": P, "s05": Outcome.SKIPPED}


def test_a_copy_of_a_course_test_is_not_valid_and_kills_nothing(variants: list[Variant], assignment: Assignment) -> None:
    from grader.core.copies import CopyCheck, Likeness

    mutants = _ids(variants, VariantKind.MUTANT)
    course = "assignments/l3-3-gru/tests/test_gru_properties.py::test_gradcheck_gru_cell"
    copies = CopyCheck(threshold=0.8, tests=[
        Likeness(test="test_a.py::test_copy", similarity=0.97, course_test=course, copied=True),
        Likeness(test="test_a.py::test_own", similarity=0.31, course_test=course),
    ])
    matrix = _matrix(variants, ["test_a.py::test_copy[1]", "test_a.py::test_own"],
                     cells=_kills("test_a.py::test_copy[1]", mutants))
    staff = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="staff",
                        copies=copies)
    copy, own = staff.tests
    assert copy.status is TestStatus.COPIED and not copy.valid and copy.kills == []
    assert copy.reason == f"copied from the course tests: {course} (similarity 0.97)"
    assert (copy.similarity, copy.similar_to) == (0.97, course)
    assert own.valid and (own.similarity, own.similar_to) == (0.31, course)
    assert staff.score.killed == 0 and not staff.passed
    assert any("test_a.py::test_copy[1]: copied" in str(r) for r in staff.reasons)
    # Students read that a test is a copy, and of which course test; the others' figures are staff's.
    student = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, copies=copies)
    assert [(t.status, t.similarity, t.similar_to) for t in student.tests] == [
        (TestStatus.COPIED, 0.97, course), (TestStatus.VALID, None, "")]
    # ... and so in a student's view of the stored staff report, as the service makes it.
    assert [(t.status, t.similarity, t.similar_to) for t in student_view(staff, variants).tests] == [
        (TestStatus.COPIED, 0.97, course), (TestStatus.VALID, None, "")]
    # Where invalid tests are allowed, a copy still counts for nothing.
    lenient = assignment.model_copy(update={"allow_invalid_tests": True})
    again = score_suite(submission="s", matrix=matrix, variants=variants, assignment=lenient, copies=copies)
    assert again.score.killed == 0 and not any("not valid" in str(r) for r in again.reasons)


@pytest.mark.parametrize("crashed, budget", [("", ""), ("the run's process exited with status 0", ""),
                                             ("", "t_b")])
def test_a_test_that_passed_and_failed_on_one_mutant_is_flaky_unless_a_budget_stopped_the_run(
        variants: list[Variant], assignment: Assignment, crashed: str, budget: str) -> None:
    """t_b passed on s01 in its first run (before t_c's kill) and raised in the confirming run, or
    the confirming run ended there: chance's, whatever the seed, and a hidden mutant is not named.
    A run the grading's budget stopped says nothing of the tests it did not finish."""
    mutants = _ids(variants, VariantKind.MUTANT)
    matrix = _matrix(variants, ["t_b", "t_c"], cells=_kills("t_c", mutants),
                     confirmations={"s01": {"t_b": Outcome.ERROR, "t_c": F}})
    if crashed or budget:
        confirming = matrix.second["s01"].model_copy(update={"crashed": crashed, "budget_exceeded": budget})
        matrix = Matrix(first=matrix.first, second={**matrix.second, "s01": confirming})
    report = score_suite(submission="s", matrix=matrix, variants=variants, assignment=assignment, audience="student")
    [t_b] = [t for t in report.tests if t.id == "t_b"]
    if budget:
        assert t_b.status is TestStatus.VALID
        return
    assert t_b.status is TestStatus.FLAKY and not t_b.valid
    assert t_b.reason.startswith("passed on a mutant in one run and failed or raised on the same mutant in another")
    assert "s01" not in t_b.reason
