"""Reporters: every format renders the report model, faithfully, and parses where it should."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from grader.core.models import (
    REPORT_SCHEMA,
    JournalSummary,
    MutantVerdict,
    Outcome,
    PolicySummary,
    Report,
    Score,
    TestVerdict,
    Timing,
)
from grader.core.models import (
    TestStatus as Status,
)
from grader.report import RENDERERS, render
from grader.report.text import render_text

P, F, E, T = Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.TIMEOUT
WHEATS = ["w01", "w02", "w03", "w04"]
HIDDEN_REAL_TITLE = "Dropout also in evaluation mode"  # what the hidden mutant really is
S02_HINT = "Where does r go: on W_hn h + b_hn, or on h before the product?"
HIDDEN_HINT = "Think about train() and eval()."
S03_HINT = "Which of h and n does z weigh | check z = 1."


def _test(
    test_id: str,
    variants: list[str],
    fails: dict[str, Outcome],
    *,
    status: Status = Status.VALID,
    reason: str = "",
    mutants: set[str],
) -> TestVerdict:
    """A test verdict whose kills follow from its outcomes, as the grader derives them."""
    outcomes = {v: fails.get(v, P) for v in variants}
    valid = status is Status.VALID
    kills = [v for v in variants if v in mutants and outcomes[v].kills] if valid else []
    return TestVerdict(
        id=test_id, valid=valid, status=status, kills=kills, reason=reason, outcomes=outcomes
    )


def _mutants(
    specs: list[tuple[str, str, str]], tests: list[TestVerdict], *, required: set[str]
) -> list[MutantVerdict]:
    verdicts = []
    for mutant_id, title, hint in specs:
        killed_by = [t.id for t in tests if mutant_id in t.kills]
        verdicts.append(
            MutantVerdict(
                id=mutant_id,
                title=title,
                required=mutant_id in required,
                hidden=mutant_id.startswith("hidden mutant"),
                killed=bool(killed_by),
                killed_by=killed_by,
                hint=hint,
            )
        )
    return verdicts


def _score(mutants: list[MutantVerdict], required: list[str]) -> Score:
    killed = sum(m.killed for m in mutants)
    return Score(
        kill_rate=killed / len(mutants),
        killed=killed,
        total=len(mutants),
        threshold=0.7,
        required=required,
        required_missing=[m.id for m in mutants if m.id in required and not m.killed],
    )


def passing_report() -> Report:
    """Four mutants, three killed (75% >= 70%), s02 among them; s03 survives with a hint."""
    specs = [
        ("s01", "Gate blocks read in the order z, r", "Swap r and z: does anything change?"),
        ("s02", "Cho's reset placement", S02_HINT),
        ("s03", "Interpolation swapped", S03_HINT),
        ("s04", "Sigmoid candidate instead of tanh", "Can the candidate be negative?"),
    ]
    mutant_ids = {s[0] for s in specs}
    variants = ["reference", "w01", "w02", *(s[0] for s in specs)]
    tests = [
        _test(
            "tests/test_gru.py::test_matches_torch",
            variants,
            {"s01": F, "s02": F},
            mutants=mutant_ids,
        ),
        _test("tests/test_gru.py::test_candidate_range", variants, {"s04": T}, mutants=mutant_ids),
        _test("tests/test_gru.py::test_shapes[a|b]", variants, {}, mutants=mutant_ids),
    ]
    mutants = _mutants(specs, tests, required={"s02"})
    return Report(
        submission="alice/hw3",
        passed=True,
        score=_score(mutants, ["s02"]),
        tests=tests,
        mutants=mutants,
        variants=variants,
        timing=Timing(total_s=12.5, runs=9, tests_s=3.25),
    )


def failing_report() -> Report:
    """A student's report: s02 and a hidden mutant survive, a test is brittle, the policy fails."""
    specs = [(f"s{n:02d}", f"Mutant number {n}", f"Hint for mutant {n}.") for n in range(1, 12)]
    specs[1] = ("s02", "Cho's reset placement", S02_HINT)
    specs.append(("hidden mutant 1", "hidden mutant 1", HIDDEN_HINT))
    mutant_ids = {s[0] for s in specs}
    variants = ["reference", *WHEATS, *(s[0] for s in specs)]
    prefix = "tests/test_gru_behaviour_under_padding_and_dropout.py::"
    tests = [
        _test(
            prefix + "test_output_matches_the_stored_torch_goldens_for_every_case",
            variants,
            {"s01": F, "s03": F, "s04": E, "s05": F},
            mutants=mutant_ids,
        ),
        _test(
            prefix + "test_padding_never_leaks_into_state_or_outputs[float64-batch_first]",
            variants,
            {"s07": F, "s08": T, "s06": Outcome.MISSING},
            mutants=mutant_ids,
        ),
        _test(
            prefix + "test_error_message_wording_exactly",
            variants,
            {"w03": F, "s02": F, "s09": F},
            status=Status.BRITTLE,
            reason="rejected w03 (a correct implementation): it checks the message's wording",
            mutants=mutant_ids,
        ),
        _test(
            prefix + "test_dropout_in_training",
            variants,
            {"s09": F, "s10": Outcome.SKIPPED},
            mutants=mutant_ids,
        ),
    ]
    mutants = _mutants(specs, tests, required={"s02"})
    return Report(
        submission="bob/hw3",
        audience="student",
        passed=False,
        reasons=[
            "required mutant s02 was not killed",
            "kill rate 66.7% is below the threshold 70%",
            "1 test is brittle",
            "the policy is violated",
        ],
        score=_score(mutants, ["s02"]),
        tests=tests,
        mutants=mutants,
        variants=variants,
        journal=JournalSummary(checked=True, ok=False, problems=["entry 2: green before red"]),
        policy=PolicySummary(
            ok=False, violations=["tests/test_gru.py:3: import os, reaches behind the interface"]
        ),
        # ANSI colour codes from a traceback: control characters XML 1.0 does not allow.
        problems=["collection error in tests/test_x.py: \x1b[31mSyntaxError\x1b[0m"],
        timing=Timing(total_s=40.0, runs=19, tests_s=11.0),
    )


@pytest.fixture
def passing() -> Report:
    return passing_report()


@pytest.fixture
def failing() -> Report:
    return failing_report()


@pytest.fixture(params=["passing", "failing"])
def report(request: pytest.FixtureRequest) -> Report:
    return request.getfixturevalue(request.param)


# ----------------------------------------------------------------------- the registry
def test_the_registry_lists_the_six_formats() -> None:
    assert list(RENDERERS) == ["text", "json", "junit", "gradescope", "github", "html"]


@pytest.mark.parametrize("fmt", ["text", "json", "junit", "gradescope", "github", "html"])
def test_every_format_renders_the_report(report: Report, fmt: str) -> None:
    document = render(report, fmt)
    assert document.strip() and document.endswith("\n")
    assert document == RENDERERS[fmt](report)


def test_an_unknown_format_is_a_value_error_naming_the_choices(passing: Report) -> None:
    with pytest.raises(
        ValueError, match=r"format must be one of text, json, junit, gradescope, github, html, got 'pdf'"
    ):
        render(passing, "pdf")


def test_render_wants_a_report() -> None:
    with pytest.raises(TypeError, match="report must be a Report, got dict"):
        render({"passed": True}, "json")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ JSON
def test_json_round_trips_and_holds_the_spec_fields(report: Report) -> None:
    document = render(report, "json")
    assert Report.model_validate_json(document) == report
    data = json.loads(document)
    assert next(iter(data)) == "schema" and data["schema"] == REPORT_SCHEMA
    assert isinstance(data["passed"], bool)
    assert set(data["score"]) >= {
        "kill_rate",
        "killed",
        "total",
        "threshold",
        "required",
        "required_missing",
    }
    assert all(set(t) >= {"id", "valid", "status", "kills"} for t in data["tests"])
    assert all(set(m) >= {"id", "title", "killed", "killed_by"} for m in data["mutants"])
    assert set(data["journal"]) >= {"checked", "ok", "problems"}
    assert set(data["policy"]) >= {"ok", "violations"}
    assert set(data["timing"]) >= {"total_s"}
    assert [m["killed"] for m in data["mutants"]] == [m.killed for m in report.mutants]


def test_json_of_the_failing_report_says_what_failed(failing: Report) -> None:
    data = json.loads(render(failing, "json"))
    assert data["passed"] is False
    assert data["score"]["required_missing"] == ["s02"]
    assert {t["status"] for t in data["tests"]} == {"valid", "brittle"}
    assert data["policy"]["ok"] is False and data["policy"]["violations"]


# ----------------------------------------------------------------------------- JUnit
def _suites(document: str) -> dict[str, ET.Element]:
    root = ET.fromstring(document)
    assert root.tag == "testsuites"
    return {suite.get("name", ""): suite for suite in root.findall("testsuite")}


def test_junit_counts_are_the_testcases_it_holds(report: Report) -> None:
    document = render(report, "junit")
    root = ET.fromstring(document)
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(c.find("failure") is not None for c in cases),
            "errors": sum(c.find("error") is not None for c in cases),
            "skipped": sum(c.find("skipped") is not None for c in cases),
        }
        for key, value in counts.items():
            assert int(suite.get(key, "-1")) == value, (suite.get("name"), key)
            totals[key] += value
        assert float(suite.get("time", "-1")) == pytest.approx(
            sum(float(c.get("time", "0")) for c in cases)
        )
    for key, value in totals.items():
        if key == "skipped":  # per suite only: the JUnit 10 schema has no such attribute on the root
            assert root.get(key) is None
        else:
            assert int(root.get(key, "-1")) == value, key
    assert float(root.get("time", "-1")) == pytest.approx(report.timing.total_s)


def test_junit_has_one_testcase_per_mutant_and_a_failure_per_survivor(report: Report) -> None:
    mutants = _suites(render(report, "junit"))["mutagrade.mutants"]
    cases = mutants.findall("testcase")
    assert len(cases) == len(report.mutants)
    assert all(c.get("classname") == "mutagrade.mutants" for c in cases)
    failed = [c for c in cases if c.find("failure") is not None]
    survivors = [m for m in report.mutants if not m.killed]
    assert int(mutants.get("failures", "-1")) == len(failed) == len(survivors)
    for case, mutant in zip(failed, survivors, strict=True):
        assert case.get("name", "").startswith(mutant.id)
        assert case.findtext("failure") == mutant.hint


def test_junit_names_a_mutant_by_id_and_title(passing: Report) -> None:
    names = [c.get("name") for c in _suites(render(passing, "junit"))["mutagrade.mutants"]]
    assert "s01: Gate blocks read in the order z, r" in names
    assert "s02: Cho's reset placement [required]" in names


def test_junit_fails_invalid_tests_the_policy_the_journal_and_reports_run_problems(
    failing: Report,
) -> None:
    suites = _suites(render(failing, "junit"))
    failed_tests = [c for c in suites["mutagrade.tests"] if c.find("failure") is not None]
    assert [c.get("name") for c in failed_tests] == [t.id for t in failing.tests if not t.valid]
    assert "rejected w03" in (failed_tests[0].findtext("failure") or "")
    checks = {c.get("name"): c for c in suites["mutagrade.checks"].findall("testcase")}
    assert checks["verdict"].find("failure") is not None
    assert checks["policy"].find("failure") is not None
    assert "import os" in (checks["policy"].findtext("failure") or "")
    assert checks["journal"].find("failure") is not None
    # The control characters were made printable instead of breaking the document.
    assert "\\x1b[31mSyntaxError" in (checks["run problems"].findtext("error") or "")


def test_junit_of_a_passing_suite_skips_the_unchecked_journal(passing: Report) -> None:
    checks = {c.get("name"): c for c in _suites(render(passing, "junit"))["mutagrade.checks"]}
    assert checks["verdict"].find("failure") is None
    assert checks["journal"].find("skipped") is not None
    assert checks["policy"].find("failure") is None and checks["policy"].find("skipped") is None


# Gradescope: tests/grader/test_gradescope.py


# ---------------------------------------------------------------------------- GitHub
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_BACKSLASH_ESCAPE = re.compile(r"\\(.)")


def _tables(markdown: str) -> list[list[str]]:
    tables: list[list[str]] = []
    current: list[str] = []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables


def test_github_tables_have_the_same_number_of_cells_in_every_row(report: Report) -> None:
    tables = _tables(render(report, "github"))
    assert len(tables) == 2  # the score and the kill matrix
    for table in tables:
        widths = {len(_CELL_SPLIT.split(row)) for row in table}
        assert len(widths) == 1, table
    matrix = tables[1]
    # Split on the outer bars too: two empty ends, then Test, Status and a cell per variant.
    assert len(_CELL_SPLIT.split(matrix[0])) == 2 + 2 + len(report.variants)
    assert len(matrix) == 2 + len(report.tests) + 1  # header, rule, tests, the killed? row


def test_github_escapes_a_pipe_in_a_test_id(passing: Report) -> None:
    markdown = render(passing, "github")
    assert "test_shapes[a\\|b]" in markdown
    assert "test_shapes[a|b]" not in markdown


def test_github_heading_and_hints(report: Report) -> None:
    markdown = render(report, "github")
    assert markdown.startswith(
        "## ✅ mutagrade: PASSED" if report.passed else "## ❌ mutagrade: NOT PASSED"
    )
    survivors = [m for m in report.mutants if not m.killed]
    assert f"### Surviving mutants ({len(survivors)})" in markdown
    # Read back Markdown's backslash escapes (W\_hn shows as W_hn, \| as |).
    shown = _BACKSLASH_ESCAPE.sub(r"\1", markdown)
    for mutant in survivors:
        assert f"Hint: {mutant.hint}" in shown
    assert "✔ passed" in markdown  # the legend


def test_github_lists_invalid_tests_and_problems(failing: Report) -> None:
    markdown = render(failing, "github")
    assert "### Invalid tests (1)" in markdown and "**brittle**" in markdown
    assert "### Policy violations" in markdown and "import os" in markdown
    assert "### Journal problems" in markdown and "green before red" in markdown
    assert "### Problems while running" in markdown


# ------------------------------------------------------------------------------ text
def test_text_starts_with_the_verdict_and_its_reasons(report: Report) -> None:
    lines = render_text(report).splitlines()
    verdict = next(line for line in lines if line.startswith("VERDICT"))
    assert lines.index(verdict) <= 2
    assert verdict == ("VERDICT: PASSED" if report.passed else "VERDICT: NOT PASSED")
    for reason in report.reasons:
        assert f"  - {reason}" in lines


def test_text_gives_the_score_and_the_missing_required_mutant(failing: Report) -> None:
    text = render_text(failing)
    killed, total = failing.score.killed, failing.score.total
    assert (
        f"Score: {killed / total * 100:.1f}% of mutants killed ({killed}/{total}); "
        "threshold 70% (at least 9/12)" in text
    )
    assert "NOT KILLED: s02" in text


def test_text_shows_every_surviving_hint_and_hides_the_hidden_title(failing: Report) -> None:
    text = render_text(failing)
    for mutant in failing.mutants:
        if not mutant.killed:
            assert f"hint: {mutant.hint}" in text
    assert "hidden mutant 1" in text
    assert HIDDEN_REAL_TITLE not in text
    assert "hidden mutant 1: hidden mutant 1" not in text  # a label equal to the id is said once


def test_text_matrix_has_a_row_per_test_in_the_variants_order(failing: Report) -> None:
    lines = render_text(failing).splitlines()
    header = next(line for line in lines if line.startswith("test "))
    labels = header.split()[2:]
    labels.remove("|")
    assert labels == ["ref", *WHEATS, *(f"s{n:02d}" for n in range(1, 12)), "hm1"]
    assert "Columns: ref = reference, hm1 = hidden mutant 1" in lines
    rows = lines[lines.index(header) + 1 : lines.index(header) + 1 + len(failing.tests)]
    brittle = rows[2].split()
    assert brittle[2] == "BRITTLE"  # an invalid test shouts its status
    cells = [c for c in brittle[3:] if c != "|"]
    assert cells == [".", ".", ".", "F", ".", ".", "F", *["."] * 6, "F", *["."] * 3]
    killed_row = next(line for line in lines if line.startswith("killed?")).split()[1:]
    assert [c for c in killed_row if c != "|"] == [
        "yes" if m.killed else "NO" for m in failing.mutants
    ]
    assert any(line.startswith("Legend:") for line in lines)


def test_text_abbreviates_long_test_ids_with_a_numbered_key(failing: Report) -> None:
    lines = render_text(failing).splitlines()
    key = lines[lines.index("Tests:") + 1 :][: len(failing.tests)]
    # Only the key and the list of invalid tests spell out the long ids; the rest fits a terminal.
    rest = [line for line in lines if not any(t.id in line for t in failing.tests)]
    assert len(rest) > 30
    assert all(len(line) <= 100 for line in rest), max(rest, key=len)
    assert [line.split()[-1] for line in key] == [t.id for t in failing.tests]
    header = next(line for line in lines if line.startswith("test "))
    rows = lines[lines.index(header) + 1 :][: len(failing.tests)]
    for n, (row, test) in enumerate(zip(rows, failing.tests, strict=True), start=1):
        number, short = row.split()[:2]  # "1 test_output_mat..." -> the number and the name
        name = test.id.rsplit("::", 1)[-1]
        assert number == str(n)
        assert short == name or (short.endswith("...") and name.startswith(short[:-3]))


def test_text_keeps_short_test_ids_whole(passing: Report) -> None:
    text = render_text(passing)
    assert "tests/test_gru.py::test_candidate_range" in text.split("Legend:")[0]
    assert "Tests:" not in text.splitlines()
    assert "Surviving mutants (1)" in text and f"hint: {S03_HINT}" in text
    assert "Journal: not checked" in text and "Policy: ok" in text
    assert "Timing: 12.5 s in total, 9 suite runs, 3.2 s inside the tests" in text


def test_text_lists_invalid_tests_policy_journal_and_problems(failing: Report) -> None:
    text = render_text(failing)
    assert "Invalid tests (1)" in text and "rejected w03" in text
    assert "Policy: VIOLATED (1)" in text and "import os" in text
    assert "Journal: NOT VERIFIED" in text and "green before red" in text
    assert "Problems while running (1):" in text


def test_a_staff_report_names_hidden_mutants_and_marks_them(failing: Report) -> None:
    hidden = failing.mutants[-1].model_copy(update={"id": "s12", "title": HIDDEN_REAL_TITLE})
    staff = failing.model_copy(
        update={
            "audience": "staff",
            "mutants": [*failing.mutants[:-1], hidden],
            "variants": [*failing.variants[:-1], "s12"],
        }
    )
    text = render_text(staff)
    assert f"s12: {HIDDEN_REAL_TITLE}  [hidden]" in text
    assert "hidden mutant 1" not in text


@pytest.mark.parametrize("fmt", ["text", "json", "junit", "gradescope", "github"])
def test_a_suite_with_no_tests_still_renders(fmt: str) -> None:
    """Nothing collected, nothing killed: the report must still say so, not crash."""
    mutant = MutantVerdict(
        id="s01", title="t", required=True, hidden=False, killed=False, killed_by=[], hint="h"
    )
    empty = Report(
        submission="carol/hw3",
        passed=False,
        reasons=["no tests were collected"],
        score=Score(
            kill_rate=0.0,
            killed=0,
            total=1,
            threshold=0.7,
            required=["s01"],
            required_missing=["s01"],
        ),
        tests=[],
        mutants=[mutant],
        variants=["reference", "s01"],
    )
    document = render(empty, fmt)
    assert "no tests were collected" in document.lower()


# ------------------------------------------------------------------ lines naming variants
def test_a_line_naming_variants_is_data_in_json_and_words_in_every_other_format(failing: Report) -> None:
    from grader.core.models import Mention

    required = Mention.of(["required mutant(s) not killed: ", ", ", ""], ["s02", "hidden mutant 1"])
    crashed = Mention.of(["", ": the child died: {shape} differs"], ["s02"])
    report = failing.model_copy(update={"reasons": [required, "1 test is brittle"], "problems": [crashed]})
    data = json.loads(render(report, "json"))
    assert data["reasons"] == [
        {"text": "required mutant(s) not killed: {}, {}", "variants": ["s02", "hidden mutant 1"]},
        "1 test is brittle",
    ]
    assert data["problems"] == [{"text": "{}: the child died: {{shape}} differs", "variants": ["s02"]}]
    assert Report.model_validate_json(render(report, "json")) == report
    assert str(crashed) == "s02: the child died: {shape} differs"
    assert crashed.renamed({"s02": "hidden mutant 2"}).variants == ["hidden mutant 2"]
    for fmt in ("text", "github", "junit", "gradescope", "html"):
        document = render(report, fmt)
        assert "required mutant(s) not killed: s02, hidden mutant 1" in document, fmt
        assert "s02: the child died: {shape} differs" in document, fmt


@pytest.mark.parametrize(
    "text, variants",
    [("{}: x", []), ("no field", ["s02"]), ("{0}: x", ["s02"]), ("{}: {!r}", ["s02", "s03"]), ("{: x", ["s02"])],
)
def test_a_line_naming_variants_has_one_bare_field_per_variant(text: str, variants: list[str]) -> None:
    from pydantic import ValidationError

    from grader.core.models import Mention

    with pytest.raises(ValidationError, match="text"):
        Mention(text=text, variants=variants)


# ------------------------------------------------------------------ the local check's words
def test_the_local_check_words_its_sections_as_the_text_report_does(failing: Report) -> None:
    from grader.core.models import CourseTestResult, ImplementationCheck
    from grader.flows.student_check import LocalCheck, render_local_check

    implementation = ImplementationCheck(
        checked=True, ok=False, implementation="impl",
        tests=[CourseTestResult(id="t.py::test_a", outcome=F, message="first line\nsecond line"),
               CourseTestResult(id="t.py::test_b", outcome=P)],
        problems=["the run crashed"],
    )
    policy = PolicySummary(ok=False, violations=["t.py:1:0: import of 'os', ..."], violations_omitted=2)
    journal = JournalSummary(checked=True, ok=False, problems=["entry 2: green before red"], entries=2)
    local = render_local_check(LocalCheck(policy=policy, implementation=implementation, journal=journal)).splitlines()
    text = render_text(failing.model_copy(
        update={"policy": policy, "implementation": implementation, "journal": journal})).splitlines()
    assert "Implementation impl: FAILS, 1/2 course tests pass (fixture goldens; torch not installed)" in local
    assert "  * t.py::test_a: failed: first line" in local and "      second line" in local
    assert "Policy: VIOLATED (3)" in local and "Journal: NOT VERIFIED" in local
    assert all(line in text for line in local), [line for line in local if line not in text]
