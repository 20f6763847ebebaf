"""A GitHub Actions job summary (Markdown for ``$GITHUB_STEP_SUMMARY``).

A heading with ✅ or ❌, the reasons, a score table, the kill matrix as a table with a legend,
the surviving mutants with their hints, the invalid tests and the problems. Test ids, hints and
messages come from students and from tracebacks, so every piece of text is escaped: in a table
a stray ``|`` would split a cell and shift every column after it.
"""

from __future__ import annotations

import os
import re

from grader.core.models import Outcome, Report
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
    surviving,
    verdict_word,
)

__all__ = ["SYMBOLS", "append_job_summary", "render_github"]

NOT_RUN_SYMBOL = "·"  # a cell not run: already decided, or never reached
SYMBOLS: dict[Outcome, str] = {
    Outcome.PASSED: "✔",
    Outcome.FAILED: "✖",
    Outcome.ERROR: "!",
    Outcome.TIMEOUT: "⏱",
    Outcome.MISSING: "?",
    Outcome.SKIPPED: "↷",
    Outcome.NOT_RUN: NOT_RUN_SYMBOL,
}
NOT_RUN = NOT_RUN_SYMBOL
_LEGEND = (
    "✔ passed · ✖ failed · ⏱ time-out · ! error in set-up or tear-down · ? no result (the run "
    "died) · ↷ skipped · `·` not run. On a mutant column, ✖ ⏱ ! ? mean the test caught the "
    "mutant; only valid tests count. Last row: did any valid test kill this mutant?"
)
# Characters Markdown would read as formatting, as HTML or as an entity, escaped in plain text.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>&|#~])")
_BACKTICKS = re.compile(r"`+")


def _flat(value: str) -> str:
    """One line, control characters spelled out: a newline would end a table row."""
    return " ".join(printable(value).split())


def _text(value: str) -> str:
    """Plain text, safe in a paragraph, a list item or a table cell."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _flat(value))


def _code(value: str) -> str:
    """Inline code; ``|`` still needs its backslash inside a table (GFM splits cells first).

    The fence is one backtick longer than the longest run of them inside: a run as long as the
    fence would close the span early and let the rest be read as Markdown and HTML.
    """
    value = _flat(value).replace("|", "\\|")
    longest = max((len(run) for run in _BACKTICKS.findall(value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest else ""  # a backtick next to the fence would lengthen it
    return f"{fence}{pad}{value}{pad}{fence}"


# What would start a block at the start of a line inside a paragraph: a list item, a setext
# heading's underline (the other block starts are escaped everywhere, by _MARKDOWN_SPECIAL).
_BLOCK_START = re.compile(r"^(?:[-+=]|\d+[.)])")


def _lines(value: str) -> str:
    """Text of several lines (a reason quoting a failure's message) in one paragraph: each line
    its own (a hard line break ends each but the last), none starting a block of its own."""
    lines = [_text(line) for line in value.splitlines() if line.strip()]
    lines = [lines[0], *(_BLOCK_START.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1], line) for line in lines[1:])]
    return "\\\n  ".join(lines)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_github(report: Report) -> str:
    """Render the report as a GitHub job summary.

    Args:
        report: the graded suite.

    Returns:
        The Markdown, ending with a newline.
    """
    icon = "✅" if report.passed else "❌"
    out = [f"## {icon} mutagrade: {verdict_word(report)} — {_code(report.submission)}", ""]
    if report.reasons:
        out += [f"- {_text(str(r))}" for r in report.reasons] + [""]
    out += _score_table(report)
    out += _matrix(report)
    out += _survivors(report)
    out += _invalid(report)
    out += _problems(report)
    return "\n".join(out).rstrip("\n") + "\n"


def _score_table(report: Report) -> list[str]:
    s = report.score
    required = ", ".join(s.required) or "none"
    missing = ", ".join(s.required_missing) or "none"
    valid = sum(t.valid for t in report.tests)
    t = report.timing
    rows = [
        ["Kill rate", f"**{percent(s.kill_rate)}** ({s.killed}/{s.total})"],
        ["Threshold", f"{percent(s.threshold)} (at least {kills_needed(s)}/{s.total})"],
        ["Required mutants", _text(required)],
        ["Required, not killed", _text(missing)],
        ["Valid tests", f"{valid} of {len(report.tests)}"],
        ["Policy", _check_word(report.policy.checked, report.policy.ok)],
        ["Journal", _check_word(report.journal.checked, report.journal.ok)],
        ["Time", f"{t.total_s:.1f} s, {t.runs} suite runs, {t.tests_s:.1f} s in tests"
                 + (f", {t.journal_s:.1f} s replaying the journal" if t.journal_s else "")],
    ]
    return [_row(["", ""]), _row(["---", "---"]), *(_row(r) for r in rows), ""]


def _check_word(checked: bool, ok: bool) -> str:
    if not checked:
        return "not checked"
    return "ok" if ok else "❌ failed"


def _matrix(report: Report) -> list[str]:
    if not report.tests:
        return ["### Kill matrix", "", f"{no_tests(report).capitalize()}.", ""]
    mutants = mutant_columns(report)
    header = ["Test", "Status", *(_text(v) for v in report.variants)]
    lines = [
        "### Kill matrix",
        "",
        _row(header),
        _row(["---", "---", *(":-:" for _ in report.variants)]),
    ]
    for t in report.tests:
        status = t.status.value if t.valid else f"**{t.status.value}**"
        symbols = [SYMBOLS[t.outcomes[v]] if v in t.outcomes else NOT_RUN for v in report.variants]
        lines.append(_row([_code(t.id), status, *symbols]))
    killed = {m.id: m.killed for m in report.mutants}
    footer = [("✅" if killed[v] else "❌") if v in mutants else "" for v in report.variants]
    lines.append(_row(["**killed?**", "", *footer]))
    lines += [f"\n{m} tests, not listed" for m in more(report.tests_omitted)]
    return lines + ["", _LEGEND, ""]


def _survivors(report: Report) -> list[str]:
    survivors = surviving(report)
    if not report.mutants and report.score.total:
        return ["### Mutants", "", f"{no_mutants(report).capitalize()}.", ""]
    if not survivors:
        return []
    lines = [f"### Surviving mutants ({len(survivors)})", ""]
    for m in survivors:
        tags = " (required)" if m.required else ""
        # A trailing backslash is CommonMark's hard line break: the hint gets a line of its own.
        lines.append(f"- **{_text(mutant_name(m))}**{tags}" + ("\\" if m.hint else ""))
        if m.hint:
            lines.append(f"  Hint: {_text(m.hint)}")
    return lines + [""]


def _invalid(report: Report) -> list[str]:
    invalid = invalid_tests(report)
    if not invalid:
        return []
    lines = [f"### Invalid tests ({len(invalid)})", ""]
    for t in invalid:
        reason = f": {_lines(t.reason)}" if t.reason.strip() else ""
        lines.append(f"- {_code(t.id)} — **{t.status.value}**{reason}")
    return lines + [""]


def _problems(report: Report) -> list[str]:
    lines: list[str] = []
    sections = (
        ("Policy violations", report.policy.violations, report.policy.violations_omitted),
        ("Journal problems", report.journal.problems, report.journal.problems_omitted),
        ("Problems while running", [str(p) for p in report.problems], report.problems_omitted),
    )
    for title, items, omitted in sections:
        if items or omitted:
            lines += [f"### {title}", "", *(f"- {_text(i)}" for i in [*items, *more(omitted)]), ""]
    return lines


def append_job_summary(report: Report) -> bool:
    """On GitHub Actions (``$GITHUB_STEP_SUMMARY`` set): append the Markdown report to the job
    summary; returns whether it did."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return False
    with open(summary, "a", encoding="utf-8") as handle:
        handle.write(render_github(report) + "\n")
    return True
