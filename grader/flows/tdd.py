"""The student's commands ``mutagrade tdd red|green|status|undo``: keep the red-then-green journal.

Run anywhere in a student repository (:func:`find_root` walks up to it). ``red`` runs the suite
against the student's own implementation and is accepted only when a test is new since the last
green and every new test fails at run time, and not because of an error in the test's own code
(a ``NameError``, ``ImportError`` or ``TypeError`` raised in a test file); it shows each new
test's failure. ``green`` is accepted only when the test files are byte-identical to the last
red's and every test passes. ``undo`` removes the newest entry, leaving the chain before it as
it was. A refusal says why and what to do, and writes nothing. The suite runs in the same
sandboxed worker as grading.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.core.caps import cap_lines
from grader.core.journal import (
    FORMAT_VERSION,
    Journal,
    JournalEntry,
    Phase,
    RED_OUTCOMES,
    chain_problems,
    digest_files,
    entry_line,
    load_journal,
    sha256_bytes,
    utc_now,
)
from grader.core.models import Outcome, SuiteRun, TestOutcome, WorkerRun
from grader.flows.replay import run_snapshot
from grader.core.paths import Layout
from grader.core.policy import find_violations, policy_for
from grader.run.runner import RunLimits

__all__ = [
    "DEFAULT_IMPL", "TEST_CODE_ERRORS", "Recorded", "Refused", "StudentRepo", "explained",
    "SuiteRefused", "find_root", "is_test_code_error", "record", "status", "undo",
]

DEFAULT_IMPL = Path("python")
TEST_PATTERNS = ("*.py",)
MAX_EXPLAINED = 5  # failing tests a refusal quotes the message of
IMPL_PATTERNS = ("*.py", "*.pyi")
# Errors that, raised in a test file itself, are mistakes in the test's code (a misspelt name,
# an import of what is not there, a call with the wrong arguments), never a red.
TEST_CODE_ERRORS = frozenset({"NameError", "UnboundLocalError", "ImportError", "ModuleNotFoundError", "TypeError"})


class Refused(Exception):
    """The command was refused; the message says why and what to do. Nothing was written."""


class SuiteRefused(Refused):
    """Refused because grading would refuse the tests as they are (a policy violation): bad
    input, as it is to ``grade`` and ``check``."""


@dataclass(frozen=True)
class StudentRepo:
    """Where a student's repository keeps its implementation, tests and journal."""

    root: Path
    tests: Path  # relative to root: the assignment's ``student_tests`` unless told otherwise
    impl: Path = DEFAULT_IMPL

    @property
    def impl_dir(self) -> Path:
        return self.root / self.impl

    @property
    def tests_dir(self) -> Path:
        return self.root / self.tests

    @property
    def journal_path(self) -> Path:
        return self.root / ".tdd" / "journal.jsonl"


@dataclass(frozen=True)
class Recorded:
    """What ``tdd red`` or ``tdd green`` appended, and (a red's) how each new test failed."""

    entry: JournalEntry
    failures: tuple[TestOutcome, ...] = ()


def find_root(start: Path) -> Path:
    """The repository ``start`` is in, found as git finds its own: the nearest folder from
    ``start`` up that holds ``.tdd/``, or else ``.git`` (the top of a repository whose journal
    is not started yet); ``start`` itself when there is neither."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / ".tdd").is_dir() or (folder / ".git").exists():
            return folder
    return start


def is_test_code_error(result: TestOutcome) -> bool:
    """Whether a test failed on an error of its own code: one of :data:`TEST_CODE_ERRORS`,
    raised in a file of the suite (not in the implementation, which the stand-in re-raises,
    nor in the framework)."""
    kind = result.message.split(":", 1)[0].strip()
    return bool(result.raised_in) and result.outcome is not Outcome.PASSED and kind in TEST_CODE_ERRORS


def _journal(repo: StudentRepo) -> Journal | None:
    if not repo.journal_path.exists():
        return None
    journal = load_journal(repo.journal_path)
    broken = chain_problems(journal)
    if broken:
        raise Refused(
            f"the journal {repo.journal_path} does not verify ({broken[0]}); "
            "restore it from version control before recording more"
        )
    return journal


def _run(repo: StudentRepo, layout: Layout, limits: RunLimits) -> SuiteRun:
    module = repo.impl_dir / layout.module_file
    if not module.is_file():
        raise Refused(f"{module}: no implementation file; your implementation belongs in {repo.impl}/{layout.module_file}")
    if not repo.tests_dir.is_dir():
        raise Refused(f"{repo.tests_dir}: no tests folder; write your first test there")
    findings = find_violations(repo.tests_dir, policy_for(layout))
    if findings.total:
        listed = [str(v) for v in findings.violations] + ([f"... and {findings.omitted} more"] if findings.omitted else [])
        raise SuiteRefused("your tests would be rejected at grading:\n  " + "\n  ".join(listed))
    [run] = run_snapshot(
        layout, repo.tests_dir, repo.impl_dir, limits,
        [WorkerRun(variant="yours", source=module.read_text(encoding="utf-8"))],
    )
    if run.crashed:
        raise Refused(f"the suite did not run to its end: {run.crashed}")
    if run.collection_errors:
        raise Refused(
            "the tests could not be collected (a collection error is not a red; fix it first):\n  "
            + "\n  ".join(run.collection_errors)
        )
    if not run.results:
        raise Refused(f"no test was collected in {repo.tests_dir}: write a test_*.py file with a test_* function")
    return run


def _append(repo: StudentRepo, journal: Journal | None, phase: Phase, run: SuiteRun, introduced: list[str]) -> JournalEntry:
    tests = digest_files(repo.tests_dir, TEST_PATTERNS)
    impl = digest_files(repo.impl_dir / "tinyllm", IMPL_PATTERNS)
    impl = {f"tinyllm/{path}": data for path, data in impl.items()}
    entry = JournalEntry(
        version=FORMAT_VERSION,
        seq=len(journal.entries) + 1 if journal else 1,
        phase=phase,
        time=utc_now(),
        tests={p: sha256_bytes(d) for p, d in tests.items()},
        impl={p: sha256_bytes(d) for p, d in impl.items()},
        outcomes={r.test_id: r.outcome for r in run.results},
        introduced=introduced,
        prev=sha256_bytes(journal.lines[-1].encode()) if journal and journal.lines else "",
    )
    blobs = repo.journal_path.parent / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for data in [*tests.values(), *impl.values()]:
        blob = blobs / sha256_bytes(data)
        if not blob.exists():
            blob.write_bytes(data)
    with repo.journal_path.open("a", encoding="utf-8") as handle:
        handle.write(entry_line(entry) + "\n")
    return entry


def record(repo: StudentRepo, phase: Phase, *, layout: Layout, limits: RunLimits) -> Recorded:
    """Run ``tdd red`` or ``tdd green``: check the rules, then append an entry.

    Args:
        repo: the student's repository.
        phase: red or green.
        layout: the course (its tests and assignment).
        limits: the assignment's limits (:meth:`RunLimits.of`): the journal's replay at grading
            runs each test under the same, so a green here is a green there.

    Returns:
        The entry appended and, for a red, each new test's failure.

    Raises:
        Refused: when a rule does not hold; nothing is written then.
        JournalFormatError: when the existing journal cannot be read.
    """
    journal = _journal(repo)
    most = limits.limits.max_journal_entries
    if journal is not None and len(journal.entries) >= most:
        raise Refused(
            f"the journal {repo.journal_path} already holds {len(journal.entries)} entries, the most the "
            f"assignment allows (max_journal_entries = {most}): grading refuses a longer one"
        )
    if phase is Phase.RED:
        return _red(repo, journal, layout, limits)
    return _green(repo, journal, layout, limits)


def _red(repo: StudentRepo, journal: Journal | None, layout: Layout, limits: RunLimits) -> Recorded:
    last = journal.last if journal else None
    if last is not None and last.phase is Phase.RED:
        raise Refused(
            f"the last entry (#{last.seq}) is already a red: make its new tests pass, then run "
            "`mutagrade tdd green` (or `mutagrade tdd undo` to take the red back)"
        )
    run = _run(repo, layout, limits)
    known = set(last.outcomes) if last is not None else set()
    new = [r for r in run.results if r.test_id not in known]
    if not new:
        raise Refused(
            "no test is new since the last green: write ONE new test that fails against your "
            "current implementation, then run `mutagrade tdd red`"
        )
    own = [r for r in new if is_test_code_error(r)]
    if own:
        raise Refused(
            "these new tests fail on an error in the test's own code, not on your implementation: "
            "a red must fail on what the implementation does; fix the test, then run `mutagrade tdd red` again"
            + _explained(own, _own_error)
        )
    passing = [r.test_id for r in new if r.outcome not in RED_OUTCOMES]
    if passing:
        raise Refused(
            f"these new tests do not fail against your current implementation: {', '.join(passing)}; "
            "a red test must fail first (it shows the test can catch the missing behaviour)"
        )
    return Recorded(_append(repo, journal, Phase.RED, run, [r.test_id for r in new]), tuple(new))


def _green(repo: StudentRepo, journal: Journal | None, layout: Layout, limits: RunLimits) -> Recorded:
    last = journal.last if journal else None
    if last is None or last.phase is not Phase.RED:
        raise Refused("there is no red to turn green: write a failing test and run `mutagrade tdd red` first")
    tests = {p: sha256_bytes(d) for p, d in digest_files(repo.tests_dir, TEST_PATTERNS).items()}
    if tests != last.tests:
        changed = sorted({p for p in tests if last.tests.get(p) != tests[p]} | {p for p in last.tests if p not in tests})
        raise Refused(
            f"the test files changed since the red (entry {last.seq}): {', '.join(changed)}; "
            "a green keeps the red's tests byte for byte: change the implementation, not the tests "
            "(or undo the test change)"
        )
    run = _run(repo, layout, limits)
    failing = [r for r in run.results if r.outcome is not Outcome.PASSED]
    if failing:
        named = ", ".join(f"{r.test_id} ({r.outcome.value})" for r in failing)
        raise Refused(f"not every test passes yet: {named}; fix the implementation and try again"
                      + _explained(failing, _why))
    return Recorded(_append(repo, journal, Phase.GREEN, run, []))


def _why(result: TestOutcome) -> str:
    """A failing test and its message, indented under the refusal or the red recorded."""
    lines = cap_lines(result.message)
    return f"\n  {result.test_id}:" + "".join(f"\n    {line}" for line in lines or [result.outcome.value])


def _own_error(result: TestOutcome) -> str:
    """A test's own error, with the line of the test file that raised it."""
    first, *rest = cap_lines(result.message) or [result.outcome.value]
    return f"\n  {result.test_id}: {first} ({result.raised_in})" + "".join(f"\n    {line}" for line in rest)


def _explained(results: list[TestOutcome], show: Callable[[TestOutcome], str]) -> str:
    more = len(results) - MAX_EXPLAINED
    return "".join(show(r) for r in results[:MAX_EXPLAINED]) + (f"\n  ... and {more} more" if more > 0 else "")


def explained(results: tuple[TestOutcome, ...]) -> str:
    """Each test and its message, indented, for at most :data:`MAX_EXPLAINED` of them."""
    return _explained(list(results), _why)


def undo(repo: StudentRepo) -> str:
    """Run ``tdd undo``: remove the journal's newest entry, leaving every line before it (and so
    the chain) as it was, and the blobs no other entry records.

    Returns:
        What was undone, where the journal now ends, and the next command.

    Raises:
        Refused: when the journal is missing, empty or does not verify; nothing is written then.
        JournalFormatError: when the journal cannot be read.
    """
    journal = _journal(repo)
    if journal is None or journal.last is None:
        raise Refused(f"the journal {repo.journal_path} has no entry: nothing to undo")
    removed = journal.last
    data = repo.journal_path.read_bytes()
    _replace(repo.journal_path, data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    kept = {d for entry in journal.entries[:-1] for d in (*entry.tests.values(), *entry.impl.values())}
    for digest in {*removed.tests.values(), *removed.impl.values()} - kept:
        (journal.blobs / digest).unlink(missing_ok=True)
    what = f"undone: entry {removed.seq} ({removed.phase.value}, recorded {removed.time})"
    if removed.introduced:
        what += f", which introduced {', '.join(removed.introduced)}"
    left = journal.entries[-2] if len(journal.entries) > 1 else None
    what += f"; the journal now ends with entry {left.seq} ({left.phase.value})." if left else "; the journal is now empty."
    return "\n".join([what, "Your tests and implementation are as they were: only the journal changed.", _next(repo, left)])


def _replace(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _next(repo: StudentRepo, last: JournalEntry | None) -> str:
    if last is None or last.phase is Phase.GREEN:
        return f"Next: write ONE new test in {repo.tests}, then run `mutagrade tdd red`."
    return "Next: make the new tests pass (change the implementation only), then run `mutagrade tdd green`."


def status(repo: StudentRepo) -> str:
    """Where the cycle stands: entries, which tests went red then green, the next command."""
    if not repo.journal_path.exists():
        return (
            f"No journal yet ({repo.journal_path}).\n"
            f"Next: write ONE test in {repo.tests}, then run `mutagrade tdd red`."
        )
    journal = load_journal(repo.journal_path)
    lines = [f"Journal {repo.journal_path}: {len(journal.entries)} entries."]
    broken = chain_problems(journal)
    if broken:
        lines.append("It does NOT verify:")
        lines.extend(f"  - {p}" for p in broken)
    for index, entry in enumerate(journal.entries):
        if entry.phase is Phase.RED:
            after = journal.entries[index + 1] if index + 1 < len(journal.entries) else None
            state = f"green at #{after.seq}" if after else "waiting for green"
            for test in entry.introduced:
                lines.append(f"  red #{entry.seq:<3} {test}: {state}")
    lines.append(_next(repo, journal.last))
    return "\n".join(lines)
