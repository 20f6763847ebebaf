"""mutagrade check: the student's implementation, journal and tests, in one verdict."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.paths import default_layout

LAYOUT = default_layout()
GRU = Path("python") / "tinyllm" / "rnn" / "gru.py"


def check(repo: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", "check", str(repo), "--format", "json", *extra],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    dest = tmp_path / "student"
    shutil.copytree(LAYOUT.examples / "student", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_the_bundled_student_passes_every_check(repo):
    done = check(repo)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    impl = report["implementation"]
    assert impl["checked"] and impl["ok"] and impl["live_torch"]
    names = {t["id"].split("::")[-1] for t in impl["tests"]}
    assert "test_matches_live_torch" in names and "test_hand_example_gru_cell" in names
    assert len(names) == 11
    assert report["journal"]["ok"] and report["journal"]["entries"] == 20
    assert report["passed"] and report["score"]["killed"] == 12


def test_a_wrong_implementation_fails_the_check_naming_the_course_tests(repo):
    gru = repo / GRU
    gru.write_text(gru.read_text().replace("return n + z * (h - n)", "return z * n + (1 - z) * h"))
    done = check(repo)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert not report["implementation"]["ok"] and not report["passed"]
    failing = {t["id"].split("::")[-1] for t in report["implementation"]["tests"] if t["outcome"] != "passed"}
    assert {"test_hand_example_gru_cell", "test_update_gate_near_one_keeps_the_state", "test_matches_live_torch"} <= failing
    assert report["reasons"][0] == "your implementation does not pass the course tests"
    # The journal no longer matches the implementation it recorded, but its tests still do.
    assert report["journal"]["checked"]


def test_no_journal_means_no_pass(repo):
    shutil.rmtree(repo / ".tdd")
    report = json.loads(check(repo).stdout)
    assert not report["passed"]
    assert any("no journal at" in p for p in report["journal"]["problems"])


def test_a_missing_implementation_is_exit_2(repo):
    (repo / GRU).unlink()
    done = check(repo)
    assert done.returncode == 2
    assert "gru.py: no implementation" in done.stderr
