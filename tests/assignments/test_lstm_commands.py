"""Every staff command on the LSTM, by name (``--assignment l3-2-lstm``), through the command line
as staff run it: the folder is all it took to add the module."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.core.paths import default_layout, layout_for
from tests.assignments.test_lstm_grading import GOOD, WITHOUT_THE_GATES

ROOT = default_layout().root
LSTM = layout_for(ROOT, "l3-2-lstm")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


def mutagrade(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=ROOT)


def _repository(folder: Path, source: str) -> Path:
    tests = folder / LSTM.student_tests
    tests.mkdir(parents=True)
    (tests / "test_lstm.py").write_text(source, encoding="utf-8")
    return folder


def test_grade_batch_grades_lstm_repositories_by_their_own_tests_folder(tmp_path):
    subs = tmp_path / "subs"
    _repository(subs / "ada", GOOD)
    _repository(subs / "bob", WITHOUT_THE_GATES)
    done = mutagrade("grade-batch", str(subs), "--assignment", "l3-2-lstm", "--output", str(tmp_path / "grades.csv"))
    assert done.returncode == 0, done.stderr[-3000:]
    with (tmp_path / "grades.csv").open(newline="", encoding="utf-8") as handle:
        rows = {r["student"]: r for r in csv.DictReader(handle)}
    assert rows["ada"]["passed"] == "yes" and rows["ada"]["killed"] == "15", rows["ada"]
    assert rows["bob"]["passed"] == "no", rows["bob"]


def test_calibrate_proves_every_lstm_variant():
    done = mutagrade("calibrate", "--assignment", "l3-2-lstm", "--format", "json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["problems"] == []
    proofs = {v["id"]: v["proof"] for v in report["variants"] if v["kind"] == "mutant"}
    assert len(proofs) == 15 and all(proofs.values()), proofs
    assert proofs["s04"] == "breaks the contract property forget_bias_block"
    assert proofs["s11"] == "breaks the contract property dropout_last_layer"


def test_golden_compares_every_lstm_variant_with_the_stored_goldens():
    done = mutagrade("golden", "--assignment", "l3-2-lstm", "--no-live")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[2:] if line.strip()}
    assert "matches torch" in lines["reference"] and all("matches torch" in lines[w] for w in ("w01", "w02", "w03", "w04"))
    assert "differs" in lines["s01"] and "differs" in lines["s13"]


def test_the_gradescope_bundle_grades_the_assignment_it_was_made_for(tmp_path):
    out = tmp_path / "lstm.zip"
    done = mutagrade("bundle", "gradescope", "--output", str(out), "--assignment", "l3-2-lstm")
    assert done.returncode == 0, done.stderr
    assert "Set the assignment's points to 15 on Gradescope" in done.stdout, done.stdout
    assert "python/tests/l3-2-lstm/" in done.stdout
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        assert archive.read("assignment").decode() == "l3-2-lstm\n"
    assert {"mutagrade/assignments/l3-2-lstm/manifest.toml", "mutagrade/reference/tinyllm/rnn/lstm.py"} <= names


def test_the_starter_hands_out_the_lstms_stub_and_no_reference_module(tmp_path):
    dest = tmp_path / "starter"
    done = mutagrade("starter", str(dest), "--assignment", "l3-2-lstm")
    assert done.returncode == 0, done.stderr
    rnn = dest / "python" / "tinyllm" / "rnn"
    stub = (rnn / "lstm.py").read_text()
    assert 'raise NotImplementedError("lstm_cell is not written yet")' in stub
    assert not (rnn / "gru.py").exists()  # another module's reference is an answer too
    assert (dest / "python" / "tests" / "l3-2-lstm" / "test_lstm.py").is_file()


@pytest.mark.parametrize("given, expected", [
    ("l9-9-none", "expected the name of an assignment (l3-2-lstm, l3-3-gru)"),
    ("../assignments/l3-2-lstm/..", "expected the name of an assignment"),
])
def test_an_unknown_assignment_is_bad_input_naming_those_there_are(given, expected):
    done = mutagrade("calibrate", "--assignment", given)
    assert done.returncode == 2 and expected in done.stderr, done.stderr


def test_the_demo_grades_the_lstms_example_repository_and_its_journal():
    done = mutagrade("demo", "--assignment", "l3-2-lstm")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "reference tinyllm.rnn.lstm" in done.stdout and "Hand example" in done.stdout
    assert "c′ = " in done.stdout and "0.617574" in done.stdout  # the chapter's numbers, computed
    assert "VERDICT: PASSED" in done.stdout and "Journal: verified (20 entries" in done.stdout


def test_check_finds_the_lstm_by_the_repositorys_tests_folder(tmp_path):
    """`check` on the LSTM example: its course tests, live torch, its journal, its grade; the
    assignment is the one whose tests folder the repository holds (no --assignment needed for
    the student's commands; the staff command is told)."""
    done = mutagrade("check", str(ROOT / "examples" / "lstm-student"), "--assignment", "l3-2-lstm")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "VERDICT: PASSED" in done.stdout
    status = subprocess.run([sys.executable, "-c", "from grader.student_cli import run; run()", "tdd", "status",
                             "--repo", str(ROOT / "examples" / "lstm-student")],
                            capture_output=True, text=True, timeout=120, env=ENV)
    assert status.returncode == 0, status.stderr
    assert "20 entries" in status.stdout or "entry 20" in status.stdout, status.stdout


@pytest.mark.parametrize("args", [
    ("variants", "list", "--assignment", "l3-2-lstm"),
    ("variants", "--assignment", "l3-2-lstm", "list"),
])
def test_a_command_of_a_command_takes_the_assignment_after_or_before_its_name(args):
    done = mutagrade(*args)
    assert done.returncode == 0, done.stderr
    assert "s15" in done.stdout and "Initial state unpacked as (c0, h0)" in done.stdout
