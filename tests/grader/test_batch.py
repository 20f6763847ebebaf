"""``grade-batch``: folders and archives (as an LMS hands them out), journals, one row and one
JSON report per student, whatever a student handed in."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from grader.core.assignment import load_assignment
from grader.flows.batch import BatchRow, find_submissions, grade_batch
from grader.core.paths import default_layout

LAYOUT = default_layout()
STUDENT = LAYOUT.examples / "student"
TESTS = Path("python") / "tests" / "l3-3-gru"
ASSIGNMENT = load_assignment(LAYOUT.assignment)
REQUIRED = ASSIGNMENT.model_copy(update={"require_journal": True})
OPTIONAL = ASSIGNMENT.model_copy(update={"require_journal": False})


def repository(dest: Path) -> Path:
    """A student repository: tests, implementation and a genuine journal."""
    shutil.copytree(STUDENT, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def bare_tests(dest: Path) -> Path:
    """The same tests at the folder's root, no journal."""
    dest.mkdir(parents=True)
    for test in (STUDENT / TESTS).glob("*.py"):
        shutil.copyfile(test, dest / test.name)
    return dest


def tar_gz(folder: Path, dest: Path) -> Path:
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(folder, arcname=".", filter=lambda info: None if "__pycache__" in info.name else info)
    return dest


def zip_of(folder: Path, dest: Path, wrapper: str = "") -> Path:
    with zipfile.ZipFile(dest, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, wrapper + path.relative_to(folder).as_posix())
    return dest


def by_student(rows: list[BatchRow]) -> dict[str, BatchRow]:
    return {row.student: row for row in rows}


# ------------------------------------------------------------------- the journal
def test_under_require_journal_a_valid_journal_passes_and_none_fails_for_that_reason(tmp_path):
    subs = tmp_path / "subs"
    repository(subs / "alice")
    bare_tests(subs / "bob")
    rows = by_student(grade_batch(subs, layout=LAYOUT, assignment=REQUIRED))
    assert list(rows) == ["alice", "bob"]
    alice, bob = rows["alice"], rows["bob"]
    assert alice.passed, alice.problems
    assert alice.journal_cell == "verified"
    assert alice.report.journal.checked and alice.report.journal.ok and alice.report.journal.entries == 20
    # bob's tests are alice's: they kill as much, and only the missing journal fails him
    assert bob.killed == alice.killed and bob.kill_rate >= REQUIRED.threshold
    assert not bob.passed
    assert bob.journal_cell == "not verified: no journal (.tdd/journal.jsonl) was submitted"
    assert bob.problems == ["the red-then-green journal does not verify"]


def test_a_forged_or_unreadable_journal_is_graded_not_verified_naming_the_line(tmp_path):
    subs = tmp_path / "subs"
    forged = repository(subs / "forger") / ".tdd" / "journal.jsonl"
    lines = forged.read_text().splitlines()
    forged.write_text("\n".join(lines[:-1]) + "\n")  # the last green removed: it ends with a red
    garbled = repository(subs / "garbler") / ".tdd" / "journal.jsonl"
    garbled.write_text(garbled.read_text().replace("\n", "\nnot json\n", 1))
    rows = by_student(grade_batch(subs, layout=LAYOUT, assignment=REQUIRED))
    forger, garbler = rows["forger"], rows["garbler"]
    assert not forger.passed and "the red-then-green journal does not verify" in forger.problems
    assert forger.journal_cell.startswith("not verified: entry 19: the journal ends with a red")
    assert not garbler.passed and garbler.report is not None  # the tests were graded all the same
    # the file is named as it is in the submission, not where the grader put it
    assert garbler.journal_cell.startswith(
        "not verified: garbler/.tdd/journal.jsonl:2: expected one JSON object per line"), garbler.journal_cell


def test_a_journal_that_is_a_link_out_of_the_submission_is_not_followed(tmp_path):
    subs = tmp_path / "subs"
    repo = repository(subs / "mallory")
    secret = tmp_path / "staff-only.jsonl"
    shutil.copyfile(repo / ".tdd" / "journal.jsonl", secret)
    (repo / ".tdd" / "journal.jsonl").unlink()
    (repo / ".tdd" / "journal.jsonl").symlink_to(secret)
    [row] = grade_batch(subs, layout=LAYOUT, assignment=REQUIRED)
    assert row.journal_cell == "not verified: mallory/.tdd/journal.jsonl: a link; the journal must be a file of the submission"
    assert not row.passed


def test_where_no_journal_is_required_one_that_does_not_verify_is_reported_and_costs_nothing(tmp_path):
    subs = tmp_path / "subs"
    forged = repository(subs / "forger") / ".tdd" / "journal.jsonl"
    forged.write_text("\n".join(forged.read_text().splitlines()[:-1]) + "\n")  # ends with a red
    [row] = grade_batch(subs, layout=LAYOUT, assignment=OPTIONAL)
    assert row.passed and row.problems == [], row.problems  # the verdict rests on the kills
    assert row.killed == 12 and row.kill_rate == 1.0
    assert row.journal_cell.startswith("not verified: entry 19: the journal ends with a red"), row.journal_cell
    assert not row.report.journal.ok
    assert any("the journal ends with a red" in p for p in row.report.journal.problems), row.report.journal.problems


def test_a_folder_wrapping_the_tests_or_a_repository_is_taken_off_as_an_archives_is(tmp_path):
    """One wrapping folder, as every intake takes it off (grader/flows/intake.py); two are
    refused, naming the folder the tests lie in."""
    subs = tmp_path / "subs"
    repository(subs / "alice" / "l3-3-gru-main")
    bare_tests(subs / "carol" / "mytests")
    bare_tests(subs / "dave" / "outer" / "mytests")
    rows = by_student(grade_batch(subs, layout=LAYOUT, assignment=ASSIGNMENT))
    assert rows["alice"].passed and rows["alice"].journal_cell == "verified", rows["alice"].problems
    assert rows["carol"].passed and rows["carol"].killed == 12 and rows["carol"].journal_cell == "none"
    assert rows["dave"].report is None and rows["dave"].problems == [
        "could not be graded: dave/outer: no test file at the top; the test files are further down, in mytests/: "
        "put them at the top, in one folder that holds everything, or in python/tests/l3-3-gru/ of a repository"]


# ------------------------------------------------------------------- archives
def test_a_folder_of_archives_is_graded_one_row_each_with_its_journal_and_reports(tmp_path):
    """The LMS download: alice.tar.gz (her repository, journal included) and carol.zip (tests
    wrapped in a folder, no journal), through the command as staff run it."""
    subs = tmp_path / "subs"
    subs.mkdir()
    tar_gz(repository(tmp_path / "alice"), subs / "alice.tar.gz")
    zip_of(bare_tests(tmp_path / "carol"), subs / "carol.zip", wrapper="mytests/")
    (subs / "index.html").write_text("<p>downloaded from the LMS</p>")  # neither: skipped, said so
    assignment = tmp_path / "assignment.toml"
    assignment.write_text(LAYOUT.assignment.read_text().replace("require_journal = false", "require_journal = true"))
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade-batch", str(subs), "--assignment", str(assignment),
         "--output", str(tmp_path / "grades.csv"), "--reports", str(tmp_path / "reports")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    with (tmp_path / "grades.csv").open(newline="", encoding="utf-8") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    assert list(rows) == ["alice", "carol"]
    assert rows["alice"]["passed"] == "yes" and rows["alice"]["journal"] == "verified"
    assert rows["alice"]["killed"] == rows["carol"]["killed"] == "12"
    assert rows["carol"]["passed"] == "no"
    assert rows["carol"]["journal"] == "not verified: no journal (.tdd/journal.jsonl) was submitted"
    assert json.loads((tmp_path / "reports" / "alice.json").read_text())["journal"]["ok"] is True
    assert json.loads((tmp_path / "reports" / "carol.json").read_text())["passed"] is False
    assert "index.html: skipped" in done.stderr
    assert "2 submissions graded, 1 passed" in done.stdout


def hostile_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def hostile_tar(path: Path, link: str, target: str) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        test = b"def test_x():\n    assert True\n"
        info = tarfile.TarInfo("test_a.py")
        info.size = len(test)
        tar.addfile(info, io.BytesIO(test))
        info = tarfile.TarInfo(link)
        info.type, info.linkname = tarfile.SYMTYPE, target
        tar.addfile(info)
    return path


def test_a_bad_archive_is_one_row_naming_the_member_and_the_rule_and_the_batch_goes_on(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    hostile_zip(subs / "eve.zip", {"test_a.py": b"def test_x():\n    pass\n", "../../escaped.py": b"x = 1\n"})
    hostile_tar(subs / "frank.tar.gz", "test_b.py", "/etc/passwd")
    (subs / "grace.zip").write_text("not an archive at all")
    (subs / "heidi.tar.gz").write_bytes(b"\x1f\x8b" + os.urandom(3 * 1024 * 1024))  # over the upload limit
    zip_of(repository(tmp_path / "ivan"), subs / "ivan.zip")
    reports = tmp_path / "reports"
    unpacked_before = set(Path(tempfile.gettempdir()).glob("mutagrade-intake-*"))
    rows = by_student(grade_batch(subs, layout=LAYOUT, assignment=ASSIGNMENT, reports=reports))
    assert set(Path(tempfile.gettempdir()).glob("mutagrade-intake-*")) <= unpacked_before  # none left behind
    assert list(rows) == ["eve", "frank", "grace", "heidi", "ivan"]
    assert rows["eve"].problems == [
        "could not be graded: eve.zip: member '../../escaped.py': '..' is not allowed in a path"]
    assert rows["frank"].problems == ["could not be graded: frank.tar.gz: member 'test_b.py': links are not allowed"]
    assert rows["grace"].problems == [
        "could not be graded: grace.zip: the archive must be a .tar.gz or a .zip, found neither (unknown file signature)"]
    assert rows["heidi"].problems == [
        "could not be graded: heidi.tar.gz: the archive is 3145730 bytes; at most 2097152 are accepted"]
    assert not (tmp_path / "escaped.py").exists() and not list(tmp_path.rglob("escaped.py"))
    for name in ("eve", "frank", "grace", "heidi"):
        assert not rows[name].passed and rows[name].report is None and rows[name].journal_cell == "none"
        document = json.loads((reports / f"{name}.json").read_text())
        assert document["student"] == name and document["passed"] is False
        assert document["error"] == rows[name].problems[0]
    assert rows["ivan"].passed and rows["ivan"].journal_cell == "verified"  # graded after all of them
    assert json.loads((reports / "ivan.json").read_text())["passed"] is True


def test_which_entries_are_students_and_two_submissions_of_one_student_are_refused(tmp_path):
    subs = tmp_path / "subs"
    bare_tests(subs / "alice")
    zip_of(subs / "alice", subs / "alice.zip")
    (subs / "bob.tgz").write_bytes(b"")
    (subs / ".DS_Store").write_bytes(b"")
    (subs / "notes.txt").write_text("")
    (subs / "linked").symlink_to(subs / "alice")
    found, skipped = find_submissions(subs)
    assert [(s.student, [p.name for p in s.paths]) for s in found] == [
        ("alice", ["alice", "alice.zip"]), ("bob", ["bob.tgz"]), ("linked", ["linked"])]
    assert skipped == ["notes.txt"]
    rows = by_student(grade_batch(subs, layout=LAYOUT, assignment=ASSIGNMENT))
    assert rows["alice"].problems == [
        "could not be graded: two submissions for alice: alice, alice.zip; keep one of them"]
    assert rows["bob"].problems == [
        "could not be graded: bob.tgz: the archive must be a .tar.gz or a .zip, found neither (unknown file signature)"]
    assert rows["linked"].problems == [
        "could not be graded: linked is a link; a student's submission must be a folder or an archive of its own"]


def test_more_submissions_ahead_than_sandbox_users_allow_is_refused(tmp_path):
    with pytest.raises(ValueError, match="ahead: expected 0 to 8 submissions prepared ahead, got 9"):
        grade_batch(tmp_path, layout=LAYOUT, assignment=ASSIGNMENT, ahead=9)


def test_grade_batch_on_a_folder_with_no_student_is_exit_2(tmp_path):
    (tmp_path / "readme.txt").write_text("")
    done = subprocess.run([sys.executable, "-m", "grader.cli", "grade-batch", str(tmp_path), "--output",
                           str(tmp_path / "g.csv")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "expected one folder or archive (.zip, .tar.gz) per student, found none" in done.stderr


@pytest.mark.parametrize("module", ["grader.flows.batch", "grader.cli"])
def test_the_batch_uses_no_part_of_the_service(module):
    code = f"import sys, {module}; print(sorted(m for m in ('fastapi', 'sqlalchemy', 'starlette') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
