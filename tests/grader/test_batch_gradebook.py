"""``grade-batch --gradebook-format canvas --roster``: the installed command grades two copies of
the bundled suite into a Canvas import file, one row per roster student in the roster's order,
in the assignment's points."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.assignment import load_assignment
from grader.core.models import Report, Score, Timing
from grader.core.paths import default_layout
from grader.core.points import points_of
from grader.core.roster import RosterEntry
from grader.flows.batch import BatchRow, gradebook_rows, write_gradebook

LAYOUT = default_layout()
STUDENT = LAYOUT.examples / "student"
TESTS = STUDENT / "python" / "tests" / "l3-3-gru" / "test_gru.py"
MUTAGRADE = Path(sys.executable).with_name("mutagrade")

ROSTER = (
    "Student,ID,SIS User ID,SIS Login ID,Section,Some Other Quiz (17)\n"
    "    Points Possible,,,,,10\n"
    '"Nobody, Carol",203,S-3,carol,Lab B,7\n'
    '"Liddell, Alice",201,S-1,alice,Lab A,9\n'
    '"Builder, Bob",202,S-2,bob,Lab A,\n'
)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(MUTAGRADE), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, cwd=LAYOUT.root)


def _assignment(tmp_path: Path, points: str) -> Path:
    """The bundled assignment, with full marks of ``points``."""
    head, limits = LAYOUT.assignment.read_text(encoding="utf-8").split("[limits]", 1)
    path = tmp_path / "assignment.toml"
    path.write_text(f"{head}points = {points}\n\n[limits]{limits}", encoding="utf-8")
    return path


def test_grade_batch_writes_a_canvas_import_in_the_assignments_points(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    shutil.copytree(STUDENT, subs / "alice", ignore=shutil.ignore_patterns("__pycache__"))
    # Bob's copy keeps the first three of the bundled tests: whatever it kills, its points
    # must follow the same rule as Gradescope's score.
    source = TESTS.read_text(encoding="utf-8")
    cut = [i for i in range(len(source)) if source.startswith("\ndef test_", i)][3]
    (subs / "bob").mkdir()
    (subs / "bob" / "test_gru.py").write_text(source[:cut], encoding="utf-8")
    (subs / "dave").mkdir()  # on no roster: a row of its own, nothing graded
    roster = tmp_path / "canvas.csv"
    roster.write_bytes(b"\xef\xbb\xbf" + ROSTER.encode("utf-8"))
    assignment = _assignment(tmp_path, "40")
    output = tmp_path / "canvas-import.csv"
    done = _run("grade-batch", str(subs), "--output", str(output), "--gradebook-format", "canvas",
                "--roster", str(roster), "--assignment", str(assignment), "--reports", str(tmp_path / "reports"))
    assert done.returncode == 0, done.stderr
    with output.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    title = load_assignment(assignment).name
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", title]
    assert rows[1] == ["Points Possible", "", "", "", "", "40"]
    by_login = {row[3]: row for row in rows[2:]}
    assert [row[3] for row in rows[2:]] == ["carol", "alice", "bob", "dave"]  # the roster's order, then the rest
    assert by_login["alice"] == ["Liddell, Alice", "201", "S-1", "alice", "Lab A", "40"]
    assert by_login["carol"] == ["Nobody, Carol", "203", "S-3", "carol", "Lab B", ""]  # no submission
    assert by_login["dave"] == ["", "", "", "dave", "", ""]  # could not be graded: no grade
    bob = json.loads((tmp_path / "reports" / "bob.json").read_text())
    expected = points_of(passed=bob["passed"], killed=bob["score"]["killed"], mutants=bob["score"]["total"],
                         assignment=load_assignment(assignment))
    assert 0 <= expected < 40
    assert float(by_login["bob"][5]) == round(expected, 2)
    assert "gradebook written to" in done.stdout


def test_a_canvas_or_moodle_gradebook_needs_a_roster(tmp_path: Path) -> None:
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    for fmt in ("canvas", "moodle"):
        done = _run("grade-batch", str(tmp_path / "subs"), "--output", str(tmp_path / "g.csv"),
                    "--gradebook-format", fmt)
        assert done.returncode == 2
        assert f"--gradebook-format {fmt} needs --roster" in done.stderr
    assert not (tmp_path / "g.csv").exists()


def test_a_bad_roster_is_refused_before_any_grading(tmp_path: Path) -> None:
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    roster = tmp_path / "roster.csv"
    roster.write_text("name,login\nAlice,alice\n", encoding="utf-8")
    done = _run("grade-batch", str(tmp_path / "subs"), "--output", str(tmp_path / "g.csv"),
                "--gradebook-format", "canvas", "--roster", str(roster))
    assert done.returncode == 2
    assert f"{roster}:1: " in done.stderr and "found: name, login" in done.stderr
    assert not (tmp_path / "g.csv").exists()


# ------------------------------------------------------- matching rows to the roster
COURSE = load_assignment(LAYOUT.assignment)


def _graded(student: str, *, killed: int, passed: bool) -> BatchRow:
    report = Report(submission=student, passed=passed, reasons=[], tests=[], mutants=[], variants=["reference"],
                    score=Score(kill_rate=killed / 12, killed=killed, total=12, threshold=0.7, required=[],
                                required_missing=[]), timing=Timing(total_s=1.0))
    return BatchRow(student=student, passed=passed, kill_rate=killed / 12, killed=killed, total=12,
                    missing_required=[], problems=[], report=report)


def _entry(login: str, name: str = "") -> RosterEntry:
    return RosterEntry(login=login, name=name, email=None, sis_id=None, lms_id=None, section=None)


def test_rows_follow_the_roster_then_the_submissions_on_no_roster() -> None:
    broken = BatchRow(student="zed", passed=False, kill_rate=0.0, killed=0, total=0, missing_required=[],
                      problems=["could not be graded: zed.zip: not an archive"])
    rows = [_graded("Alice", killed=12, passed=True), _graded("bob", killed=6, passed=False), broken,
            _graded("mallory", killed=1, passed=False)]
    roster = [_entry("carol", "C, Carol"), _entry("bob", "B, Bob"), _entry("alice", "A, Alice")]
    lines = gradebook_rows(rows, roster=roster, assignment=COURSE)
    assert [(line.entry.login, line.submission, line.status) for line in lines] == [
        ("carol", "", "no submission"), ("bob", "bob", "not passed"), ("alice", "Alice", "passed"),
        ("mallory", "mallory", "not passed"), ("zed", "zed", "could not be graded: zed.zip: not an archive")]
    points = [line.points for line in lines]
    assert points[0] is None and points[4] is None
    assert points[1:4] == pytest.approx([25.0, 100.0, 4.17], abs=1e-9)  # 6 x 0.5 of 12 units; 1 x 0.5 of 12
    assert all(line.final_points == line.points and line.penalty_points == 0 for line in lines)


def test_an_exact_login_wins_over_one_that_differs_in_case() -> None:
    rows = [_graded("ada", killed=12, passed=True), _graded("ADA", killed=3, passed=False)]
    lines = gradebook_rows(rows, roster=[_entry("ADA")], assignment=COURSE)
    assert [(line.entry.login, line.submission) for line in lines] == [("ADA", "ADA"), ("ada", "ada")]


def test_without_a_roster_the_csv_is_the_grading_csv_and_canvas_is_refused(tmp_path: Path) -> None:
    rows = [_graded("alice", killed=12, passed=True)]
    assert write_gradebook(rows, tmp_path / "g.csv", fmt="csv", roster=None, assignment=COURSE) == []
    assert (tmp_path / "g.csv").read_text().splitlines()[0].startswith("student,passed,kill_rate,killed,total")
    with pytest.raises(ValueError, match="a canvas gradebook needs the course's roster"):
        write_gradebook(rows, tmp_path / "c.csv", fmt="canvas", roster=None, assignment=COURSE)
    lines = write_gradebook(rows, tmp_path / "p.csv", fmt="csv", roster=[_entry("alice")], assignment=COURSE)
    assert [line.final_points for line in lines] == [100.0]
    with (tmp_path / "p.csv").open(newline="", encoding="utf-8") as handle:
        assert list(csv.reader(handle))[1] == ["alice", "", "", "alice", "passed", "100", "0", "100"]
