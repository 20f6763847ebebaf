"""How much of a suite the grader reads, runs and reports: every size cap, in one place.

A suite is hostile input, and its size must not become the grader's or the service's cost: a
test file of 200,000 refused lines, 600 tests with ids of 3,000 characters or a module-level
error in every file would otherwise give reports of tens of megabytes. So:

* the policy check reads no test file over :data:`MAX_TEST_FILE_BYTES` (parsing costs the
  grader's own memory, several hundred bytes of syntax tree for each byte of source) and lists
  the first :data:`MAX_LISTED` violations, counting the rest;
* a suite of more than :data:`MAX_TESTS` collected tests is refused, with nothing else run;
* a report lists at most :data:`MAX_LISTED` problems of each kind (counting the rest), cuts test
  ids to :data:`MAX_ID_CHARS` (keeping them apart) and every message to :data:`MAX_TEXT_CHARS`
  (:data:`MAX_TEST_REASON_CHARS` for the reason of each test, of which there may be hundreds);
* the service stores at most :data:`MAX_STORED_REPORT_BYTES` of a report: one over it is
  shortened, whole pieces at a time, never cut inside its JSON (:func:`fit_report`).

The worker caps each message it reports at 2,000 characters itself (``grader.worker.child``),
and what one run may report at 4 MiB (``grader.worker.watch``); the uploads' own limits are
``grader.flows.archive.ArchiveLimits`` and ``grader.sandbox.base.SandboxLimits``.
"""

from __future__ import annotations

from typing import Iterable, TypeVar

from grader.core.models import JournalSummary, Mention, Report

__all__ = [
    "ELLIPSIS",
    "MAX_ID_CHARS",
    "MAX_LISTED",
    "MAX_MESSAGE_LINES",
    "MAX_NAMED_TESTS",
    "MAX_STORED_REPORT_BYTES",
    "MAX_TESTS",
    "MAX_TEST_FILE_BYTES",
    "MAX_TEST_REASON_CHARS",
    "MAX_TEXT_CHARS",
    "bound_journal",
    "cap_lines",
    "cap_text",
    "first",
    "fit_report",
    "report_json_within",
    "short_ids",
]

# A test file the policy check reads: a suite's test files are tens of KiB (the course's own
# longest is 44 KiB), while the densest file of this size already takes the parser about
# 160 MiB. Far below the uploads' limits (2 MiB packed, 20 MiB unpacked; 64 MiB staged).
MAX_TEST_FILE_BYTES = 256 * 1024
# Collected tests a suite may hold; a suite of more is refused after the reference's collection.
MAX_TESTS = 500
# Policy violations, run problems and journal problems a report lists; the rest are counted.
MAX_LISTED = 50
# Tests named in one line of a report (the invalid tests among the reasons).
MAX_NAMED_TESTS = 10
# A test id as a report shows it (the runs use the whole id).
MAX_ID_CHARS = 300
# A message, reason, violation or problem in a report (the worker's own cap).
MAX_TEXT_CHARS = 2000
# The reason a test does not count: one per test, up to MAX_TESTS of them.
MAX_TEST_REASON_CHARS = 500
# Lines of a failure's message a reason or a refusal quotes (numpy's assertion messages run to
# about 9: what differs, where, by how much, then both arrays).
MAX_MESSAGE_LINES = 10
# A report as the service stores it; with the caps above a report stays far below (about
# 3 MiB for MAX_TESTS tests of the longest ids, each killing every mutant in a full matrix).
MAX_STORED_REPORT_BYTES = 8 * 1024**2

ELLIPSIS = "..."
_MIN_ID_CHARS = 40  # below this a shortened id would be mostly its tie-breaker

T = TypeVar("T")


def cap_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ELLIPSIS))] + ELLIPSIS


def cap_lines(text: str, limit: int = MAX_MESSAGE_LINES) -> list[str]:
    """The non-blank lines of ``text`` (a failure's message), at most ``limit`` of them, the
    cut said in one more line."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= limit:
        return lines
    return [*lines[:limit], f"{ELLIPSIS} ({len(lines) - limit} more lines)"]


def first(items: Iterable[T], limit: int = MAX_LISTED) -> tuple[list[T], int]:
    """The first ``limit`` items, and how many more there were."""
    listed: list[T] = []
    more = 0
    for item in items:
        if len(listed) < limit:
            listed.append(item)
        else:
            more += 1
    return listed, more


def _shortened(test_id: str, limit: int, attempt: int) -> str:
    """The start and the end of ``test_id`` (where a file, a function and a parametrization's
    case are), with a numbered tie-breaker from the second attempt on."""
    tag = "" if attempt == 1 else f"#{attempt}{ELLIPSIS}"
    tail = limit // 3
    head = limit - tail - len(ELLIPSIS) - len(tag)
    return f"{test_id[:head]}{ELLIPSIS}{tag}{test_id[-tail:]}"


def short_ids(ids: Iterable[str], limit: int = MAX_ID_CHARS) -> dict[str, str]:
    """Each test id -> the id a report shows: itself within ``limit`` characters, else its start
    and its end around an ellipsis. No two ids get the same name: ids alike at both ends (or a
    short id a student made look like a shortened one) are told apart by a number.

    Raises:
        ValueError: if ``limit`` leaves no room for a tie-breaker.
    """
    if limit < _MIN_ID_CHARS:
        raise ValueError(f"limit must be at least {_MIN_ID_CHARS} characters, got {limit}")
    ids = list(dict.fromkeys(ids))
    names = {test_id: test_id for test_id in ids if len(test_id) <= limit}
    taken = set(names)
    for test_id in ids:
        if test_id in names:
            continue
        attempt = 1
        while (name := _shortened(test_id, limit, attempt)) in taken:
            attempt += 1
        names[test_id] = name
        taken.add(name)
    return names


def bound_journal(journal: JournalSummary, names: dict[str, str] | None = None) -> JournalSummary:
    """The journal's summary within the caps: its first problems (the rest counted), and its
    history for at most :data:`MAX_TESTS` tests, named as ``names`` (from :func:`short_ids`)
    names them in the matrix."""
    problems, more = first((cap_text(p) for p in journal.problems), MAX_LISTED)
    history, left_out = first(journal.history.items(), MAX_TESTS)
    names = {**short_ids([t for t, _ in history if t not in (names or {})]), **(names or {})}
    return journal.model_copy(update={
        "problems": problems,
        "problems_omitted": journal.problems_omitted + more,
        "history": {names[t]: cap_text(h, MAX_TEST_REASON_CHARS) for t, h in history},
        "history_omitted": journal.history_omitted + left_out,
    })


# ------------------------------------------------------------------ a report in a byte cap
def _size(report: Report) -> int:
    return len(report.model_dump_json().encode())


def _texts_cut(report: Report, limit: int) -> Report:
    """Every free text of ``report`` cut to ``limit`` characters (a Mention's words each, its
    names whole: the student's view renames them)."""
    def cut(values: list[str]) -> list[str]:
        return [cap_text(v, limit) for v in values]

    def cut_lines(lines: list[str | Mention]) -> list[str | Mention]:
        return [Mention.of([cap_text(w, limit) for w in line.words()], line.variants)
                if isinstance(line, Mention) else cap_text(line, limit) for line in lines]

    return report.model_copy(update={
        "submission": cap_text(report.submission, limit),
        "reasons": cut_lines(report.reasons),
        "refused": cap_text(report.refused, limit),
        "tests": [t.model_copy(update={"reason": cap_text(t.reason, limit)}) for t in report.tests],
        "mutants": [m.model_copy(update={"title": cap_text(m.title, limit), "hint": cap_text(m.hint, limit)})
                    for m in report.mutants],
        "policy": report.policy.model_copy(update={"violations": cut(report.policy.violations)}),
        "journal": report.journal.model_copy(update={
            "problems": cut(report.journal.problems),
            "history": {k: cap_text(v, limit) for k, v in report.journal.history.items()},
        }),
        "problems": cut_lines(report.problems),
    })


def _lists_cut(report: Report, limit: int) -> Report:
    """Each list of ``report`` cut to its first ``limit`` items, the rest counted."""
    violations, v_more = first(report.policy.violations, limit)
    problems, p_more = first(report.problems, limit)
    j_problems, j_more = first(report.journal.problems, limit)
    history, h_more = first(report.journal.history.items(), limit)
    return report.model_copy(update={
        "mutants": [m.model_copy(update={"killed_by": m.killed_by[:limit]}) for m in report.mutants],
        "policy": report.policy.model_copy(update={
            "violations": violations, "violations_omitted": report.policy.violations_omitted + v_more}),
        "journal": report.journal.model_copy(update={
            "problems": j_problems, "problems_omitted": report.journal.problems_omitted + j_more,
            "history": dict(history), "history_omitted": report.journal.history_omitted + h_more}),
        "problems": problems,
        "problems_omitted": report.problems_omitted + p_more,
    })


def _tests_cut(report: Report, keep: int) -> Report:
    return report.model_copy(update={
        "tests": report.tests[:keep],
        "tests_omitted": report.tests_omitted + max(0, len(report.tests) - keep),
    })


def fit_report(report: Report, max_bytes: int = MAX_STORED_REPORT_BYTES) -> Report:
    """``report`` if its JSON is within ``max_bytes``, else a shortened copy that is, saying so
    among its problems: texts cut shorter, then lists, then the tests listed, halved until it
    fits. The verdict, the score and the mutants stay; what was left out is counted
    (``tests_omitted``, ``problems_omitted``, ...).

    Raises:
        ValueError: if even the report's verdict, score and mutants alone are over ``max_bytes``.
    """
    if _size(report) <= max_bytes:
        return report
    note = (f"this report was shortened to fit the stored size limit of {max_bytes / 1024**2:g} MiB: "
            "long texts are cut, and only the first items of long lists are listed")
    room = max_bytes - len(note.encode()) - 8  # the note goes in last, with its quotes and comma
    fitted = _texts_cut(report, MAX_TEST_REASON_CHARS)
    for limit in (MAX_LISTED, 10, 1):
        if _size(fitted) <= room:
            break
        fitted = _lists_cut(fitted, limit)
    keep = len(fitted.tests)
    while _size(fitted) > room and keep:
        keep //= 2
        fitted = _tests_cut(fitted, keep)
    if _size(fitted) > room:
        fitted = _lists_cut(_texts_cut(fitted, 100), 0)
    fitted = fitted.model_copy(update={"problems": [*fitted.problems, note]})
    if _size(fitted) > max_bytes:
        raise ValueError(f"a report's verdict, score and mutants alone are over {max_bytes} bytes")
    return fitted


def report_json_within(report: Report, max_bytes: int = MAX_STORED_REPORT_BYTES) -> str:
    """The report's JSON, within ``max_bytes`` (see :func:`fit_report`)."""
    document = report.model_dump_json()
    if len(document.encode()) <= max_bytes:
        return document
    return fit_report(report, max_bytes).model_dump_json()
