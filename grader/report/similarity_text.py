"""The plain-text table of ``mutagrade similarity``: one line per pair, most similar first, then
the students that were not compared and why. Plain ASCII, student names with their control
characters spelled out, so that it reads the same in any terminal or log."""

from __future__ import annotations

from grader.core.similarity import MatchedRegion, SimilarityResult
from grader.report._common import percent, printable

__all__ = ["render_similarity_text"]

_NAME_WIDTH = 24  # a longer name is cut, with "..."
_REGIONS_SHOWN = 3
_HEADERS = ("similar", "a", "b", "a in b", "b in a", "tokens", "matched in a")


def _name(student: str) -> str:
    shown = printable(student)
    return shown if len(shown) <= _NAME_WIDTH else shown[: _NAME_WIDTH - 3] + "..."


def _where(regions: list[MatchedRegion]) -> str:
    """``test_cell.py:12-30, test_cell.py:41-44 (+2)``: the first regions, where they are."""
    shown = [f"{printable(r.file) or '?'}:{r.first_line}-{r.last_line}" for r in regions[:_REGIONS_SHOWN]]
    rest = len(regions) - _REGIONS_SHOWN
    return ", ".join(shown) + (f" (+{rest})" if rest > 0 else "")


def render_similarity_text(result: SimilarityResult) -> str:
    """Render ``result`` as a table.

    Args:
        result: the pairs of :func:`grader.flows.similarity.compare_suites`.

    Returns:
        The text, ending with a newline.
    """
    count = len(result.pairs)
    lines = [
        f"Similar test suites: {len(result.students)} students compared, {count} pair"
        f"{'' if count == 1 else 's'} at or above {percent(result.threshold)} "
        "(the course's tests not counted)",
        "",
    ]
    rows = [
        [percent(p.similarity), _name(p.a), _name(p.b), percent(p.similarity_a), percent(p.similarity_b),
         str(p.overlap), _where(p.regions_a)]
        for p in result.pairs
    ]
    if rows:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_HEADERS)]
        right = {0, 3, 4, 5}  # figures line up on the right

        def line(cells: list[str] | tuple[str, ...]) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

        lines.append(line(_HEADERS))
        lines.append(line(["-" * w for w in widths]))
        lines += [line(row) for row in rows]
    else:
        lines.append("No pair is that similar.")
    if result.skipped:
        lines += ["", f"Not compared ({len(result.skipped)} skipped):"]
        lines += [f"  {_name(s.student)}: skipped: {printable(s.reason)}" for s in result.skipped]
    return "\n".join(lines) + "\n"
