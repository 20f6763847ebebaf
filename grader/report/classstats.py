"""The class statistics (:class:`~grader.core.classstats.ClassStats`) as plain text and as JSON.

The text reads as the report's does (:mod:`grader.report.text`): the counts first, then the
mutants the class's tests miss most, the scores' histogram and the tests by validity. Plain
ASCII, every title made printable, so it reads the same in any terminal or log.
"""

from __future__ import annotations

from grader.core.classstats import ClassStats, MutantStats
from grader.core.models import TestStatus
from grader.report._common import percent, printable

__all__ = ["render_stats_json", "render_stats_text"]

BAR_WIDTH = 40  # characters of the histogram's longest bar
TITLE_WIDTH = 60  # characters of a mutant's title before it is cut


def _rate(value: float | None) -> str:
    return "n/a" if value is None else percent(value)


def _counts(stats: ClassStats) -> list[str]:
    refused = f" ({stats.refused} refused as a whole)" if stats.refused else ""
    return [
        f"mutagrade class statistics: {stats.students} student{'' if stats.students == 1 else 's'}",
        f"  {stats.graded} graded: {stats.passed} passed, {stats.not_passed} not passed{refused}",
        f"  {stats.errors} could not be graded",
        f"  kill rate: median {_rate(stats.median_kill_rate)}, mean {_rate(stats.mean_kill_rate)}",
    ]


def _title(mutant: MutantStats) -> str:
    title = printable(mutant.title).replace("\n", " ")
    return title if len(title) <= TITLE_WIDTH else title[: TITLE_WIDTH - 3] + "..."


def _mutant_lines(stats: ClassStats) -> list[str]:
    if not stats.mutants:
        return ["Mutants: none in the reports"]
    ids = [printable(m.id) for m in stats.mutants]
    width = max(len("mutant"), *(len(i) for i in ids))
    killed_width = max(len("killed"), *(len(f"{m.killed}/{m.suites}") for m in stats.mutants))
    out = ["Mutants, the ones the class's tests miss most first:",
           f"  {'mutant':<{width}}  {'killed':>{killed_width}}  {'rate':>6}  title"]
    for shown, mutant in zip(ids, stats.mutants):
        marks = ", ".join(word for word, on in (("required", mutant.required), ("hidden", mutant.hidden)) if on)
        out.append(f"  {shown:<{width}}  {f'{mutant.killed}/{mutant.suites}':>{killed_width}}  "
                   f"{percent(mutant.kill_rate):>6}  {_title(mutant)}" + (f" ({marks})" if marks else ""))
    return out


def _histogram_lines(stats: ClassStats) -> list[str]:
    most = max((b.count for b in stats.histogram), default=0)
    out = ["Scores (kill rate of each graded suite; 100% counts in the last line):"]
    for bin_ in stats.histogram:
        label = f"{percent(bin_.low)}-{percent(bin_.high)}"
        bar = "#" * (round(BAR_WIDTH * bin_.count / most) if most else 0)
        out.append(f"  {label:>8} |{bar} {bin_.count}")
    return out


def _test_lines(stats: ClassStats) -> list[str]:
    width = max(len(s.value) for s in TestStatus)
    out = ["Tests by validity, over the class:"]
    out.extend(f"  {status.value:<{width}}  {stats.tests.get(status, 0)}" for status in TestStatus)
    if stats.tests_omitted:
        out.append(f"  ... and {stats.tests_omitted} more tests that shortened reports do not list")
    return out


def render_stats_text(stats: ClassStats) -> str:
    """Render the class statistics as plain text.

    Args:
        stats: the class's figures.

    Returns:
        The text, ending with a newline.
    """
    sections = [_counts(stats), _mutant_lines(stats), _histogram_lines(stats), _test_lines(stats)]
    return "\n\n".join("\n".join(lines) for lines in sections) + "\n"


def render_stats_json(stats: ClassStats) -> str:
    """Render the class statistics as indented JSON (``schema: "mutagrade.class-stats/1"``);
    ``ClassStats.model_validate_json`` reads it back into equal statistics.

    Args:
        stats: the class's figures.

    Returns:
        The JSON document, ending with a newline.
    """
    return stats.model_dump_json(indent=2, by_alias=True) + "\n"
