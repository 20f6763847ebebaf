"""A standalone HTML page (``mutagrade grade --format html``): one file a student opens in any
browser, offline.

The same sections, colours and symbols as the service's report page (``api/web/templates/``), with
nothing outside the file: its style sheet is inline, it loads and runs nothing, and it says so to
the browser (a ``Content-Security-Policy`` forbidding every script and resource). Test ids,
messages and file names come from students: every piece of text is escaped (and control
characters spelled out) before it is written, attributes included.
"""

from __future__ import annotations

from html import escape

from grader.core.caps import cap_lines
from grader.core.models import Outcome, Report, TestStatus, TestVerdict
from grader.report._common import (
    invalid_tests,
    kills_needed,
    more,
    mutant_columns,
    mutant_name,
    no_mutants,
    no_tests,
    percent,
    printable,
    similar_tests,
    surviving,
    verdict_word,
)

__all__ = ["render_html"]

CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_STYLE = """
  body { font: 16px/1.5 system-ui, sans-serif; margin: 0; color: #1b1b1b; background: #fafafa; }
  main { padding: 1rem 1.2rem; max-width: 80rem; }
  h1 { font-size: 1.5rem; margin: .5rem 0; }
  h2 { font-size: 1.2rem; margin-top: 1.6rem; }
  .verdict { font-size: 1.3rem; font-weight: 700; padding: .5rem .8rem; border-radius: .3rem; display: inline-block; }
  .passed { background: #d7f5dd; color: #0b5d1e; border: 2px solid #0b5d1e; }
  .failed { background: #fde2e1; color: #8a1c13; border: 2px solid #8a1c13; }
  table { border-collapse: collapse; margin: .5rem 0; }
  th, td { border: 1px solid #c9c9c9; padding: .25rem .45rem; text-align: center; }
  th.test, td.test { text-align: left; font-family: ui-monospace, monospace; font-size: .9rem; }
  table.grid td.cell { width: 2.4rem; font-weight: 700; }
  table.grid td.test { overflow-wrap: anywhere; min-width: 18rem; }
  td.ok { background: #d7f5dd; color: #0b5d1e; }
  td.bad { background: #f6b1ab; color: #6d0f08; }
  td.kill { background: #2e7d32; color: #fff; }
  td.miss { background: #eeeeee; color: #555; }
  tr.invalid td.test { text-decoration: line-through; color: #8a1c13; }
  th.mutant.survived { background: #ffe08a; }
  .legend span { display: inline-block; padding: 0 .4rem; margin-right: .6rem; border: 1px solid #c9c9c9; }
  ul.problems li { color: #8a1c13; }
  code, pre { font-family: ui-monospace, monospace; }
  pre.reason { white-space: pre-wrap; overflow-wrap: anywhere; margin: .2rem 0 .6rem 0; color: #1b1b1b; }
  .hint { margin: .3rem 0 .8rem 0; }
"""
_LEGEND = (
    '<p class="legend"><span class="ok">✓</span>passes on a correct implementation '
    '<span class="bad">✗</span>fails on a correct implementation (the test is not valid) '
    '<span class="kill">✗</span>catches the mutant <span class="miss">·</span>the mutant passes '
    "<span>–</span>not run (already decided)</p>"
)
_PASSES = (Outcome.PASSED, Outcome.SKIPPED)


def _e(value: object) -> str:
    """Student text as HTML text or an attribute's value: control characters spelled out,
    ``< > & " '`` escaped."""
    return escape(printable(str(value)), quote=True)


def render_html(report: Report) -> str:
    """Render the report as a standalone HTML page.

    Args:
        report: the graded suite.

    Returns:
        The page, ending with a newline.
    """
    word = verdict_word(report)
    out = [
        "<!doctype html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>mutagrade: {word} · {_e(report.submission)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        "<main>",
        f"<h1>mutagrade report <small>for {_e(report.submission)} (audience: {_e(report.audience)})</small></h1>",
        f'<p class="verdict {"passed" if report.passed else "failed"}">{word}</p>',
    ]
    if report.reasons:
        out.append(_list([str(r) for r in report.reasons]))
    out += _score(report)
    out += _matrix(report)
    out += _survivors(report)
    out += _invalid(report)
    out += _similarity(report)
    out += _checks(report)
    out += ["</main>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def _list(items: list[str], omitted: int = 0, *, code: bool = False) -> str:
    shown = [f"<code>{_e(i)}</code>" if code else _e(i) for i in items] + [_e(m) for m in more(omitted)]
    return '<ul class="problems">' + "".join(f"<li>{i}</li>" for i in shown) + "</ul>"


def _score(report: Report) -> list[str]:
    s = report.score
    required = _e(", ".join(s.required) or "none")
    missing = f"; <strong>not killed: {_e(', '.join(s.required_missing))}</strong>" if s.required_missing else ""
    valid = sum(t.valid for t in report.tests)
    return [
        "<h2>Score</h2>",
        f"<p><strong>{percent(s.kill_rate)}</strong> of mutants killed ({s.killed} of {s.total}); the threshold is "
        f"{percent(s.threshold)} (at least {kills_needed(s)} of {s.total}). Required: {required}{missing}. "
        f"Tests: {valid} of {len(report.tests)} valid.</p>",
    ]


def _cell(test: TestVerdict, variant: str, mutants: set[str]) -> str:
    outcome = test.outcomes.get(variant)
    if outcome is None or outcome is Outcome.NOT_RUN:
        return f'<td class="cell" title="{_e(variant)}: not run (already decided)">–</td>'
    passed = outcome in _PASSES
    if variant in mutants:
        kind, symbol = ("miss", "·") if passed else ("kill", "✗")
    else:
        kind, symbol = ("ok", "✓") if passed else ("bad", "✗")
    return f'<td class="cell {kind}" title="{_e(variant)}: {outcome.value}">{symbol}</td>'


def _matrix(report: Report) -> list[str]:
    if not report.tests:
        return ["<h2>Kill matrix</h2>", f"<p>{_e(no_tests(report).capitalize())}.</p>"]
    mutants = mutant_columns(report)
    killed = {m.id: m for m in report.mutants}
    header = []
    for v in report.variants:
        m = killed.get(v)
        kind = ("mutant survived" if not m.killed else "mutant") if m else ""
        title = m.title if m else "correct implementation"
        header.append(f'<th scope="col" class="{kind}" title="{_e(title)}">{_e(v)}</th>')
    rows = []
    for t in report.tests:
        cells = "".join(_cell(t, v, mutants) for v in report.variants)
        rows.append(f'<tr class="{"" if t.valid else "invalid"}"><td class="test">{_e(t.id)}</td>'
                    f"<td>{_e(t.status.value)}</td>{cells}</tr>")
    footer = "".join(
        f"<td>{('yes' if killed[v].killed else 'no') if v in killed else ''}</td>" for v in report.variants
    )
    lines = [
        "<h2>Kill matrix</h2>",
        _LEGEND,
        '<table class="grid" id="matrix">',
        "<caption>Rows: your tests. Columns: the reference and correct implementations, then the mutants. "
        "Last row: did any valid test kill the mutant?</caption>",
        '<thead><tr><th scope="col" class="test">test</th><th scope="col">status</th>' + "".join(header) + "</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody>",
        f'<tfoot><tr><th scope="row" class="test">killed?</th><td></td>{footer}</tr></tfoot>',
        "</table>",
    ]
    lines += [f"<p>{_e(m)} tests, not listed.</p>" for m in more(report.tests_omitted)]
    return lines


def _survivors(report: Report) -> list[str]:
    lines = ["<h2>Surviving mutants</h2>"]
    if not report.mutants:
        return lines + [f"<p>{_e(no_mutants(report).capitalize())}.</p>"]
    survivors = surviving(report)
    if not survivors:
        return lines + [f"<p>None: all {len(report.mutants)} were killed.</p>"]
    for m in survivors:
        tags = [tag for tag, on in (("required", m.required), ("hidden", m.hidden)) if on]
        lines.append(f"<h3>{_e(mutant_name(m))}{' (' + ', '.join(tags) + ')' if tags else ''}</h3>")
        if m.hint:
            lines.append(f'<p class="hint">{_e(m.hint)}</p>')
    return lines


def _invalid(report: Report) -> list[str]:
    invalid = invalid_tests(report)
    if not invalid:
        return []
    items = [
        f"<li><code>{_e(t.id)}</code> ({_e(t.status.value)})"
        + (f'<pre class="reason">{_e(t.reason)}</pre>' if t.reason else "") + "</li>"
        for t in invalid
    ]
    return ["<h2>Tests that do not count</h2>", '<ul class="problems">', *items, "</ul>"]


def _similarity(report: Report) -> list[str]:
    compared = similar_tests(report)
    if not compared:
        return []
    rows = [
        f'<tr class="{"invalid" if t.status is TestStatus.COPIED else ""}">'
        f'<td class="test">{_e(t.id)}</td><td>{t.similarity:.2f}</td><td class="test">{_e(t.similar_to)}</td></tr>'
        for t in compared
    ]
    return [
        "<h2>Similarity to the course tests</h2>",
        '<table id="similarity">',
        "<caption>Each test and the course test it is most like (1.00: the same test, names and "
        "formatting aside); a copy counts for nothing.</caption>",
        '<thead><tr><th scope="col" class="test">test</th><th scope="col">similarity</th>'
        '<th scope="col" class="test">closest course test</th></tr></thead>',
        "<tbody>", *rows, "</tbody>", "</table>",
    ]


def _checks(report: Report) -> list[str]:
    lines = ["<h2>Policy</h2>"]
    policy = report.policy
    if not policy.checked:
        lines.append("<p>Not checked.</p>")
    elif policy.ok and not policy.violations:
        lines.append("<p>Ok.</p>")
    else:
        lines.append(_list(policy.violations, policy.violations_omitted, code=True))
    lines.append("<h2>Journal</h2>")
    journal = report.journal
    if not journal.checked:
        lines.append("<p>Not checked.</p>")
    else:
        state = "Verified" if journal.ok else "Does not verify"
        lines.append(f"<p>{state}: {journal.entries} entries, replayed in {journal.replay_s:.1f} s.</p>")
        if journal.problems or journal.problems_omitted:
            lines.append(_list(journal.problems, journal.problems_omitted))
    impl = report.implementation
    if impl.checked:
        passed = sum(t.outcome is Outcome.PASSED for t in impl.tests)
        lines.append(f"<h2>Implementation {_e(impl.implementation)}</h2>")
        lines.append(f"<p>{'Ok' if impl.ok else 'Fails'}: {passed} of {len(impl.tests)} course tests pass.</p>")
        failing = [
            f"<li><code>{_e(t.id)}</code>: {_e(t.outcome.value)}"
            + (f'<pre class="reason">{_e(chr(10).join(cap_lines(t.message)))}</pre>' if t.message.strip() else "")
            + "</li>"
            for t in impl.tests if t.outcome is not Outcome.PASSED
        ]
        if failing or impl.problems:
            lines += ['<ul class="problems">', *failing, *(f"<li>{_e(p)}</li>" for p in impl.problems), "</ul>"]
    if report.problems:
        lines += ["<h2>Problems while running</h2>", _list([str(p) for p in report.problems], report.problems_omitted)]
    t = report.timing
    lines.append(
        f"<p>Timing: {t.total_s:.1f} s in total"
        + (f" ({t.journal_s:.1f} s replaying the journal)" if t.journal_s else "")
        + f", {t.runs} suite runs, {t.tests_s:.1f} s inside the tests, "
        f"{t.cpu_s:.1f} CPU s.</p>"
    )
    return lines
