"""The red-then-green journal: forgeries are caught naming the entry; genuine journals verify."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.core.journal import (
    JournalEntry,
    JournalFormatError,
    Phase,
    entry_line,
    load_journal,
    sha256_bytes,
)
from grader.core.assignment import load_assignment
from grader.core.paths import default_layout
from grader.flows.replay import verify_journal
from grader.run.runner import RunLimits

LAYOUT = default_layout()
STUDENT = LAYOUT.examples / "student"
LIMITS = RunLimits.of(load_assignment(LAYOUT.assignment))  # grading replays under these
TESTS = Path("python") / "tests" / "l3-3-gru"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    dest = tmp_path / "student"
    shutil.copytree(STUDENT, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def journal_of(repo: Path) -> Path:
    return repo / ".tdd" / "journal.jsonl"


def verify(repo: Path, tests: Path | None = None):
    return verify_journal(journal_of(repo), tests or repo / TESTS, layout=LAYOUT, limits=LIMITS)


def rewrite(repo: Path, change) -> None:
    """Apply ``change(list of entry dicts)`` and write the journal back with a valid chain:
    what a forger who knows the format would do."""
    entries = [e.model_dump(mode="json") for e in load_journal(journal_of(repo)).entries]
    entries = change(entries)
    lines, prev = [], ""
    for number, data in enumerate(entries, start=1):
        data["seq"], data["prev"] = number, prev
        line = entry_line(JournalEntry.model_validate(data))
        lines.append(line)
        prev = sha256_bytes(line.encode())
    journal_of(repo).write_text("\n".join(lines) + "\n")


def test_the_genuine_journal_of_ten_cycles_verifies_quickly(repo):
    started = time.monotonic()
    summary = verify(repo)
    elapsed = time.monotonic() - started
    assert summary.ok, summary.problems
    assert summary.entries == 20
    assert len(summary.history) == 10
    assert all(h.startswith("red at entry") and "green at entry" in h for h in summary.history.values())
    assert elapsed < 5.0, f"verification took {elapsed:.2f} s"


def test_an_edited_line_breaks_the_chain(repo):
    lines = journal_of(repo).read_text().splitlines()
    data = json.loads(lines[2])
    data["time"] = "2020-01-01T00:00:00.000000Z"
    lines[2] = json.dumps(data, sort_keys=True, separators=(",", ":"))
    journal_of(repo).write_text("\n".join(lines) + "\n")
    problems = verify(repo).problems
    assert any(p.startswith("entry 4 (green, line 4): chain broken") for p in problems), problems


def test_a_hand_edited_line_out_of_canonical_form_is_caught(repo):
    lines = journal_of(repo).read_text().splitlines()
    lines[0] = json.dumps(json.loads(lines[0]), indent=1).replace("\n", " ")
    journal_of(repo).write_text("\n".join(lines) + "\n")
    problems = verify(repo).problems
    assert any("entry 1 (red, line 1): the line is not in canonical form" in p for p in problems)


def test_a_red_whose_new_test_passes_on_its_snapshot_is_caught_on_replay(repo):
    def forge(entries):
        # Entry 5 (red) claims its gradient test failed, but give it the fixed implementation.
        entries[4]["impl"] = dict(entries[5]["impl"])
        return entries

    rewrite(repo, forge)
    problems = verify(repo).problems
    assert any(
        "entry 5 (red): test test_gru.py::test_hand_example_gradient_with_respect_to_h: passed when its red "
        "snapshot was replayed" in p
        for p in problems
    ), problems


def test_a_forged_green_outcome_is_caught_on_replay(repo):
    def forge(entries):
        entries[5]["impl"] = dict(entries[4]["impl"])  # green 6 with the red's (buggy) code
        return entries

    rewrite(repo, forge)
    problems = verify(repo).problems
    assert any("entry 6 (green): test test_gru.py::test_hand_example_gradient_with_respect_to_h: failed" in p for p in problems)


TAMPER = """

# Appended by a forger: at import, replace whatever judges the replay with a verdict of "passed".
import sys as _sys


def _all_passed(*args, **kwargs):
    return {"results": [], "passed": True}


for _name, _module in list(_sys.modules.items()):
    if _name.startswith("grader"):
        for _attr in list(vars(_module)):
            if any(word in _attr.lower() for word in ("judge", "checked_result", "replay", "verify", "outcome")):
                try:
                    setattr(_module, _attr, _all_passed)
                except Exception:
                    pass
        for _cls in [v for v in vars(_module).values() if isinstance(v, type)]:
            for _attr in list(vars(_cls)):
                if "judge" in _attr.lower():
                    setattr(_cls, _attr, _all_passed)
"""


@pytest.mark.parametrize("where", ["tinyllm/rnn/__init__.py", "tinyllm/rnn/gru.py"])
def test_a_recorded_implementation_that_tampers_with_replay_is_caught(repo, where):
    """The recorded implementation (the package's other modules included) is imported only in
    the run's own process, never in the worker that judges it: whatever it replaces there, the
    worker judges the run from its events."""
    def forge(entries):
        impl = dict(entries[4]["impl"])  # green 6 with the red's (buggy) code ...
        tampered = (repo / ".tdd" / "blobs" / impl[where]).read_bytes() + TAMPER.encode()
        digest = sha256_bytes(tampered)
        (repo / ".tdd" / "blobs" / digest).write_bytes(tampered)
        entries[5]["impl"] = {**impl, where: digest}  # ... and code that tampers with the replay
        return entries

    rewrite(repo, forge)
    summary = verify(repo)
    assert not summary.ok
    assert any("entry 6 (green): test test_gru.py::test_hand_example_gradient_with_respect_to_h: failed" in p
               for p in summary.problems), summary.problems


def test_a_green_whose_tests_differ_from_its_red_is_caught(repo):
    def forge(entries):
        entries[3]["tests"] = dict(entries[1]["tests"])  # green 4 keeps green 2's tests
        return entries

    rewrite(repo, forge)
    problems = verify(repo).problems
    assert any(
        p.startswith("entry 4 (green, line 4): a green must have exactly the test files of its red (entry 3)")
        for p in problems
    ), problems


def test_a_submitted_test_that_never_went_red_is_caught(repo):
    def forge(entries):
        entries[18]["introduced"] = []  # red 19 no longer claims its test
        return entries

    rewrite(repo, forge)
    problems = verify(repo).problems
    assert any(
        "test test_gru.py::test_no_state_means_zeros_and_bad_arguments_raise: never went red" in p for p in problems
    ), problems
    assert any(p.startswith("entry 19 (red, line 19): a red must introduce at least one new test") for p in problems)


def test_a_journal_that_starts_with_green_is_caught(repo):
    rewrite(repo, lambda entries: entries[1:])
    problems = verify(repo).problems
    assert any(
        p.startswith("entry 1 (green, line 1): phases must alternate starting with red") for p in problems
    ), problems


def test_missing_blobs_are_caught(repo):
    entry = load_journal(journal_of(repo)).entries[6]
    digest = entry.tests["test_gru.py"]
    (repo / ".tdd" / "blobs" / digest).unlink()
    problems = verify(repo).problems
    assert any(f"test file test_gru.py: blob {digest[:12]}... is missing" in p for p in problems), problems


def test_a_journal_copied_from_another_repository_is_caught(repo, tmp_path):
    other = tmp_path / "other-tests"
    other.mkdir()
    source = (repo / TESTS / "test_gru.py").read_text()
    (other / "test_gru.py").write_text(source.replace("atol=1e-12", "atol=1e-9"))
    problems = verify(repo, other).problems
    assert any("the submitted tests differ from the last green (entry 20) in ['test_gru.py']" in p for p in problems)


def test_a_journal_ending_with_a_red_is_caught(repo):
    rewrite(repo, lambda entries: entries[:-1])
    problems = verify(repo).problems
    assert any(p.startswith("entry 19: the journal ends with a red") for p in problems), problems


def test_a_line_that_is_no_entry_is_a_format_error_naming_the_line(repo):
    with journal_of(repo).open("a") as handle:
        handle.write("{not json\n")
    with pytest.raises(JournalFormatError, match=r"journal.jsonl:21: expected one JSON object per line"):
        verify(repo)
    journal_of(repo).write_text('{"seq": 1}\n')
    with pytest.raises(JournalFormatError, match=r"journal.jsonl:1: not a journal entry: field version"):
        verify(repo)


def test_grade_with_a_malformed_journal_exits_2(repo):
    journal_of(repo).write_text("garbage\n")
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(repo / TESTS), "--journal", str(journal_of(repo))],
        capture_output=True, text=True, timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode == 2
    assert "journal.jsonl:1: expected one JSON object per line" in done.stderr


def test_grade_with_a_forged_journal_does_not_pass(repo):
    rewrite(repo, lambda entries: entries[1:])
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(repo / TESTS), "--journal", str(journal_of(repo)),
         "--format", "json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["journal"]["checked"] and not report["journal"]["ok"]
    assert "the red-then-green journal does not verify" in report["reasons"]


def test_the_bundled_journal_is_rebuilt_from_scratch_by_the_real_commands(tmp_path):
    dest = tmp_path / "rebuilt"
    done = subprocess.run(
        [sys.executable, str(LAYOUT.examples / "build_student.py"), str(dest)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert verify(dest).ok
    rebuilt = load_journal(journal_of(dest)).entries
    committed = load_journal(journal_of(STUDENT)).entries
    keep = ("seq", "phase", "tests", "impl", "outcomes", "introduced")
    assert [e.model_dump(include=set(keep)) for e in rebuilt] == [e.model_dump(include=set(keep)) for e in committed]
    assert [e.phase for e in rebuilt] == [Phase.RED, Phase.GREEN] * 10
