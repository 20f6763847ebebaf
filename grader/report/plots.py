"""The class statistics drawn as SVG (matplotlib): each mutant's kill rate, the scores'
histogram, the tests by validity.

Each plot is a standalone SVG document that renders offline: text drawn as paths (no font
needed where it is viewed), no script, no link to anything outside it (no DOCTYPE either), and
a ``<title>`` and ``<desc>`` that say what it shows and its figures, for a screen reader. Every
string drawn is made printable and taken as plain text (a ``$`` never starts mathtext), and
what goes into the ``<title>`` and ``<desc>`` is escaped. The figures are 12.8 inches wide:
about 1280 pixels on a page. matplotlib is imported by the functions, when a plot is drawn:
no other command pays for its import.
"""

from __future__ import annotations

import io
import re
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from grader.core.classstats import ClassStats, MutantStats
from grader.core.models import TestStatus
from grader.report._common import percent, printable

__all__ = ["kill_rate_plot", "score_histogram", "validity_plot"]

WIDTH_IN = 12.8  # inches; about 1280 px on a page
LABEL_CHARS = 56  # a mutant's label on the axis, cut beyond
RC = {"svg.fonttype": "path", "svg.hashsalt": "mutagrade", "font.size": 11.0, "axes.titlesize": 13.0}
COLOURS = {"required": "#b2182b", "hidden": "#5e3c99", "other": "#2166ac"}
STATUS_COLOURS = {
    TestStatus.VALID: "#1a9850",
    TestStatus.WRONG: "#d73027",
    TestStatus.FLAKY: "#fc8d59",
    TestStatus.BRITTLE: "#fee08b",
    TestStatus.COPIED: "#91bfdb",
}
_NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}
_DOCTYPE = re.compile(r"<!DOCTYPE[^>]*>\s*")
_SVG_OPEN = re.compile(r"<svg\b[^>]*>")


def _plain(text: str) -> str:
    """``text`` as matplotlib should draw it: printable, one line, each ``$`` a dollar sign."""
    return printable(text).replace("\n", " ").replace("$", r"\$")


def _figure(height_in: float) -> Any:
    """A figure drawn by the Agg canvas (no GUI backend is ever chosen) and laid out by matplotlib."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_IN, height_in), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _svg(figure: Any, *, name: str, title: str, desc: str) -> str:
    """The figure as an SVG document, with a ``<title>`` and ``<desc>`` first in it."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata=_NO_METADATA)
    text = _DOCTYPE.sub("", buffer.getvalue(), count=1)
    opening = _SVG_OPEN.search(text)
    if opening is None:  # matplotlib always writes one; say so plainly if that ever changes
        raise RuntimeError("matplotlib wrote no <svg> element")
    labelled = (opening.group()[:-1] + f' role="img" aria-labelledby={quoteattr(f"{name}-title {name}-desc")}>')
    head = (f'\n <title id="{name}-title">{escape(printable(title))}</title>'
            f'\n <desc id="{name}-desc">{escape(printable(desc))}</desc>')
    return text[: opening.start()] + labelled + head + text[opening.end():]


def _label(mutant: MutantStats) -> str:
    words = f"{mutant.id}: {mutant.title}" if mutant.title and mutant.title != mutant.id else mutant.id
    words = words if len(words) <= LABEL_CHARS else words[: LABEL_CHARS - 1] + "\u2026"
    return _plain(words)


def _kind(mutant: MutantStats) -> str:
    return "required" if mutant.required else "hidden" if mutant.hidden else "other"


def kill_rate_plot(stats: ClassStats) -> str:
    """Each mutant's kill rate across the class, one horizontal bar each, the most missed on top.

    Args:
        stats: the class's figures.

    Returns:
        The SVG document; bar ``n`` (a ``<g id="kill-rate-bar-n">``) is ``stats.mutants[n]``'s.
    """
    from matplotlib import rc_context
    from matplotlib.patches import Patch
    from matplotlib.ticker import PercentFormatter

    mutants = stats.mutants
    with rc_context(RC):
        figure = _figure(max(3.0, 0.38 * len(mutants) + 1.6))
        axes = figure.add_subplot()
        rows = list(range(len(mutants)))
        bars = axes.barh(rows, [m.kill_rate for m in mutants], height=0.7,
                         color=[COLOURS[_kind(m)] for m in mutants])
        for index, (bar, mutant) in enumerate(zip(bars.patches, mutants)):
            bar.set_gid(f"kill-rate-bar-{index}")
            axes.text(mutant.kill_rate + 0.01, index, f"{percent(mutant.kill_rate)} ({mutant.killed}/{mutant.suites})",
                      va="center", fontsize=10, parse_math=False)
        axes.set_yticks(rows, labels=[_label(m) for m in mutants])
        axes.set_ylim(max(len(mutants), 1) - 0.5, -0.5)  # the first (the most missed) on top
        axes.set_xlim(0, 1.15)
        axes.set_xticks([n / 10 for n in range(11)])
        axes.xaxis.set_major_formatter(PercentFormatter(1.0))
        axes.set_xlabel(f"share of the {stats.graded} graded suites that kill the mutant")
        axes.set_title("Kill rate of each mutant across the class, the most missed first")
        axes.grid(axis="x", alpha=0.3)
        kinds = [k for k in COLOURS if any(_kind(m) == k for m in mutants)]
        if kinds:
            axes.legend(handles=[Patch(color=COLOURS[k], label=k) for k in kinds], loc="lower right")
        desc = "; ".join(f"{m.id} ({m.title}): killed by {m.killed} of {m.suites}, {percent(m.kill_rate)}"
                         for m in mutants) or "no mutant in the reports"
        return _svg(figure, name="kill-rates", desc=desc,
                    title=f"Kill rate of each of {len(mutants)} mutants across {stats.graded} graded suites, "
                          "the most missed first")


def score_histogram(stats: ClassStats) -> str:
    """How many suites reached each tenth of the kill rate (100% in the last bar).

    Args:
        stats: the class's figures.

    Returns:
        The SVG document.
    """
    from matplotlib import rc_context
    from matplotlib.ticker import MaxNLocator

    bins = stats.histogram
    labels = [f"{percent(b.low)}\u2013{percent(b.high)}" for b in bins]
    with rc_context(RC):
        figure = _figure(4.8)
        axes = figure.add_subplot()
        bars = axes.bar(range(len(bins)), [b.count for b in bins], width=0.85, color=COLOURS["other"])
        for index, bar in enumerate(bars.patches):
            bar.set_gid(f"score-bar-{index}")
        axes.bar_label(bars, labels=[str(b.count) if b.count else "" for b in bins], padding=2)
        axes.set_xticks(range(len(bins)), labels=labels)
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylim(0, max([b.count for b in bins] + [1]) * 1.15)
        axes.set_xlabel("kill rate of the suite")
        axes.set_ylabel("suites")
        median = "n/a" if stats.median_kill_rate is None else percent(stats.median_kill_rate)
        mean = "n/a" if stats.mean_kill_rate is None else percent(stats.mean_kill_rate)
        axes.set_title(f"Kill rates of the {stats.graded} graded suites: median {median}, mean {mean}")
        axes.grid(axis="y", alpha=0.3)
        desc = "; ".join(f"{label}: {b.count}" for label, b in zip(labels, bins))
        return _svg(figure, name="scores", desc=desc,
                    title=f"Histogram of the kill rates of {stats.graded} graded suites, in tenths; "
                          f"median {median}, mean {mean}")


def validity_plot(stats: ClassStats) -> str:
    """The class's tests by validity (valid, wrong, flaky, brittle, copied), one bar each.

    Args:
        stats: the class's figures.

    Returns:
        The SVG document.
    """
    from matplotlib import rc_context
    from matplotlib.ticker import MaxNLocator

    statuses = list(TestStatus)
    counts = [stats.tests.get(status, 0) for status in statuses]
    with rc_context(RC):
        figure = _figure(3.6)
        axes = figure.add_subplot()
        bars = axes.barh(range(len(statuses)), counts, height=0.7,
                         color=[STATUS_COLOURS.get(s, COLOURS["other"]) for s in statuses])
        for index, bar in enumerate(bars.patches):
            bar.set_gid(f"validity-bar-{index}")
        axes.bar_label(bars, labels=[str(c) for c in counts], padding=3)
        axes.set_yticks(range(len(statuses)), labels=[s.value for s in statuses])
        axes.set_ylim(len(statuses) - 0.5, -0.5)
        axes.set_xlim(0, max(counts + [1]) * 1.12)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlabel("tests, over every graded suite")
        total = sum(counts)
        axes.set_title(f"The class's {total} tests by validity (only valid tests kill)")
        axes.grid(axis="x", alpha=0.3)
        desc = "; ".join(f"{s.value}: {c}" for s, c in zip(statuses, counts))
        return _svg(figure, name="validity", desc=desc,
                    title=f"The {total} tests of {stats.graded} graded suites by validity")
