"""JUnit XML, for CI systems that show test results: one testcase per mutant, and the checks.

Three suites under ``<testsuites>``:

* ``mutagrade.mutants``: one testcase per mutant, named ``id: title``; a surviving mutant is a
  ``<failure>`` whose text is its hint.
* ``mutagrade.tests``: one testcase per student test; an invalid one is a ``<failure>`` saying
  why it does not count.
* ``mutagrade.checks``: the verdict (a failure with the reasons when the suite did not pass),
  the policy and the journal (failures when they fail, skipped when not checked), and the run
  problems (an ``<error>``, since they are the grader's trouble running the suite).

Every suite's ``tests``/``failures``/``errors``/``skipped`` are counted from the testcases it
holds. The model carries no time per mutant or per test, so testcases and suites say
``time="0.000"``; the root's ``time`` is the whole grading run's wall clock, as pytest's is.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Literal

from grader.core.models import Report
from grader.report._common import invalid_tests, more, mutant_name, no_tests, percent, printable, verdict_word

__all__ = ["render_junit"]

Kind = Literal["passed", "failure", "error", "skipped"]

# XML 1.0 forbids most control characters; student test ids and crash messages may hold them
# (ANSI colours from a traceback), and one of them would make the whole file unparseable.
_xml_safe = printable


@dataclass(frozen=True)
class _Case:
    classname: str
    name: str
    kind: Kind = "passed"
    message: str = ""
    text: str = ""
    system_out: str = ""


def render_junit(report: Report) -> str:
    """Render the report as JUnit XML.

    Args:
        report: the graded suite.

    Returns:
        The XML document (with its declaration), ending with a newline.
    """
    suites = [
        ("mutagrade.mutants", _mutant_cases(report)),
        ("mutagrade.tests", _test_cases(report)),
        ("mutagrade.checks", _check_cases(report)),
    ]
    root = ET.Element("testsuites", name=f"mutagrade {_xml_safe(report.submission)}")
    # <testsuites> carries no skipped count in the JUnit 10 schema (Jenkins xunit rejects the
    # attribute there): each <testsuite> has its own.
    totals = dict.fromkeys(("tests", "failures", "errors"), 0)
    for name, cases in suites:
        suite = _suite(name, cases, report)
        root.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key, "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{report.timing.total_s:.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _suite(name: str, cases: list[_Case], report: Report) -> ET.Element:
    suite = ET.Element("testsuite", name=name)
    # Counted from the very cases written below, so the attributes cannot drift from them.
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(c.kind == "failure" for c in cases)))
    suite.set("errors", str(sum(c.kind == "error" for c in cases)))
    suite.set("skipped", str(sum(c.kind == "skipped" for c in cases)))
    suite.set("time", "0.000")
    if name == "mutagrade.mutants":
        props = ET.SubElement(suite, "properties")
        s = report.score
        for key, value in (
            ("passed", str(report.passed).lower()),
            ("kill_rate", f"{s.kill_rate:.4f}"),
            ("killed", str(s.killed)),
            ("total", str(s.total)),
            ("threshold", f"{s.threshold:.4f}"),
            ("required", ",".join(s.required)),
            ("required_missing", ",".join(s.required_missing)),
        ):
            ET.SubElement(props, "property", name=key, value=_xml_safe(value))
    for case in cases:
        element = ET.SubElement(
            suite, "testcase", classname=case.classname, name=_xml_safe(case.name), time="0.000"
        )
        if case.kind != "passed":
            child = ET.SubElement(element, case.kind, message=_xml_safe(case.message))
            if case.text:
                child.text = _xml_safe(case.text)
        if case.system_out:
            ET.SubElement(element, "system-out").text = _xml_safe(case.system_out)
    return suite


def _mutant_cases(report: Report) -> list[_Case]:
    cases = []
    for m in report.mutants:
        name = mutant_name(m) + (" [required]" if m.required else "")
        if m.killed:
            cases.append(
                _Case("mutagrade.mutants", name, system_out=f"killed by: {', '.join(m.killed_by)}")
            )
        else:
            message = "survived: no valid test fails on this mutant"
            cases.append(_Case("mutagrade.mutants", name, "failure", message, m.hint))
    return cases


def _test_cases(report: Report) -> list[_Case]:
    cases = []
    for t in report.tests:
        if t.valid:
            kills = ", ".join(t.kills) if t.kills else "nothing"
            cases.append(_Case("mutagrade.tests", t.id, system_out=f"kills: {kills}"))
        else:
            message = f"{t.status.value}: this test does not count"
            cases.append(_Case("mutagrade.tests", t.id, "failure", message, t.reason))
    return cases


def _check_cases(report: Report) -> list[_Case]:
    cls = "mutagrade.checks"
    s = report.score
    summary = (
        f"{verdict_word(report)}: {s.killed}/{s.total} mutants killed ({percent(s.kill_rate)}), "
        f"threshold {percent(s.threshold)}"
    )
    if report.passed:
        cases = [_Case(cls, "verdict", system_out=summary)]
    else:
        cases = [_Case(cls, "verdict", "failure", summary, "\n".join(str(r) for r in report.reasons))]

    n_invalid = len(invalid_tests(report))
    if not report.tests:
        cases.append(_Case(cls, "validity", "failure", no_tests(report)))
    elif n_invalid:
        cases.append(_Case(cls, "validity", "failure", f"{n_invalid} invalid test(s)"))
    else:
        cases.append(_Case(cls, "validity", system_out=f"all {len(report.tests)} tests valid"))

    policy = report.policy
    if not policy.checked:
        cases.append(_Case(cls, "policy", "skipped", "policy not checked"))
    elif not policy.ok or policy.violations:
        message = f"{policy.found} policy violation(s)"
        text = "\n".join([*policy.violations, *more(policy.violations_omitted)])
        cases.append(_Case(cls, "policy", "failure", message, text))
    else:
        cases.append(_Case(cls, "policy"))

    journal = report.journal
    if not journal.checked:
        cases.append(_Case(cls, "journal", "skipped", "journal not checked"))
    elif not journal.ok:
        message = "journal does not verify"
        text = "\n".join([*journal.problems, *more(journal.problems_omitted)])
        cases.append(_Case(cls, "journal", "failure", message, text))
    else:
        text = "\n".join([*journal.problems, *more(journal.problems_omitted)])
        cases.append(_Case(cls, "journal", system_out=text))

    if report.problems:
        message = f"{len(report.problems) + report.problems_omitted} problem(s) while running the suite"
        text = "\n".join([*map(str, report.problems), *more(report.problems_omitted)])
        cases.append(_Case(cls, "run problems", "error", message, text))
    else:
        cases.append(_Case(cls, "run problems"))
    return cases
