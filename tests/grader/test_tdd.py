"""The student's tdd commands: each rule refuses with its reason and writes nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.paths import default_layout

LAYOUT = default_layout()
TEST_FILE = Path("python") / "tests" / "l3-3-gru" / "test_gru.py"
GRU = Path("python") / "tinyllm" / "rnn" / "gru.py"

HAND = '''import math
import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def test_hand_example_gru_cell():
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    h2 = gru_cell(Tensor([[1.0]], dtype=np.float64), np.array([[0.5]]), *w)
    assert np.allclose(h2.data, [[0.25 * np.tanh(0.75) + 0.375]])
'''
SWAPPED = ("    return (1 - z) * n + z * h\n", "    return z * n + (1 - z) * h\n")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(LAYOUT.reference / "tinyllm", root / "python" / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    (root / TEST_FILE).parent.mkdir(parents=True)
    (root / TEST_FILE).write_text(HAND)
    return root


def tdd(repo: Path, phase: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", "tdd", phase, "--repo", str(repo)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def journal(repo: Path) -> str:
    path = repo / ".tdd" / "journal.jsonl"
    return path.read_text() if path.exists() else ""


def edit(repo: Path, path: Path, old: str, new: str) -> None:
    text = (repo / path).read_text()
    assert old in text
    (repo / path).write_text(text.replace(old, new))


def refused(repo: Path, phase: str, reason: str) -> None:
    before = journal(repo)
    done = tdd(repo, phase)
    assert done.returncode == 1, done.stdout
    assert f"mutagrade tdd {phase}: refused:" in done.stderr and reason in done.stderr, done.stderr
    assert journal(repo) == before, "a refused command wrote to the journal"


def test_a_whole_cycle_and_every_refusal(repo):
    refused(repo, "green", "there is no red to turn green")
    refused(repo, "red", "do not fail against your current implementation: test_gru.py::test_hand_example_gru_cell")

    edit(repo, GRU, *SWAPPED)
    done = tdd(repo, "red")
    assert done.returncode == 0 and "red recorded (entry 1)" in done.stdout
    refused(repo, "red", "the last entry (#1) is already a red")
    refused(repo, "green", "not every test passes yet: test_gru.py::test_hand_example_gru_cell (failed)")

    edit(repo, TEST_FILE, "0.375", "0.37500")
    refused(repo, "green", "the test files changed since the red (entry 1): test_gru.py")
    edit(repo, TEST_FILE, "0.37500", "0.375")

    edit(repo, GRU, SWAPPED[1], SWAPPED[0])
    done = tdd(repo, "green")
    assert done.returncode == 0 and "green recorded (entry 2): all 1 tests pass" in done.stdout
    refused(repo, "red", "no test is new since the last green")

    status = tdd(repo, "status")
    assert "red #1   test_gru.py::test_hand_example_gru_cell: green at #2" in status.stdout
    assert "Next: write ONE new test" in status.stdout


def test_a_collection_error_is_not_a_red(repo):
    (repo / TEST_FILE).write_text(HAND + "\ndef test_broken(:\n    pass\n")
    refused(repo, "red", "test_gru.py:12:16: syntax error")
    (repo / TEST_FILE).write_text(HAND.replace("import gru_cell", "import gru_cell, no_such_thing"))
    refused(repo, "red", "a collection error is not a red")


def test_tests_the_grader_would_reject_are_refused_early(repo):
    (repo / TEST_FILE).write_text("import os\n" + HAND)
    refused(repo, "red", "your tests would be rejected at grading")


def test_a_broken_journal_stops_the_commands(repo):
    edit(repo, GRU, *SWAPPED)
    assert tdd(repo, "red").returncode == 0
    path = repo / ".tdd" / "journal.jsonl"
    path.write_text(path.read_text().replace('"phase":"red"', '"phase":"green"'))
    refused(repo, "green", "does not verify")


def test_status_without_a_journal_says_what_to_do(repo):
    done = tdd(repo, "status")
    assert done.returncode == 0
    assert "No journal yet" in done.stdout and "mutagrade tdd red" in done.stdout


# A test right on the reference, but seconds of work on any machine: far past a 1 s test limit.
SLOW = HAND + "    n = 0\n    for _ in range(2 * 10**8):\n        n += 1\n"


@pytest.fixture
def tight_root(tmp_path: Path) -> Path:
    """A checkout whose assignment gives each test 1 s (the reference and course tests as shipped)."""
    root = tmp_path / "course"
    shutil.copytree(LAYOUT.reference, root / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    text = LAYOUT.assignment.read_text()
    assert "test_timeout_s = 10.0" in text
    (root / "mutants").mkdir()
    (root / "mutants" / "assignment.toml").write_text(text.replace("test_timeout_s = 10.0", "test_timeout_s = 1.0"))
    return root


def _slow_red(repo: Path, run) -> None:
    (repo / TEST_FILE).write_text(SLOW)
    edit(repo, GRU, *SWAPPED)
    done = run("red")
    assert done.returncode == 0 and "red recorded (entry 1)" in done.stdout, done.stdout + done.stderr
    edit(repo, GRU, SWAPPED[1], SWAPPED[0])


def test_tdd_green_times_out_a_test_past_the_assignments_limit_as_the_replay_does(repo, tight_root):
    # The journal's replay runs each test under the assignment's limit: a green that passes only
    # under a longer one would be recorded, then refused at grading.
    def run(phase: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "grader.cli", "--root", str(tight_root), "tdd", phase, "--repo", str(repo)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )

    _slow_red(repo, run)
    before = journal(repo)
    done = run("green")
    assert done.returncode == 1, done.stdout
    assert "not every test passes yet: test_gru.py::test_hand_example_gru_cell (timeout)" in done.stderr, done.stderr
    assert journal(repo) == before


def test_the_student_commands_take_the_courses_assignment_limit(repo, tight_root, monkeypatch, capsys):
    from grader import student_cli

    monkeypatch.setattr(student_cli, "COURSE", tight_root)

    def run(phase: str) -> subprocess.CompletedProcess:
        code = student_cli.main(["tdd", phase, "--repo", str(repo)])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess([], code, out, err)

    _slow_red(repo, run)
    done = run("green")
    assert done.returncode == 1, done.stdout
    assert "test_gru.py::test_hand_example_gru_cell (timeout)" in done.stderr, done.stderr

    # `check` replays the journal and runs the course tests under the same limit.
    from grader.flows import student_check

    seen = []

    def check_implementation(impl_dir, *, layout, limits, live=None):
        seen.append(limits)
        raise RuntimeError("stopped here: the limits are what this test is about")

    monkeypatch.setattr(student_check, "check_implementation", check_implementation)
    student_cli.main(["check", str(repo)])
    assert "stopped here" in capsys.readouterr().err
    [limits] = seen
    assert limits.limits.test_timeout_s == 1.0


def test_a_journal_at_the_assignments_most_entries_takes_no_more(repo, tmp_path):
    root = tmp_path / "course"
    shutil.copytree(LAYOUT.reference, root / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "mutants").mkdir()
    text = LAYOUT.assignment.read_text()
    assert "max_journal_entries = 100" in text
    (root / "mutants" / "assignment.toml").write_text(text.replace("max_journal_entries = 100", "max_journal_entries = 2"))

    def run(phase: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "grader.cli", "--root", str(root), "tdd", phase, "--repo", str(repo)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )

    edit(repo, GRU, *SWAPPED)
    assert run("red").returncode == 0
    edit(repo, GRU, SWAPPED[1], SWAPPED[0])
    assert run("green").returncode == 0
    before = journal(repo)
    done = run("red")
    assert done.returncode == 1
    assert "already holds 2 entries, the most the assignment allows (max_journal_entries = 2)" in done.stderr, done.stderr
    assert journal(repo) == before
