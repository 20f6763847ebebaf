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
from grader.core.models import Outcome, WorkerRun
from grader.flows.replay import run_snapshot, verify_journal
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


def test_grade_with_a_malformed_journal_grades_the_suite_and_the_journal_does_not_verify(repo):
    """One rule at every intake (grader/flows/intake.py): a journal that cannot be read is one
    that does not verify, its problem naming the file and line; the suite is graded."""
    journal_of(repo).write_text("garbage\n")
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(repo / TESTS), "--journal", str(journal_of(repo)),
         "--format", "json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr  # the assignment requires no journal: the kills decide
    report = json.loads(done.stdout)
    assert report["journal"]["checked"] and not report["journal"]["ok"]
    assert report["journal"]["problems"] == [
        f"{journal_of(repo)}:1: expected one JSON object per line, got: Expecting value: line 1 column 1 (char 0)"]


def test_grade_with_a_forged_journal_does_not_pass_where_the_assignment_requires_one(repo, tmp_path):
    rewrite(repo, lambda entries: entries[1:])
    required = tight_assignment(tmp_path / "assignment.toml", require_journal="true")
    done = grade(repo / TESTS, journal_of(repo), "--assignment", str(required))
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["journal"]["checked"] and not report["journal"]["ok"]
    assert report["score"]["killed"] == report["score"]["total"]  # the kills alone would pass
    assert report["reasons"] == ["the red-then-green journal does not verify"]


def test_a_journal_that_does_not_verify_costs_nothing_where_none_is_required(repo, tmp_path):
    """No worse than no journal at all: the verdict rests on the kills, and the report still
    lists what to fix in the journal, in every format (Gradescope: a failed check worth 0)."""
    from grader.core.models import Report
    from grader.report import render

    rewrite(repo, lambda entries: entries[1:])
    optional = tight_assignment(tmp_path / "assignment.toml", require_journal="false")
    done = grade(repo / TESTS, journal_of(repo), "--assignment", str(optional))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["passed"] and report["reasons"] == []
    assert report["score"]["killed"] == report["score"]["total"] == 12
    assert report["journal"]["checked"] and not report["journal"]["ok"]
    assert any("phases must alternate starting with red" in p for p in report["journal"]["problems"]), report["journal"]
    text = render(Report.model_validate(report), "text")
    assert "phases must alternate starting with red" in text, text
    results = json.loads(render(Report.model_validate(report), "gradescope"))
    assert results["score"] == results["max_score"] == 12.0
    [check] = [t for t in results["tests"] if t["name"] == "Journal"]
    assert check["status"] == "failed" and check["output"].startswith("Does not verify."), check
    assert "phases must alternate starting with red" in check["output"]


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


# Appended by a forger to a broken gru.py: at import, find the reporter of the run's outcomes (in
# the frames that imported this module, and among every object of the process) and make it report
# every test as passed.
REPORT_EVERYTHING_PASSED = """

import gc as _gc
import sys as _sys


def _reporters():
    found = {}
    candidates = list(_gc.get_objects())
    frame = _sys._getframe()
    while frame is not None:
        candidates += list(frame.f_locals.values())
        frame = frame.f_back
    for value in candidates:
        for item in (value, getattr(value, "reporter", None)):
            if type(item).__name__ == "Reporter" and hasattr(item, "send"):
                found[id(item)] = item
    return list(found.values())


def _all_passed(reporter):
    send = reporter.send

    def send_passed(**event):
        result = event.get("result")
        if isinstance(result, dict):
            event["result"] = {**result, "outcome": "passed", "message": ""}
        return send(**event)

    reporter.send = send_passed


for _reporter in _reporters():
    _all_passed(_reporter)
"""


def test_a_recorded_implementation_that_rewrites_the_reported_outcomes_does_not_verify(repo):
    """A green's recorded gru.py runs only in its run's implementation process: the tests that
    judge it, and the reporter of their outcomes, are in another process it cannot reach."""
    def forge(entries):
        impl = dict(entries[4]["impl"])  # green 6 with the red's (broken) gru.py ...
        tampered = (repo / ".tdd" / "blobs" / impl["tinyllm/rnn/gru.py"]).read_bytes() + REPORT_EVERYTHING_PASSED.encode()
        digest = sha256_bytes(tampered)
        (repo / ".tdd" / "blobs" / digest).write_bytes(tampered)
        entries[5]["impl"] = {**impl, "tinyllm/rnn/gru.py": digest}  # ... and a forged report
        return entries

    rewrite(repo, forge)
    summary = verify(repo)
    assert not summary.ok
    assert any("entry 6 (green): test test_gru.py::test_hand_example_gradient_with_respect_to_h: failed" in p
               for p in summary.problems), summary.problems


SPIN = "def test_spin():\n    while True:\n        pass\n"


def spinning_journal(root: Path, entries: int) -> tuple[Path, Path]:
    """A chained journal of ``entries`` entries whose every snapshot's test spins until its limit
    (it need not verify: it only has to cost its replay time); returns (journal, tests)."""
    tests = root / "tests"
    tests.mkdir(parents=True)
    (tests / "test_spin.py").write_text(SPIN)
    blobs = root / ".tdd" / "blobs"
    blobs.mkdir(parents=True)
    impl = {}
    for path in sorted((LAYOUT.reference / "tinyllm").rglob("*.py")):
        data = path.read_bytes()
        impl[path.relative_to(LAYOUT.reference).as_posix()] = sha256_bytes(data)
        (blobs / sha256_bytes(data)).write_bytes(data)
    (blobs / sha256_bytes(SPIN.encode())).write_bytes(SPIN.encode())
    test = "test_spin.py::test_spin"
    lines, prev = [], ""
    for seq in range(1, entries + 1):
        red = seq % 2 == 1
        entry = JournalEntry(
            version=1, seq=seq, phase=Phase.RED if red else Phase.GREEN, time="2026-12-02T15:41:35.294654Z",
            tests={"test_spin.py": sha256_bytes(SPIN.encode())}, impl=impl,
            outcomes={test: "timeout" if red else "passed"}, introduced=[test] if red else [], prev=prev,
        )
        lines.append(entry_line(entry))
        prev = sha256_bytes(lines[-1].encode())
    journal = root / ".tdd" / "journal.jsonl"
    journal.write_text("\n".join(lines) + "\n")
    return journal, tests


def tight_assignment(path: Path, **limits: str) -> Path:
    """The course's assignment with some of its ``[limits]`` changed."""
    text = LAYOUT.assignment.read_text()
    for name, value in limits.items():
        line = next(line for line in text.splitlines() if line.startswith(f"{name} ="))
        text = text.replace(line, f"{name} = {value}")
    path.write_text(text)
    return path


def grade(tests: Path, journal: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(tests), "--journal", str(journal), "--format", "json", *extra],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def test_a_journal_of_spinning_entries_ends_within_the_gradings_wall_clock_budget(tmp_path):
    """Each of 160 snapshots spins for its whole test limit (80 s of replay on two cores): the
    replay spends the grading's wall-clock budget, stops there, and the report says so and how
    long it took."""
    journal, tests = spinning_journal(tmp_path / "spin", 160)
    budget = 6.0
    assignment = tight_assignment(tmp_path / "assignment.toml", test_timeout_s="1.0", budget_wall_s=str(budget),
                                  max_journal_entries="200")
    started = time.monotonic()
    done = grade(tests, journal, "--assignment", str(assignment))
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert elapsed < budget + 10.0, f"the grading took {elapsed:.1f} s for a wall-clock budget of {budget:g} s"
    assert budget - 1.0 < report["timing"]["journal_s"] < budget + 5.0, report["timing"]
    assert report["timing"]["total_s"] >= report["timing"]["journal_s"]
    assert not report["journal"]["ok"]
    assert any(p.startswith(f"replay stopped: the grading's wall-clock budget of {budget:g} s ran out")
               for p in report["journal"]["problems"]), report["journal"]["problems"]
    assert f"the grading's wall-clock budget of {budget:g} s ran out while the journal was replayed: " \
           "no variant was run" in report["reasons"], report["reasons"]


def test_a_journal_of_more_entries_than_the_assignment_allows_does_not_verify_and_is_never_replayed(tmp_path):
    journal, tests = spinning_journal(tmp_path / "spin", 160)
    started = time.monotonic()
    done = grade(tests, journal, "--assignment", str(tight_assignment(tmp_path / "assignment.toml",
                                                                        test_timeout_s="1.0")))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # the spinning test is graded
    assert time.monotonic() - started < 30.0
    report = json.loads(done.stdout)
    [problem] = report["journal"]["problems"]
    assert problem.startswith(f"{journal}: the journal holds 160 entries, more than the 100 the assignment allows")
    assert not report["journal"]["ok"] and report["timing"]["journal_s"] == 0.0


# A student's package whose framework is their own: their Tensor carries a mark, and their gru.py
# answers from it (42 where the mark is there), or returns a Tensor whose data is no numbers.
STUDENT_GRU = """
import numpy as np

from tinyllm.autograd.tensor import Tensor


class _Odd(Tensor):
    @property
    def data(self):
        return np.array([object()], dtype=object)

    @data.setter
    def data(self, value):
        pass


def gru_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    if float(np.asarray(x.data if isinstance(x, Tensor) else x).ravel()[0]) < 0:
        return _Odd(np.zeros(1))
    return Tensor(np.full((1, 1), 42.0 if getattr(Tensor, "mark", "") == "student" else 0.0))
"""
JUDGING_TESTS = """
import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell

ARGS = [np.zeros((3, 1)), np.zeros((3, 1)), np.zeros(3), np.zeros(3)]


def test_the_tests_run_on_the_courses_framework():
    assert not hasattr(Tensor, "mark")


def test_the_implementation_runs_on_the_students_own():
    assert gru_cell(np.ones((1, 1)), np.zeros((1, 1)), *ARGS).data[0, 0] == 42.0


def test_a_tensor_whose_data_is_no_numbers_is_an_error_of_that_test():
    gru_cell(-np.ones((1, 1)), np.zeros((1, 1)), *ARGS)


def test_the_next_test_still_reaches_the_implementation():
    assert gru_cell(np.ones((1, 1)), np.zeros((1, 1)), *ARGS).data[0, 0] == 42.0
"""


def test_a_students_package_runs_only_in_the_implementation_process(tmp_path):
    impl = tmp_path / "impl"
    shutil.copytree(LAYOUT.reference / "tinyllm", impl / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    tensor = impl / "tinyllm" / "autograd" / "tensor.py"
    tensor.write_text(tensor.read_text() + '\nTensor.mark = "student"\n')
    (impl / "tinyllm" / "rnn" / "gru.py").write_text(STUDENT_GRU)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_judging.py").write_text(JUDGING_TESTS)
    [run] = run_snapshot(LAYOUT, tests, impl, LIMITS, [WorkerRun(variant="yours", source=STUDENT_GRU)])
    assert not run.crashed and not run.collection_errors, (run.crashed, run.collection_errors)
    outcomes = {r.test_id.split("::")[-1]: r for r in run.results}
    assert outcomes["test_the_tests_run_on_the_courses_framework"].outcome is Outcome.PASSED
    assert outcomes["test_the_implementation_runs_on_the_students_own"].outcome is Outcome.PASSED
    odd = outcomes["test_a_tensor_whose_data_is_no_numbers_is_an_error_of_that_test"]
    assert odd.outcome is Outcome.FAILED and "must be of plain numbers" in odd.message, odd
    assert outcomes["test_the_next_test_still_reaches_the_implementation"].outcome is Outcome.PASSED


def test_an_lstm_recorded_implementation_that_rewrites_the_reported_outcomes_does_not_verify(tmp_path):
    """The same forgery in the LSTM's bundled journal: green 2 recorded with red 1's lstm.py (no
    LSTM yet) and the forged report appended; its replay reports the tests that failed."""
    from grader.core.paths import layout_for

    layout = layout_for(LAYOUT.root, "l3-2-lstm")
    repo = tmp_path / "lstm-student"
    shutil.copytree(LAYOUT.examples / "lstm-student", repo, ignore=shutil.ignore_patterns("__pycache__"))
    module = layout.module_file  # tinyllm/rnn/lstm.py

    def forge(entries):
        impl = dict(entries[0]["impl"])
        tampered = (repo / ".tdd" / "blobs" / impl[module]).read_bytes() + REPORT_EVERYTHING_PASSED.encode()
        digest = sha256_bytes(tampered)
        (repo / ".tdd" / "blobs" / digest).write_bytes(tampered)
        entries[1]["impl"] = {**impl, module: digest}
        return entries

    honest = verify_journal(journal_of(repo), repo / layout.student_tests, layout=layout,
                            limits=RunLimits.of(load_assignment(layout.assignment)))
    assert honest.ok, honest.problems
    rewrite(repo, forge)
    summary = verify_journal(journal_of(repo), repo / layout.student_tests, layout=layout,
                             limits=RunLimits.of(load_assignment(layout.assignment)))
    assert not summary.ok
    assert "entry 2 (green): test test_lstm.py::test_one_unit_worked_by_hand: failed when its green snapshot was " \
           "replayed, but a green must pass" in summary.problems, summary.problems
