"""The few facts every reporter states the same way: the verdict, percentages, who survived."""

from __future__ import annotations

import math
import re

from grader.core.models import MutantVerdict, Report, Score, TestVerdict

__all__ = [
    "invalid_tests",
    "kills_needed",
    "more",
    "mutant_columns",
    "mutant_name",
    "no_mutants",
    "no_tests",
    "percent",
    "printable",
    "similar_tests",
    "surviving",
    "verdict_word",
]


# Control characters (ANSI colours in a traceback, a stray NUL from a student's test id) would
# recolour a terminal, vanish in Markdown or make an XML file unparseable; surrogates and the two
# non-characters are not allowed in XML either. Tab, newline and carriage return are kept.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def printable(text: str) -> str:
    """``text`` with every control character spelled out: ``"\\x1b[31m"`` for ESC ``[31m``."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def more(count: int) -> list[str]:
    """``["... and 7 more"]`` after a list the caps cut (see grader.core.caps); nothing when none was."""
    return [f"... and {count} more"] if count else []


def _refused(report: Report) -> str:
    """That the suite was refused, and where the report says why: the violations are listed
    under Policy (each format puts that section where it does); any other refusal has its
    reason only among the verdict's."""
    if not report.policy.ok:
        return f"the suite was refused: {report.policy.refusal} (listed under Policy)"
    return "the suite was refused (see the reasons of the verdict)"


def no_tests(report: Report) -> str:
    """Why a report lists no test: none was collected, or the suite was refused before any ran."""
    if report.input_refused:
        return f"nothing was run: {_refused(report)}"
    return "no tests were collected"


def no_mutants(report: Report) -> str:
    """What a report that lists no mutant says of them: the assignment has none, or none was
    run (the suite was refused before any run: nothing of it counts)."""
    total = report.score.total
    if not total:
        return "none to kill"
    why = _refused(report) if report.input_refused else "the suite was not run"
    return f"not run: {why}; none of the {total} is killed"


def verdict_word(report: Report) -> str:
    return "PASSED" if report.passed else "NOT PASSED"


def percent(fraction: float) -> str:
    """``0.7`` -> ``"70%"``, ``7/12`` -> ``"58.3%"``: one decimal only when it says something."""
    text = f"{fraction * 100:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "%"


def kills_needed(score: Score) -> int:
    """The fewest killed mutants that reach the threshold.

    The epsilon keeps ``0.7 * 10 = 7.000000000000001`` from asking for 8.
    """
    return max(0, math.ceil(score.threshold * score.total - 1e-9))


def surviving(report: Report) -> list[MutantVerdict]:
    return [m for m in report.mutants if not m.killed]


def invalid_tests(report: Report) -> list[TestVerdict]:
    return [t for t in report.tests if not t.valid]


def similar_tests(report: Report) -> list[TestVerdict]:
    """The tests compared with the course tests, the most like one first (a student's report
    holds the figure of its copies only)."""
    compared = [t for t in report.tests if t.similarity is not None]
    return sorted(compared, key=lambda t: -(t.similarity or 0.0))


def mutant_name(mutant: MutantVerdict) -> str:
    """``"s02: Cho's reset placement"``; a hidden mutant whose title is its label is named once."""
    if not mutant.title or mutant.title == mutant.id:
        return mutant.id
    return f"{mutant.id}: {mutant.title}"


def mutant_columns(report: Report) -> set[str]:
    """The matrix columns that are mutants (the rest are the reference and the wheats)."""
    return {m.id for m in report.mutants}
