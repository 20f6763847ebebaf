"""The size caps: text and lists cut with a count of the rest, test ids shortened yet unique, and
a report fitted to a byte cap without cutting its JSON."""

from __future__ import annotations

import json

import pytest

from grader.core.caps import (
    MAX_ID_CHARS,
    MAX_STORED_REPORT_BYTES,
    MAX_TESTS,
    cap_text,
    first,
    fit_report,
    report_json_within,
    short_ids,
)
from grader.core.models import (
    JournalSummary,
    MutantVerdict,
    Outcome,
    PolicySummary,
    Report,
    Score,
    TestStatus,
    TestVerdict,
)


def test_cap_text_keeps_short_text_and_cuts_long_text_with_an_ellipsis():
    assert cap_text("short", 10) == "short"
    assert cap_text("x" * 10, 10) == "x" * 10
    cut = cap_text("abcdefghijklmnop", 10)
    assert cut == "abcdefg..." and len(cut) == 10


def test_first_lists_the_first_items_and_counts_the_rest():
    assert first(range(7), 3) == ([0, 1, 2], 4)
    assert first(["a"], 3) == (["a"], 0)


def test_short_ids_leave_ids_within_the_cap_alone():
    ids = ["test_a.py::test_x", "t" * MAX_ID_CHARS]
    assert short_ids(ids) == {i: i for i in ids}


def test_long_ids_are_cut_to_the_cap_keeping_their_start_and_their_end():
    long = "test_long.py::test_p[case_" + "x" * 3000 + "00042]"
    short = short_ids([long])[long]
    assert len(short) <= MAX_ID_CHARS
    assert short.startswith("test_long.py::test_p[case_xxx") and short.endswith("00042]")
    assert "..." in short


def test_ids_sharing_a_long_prefix_stay_apart():
    ids = [f"test_long.py::test_p[{'x' * 3000}{n:05d}]" for n in range(600)]
    names = short_ids(ids)
    assert len(set(names.values())) == 600
    assert all(len(name) <= MAX_ID_CHARS for name in names.values())


def test_ids_differing_only_in_the_middle_stay_apart():
    # Head and tail alike: the shortened forms would be one string without a tie-breaker.
    ids = ["test_m.py::test_p[" + "a" * 1000 + middle + "b" * 1000 + "]" for middle in ("1", "2", "3")]
    names = short_ids(ids)
    assert len(set(names.values())) == 3
    assert all(len(name) <= MAX_ID_CHARS for name in names.values())


def test_a_short_id_never_merges_with_the_shortened_form_of_a_long_one():
    long = "test_m.py::test_p[" + "a" * 1000 + "]"
    forged = short_ids([long])[long]  # a student names a test exactly that
    names = short_ids([forged, long])
    assert names[forged] == forged and names[long] != forged
    assert len(names[long]) <= MAX_ID_CHARS


def _huge_report(tests: int = MAX_TESTS) -> Report:
    """A report no grading makes (the caps prevent it): long ids, reasons and lists."""
    variants = ["reference", "w01", *(f"s{n:02d}" for n in range(1, 13))]
    verdicts = [
        TestVerdict(
            id=f"test_x.py::test_{n}_" + "y" * 3000, valid=False, status=TestStatus.WRONG,
            kills=[], reason="r" * 5000, outcomes={v: Outcome.FAILED for v in variants},
        )
        for n in range(tests)
    ]
    mutants = [
        MutantVerdict(id=v, title=v, required=False, hidden=False, killed=True,
                      killed_by=[t.id for t in verdicts])
        for v in variants[2:]
    ]
    return Report(
        submission="huge", passed=False, reasons=["z" * 5000] * 20,
        score=Score(kill_rate=1.0, killed=12, total=12, threshold=0.7, required=[], required_missing=[]),
        tests=verdicts, mutants=mutants, variants=variants,
        policy=PolicySummary(ok=False, violations=["v" * 3000] * 400),
        journal=JournalSummary(checked=True, ok=False, problems=["j" * 3000] * 400,
                               history={t.id: "red at entry 1, green at entry 2" for t in verdicts}),
        problems=["p" * 3000] * 400,
    )


def test_a_report_within_the_cap_is_left_as_it_is():
    report = _huge_report(tests=2)
    assert fit_report(report, 10 * 1024**2) is report


def test_a_report_over_the_cap_is_shortened_into_valid_json_that_says_what_it_left_out():
    report = _huge_report()
    assert len(report.model_dump_json().encode()) > MAX_STORED_REPORT_BYTES
    document = report_json_within(report)
    assert len(document.encode()) <= MAX_STORED_REPORT_BYTES
    fitted = Report.model_validate_json(document)  # whole JSON, not cut in the middle
    assert fitted.passed is False and fitted.score == report.score
    assert len(fitted.tests) + fitted.tests_omitted == MAX_TESTS
    listed = len(fitted.policy.violations) + fitted.policy.violations_omitted
    assert listed == 400
    assert any("shortened" in p and "MiB" in p for p in fitted.problems)


@pytest.mark.parametrize("cap", [64 * 1024, 256 * 1024, 1024**2])
def test_fitting_reaches_small_caps_too(cap):
    document = report_json_within(_huge_report(), cap)
    assert len(document.encode()) <= cap
    assert json.loads(document)["schema"] == "mutagrade.report/2"
