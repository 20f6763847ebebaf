"""The page of ``mutagrade similarity --html``: each pair side by side, the matched regions
marked, in one file that any browser opens offline.

Its style sheet is inline, it loads and runs nothing, and it tells the browser so (the same
``Content-Security-Policy`` as the report page, :mod:`grader.report.html`). Every piece of a
student's text, names included, is escaped (and control characters spelled out) before it is
written; the only markup inside a suite is ours (``<mark>`` around what the other side holds
too, a line number before each line).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from grader.core.similarity import MatchedRegion, SimilarPair, SimilarityResult, SuiteText, line_starts
from grader.report._common import percent, printable
from grader.report.html import CONTENT_SECURITY_POLICY

__all__ = ["SHOWN_PAIRS", "render_similarity_html"]

# Pairs shown side by side, the most similar first (each shows both suites whole); the index
# lists every pair. A class where more are alike is read from the table or the JSON.
SHOWN_PAIRS = 100

_STYLE = """
  body { font: 16px/1.5 system-ui, sans-serif; margin: 0; color: #1b1b1b; background: #fafafa; }
  main { padding: 1rem 1.2rem; }
  h1 { font-size: 1.5rem; margin: .5rem 0; }
  h2 { font-size: 1.2rem; margin-top: 2rem; border-top: 1px solid #c9c9c9; padding-top: 1rem; }
  table { border-collapse: collapse; margin: .5rem 0; }
  th, td { border: 1px solid #c9c9c9; padding: .25rem .45rem; text-align: left; }
  td.n { text-align: right; }
  .sides { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
  .side { min-width: 0; }
  .side h3 { font-size: 1rem; margin: .3rem 0; }
  pre { font: .8rem/1.35 ui-monospace, monospace; background: #fff; border: 1px solid #c9c9c9;
        padding: .4rem; overflow-x: auto; margin: 0; }
  pre .ln { color: #8a8a8a; user-select: none; }
  pre .file { color: #0b4f8a; font-weight: 700; }
  mark { background: #ffd27a; color: inherit; }
  ul.skipped li { color: #8a1c13; }
"""


def _e(value: object) -> str:
    """Student text as HTML text or an attribute's value: control characters spelled out,
    ``< > & " '`` escaped."""
    return escape(printable(str(value)), quote=True)


def render_similarity_html(result: SimilarityResult, suites: Sequence[SuiteText]) -> str:
    """Render ``result`` as a standalone page, each pair's suites side by side.

    Args:
        result: the pairs of :func:`grader.flows.similarity.compare_suites`.
        suites: the texts compared (those of students in no pair are not shown).

    Returns:
        The page, ending with a newline.
    """
    texts = {s.student: s for s in suites}
    count = len(result.pairs)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>mutagrade: similar test suites</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        "<main>",
        "<h1>Similar test suites</h1>",
        f"<p>{len(result.students)} students compared; {count} pair{'' if count == 1 else 's'} at or above "
        f"{_e(percent(result.threshold))} similarity. What the course hands out (its tests) is never counted "
        "as matched; marked code is found in the other suite too.</p>",
    ]
    out += _index(result.pairs) if result.pairs else ["<p>No pair is that similar.</p>"]
    if result.skipped:
        out.append("<h2>Not compared</h2>")
        out.append('<ul class="skipped">' + "".join(
            f"<li>{_e(s.student)}: {_e(s.reason)}</li>" for s in result.skipped) + "</ul>")
    for number, pair in enumerate(result.pairs[:SHOWN_PAIRS], 1):
        out += _pair(number, pair, texts)
    if count > SHOWN_PAIRS:
        out.append(f"<p>The {count - SHOWN_PAIRS} less similar pairs are listed above, not shown side by side.</p>")
    out += ["</main>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def _index(pairs: list[SimilarPair]) -> list[str]:
    rows = "".join(
        f'<tr><td class="n">{_anchor(n)}</td><td class="n">{_e(percent(p.similarity))}</td>'
        f"<td>{_e(p.a)}</td><td>{_e(p.b)}</td><td class=\"n\">{_e(percent(p.similarity_a))}</td>"
        f'<td class="n">{_e(percent(p.similarity_b))}</td><td class="n">{p.overlap}</td></tr>'
        for n, p in enumerate(pairs, 1)
    )
    return ["<table>", "<tr><th>#</th><th>similar</th><th>a</th><th>b</th><th>a in b</th><th>b in a</th>"
            "<th>tokens</th></tr>", rows, "</table>"]


def _anchor(number: int) -> str:
    return f'<a href="#pair-{number}">{number}</a>' if number <= SHOWN_PAIRS else str(number)


def _pair(number: int, pair: SimilarPair, texts: dict[str, SuiteText]) -> list[str]:
    return [
        f'<h2 id="pair-{number}">{number}. {_e(pair.a)} and {_e(pair.b)}: {_e(percent(pair.similarity))}</h2>',
        f"<p>{_e(percent(pair.similarity_a))} of {_e(pair.a)}'s suite is found in {_e(pair.b)}'s, "
        f"{_e(percent(pair.similarity_b))} of {_e(pair.b)}'s in {_e(pair.a)}'s; {pair.overlap} tokens matched.</p>",
        '<div class="sides">',
        _side(pair.a, pair.regions_a, texts.get(pair.a)),
        _side(pair.b, pair.regions_b, texts.get(pair.b)),
        "</div>",
    ]


def _side(student: str, regions: list[MatchedRegion], suite: SuiteText | None) -> str:
    if suite is None:
        return f'<div class="side"><h3>{_e(student)}</h3><p>(its text is not at hand)</p></div>'
    return f'<div class="side"><h3>{_e(student)}</h3><pre>{_marked(suite, regions)}</pre></div>'


def _marked(suite: SuiteText, regions: list[MatchedRegion]) -> str:
    """The suite's text, line by line, each line numbered as in its file, the regions marked
    (a mark is closed at each line's end and opened again on the next, so that the markup
    stays nested)."""
    text = suite.text
    starts = line_starts(text)
    headers = {f.line for f in suite.files}
    spans = sorted((r.start, r.end) for r in regions)
    width = len(str(len(starts)))
    out: list[str] = []
    at = 0  # the first span that may still reach the line
    for number, begin in enumerate(starts, 1):
        end = starts[number] - 1 if number < len(starts) else len(text)
        if begin == end == len(text) and number > 1:
            break  # the empty line after the last newline
        if number in headers:
            out.append(f'<span class="file">{_e(text[begin:end])}</span>\n')
            continue
        _, line = suite.file_at(number)
        while at < len(spans) and spans[at][1] <= begin:
            at += 1
        pieces, cursor = [], begin
        for start, stop in spans[at:]:
            if start >= end:
                break
            start, stop = max(start, begin), min(stop, end)
            pieces.append(_e(text[cursor:start]) + f"<mark>{_e(text[start:stop])}</mark>")
            cursor = stop
        pieces.append(_e(text[cursor:end]))
        out.append(f'<span class="ln">{str(line).rjust(width)}</span> {"".join(pieces)}\n')
    return "".join(out)
