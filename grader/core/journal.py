"""The red-then-green journal: its format and the rules it is checked by, from the file alone.

A student repository keeps ``.tdd/journal.jsonl`` (one JSON entry a line) and
``.tdd/blobs/<sha256>`` (every file an entry recorded). Each entry records the phase (red or
green), the test and implementation files by digest, every test's outcome, the tests a red
introduces, and the sha256 of the previous line, so editing any line breaks the chain. See
``docs/journal.md``.

Verification (:mod:`grader.flows.replay`) re-checks every rule here, then **replays** it: every
red snapshot (tests and implementation restored from the blobs) is run again and its new tests
must fail, every green snapshot must pass. Recorded outcomes are therefore evidence only if
they replay.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from enum import StrEnum
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from grader.core.models import JournalSummary, Outcome
from grader.core.tomlfile import field_problems

__all__ = [
    "FORMAT_VERSION",
    "Journal",
    "JournalEntry",
    "JournalFormatError",
    "NO_JOURNAL",
    "Phase",
    "RED_OUTCOMES",
    "blob_problems",
    "chain_problems",
    "history",
    "submission_problems",
    "digest_files",
    "entry_line",
    "load_journal",
    "sha256_bytes",
    "utc_now",
    "verify",
]

FORMAT_VERSION = 1
NO_JOURNAL = "no journal (.tdd/journal.jsonl) was submitted"  # the problem of a submission without one


class JournalFormatError(ValueError):
    """The journal cannot be read at all (a line that is no entry); names the line."""


class Phase(StrEnum):
    RED = "red"
    GREEN = "green"


class JournalEntry(BaseModel):
    """One line of ``.tdd/journal.jsonl``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    seq: int  # 1, 2, 3, ... in file order
    phase: Phase
    time: str  # UTC, ISO 8601 with a trailing Z
    tests: dict[str, str]  # test file (relative to the tests folder) -> sha256
    impl: dict[str, str]  # implementation file (relative to the implementation folder) -> sha256
    outcomes: dict[str, Outcome]  # test id -> outcome when the command ran
    introduced: list[str] = []  # a red: the test ids new since the last green
    prev: str  # sha256 of the previous line's bytes; "" for the first entry


class Journal(BaseModel):
    """A journal read from disk: its entries and the exact lines they came from."""

    path: str
    entries: list[JournalEntry]
    lines: list[str]

    @property
    def blobs(self) -> Path:
        return Path(self.path).parent / "blobs"

    @property
    def last(self) -> JournalEntry | None:
        return self.entries[-1] if self.entries else None

    def last_of(self, phase: Phase) -> JournalEntry | None:
        return next((e for e in reversed(self.entries) if e.phase is phase), None)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_files(folder: Path, patterns: tuple[str, ...]) -> dict[str, bytes]:
    """The files under ``folder`` matching ``patterns``, by posix path relative to it
    (caches and links left out)."""
    found: dict[str, bytes] = {}
    if not folder.is_dir():
        return found
    for pattern in patterns:
        for path in folder.rglob(pattern):
            if path.is_symlink() or not path.is_file() or "__pycache__" in path.parts:
                continue
            found[path.relative_to(folder).as_posix()] = path.read_bytes()
    return dict(sorted(found.items()))


def entry_line(entry: JournalEntry) -> str:
    """The canonical line for an entry: sorted keys, no spaces, so its digest is stable."""
    return json.dumps(entry.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def load_journal(path: Path, *, max_entries: int | None = None) -> Journal:
    """Read a journal file (of at most ``max_entries`` lines, when given).

    Raises:
        JournalFormatError: if the file is missing, holds more than ``max_entries`` lines, or
            a line is not a journal entry (the message names the line and the field).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JournalFormatError(f"{path}: no such journal file") from None
    except UnicodeDecodeError as exc:
        raise JournalFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.splitlines()
    if max_entries is not None and len(lines) > max_entries:
        raise JournalFormatError(
            f"{path}: the journal holds {len(lines)} entries, more than the {max_entries} the assignment allows "
            f"(max_journal_entries): nothing of it was replayed"
        )
    entries = []
    for number, line in enumerate(lines, start=1):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JournalFormatError(f"{path}:{number}: expected one JSON object per line, got: {exc}") from None
        try:
            entries.append(JournalEntry.model_validate(data))
        except ValidationError as exc:
            raise JournalFormatError(f"{path}:{number}: not a journal entry: {field_problems(exc)}") from None
    return Journal(path=str(path), entries=entries, lines=lines)


# ---------------------------------------------------------------- static checks
def chain_problems(journal: Journal) -> list[str]:
    """Problems with the journal as a file: the hash chain, numbering, version, phase order,
    and each entry's own rules (what a red introduces, what a green keeps)."""
    problems: list[str] = []
    last_green: JournalEntry | None = None
    last_red: JournalEntry | None = None
    for index, (entry, line) in enumerate(zip(journal.entries, journal.lines)):
        label = f"entry {entry.seq} ({entry.phase.value}, line {index + 1})"
        expected_prev = "" if index == 0 else sha256_bytes(journal.lines[index - 1].encode())
        if entry.prev != expected_prev:
            problems.append(
                f"{label}: chain broken: prev must be the sha256 of line {index} "
                f"({expected_prev[:12] or 'empty'}...), got {entry.prev[:12] or 'empty'}...: "
                "a line before it was edited, removed or inserted"
            )
        if line != entry_line(entry):
            problems.append(f"{label}: the line is not in canonical form: it was edited by hand")
        if entry.seq != index + 1:
            problems.append(f"{label}: seq must be {index + 1}, got {entry.seq}")
        if entry.version != FORMAT_VERSION:
            problems.append(f"{label}: version must be {FORMAT_VERSION}, got {entry.version}")
        expected_phase = Phase.RED if index % 2 == 0 else Phase.GREEN
        if entry.phase is not expected_phase:
            problems.append(
                f"{label}: phases must alternate starting with red; expected {expected_phase.value}"
            )
        if entry.phase is Phase.RED:
            known = set(last_green.outcomes) if last_green else set()
            if not entry.introduced:
                problems.append(f"{label}: a red must introduce at least one new test, introduced none")
            for test in entry.introduced:
                if test in known:
                    problems.append(f"{label}: test {test}: introduced, but it was already in entry {last_green.seq}")
                if entry.outcomes.get(test) not in RED_OUTCOMES:
                    problems.append(
                        f"{label}: test {test}: a red's new test must fail, recorded "
                        f"{entry.outcomes.get(test, 'nothing')}"
                    )
            last_red = entry
        else:
            if last_red is not None and entry.tests != last_red.tests:
                changed = sorted(set(entry.tests.items()) ^ set(last_red.tests.items()))
                problems.append(
                    f"{label}: a green must have exactly the test files of its red (entry {last_red.seq}); "
                    f"differs in {sorted({path for path, _ in changed})}"
                )
            failing = sorted(t for t, o in entry.outcomes.items() if o is not Outcome.PASSED)
            if failing or not entry.outcomes:
                problems.append(f"{label}: a green must pass every test, recorded not passing: {failing or 'no test'}")
            last_green = entry
    return problems


RED_OUTCOMES = (Outcome.FAILED, Outcome.ERROR, Outcome.TIMEOUT)


def blob_problems(journal: Journal) -> list[str]:
    """Every recorded file must be in ``blobs/`` with the recorded digest."""
    problems = []
    seen: set[str] = set()
    for entry in journal.entries:
        for kind, files in (("test", entry.tests), ("implementation", entry.impl)):
            for path, digest in files.items():
                if digest in seen:
                    continue
                seen.add(digest)
                blob = journal.blobs / digest
                if not blob.is_file():
                    problems.append(
                        f"entry {entry.seq}: {kind} file {path}: blob {digest[:12]}... is missing from {journal.blobs}"
                    )
                elif sha256_bytes(blob.read_bytes()) != digest:
                    problems.append(f"entry {entry.seq}: {kind} file {path}: blob {digest[:12]}... does not match its digest")
    return problems


def submission_problems(journal: Journal, tests_dir: Path) -> list[str]:
    """The submitted tests must be the last green's, and every test must have gone red."""
    problems = []
    last = journal.last
    if last is None:
        return ["the journal is empty: run `mutagrade tdd red` after writing your first test"]
    if last.phase is Phase.RED:
        problems.append(
            f"entry {last.seq}: the journal ends with a red: make its tests pass and run `mutagrade tdd green`"
        )
    green = journal.last_of(Phase.GREEN)
    if green is None:
        return problems
    submitted = {path: sha256_bytes(data) for path, data in digest_files(tests_dir, ("*.py",)).items()}
    if submitted != green.tests:
        differing = sorted(
            {p for p in submitted if green.tests.get(p) != submitted[p]}
            | {p for p in green.tests if p not in submitted}
        )
        problems.append(
            f"the submitted tests differ from the last green (entry {green.seq}) in {differing}: "
            "submit the tests the journal recorded, or continue the cycle"
        )
    introduced = {t for e in journal.entries if e.phase is Phase.RED for t in e.introduced}
    for test in sorted(green.outcomes):
        if test not in introduced:
            problems.append(f"test {test}: never went red (no red entry introduced it)")
    return problems


def history(journal: Journal) -> dict[str, str]:
    """Test id -> where it went red and then green."""
    lines: dict[str, str] = {}
    for index, entry in enumerate(journal.entries):
        if entry.phase is not Phase.RED:
            continue
        after = journal.entries[index + 1] if index + 1 < len(journal.entries) else None
        for test in entry.introduced:
            green = f", green at entry {after.seq}" if after and after.outcomes.get(test) is Outcome.PASSED else ", never green"
            lines[test] = f"red at entry {entry.seq}{green}"
    return dict(sorted(lines.items()))


def verify(
    journal_path: Path, tests_dir: Path, *, replay: Callable[[Journal], list[str]] | None = None,
    max_entries: int | None = None,
) -> JournalSummary:
    """Check a journal against the submitted tests by every rule of this module, then by
    ``replay`` (which runs its snapshots: :func:`grader.flows.replay.verify_journal` gives it),
    unless its blobs are already wrong.

    Raises:
        JournalFormatError: if the journal cannot be read at all, or holds more than
            ``max_entries`` entries (before anything is replayed).
    """
    journal = load_journal(journal_path, max_entries=max_entries)
    problems = chain_problems(journal) + blob_problems(journal) + submission_problems(journal, tests_dir)
    started = time.monotonic()
    if replay is not None and journal.entries and not blob_problems(journal):
        problems += replay(journal)
    return JournalSummary(
        checked=True,
        ok=not problems,
        problems=problems,
        entries=len(journal.entries),
        history=history(journal),
        replay_s=round(time.monotonic() - started, 3),
    )
