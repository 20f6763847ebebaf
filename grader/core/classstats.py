"""A class's statistics from its students' reports: what the class's tests miss, for staff.

Built from the reports ``grade-batch --reports`` writes (read back by
:func:`grader.flows.stats.load_reports`), or those the service stores; a pure function of them,
so the command and the service's statistics page state the same figures. Hidden mutants are
counted under their own ids: these figures are staff's.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from grader.core.models import MutantVerdict, Report, TestStatus

__all__ = ["CLASS_STATS_SCHEMA", "HISTOGRAM_BINS", "ClassStats", "HistogramBin", "MutantStats", "class_stats"]

CLASS_STATS_SCHEMA = "mutagrade.class-stats/1"
HISTOGRAM_BINS = 10  # tenths of the kill rate: 0-0.1, ..., 0.9-1.0 (1.0 in the last)


class MutantStats(BaseModel):
    """One mutant across the class: how many suites killed it, of how many graded."""

    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    hidden: bool
    required: bool
    killed: int  # suites that killed it
    suites: int  # suites graded (a suite refused before any run killed none)
    kill_rate: float  # killed / suites; 0 when none was graded


class HistogramBin(BaseModel):
    """The suites whose kill rate lies in ``[low, high)`` (the last bin holds 1.0 too)."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    count: int


class ClassStats(BaseModel):
    """The class's figures: counts, each mutant's kill rate (the most missed first), the
    scores' histogram and the tests by validity, summed over the class."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    schema_: str = Field(default=CLASS_STATS_SCHEMA, alias="schema")
    graded: int  # students with a report
    passed: int
    not_passed: int  # graded, not passed (the refused among them)
    refused: int  # graded, and refused as a whole (a policy violation, a syntax error, too many tests)
    errors: int  # students whose submission could not be graded (no report)
    mutants: list[MutantStats]
    histogram: list[HistogramBin]
    tests: dict[TestStatus, int]  # every category, in TestStatus's order
    tests_omitted: int = 0  # tests a shortened report did not list, so not among ``tests``
    median_kill_rate: float | None  # None when no suite was graded
    mean_kill_rate: float | None

    @property
    def students(self) -> int:
        """Every student counted: graded or not."""
        return self.graded + self.errors


def _bin(report: Report) -> int:
    """The tenth a suite's kill rate falls in, from its whole counts where it has them (so
    that 7/10 is never put below 0.7 by a rounding)."""
    score = report.score
    if score.total > 0:
        index = HISTOGRAM_BINS * score.killed // score.total
    else:
        index = int(score.kill_rate * HISTOGRAM_BINS + 1e-9)
    return max(0, min(HISTOGRAM_BINS - 1, index))


def _mutant_stats(reports: list[Report]) -> list[MutantStats]:
    """Each mutant met in any report, the least killed first (then by id)."""
    seen: dict[str, MutantVerdict] = {}
    killed: dict[str, int] = {}
    for report in reports:
        for mutant in report.mutants:
            seen.setdefault(mutant.id, mutant)
            killed[mutant.id] = killed.get(mutant.id, 0) + mutant.killed
    suites = len(reports)
    found = [
        MutantStats(id=m.id, title=m.title, hidden=m.hidden, required=m.required, killed=killed[m.id],
                    suites=suites, kill_rate=killed[m.id] / suites if suites else 0.0)
        for m in seen.values()
    ]
    return sorted(found, key=lambda m: (m.kill_rate, m.id))


def class_stats(reports: Iterable[Report], *, errors: int = 0) -> ClassStats:
    """The class's statistics.

    Args:
        reports: one report per graded student (staff's view names hidden mutants by id; a
            student's view counts them as it names them, "hidden mutant N").
        errors: the students whose submission could not be graded (no report).

    Returns:
        The figures; a mutant a refused suite's report does not list counts as not killed by it.

    Raises:
        ValueError: ``errors`` is negative.
    """
    if errors < 0:
        raise ValueError(f"errors must be 0 or more, got {errors}")
    reports = list(reports)
    rates = [r.score.kill_rate for r in reports]
    counts = [0] * HISTOGRAM_BINS
    for report in reports:
        counts[_bin(report)] += 1
    tests = dict.fromkeys(TestStatus, 0)
    for report in reports:
        for test in report.tests:
            tests[test.status] += 1
    passed = sum(r.passed for r in reports)
    return ClassStats(
        graded=len(reports),
        passed=passed,
        not_passed=len(reports) - passed,
        refused=sum(r.input_refused for r in reports),
        errors=errors,
        mutants=_mutant_stats(reports),
        histogram=[HistogramBin(low=n / HISTOGRAM_BINS, high=(n + 1) / HISTOGRAM_BINS, count=c)
                   for n, c in enumerate(counts)],
        tests=tests,
        tests_omitted=sum(r.tests_omitted for r in reports),
        median_kill_rate=statistics.median(rates) if rates else None,
        mean_kill_rate=statistics.fmean(rates) if rates else None,
    )
