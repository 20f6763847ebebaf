"""Gradescope autograder ``results.json``: one scored test per mutant, and three checks.

Scoring, kept simple on purpose: ``score`` is the number of killed mutants and ``max_score``
the number of mutants, so Gradescope shows the kill count. Whether the suite *passed*
(threshold, required mutants, valid tests, policy, journal) is not folded into the number;
the top-level ``output`` says it first, with the reasons, and the checks "Test validity",
"Policy" and "Journal" (``max_score`` 0) show as passed or failed.

Fields, all of them and nothing else: top level ``score`` (float), ``max_score`` (float),
``output`` (str), ``visibility`` and ``stdout_visibility`` ("visible"), ``tests`` (list);
each test ``name`` (str), ``score`` (float), ``max_score`` (float), ``status``
("passed"|"failed"), ``output`` (str), ``visibility`` ("visible").
"""

from __future__ import annotations

import json
from typing import Any

from grader.models import Report
from grader.report._common import (
    invalid_tests,
    kills_needed,
    mutant_name,
    percent,
    printable,
    verdict_word,
)

__all__ = ["render_gradescope"]

_VISIBLE = "visible"


def render_gradescope(report: Report) -> str:
    """Render the report as a Gradescope ``results.json``.

    Args:
        report: the graded suite.

    Returns:
        The JSON document, ending with a newline.
    """
    tests = [_mutant_test(report, i) for i in range(len(report.mutants))]
    tests += [_validity_test(report), _policy_test(report), _journal_test(report)]
    results: dict[str, Any] = {
        "score": float(report.score.killed),
        "max_score": float(report.score.total),
        "output": printable(_summary(report)),
        "visibility": _VISIBLE,
        "stdout_visibility": _VISIBLE,
        "tests": tests,
    }
    return json.dumps(results, indent=2, ensure_ascii=False) + "\n"


def _test(name: str, score: float, max_score: float, ok: bool, output: str) -> dict[str, Any]:
    return {
        "name": printable(name),
        "score": float(score),
        "max_score": float(max_score),
        "status": "passed" if ok else "failed",
        "output": printable(output),
        "visibility": _VISIBLE,
    }


def _summary(report: Report) -> str:
    s = report.score
    lines = [
        f"{verdict_word(report)}. Killed {s.killed} of {s.total} mutants ({percent(s.kill_rate)}). "
        f"Passing needs {percent(s.threshold)} (at least {kills_needed(s)} killed), every "
        "required mutant killed, every test valid, the policy kept and, when required, the "
        "journal verified. The score counts killed mutants only."
    ]
    lines += [f"- {reason}" for reason in report.reasons]
    if report.problems:
        lines.append("Problems while running:")
        lines += [f"- {p}" for p in report.problems]
    return "\n".join(lines)


def _mutant_test(report: Report, index: int) -> dict[str, Any]:
    m = report.mutants[index]
    name = mutant_name(m) + (" (required)" if m.required else "")
    if m.killed:
        return _test(name, 1, 1, True, f"Killed by: {', '.join(m.killed_by)}")
    output = "Survived: no valid test fails on this mutant."
    if m.hint:
        output += f"\nHint: {m.hint}"
    return _test(name, 0, 1, False, output)


def _validity_test(report: Report) -> dict[str, Any]:
    invalid = invalid_tests(report)
    if not report.tests:
        return _test("Test validity", 0, 0, False, "No tests were collected.")
    if not invalid:
        return _test("Test validity", 0, 0, True, f"All {len(report.tests)} tests are valid.")
    lines = [f"{len(invalid)} of {len(report.tests)} tests are invalid and count for nothing:"]
    lines += [
        f"- {t.id} ({t.status.value})" + (f": {t.reason}" if t.reason else "") for t in invalid
    ]
    return _test("Test validity", 0, 0, False, "\n".join(lines))


def _policy_test(report: Report) -> dict[str, Any]:
    policy = report.policy
    if not policy.checked:
        return _test("Policy", 0, 0, True, "Not checked.")
    ok = policy.ok and not policy.violations
    output = "No violations." if ok else "\n".join(f"- {v}" for v in policy.violations)
    return _test("Policy", 0, 0, ok, output)


def _journal_test(report: Report) -> dict[str, Any]:
    journal = report.journal
    if not journal.checked:
        return _test("Journal", 0, 0, True, "Not checked.")
    lines = ["Verified." if journal.ok else "Does not verify."]
    lines += [f"- {p}" for p in journal.problems]
    return _test("Journal", 0, 0, journal.ok, "\n".join(lines))
