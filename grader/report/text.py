"""The plain-text report, written for a student reading it at 2 a.m.: the verdict comes first.

Order: verdict and reasons, score, kill matrix (with its legend and each test's status), the
mutants that survived with their hints, invalid tests with why, each test's similarity to the
course tests (staff's report; a student's shows its copies only), then policy, journal, run
problems and timing. Plain ASCII symbols, so it reads the same in any terminal or log.
"""

from __future__ import annotations

from grader.core.caps import cap_lines
from grader.core.models import (
    ImplementationCheck,
    JournalSummary,
    Outcome,
    PolicySummary,
    Report,
    TestStatus,
    TestVerdict,
)
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

__all__ = ["SYMBOLS", "implementation_lines", "journal_lines", "policy_lines", "render_text"]

LINE_WIDTH = 100
NOT_RUN_SYMBOL = "-"  # a cell not run: already decided, or never reached
SYMBOLS: dict[Outcome, str] = {
    Outcome.PASSED: ".",
    Outcome.FAILED: "F",
    Outcome.ERROR: "E",
    Outcome.TIMEOUT: "T",
    Outcome.MISSING: "?",
    Outcome.SKIPPED: "s",
    Outcome.NOT_RUN: NOT_RUN_SYMBOL,
}
NOT_RUN = NOT_RUN_SYMBOL
_LEGEND = (
    "Legend: . passed   F failed   E error in set-up/tear-down   T time-out   ? no result (died)",
    "        s skipped   - not run.  On a mutant column anything but . and s means the test caught",
    "        it -- but only valid tests count.  Last row: did any valid test kill this mutant?",
)
_STATUS_WIDTH = max(len(s.value) for s in TestStatus)
_MIN_CELL = 3  # wide enough for the "yes"/"NO" of the last row
_MIN_LABEL = 16  # below this a test label says nothing; let the line run long instead


def render_text(report: Report) -> str:
    """Render the report as plain text.

    Args:
        report: the graded suite.

    Returns:
        The text, ending with a newline.
    """
    out: list[str] = []
    out.append(f"mutagrade report for {report.submission} (audience: {report.audience})")
    out.append("")
    out.append(f"VERDICT: {verdict_word(report)}")
    out.extend(f"  - {reason}" for reason in report.reasons)
    out.append("")
    out.extend(_score_lines(report))
    out.append("")
    out.extend(_matrix_lines(report))
    out.extend(_survivor_lines(report))
    out.extend(_invalid_lines(report))
    out.extend(_similarity_lines(report))
    out.extend(_checks_lines(report))
    t = report.timing
    out.append(
        f"Timing: {t.total_s:.1f} s in total"
        + (f" ({t.journal_s:.1f} s replaying the journal)" if t.journal_s else "")
        + f", {t.runs} suite runs, "
        f"{t.tests_s:.1f} s inside the tests, {t.cpu_s:.1f} CPU s"
        + (f"; {t.not_run} cells not run (already decided: see '-')" if t.not_run else "")
    )
    # Student test ids and crash messages may carry terminal escapes; show them, do not obey them.
    return printable("\n".join(out) + "\n")


def _score_lines(report: Report) -> list[str]:
    s = report.score
    lines = [
        f"Score: {percent(s.kill_rate)} of mutants killed ({s.killed}/{s.total}); "
        f"threshold {percent(s.threshold)} (at least {kills_needed(s)}/{s.total})"
    ]
    if not s.required:
        lines.append("Required mutants: none")
    elif s.required_missing:
        missing = ", ".join(s.required_missing)
        lines.append(f"Required mutants: {', '.join(s.required)} -- NOT KILLED: {missing}")
    else:
        lines.append(f"Required mutants: {', '.join(s.required)} -- all killed")
    valid = sum(t.valid for t in report.tests)
    lines.append(f"Tests: {valid} of {len(report.tests)} valid")
    return lines


# ------------------------------------------------------------------------ the matrix
def _column_labels(variants: list[str]) -> list[str]:
    """Short column labels: ids of up to 5 characters stay, longer ones are abbreviated.

    ``reference`` -> ``ref``, ``hidden mutant 3`` -> ``hm3``; a clash or a label still too
    long falls back to ``c<n>``. The key under the matrix spells out every abbreviation.
    """
    labels: list[str] = []
    for n, variant in enumerate(variants, start=1):
        if len(variant) <= 5:
            labels.append(variant)
            continue
        words = variant.split()
        label = (
            "".join(w if w.isdigit() else w[0] for w in words) if len(words) > 1 else variant[:3]
        )
        if len(label) > 5 or label in labels or label in variants:
            label = f"c{n}"
        labels.append(label)
    return labels


def _row_labels(tests: list[TestVerdict], width: int) -> tuple[list[str], bool]:
    """Test labels that fit ``width``; numbered and shortened (with a key) when ids do not fit."""
    ids = [t.id for t in tests]
    if all(len(i) <= width for i in ids):
        return ids, False
    digits = len(str(len(ids)))
    room = max(width, _MIN_LABEL) - digits - 1
    labels = []
    for n, test_id in enumerate(ids, start=1):
        short = test_id.rsplit("::", 1)[-1]  # the file is in the key; the name is what you know
        if len(short) > room:
            short = short[: room - 3] + "..."
        labels.append(f"{n:>{digits}} {short}")
    return labels, True


def _matrix_lines(report: Report) -> list[str]:
    if not report.tests:
        return [f"Kill matrix: {no_tests(report)}.", ""]
    mutants = mutant_columns(report)
    labels = _column_labels(report.variants)
    widths = [max(_MIN_CELL, len(label)) for label in labels]
    # A bar wherever the columns change between correct implementations and mutants.
    bars = [
        i > 0 and ((report.variants[i - 1] in mutants) != (v in mutants))
        for i, v in enumerate(report.variants)
    ]

    def cells(values: list[str]) -> str:
        parts = []
        for value, width, bar in zip(values, widths, bars, strict=True):
            parts.append(("| " if bar else "") + value.center(width))
        return " ".join(parts)

    grid_width = len(cells(labels))
    room = LINE_WIDTH - grid_width - _STATUS_WIDTH - 4
    row_labels, keyed = _row_labels(report.tests, room)
    label_width = max(len("test"), *(len(label) for label in row_labels))

    lines = ["Kill matrix (rows: tests; columns: reference and correct variants | mutants)"]
    lines.append(f"{'test':<{label_width}}  {'status':<{_STATUS_WIDTH}}  {cells(labels)}".rstrip())
    for label, test in zip(row_labels, report.tests, strict=True):
        status = test.status.value if test.valid else test.status.value.upper()
        symbols = [
            SYMBOLS[test.outcomes[v]] if v in test.outcomes else NOT_RUN for v in report.variants
        ]
        lines.append(
            f"{label:<{label_width}}  {status:<{_STATUS_WIDTH}}  {cells(symbols)}".rstrip()
        )
    killed = {m.id: m.killed for m in report.mutants}
    footer = [("yes" if killed[v] else "NO") if v in killed else "" for v in report.variants]
    lines.append(f"{'killed?':<{label_width}}  {'':<{_STATUS_WIDTH}}  {cells(footer)}".rstrip())
    lines.extend(f"{m} tests, not listed" for m in more(report.tests_omitted))
    lines.extend(_LEGEND)

    abbreviated = [
        f"{lab} = {v}" for lab, v in zip(labels, report.variants, strict=True) if lab != v
    ]
    if abbreviated:
        lines.append("Columns: " + ", ".join(abbreviated))
    if keyed:
        lines.append("Tests:")
        digits = len(str(len(report.tests)))
        lines.extend(f"  {n:>{digits}}  {t.id}" for n, t in enumerate(report.tests, start=1))
    lines.append("")
    return lines


# ------------------------------------------------------------------- the rest, in order
def _survivor_lines(report: Report) -> list[str]:
    survivors = surviving(report)
    if not report.mutants:
        return [f"Mutants: {no_mutants(report)}.", ""]
    if not survivors:
        return [f"Surviving mutants: none -- all {len(report.mutants)} killed.", ""]
    lines = [f"Surviving mutants ({len(survivors)}): no valid test fails on these"]
    for m in survivors:
        tags = [tag for tag, on in (("REQUIRED", m.required), ("hidden", m.hidden)) if on]
        lines.append(f"  * {mutant_name(m)}" + (f"  [{', '.join(tags)}]" if tags else ""))
        if m.hint:
            lines.append(f"    hint: {m.hint}")
    lines.append("")
    return lines


def _invalid_lines(report: Report) -> list[str]:
    invalid = invalid_tests(report)
    if not invalid:
        return []
    lines = [f"Invalid tests ({len(invalid)}): these count for nothing until fixed"]
    for t in invalid:
        lines.append(f"  * {t.id} -- {t.status.value}")
        # A reason's later lines (a failure's message) keep their own indentation under it.
        lines.extend(f"    {line}" for line in t.reason.splitlines())
    lines.append("")
    return lines


def _similarity_lines(report: Report) -> list[str]:
    compared = similar_tests(report)
    if not compared:
        return []
    lines = ["Similarity to the course tests (each test's closest; a copy counts for nothing):"]
    for t in compared:
        copied = "  COPIED" if t.status is TestStatus.COPIED else ""
        lines.append(f"  {t.similarity:.2f}  {t.id}  ~ {t.similar_to}{copied}")
    lines.append("")
    return lines


def _checks_lines(report: Report) -> list[str]:
    lines = [*policy_lines(report.policy), *journal_lines(report.journal)]
    if report.implementation.checked:
        lines.extend(implementation_lines(report.implementation))
    if report.problems:
        lines.append(f"Problems while running ({len(report.problems) + report.problems_omitted}):")
        lines.extend(f"  * {p}" for p in report.problems)
        lines.extend(f"  {m}" for m in more(report.problems_omitted))
    lines.append("")
    return lines


# The checks beside the grade, worded alike here and in the student's local check
# (grader.flows.student_check): a line for each, what it found indented below.
def policy_lines(policy: PolicySummary) -> list[str]:
    """The policy check: ok, not checked, or its violations."""
    if not policy.checked:
        return ["Policy: not checked"]
    if policy.ok and not policy.violations:
        return ["Policy: ok"]
    return [
        f"Policy: VIOLATED ({policy.found})",
        *(f"  * {printable(v)}" for v in policy.violations),
        *(f"  {m}" for m in more(policy.violations_omitted)),
    ]


def journal_lines(journal: JournalSummary) -> list[str]:
    """The journal's verification: verified, not checked, or its problems."""
    if not journal.checked:
        return ["Journal: not checked"]
    if journal.ok and not journal.problems:
        return [f"Journal: verified ({journal.entries} entries, replayed in {journal.replay_s:.1f} s)"]
    return [
        f"Journal: {'ok, with remarks' if journal.ok else 'NOT VERIFIED'}",
        *(f"  * {printable(p)}" for p in journal.problems),
        *(f"  {m}" for m in more(journal.problems_omitted)),
    ]


def implementation_lines(impl: ImplementationCheck) -> list[str]:
    """The course tests on the student's implementation: how many pass, and each failure's
    first lines."""
    passed = sum(t.outcome is Outcome.PASSED for t in impl.tests)
    torch_note = "fixture goldens and live torch" if impl.live_torch else "fixture goldens; torch not installed"
    lines = [
        f"Implementation {printable(impl.implementation)}: {'ok' if impl.ok else 'FAILS'}, "
        f"{passed}/{len(impl.tests)} course tests pass ({torch_note})"
    ]
    for test in impl.tests:
        if test.outcome is not Outcome.PASSED:
            message = cap_lines(test.message)
            lines.append(f"  * {printable(test.id)}: {test.outcome.value}" + (f": {printable(message[0])}" if message else ""))
            lines.extend(f"      {printable(line)}" for line in message[1:])
    lines.extend(f"  * {printable(p)}" for p in impl.problems)
    return lines
