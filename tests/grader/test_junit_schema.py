"""The JUnit report validates against the Jenkins xunit plugin's JUnit 10 schema
(tests/fixtures/junit-10.xsd), the strictest reader CI systems put it through."""

from __future__ import annotations

from pathlib import Path

import pytest
import xmlschema

from grader.core.models import JournalSummary, PolicySummary
from grader.report import render

from tests.grader.test_report import failing_report, passing_report

SCHEMA = xmlschema.XMLSchema10(Path(__file__).resolve().parents[1] / "fixtures" / "junit-10.xsd")


@pytest.mark.parametrize("report", [
    passing_report(),
    failing_report(),
    # Checks not made are skipped cases: the skipped counts must sit where the schema allows them.
    passing_report().model_copy(update={"policy": PolicySummary(checked=False), "journal": JournalSummary(checked=False)}),
], ids=["passed", "not-passed", "checks-skipped"])
def test_the_junit_report_validates_against_the_xunit_schema(report):
    xml = render(report, "junit")
    errors = [str(error.reason) for error in SCHEMA.iter_errors(xml)]
    assert errors == [], errors
    assert SCHEMA.is_valid(xml)
