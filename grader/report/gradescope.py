"""Gradescope autograder ``results.json``: the score, one check per mutant, and the checks.

Scoring follows the assignment's ``gradescope_score`` (:class:`GradescopeOptions`):

- ``"verdict"`` (the default): the points follow the verdict. A suite that passed gets full
  points (``max_score``, the number of mutants); one that did not gets ``not_passed_share``
  points per killed mutant (0.5 by default), so that it always scores less than a passed one,
  whatever it killed. The first test, "Verdict", carries the points and says why; each mutant is
  a check of 0 points, passed when killed.
- ``"kills"``: one point per killed mutant, whatever the verdict (which the output states first).

Either way the checks "Test validity", "Policy" and "Journal" (0 points) follow; a check that
was not made (no journal submitted, the policy off) is left out and the output says so: it is
never shown as passed. With ``hidden_hints`` set and the staff report given (``revealed``), each
hidden mutant gets one more test of 0 points naming it and its hint, which Gradescope shows only
``after_due_date`` (or ``after_published``): its test ``visibility``. Nothing else of the staff
report is rendered; the student report is what every visible part shows.

Fields, all of them and nothing else: top level ``score`` and ``max_score`` (float),
``execution_time`` (int: seconds of the grading and the journal's replay), ``output`` (str),
``visibility`` ("visible"), ``stdout_visibility`` ("hidden": what the autograder prints is for
staff), ``tests`` (list); each test ``name`` (str), ``score`` and ``max_score`` (float),
``status`` ("passed"|"failed"), ``output`` (str), ``visibility`` ("visible", or the hidden
mutants' setting).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from grader.core.models import Audience, Report
from grader.core.points import mutant_units
from grader.report._common import (
    invalid_tests,
    kills_needed,
    more,
    mutant_name,
    no_tests,
    percent,
    printable,
    verdict_word,
)

if TYPE_CHECKING:
    from grader.core.assignment import Assignment

__all__ = ["GradescopeOptions", "gradescope_options", "gradescope_points", "render_gradescope"]

_VISIBLE = "visible"

ScoreMode = Literal["verdict", "kills"]
HintsShown = Literal["never", "after_due_date", "after_published"]


@dataclass(frozen=True)
class GradescopeOptions:
    """How ``results.json`` scores and what it reveals (the assignment's ``gradescope_*``)."""

    score: ScoreMode = "verdict"
    not_passed_share: float = 0.5  # points per killed mutant for a suite that did not pass
    hidden_hints: HintsShown = "never"

    def __post_init__(self) -> None:
        if self.score not in ("verdict", "kills"):
            raise ValueError(f"score must be 'verdict' or 'kills', got {self.score!r}")
        if not 0.0 <= self.not_passed_share < 1.0:
            raise ValueError(f"not_passed_share must be at least 0 and below 1, got {self.not_passed_share!r}")
        if self.hidden_hints not in ("never", "after_due_date", "after_published"):
            raise ValueError(
                f"hidden_hints must be 'never', 'after_due_date' or 'after_published', got {self.hidden_hints!r}"
            )


def gradescope_options(assignment: Assignment) -> GradescopeOptions:
    """The options ``assignment.toml`` sets (``gradescope_score`` and the rest)."""
    return GradescopeOptions(
        score=assignment.gradescope_score,
        not_passed_share=assignment.gradescope_not_passed_share,
        hidden_hints=assignment.gradescope_hidden_hints,
    )


def gradescope_points(mutants: int) -> float:
    """The points ``results.json`` scores out of (its ``max_score``), in either mode: one per
    mutant graded. The assignment's points on Gradescope must be set to it.

    Args:
        mutants: how many mutants a grading counts (hidden ones included).
    """
    return float(mutants)


def render_gradescope(
    report: Report, options: GradescopeOptions | None = None, *, revealed: Report | None = None
) -> str:
    """Render the report as a Gradescope ``results.json``.

    Args:
        report: the graded suite, as its reader may see it.
        options: scoring and revealing (default: the verdict decides, nothing revealed).
        revealed: the staff report ``report`` is the student view of; with
            ``options.hidden_hints`` set, its hidden mutants are revealed after the due date.

    Returns:
        The JSON document, ending with a newline.

    Raises:
        ValueError: ``revealed`` is given to be revealed but is not the staff report of the same
            grading, or ``report`` is not a student report.
    """
    options = options or GradescopeOptions()
    total = report.score.total
    score = _points(report, options)
    tests = [_verdict_test(report, options, score)] if options.score == "verdict" else []
    tests += [_mutant_test(report, i, options) for i in range(len(report.mutants))]
    tests += [_validity_test(report)]
    tests += [test for test in (_policy_test(report), _journal_test(report)) if test is not None]
    if revealed is not None and options.hidden_hints != "never":
        tests += _revealed_tests(report, revealed, options.hidden_hints)
    results: dict[str, Any] = {
        "score": score,
        "max_score": gradescope_points(total),
        "execution_time": max(0, round(report.timing.total_s)),  # the journal's replay included
        "output": printable(_summary(report, options)),
        "visibility": _VISIBLE,
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    return json.dumps(results, indent=2, ensure_ascii=False) + "\n"


def _points(report: Report, options: GradescopeOptions) -> float:
    # The gradebooks' rule (grader/core/points.py), in mutant units: one per mutant when passed.
    units = mutant_units(passed=report.passed, killed=report.score.killed, mutants=report.score.total,
                         score=options.score, not_passed_share=options.not_passed_share)
    return round(units, 2)


def _test(
    name: str, score: float, max_score: float, ok: bool, output: str, visibility: str = _VISIBLE
) -> dict[str, Any]:
    return {
        "name": printable(name),
        "score": float(score),
        "max_score": float(max_score),
        "status": "passed" if ok else "failed",
        "output": printable(output),
        "visibility": visibility,
    }


def _summary(report: Report, options: GradescopeOptions) -> str:
    s = report.score
    scored = (
        "The score counts killed mutants only."
        if options.score == "kills"
        else "The score follows the verdict (see Verdict)."
    )
    lines = [
        f"{verdict_word(report)}. Killed {s.killed} of {s.total} mutants ({percent(s.kill_rate)}). "
        f"Passing needs {percent(s.threshold)} (at least {kills_needed(s)} killed), every "
        "required mutant killed, every test valid, the policy kept and, when required, the "
        f"journal verified. {scored}"
    ]
    lines += [f"- {reason}" for reason in report.reasons]
    if not report.policy.checked:
        lines.append("Policy: not checked.")
    if not report.journal.checked:
        lines.append("Journal: not checked (none was submitted, and none is required).")
    if report.problems:
        lines.append("Problems while running:")
        lines += [f"- {p}" for p in [*report.problems, *more(report.problems_omitted)]]
    return "\n".join(lines)


def _share(value: float) -> str:
    return f"{value:g}"


def _verdict_test(report: Report, options: GradescopeOptions, score: float) -> dict[str, Any]:
    s = report.score
    if report.passed:
        output = f"PASSED: full points ({s.total:g} of {s.total:g})."
    else:
        output = (
            f"NOT PASSED: a suite that does not pass earns {_share(options.not_passed_share)} point per "
            f"killed mutant, at most {_share(round(s.total * options.not_passed_share, 2))} of {s.total:g}: "
            f"{s.killed} killed, {_share(score)} points. Passing gives full points."
        )
        output += "".join(f"\n- {reason}" for reason in report.reasons)
    return _test("Verdict", score, s.total, report.passed, output)


def _mutant_test(report: Report, index: int, options: GradescopeOptions) -> dict[str, Any]:
    m = report.mutants[index]
    worth = 1.0 if options.score == "kills" else 0.0
    name = mutant_name(m) + (" (required)" if m.required else "")
    if m.killed:
        return _test(name, worth, worth, True, f"Killed by: {', '.join(m.killed_by)}")
    output = "Survived: no valid test fails on this mutant."
    if m.hint:
        output += f"\nHint: {m.hint}"
    return _test(name, 0, worth, False, output)


def _validity_test(report: Report) -> dict[str, Any]:
    invalid = invalid_tests(report)
    if not report.tests:
        return _test("Test validity", 0, 0, False, f"{no_tests(report).capitalize()}.")
    if not invalid:
        return _test("Test validity", 0, 0, True, f"All {len(report.tests)} tests are valid.")
    lines = [f"{len(invalid)} of {len(report.tests)} tests are invalid and count for nothing:"]
    lines += [
        f"- {t.id} ({t.status.value})" + (f": {t.reason}" if t.reason else "") for t in invalid
    ]
    return _test("Test validity", 0, 0, False, "\n".join(lines))


def _policy_test(report: Report) -> dict[str, Any] | None:
    policy = report.policy
    if not policy.checked:
        return None  # said in the output: a check not made is not a check passed
    ok = policy.ok and not policy.violations
    output = "No violations." if ok else "\n".join(f"- {v}" for v in [*policy.violations, *more(policy.violations_omitted)])
    return _test("Policy", 0, 0, ok, output)


def _journal_test(report: Report) -> dict[str, Any] | None:
    journal = report.journal
    if not journal.checked:
        return None  # said in the output: a check not made is not a check passed
    lines = ["Verified." if journal.ok else "Does not verify."]
    lines += [f"- {p}" for p in [*journal.problems, *more(journal.problems_omitted)]]
    return _test("Journal", 0, 0, journal.ok, "\n".join(lines))


def _revealed_tests(report: Report, staff: Report, visibility: str) -> list[dict[str, Any]]:
    """One test per hidden mutant: its real name and hint, shown only at ``visibility``."""
    # == rather than is: a report copied with model_copy may carry the audience as its string.
    if staff.audience != Audience.STAFF:
        raise ValueError("revealed must be the staff report of the same grading, got a student report")
    if report.audience != Audience.STUDENT:
        raise ValueError("the hidden mutants are revealed beside a student report, got a staff report")
    if [(m.hidden, m.killed) for m in report.mutants] != [(m.hidden, m.killed) for m in staff.mutants]:
        raise ValueError("revealed must be the staff report of the same grading: it has not the same mutants")
    tests = []
    for shown, real in zip(report.mutants, staff.mutants):
        if not real.hidden:
            continue
        if real.killed:
            output = f"Killed by: {', '.join(real.killed_by)}"
        else:
            output = "Survived." + (f"\nHint: {real.hint}" if real.hint else "")
        tests.append(_test(f"{shown.id}, revealed: {mutant_name(real)}", 0, 0, real.killed, output, visibility))
    return tests
