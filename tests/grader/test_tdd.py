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


def tdd_in(folder: Path, phase: str) -> subprocess.CompletedProcess:
    """``mutagrade tdd PHASE`` run from ``folder``, without ``--repo``."""
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", "tdd", phase],
        capture_output=True, text=True, timeout=120, cwd=folder, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def refused(repo: Path, phase: str, reason: str) -> None:
    """``tdd PHASE`` refused for ``reason``: a refused red or undo is bad input (exit 2), a
    refused green a check that did not pass (exit 1)."""
    before = journal(repo)
    done = tdd(repo, phase)
    assert done.returncode == (1 if phase == "green" else 2), done.stdout + done.stderr
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
    refused(repo, "undo", "does not verify")


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
    shutil.copytree(LAYOUT.root / "assignments", root / "assignments", ignore=shutil.ignore_patterns("__pycache__"))
    text = LAYOUT.assignment.read_text()
    assert "test_timeout_s = 10.0" in text
    rules = root / LAYOUT.assignment.relative_to(LAYOUT.root)
    rules.write_text(text.replace("test_timeout_s = 10.0", "test_timeout_s = 1.0"))
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
    shutil.copytree(LAYOUT.root / "assignments", root / "assignments", ignore=shutil.ignore_patterns("__pycache__"))
    text = LAYOUT.assignment.read_text()
    assert "max_journal_entries = 100" in text
    rules = root / LAYOUT.assignment.relative_to(LAYOUT.root)
    rules.write_text(text.replace("max_journal_entries = 100", "max_journal_entries = 2"))

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
    assert done.returncode == 2
    assert "already holds 2 entries, the most the assignment allows (max_journal_entries = 2)" in done.stderr, done.stderr
    assert journal(repo) == before


# ------------------------------------------------------------ what a red shows, and refuses
def second_test(expected: str = "0.375") -> str:
    """The hand example again, as a second test expecting ``expected`` where it expects 0.375."""
    body = HAND.split("\n\n\n", 1)[1].replace("test_hand_example_gru_cell", "test_hand_example_again")
    return "\n\n" + body.replace("0.375", expected)


def test_a_red_shows_each_new_tests_failure(repo):
    edit(repo, GRU, *SWAPPED)
    (repo / TEST_FILE).write_text(HAND + second_test("0.5"))
    done = tdd(repo, "red")
    assert done.returncode == 0, done.stderr
    assert "red recorded (entry 1)" in done.stdout
    for test in ("test_gru.py::test_hand_example_gru_cell", "test_gru.py::test_hand_example_again"):
        assert f"\n  {test}:\n    AssertionError" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("then run `mutagrade tdd green`."), done.stdout


def test_an_error_raised_in_the_implementation_is_a_red(repo):
    # A NameError or TypeError of the implementation (not of the test) is what a red is for.
    edit(repo, GRU, SWAPPED[0], "    return (1 - z) * n + z * h_typo\n")
    done = tdd(repo, "red")
    assert done.returncode == 0 and "red recorded (entry 1)" in done.stdout, done.stderr
    assert "h_typo" in done.stdout, done.stdout
    edit(repo, GRU, "    return (1 - z) * n + z * h_typo\n", "    raise TypeError('not written yet')\n")
    (repo / TEST_FILE).write_text(HAND + second_test())
    assert tdd(repo, "undo").returncode == 0
    done = tdd(repo, "red")
    assert done.returncode == 0 and "TypeError: not written yet" in done.stdout, done.stdout + done.stderr


# Errors in a test's own code: each is raised in the test file itself, on the line named.
OWN_ERRORS = {
    "NameError": ("    cell = GRUCel(2, 3)\n", "NameError: name 'GRUCel' is not defined"),
    "ImportError": ("    from tinyllm.rnn.gru import GRUCel\n", "ImportError: cannot import name 'GRUCel'"),
    "TypeError": ("    x = ones(2)\n", "TypeError: ones() missing 1 required positional argument: 'cols'"),
}


@pytest.mark.parametrize("kind", sorted(OWN_ERRORS))
def test_a_red_whose_failure_is_an_error_in_the_tests_own_code_is_refused(repo, kind):
    line, message = OWN_ERRORS[kind]
    body = HAND + "\n\ndef ones(rows, cols):\n    return np.ones((rows, cols))\n\n\ndef test_cell():\n" + line
    body += "    assert False, 'not reached'\n"
    (repo / TEST_FILE).write_text(body)
    edit(repo, GRU, *SWAPPED)  # the hand example fails for a good reason: one bad test refuses the red
    number = body.splitlines().index(line.rstrip("\n")) + 1
    refused(repo, "red", f"test_gru.py::test_cell: {message}")
    done = tdd(repo, "red")
    assert f"(test_gru.py:{number})" in done.stderr, done.stderr
    assert "fix the test" in done.stderr and "test_hand_example_gru_cell" not in done.stderr, done.stderr
    assert not (repo / ".tdd").exists()


# ------------------------------------------------------------------------------- undo
def test_undo_removes_the_newest_entry_one_at_a_time_down_to_an_empty_journal(repo):
    refused(repo, "undo", "nothing to undo")
    edit(repo, GRU, *SWAPPED)
    assert tdd(repo, "red").returncode == 0
    edit(repo, GRU, SWAPPED[1], SWAPPED[0])
    assert tdd(repo, "green").returncode == 0
    red = journal(repo).splitlines(keepends=True)[0]

    done = tdd(repo, "undo")
    assert done.returncode == 0, done.stderr
    assert "undone: entry 2 (green" in done.stdout and "the journal now ends with entry 1 (red)" in done.stdout
    assert journal(repo) == red
    # The red stands again, and a new green continues its chain.
    done = tdd(repo, "green")
    assert done.returncode == 0 and "green recorded (entry 2)" in done.stdout, done.stderr

    assert tdd(repo, "undo").returncode == 0
    done = tdd(repo, "undo")
    assert done.returncode == 0, done.stderr
    assert "undone: entry 1 (red" in done.stdout and "test_gru.py::test_hand_example_gru_cell" in done.stdout
    assert "the journal is now empty" in done.stdout
    assert journal(repo) == ""
    refused(repo, "undo", "nothing to undo")
    assert ": 0 entries." in tdd(repo, "status").stdout


def test_after_undoing_a_mistaken_red_the_journal_still_verifies(repo):
    from grader.core.assignment import load_assignment
    from grader.core.journal import chain_problems, load_journal
    from grader.flows.replay import verify_journal
    from grader.run.runner import RunLimits
    from grader.student_cli import local_sandbox

    edit(repo, GRU, *SWAPPED)
    assert tdd(repo, "red").returncode == 0
    edit(repo, GRU, SWAPPED[1], SWAPPED[0])
    assert tdd(repo, "green").returncode == 0
    kept = journal(repo)
    (repo / TEST_FILE).write_text(HAND + second_test("0.5"))  # red, but for a wrong expectation
    assert tdd(repo, "red").returncode == 0
    done = tdd(repo, "undo")
    assert done.returncode == 0 and "undone: entry 3 (red" in done.stdout, done.stderr
    assert "test_gru.py::test_hand_example_again" in done.stdout
    assert journal(repo) == kept

    (repo / TEST_FILE).write_text(HAND + second_test())  # the right expectation, red on the swapped GRU
    edit(repo, GRU, *SWAPPED)
    assert "red recorded (entry 3)" in tdd(repo, "red").stdout
    edit(repo, GRU, SWAPPED[1], SWAPPED[0])
    assert "green recorded (entry 4)" in tdd(repo, "green").stdout
    path = repo / ".tdd" / "journal.jsonl"
    assert chain_problems(load_journal(path)) == []
    limits = RunLimits.of(load_assignment(LAYOUT.assignment), sandbox=local_sandbox())
    summary = verify_journal(path, repo / TEST_FILE.parent, layout=LAYOUT, limits=limits)
    assert summary.ok and summary.entries == 4, summary.problems


# ------------------------------------------------------------------ from a subfolder
def test_tdd_finds_the_journal_from_a_subfolder_as_git_finds_its_folder(repo):
    (repo / ".git").mkdir()  # the repository's top: where a journal starts when there is none yet
    tests = repo / TEST_FILE.parent
    edit(repo, GRU, *SWAPPED)
    done = tdd_in(tests, "red")
    assert done.returncode == 0 and "red recorded (entry 1)" in done.stdout, done.stdout + done.stderr
    assert (repo / ".tdd" / "journal.jsonl").is_file() and not (tests / ".tdd").exists()

    (repo / ".git").rmdir()  # .tdd/ alone marks the repository now
    status = tdd_in(repo / "python" / "tinyllm" / "rnn", "status")
    assert status.returncode == 0
    assert f"Journal {(repo / '.tdd' / 'journal.jsonl').resolve()}: 1 entries." in status.stdout, status.stdout
    assert "red #1   test_gru.py::test_hand_example_gru_cell: waiting for green" in status.stdout
    edit(repo, GRU, SWAPPED[1], SWAPPED[0])
    done = tdd_in(tests, "green")
    assert done.returncode == 0 and "green recorded (entry 2)" in done.stdout, done.stdout + done.stderr
    done = tdd_in(tests, "undo")
    assert done.returncode == 0 and "undone: entry 2 (green" in done.stdout, done.stdout + done.stderr
