"""Every format shows what the caps left out of a report's lists: "... and K more"."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from grader.core.models import JournalSummary, PolicySummary, Report, Score
from grader.report import RENDERERS, render

VIOLATIONS = [f"test_big.py:{n}:0: import of 'os', student tests may import only numpy" for n in range(1, 51)]


def _report() -> Report:
    return Report(
        submission="big",
        passed=False,
        reasons=["the policy check failed (200000 violation(s)): nothing was run"],
        score=Score(kill_rate=0.0, killed=0, total=12, threshold=0.7, required=["s02"], required_missing=["s02"]),
        tests=[], mutants=[], variants=[],
        policy=PolicySummary(ok=False, violations=VIOLATIONS, violations_omitted=199_950),
        journal=JournalSummary(checked=True, ok=False, problems=["entry 1: broken"] * 50, problems_omitted=7),
        problems=["reference: collection error"] * 50,
        problems_omitted=3,
    )


@pytest.mark.parametrize("fmt", ["text", "github", "junit", "gradescope"])
def test_every_format_says_how_many_violations_it_leaves_out(fmt):
    document = render(_report(), fmt)
    assert "... and 199950 more" in document
    assert VIOLATIONS[-1].split(":")[1] in document  # the last listed one is there


@pytest.mark.parametrize("fmt", ["text", "github", "junit", "gradescope"])
def test_every_format_says_how_many_problems_it_leaves_out(fmt):
    document = render(_report(), fmt)
    assert "... and 3 more" in document and "... and 7 more" in document


def test_json_carries_the_counts_as_fields():
    data = json.loads(render(_report(), "json"))
    assert data["policy"]["violations_omitted"] == 199_950 and len(data["policy"]["violations"]) == 50
    assert data["problems_omitted"] == 3 and data["journal"]["problems_omitted"] == 7


def test_text_and_junit_count_every_violation_not_just_those_listed():
    assert "Policy: VIOLATED (200000)" in render(_report(), "text")
    root = ET.fromstring(render(_report(), "junit"))
    policy = next(case for case in root.iter("testcase") if case.get("name") == "policy")
    assert policy.find("failure").get("message") == "200000 policy violation(s)"


def test_nothing_is_said_of_the_rest_when_nothing_was_left_out():
    report = _report().model_copy(update={
        "policy": PolicySummary(ok=False, violations=VIOLATIONS[:2]),
        "problems_omitted": 0,
        "journal": JournalSummary(checked=True, ok=False, problems=["entry 1: broken"]),
    })
    for fmt in RENDERERS:
        assert "... and" not in render(report, fmt), fmt


@pytest.mark.parametrize("fmt", ["text", "github", "junit", "gradescope", "html"])
def test_a_suite_refused_for_its_number_of_tests_says_so_and_not_that_none_was_collected(fmt):
    why = "the suite has 600 tests, more than the limit of 500: nothing else was run"
    report = _report().model_copy(update={
        "reasons": [why], "refused": why, "policy": PolicySummary(ok=True), "problems": [], "problems_omitted": 0,
        "journal": JournalSummary(),
    })
    document = render(report, fmt)
    assert why in document
    assert "no tests were collected" not in document.lower()
    assert "nothing was run" in document.lower()
