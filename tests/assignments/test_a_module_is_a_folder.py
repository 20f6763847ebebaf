"""Adding a module takes a folder and its reference, no code: a checkout given a third module
(the LSTM again, under another module name, ``tinyllm.rnn.cell3``, in a folder of its own) is
calibrated and graded by the grader as it is, in the sandbox, with the same guarantees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.paths import default_layout, layout_for
from tests.assignments.test_lstm_grading import GOOD
from tests.student_wheel import readable_folder

ROOT = default_layout().root
LSTM = layout_for(ROOT, "l3-2-lstm")
NAME = "l9-cell3"
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


def _renamed(text: str) -> str:
    return text.replace("tinyllm.rnn.lstm", "tinyllm.rnn.cell3").replace("rnn/lstm.py", "rnn/cell3.py")


@pytest.fixture(scope="module")
def checkout():
    """A checkout (readable by the sandbox users) whose course has one more module, made of
    files alone: the reference and its stub in the shared tinyllm, and a folder."""
    root = readable_folder("mutagrade-new-module-")
    try:
        shutil.copytree(ROOT / "reference", root / "reference", ignore=shutil.ignore_patterns("__pycache__"))
        rnn = root / "reference" / "tinyllm" / "rnn"
        for suffix in (".py", ".pyi"):
            shutil.copyfile(rnn / f"lstm{suffix}", rnn / f"cell3{suffix}")
        shutil.copytree(ROOT / "assignments", root / "assignments", ignore=shutil.ignore_patterns("__pycache__"))
        folder = root / "assignments" / NAME
        shutil.copytree(LSTM.assignment_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
        rules = (folder / "assignment.toml").read_text()
        rules = rules.replace('module = "tinyllm.rnn.lstm"', 'module = "tinyllm.rnn.cell3"')
        rules = rules.replace('student_tests = "python/tests/l3-2-lstm"', 'student_tests = "python/tests/l9-cell3"')
        (folder / "assignment.toml").write_text(rules.replace('example = "examples/lstm-student"', ""))
        for path in [*(folder / "tests").glob("*.py"), *(folder / "starter").rglob("*.py")]:
            path.write_text(_renamed(path.read_text()))
        for path in root.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def mutagrade(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader.cli", "--root", str(checkout), *args, "--assignment", NAME],
                          capture_output=True, text=True, timeout=600, env=ENV)


def test_the_new_module_is_calibrated_as_the_folder_says(checkout):
    done = mutagrade(checkout, "calibrate")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Calibration OK: every variant is what the manifest says." in done.stdout


def test_a_suite_of_the_new_module_is_graded_and_reaches_no_reference(checkout, tmp_path):
    suite = readable_folder("mutagrade-new-module-suite-")
    try:
        (suite / "test_cell3.py").write_text(_renamed(GOOD))
        (suite / "test_cell3.py").chmod(0o644)
        done = mutagrade(checkout, "grade", str(suite))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert "VERDICT: PASSED" in done.stdout and "(15/15)" in done.stdout
        (suite / "test_cell3.py").write_text(_renamed(GOOD).replace("tinyllm.rnn.cell3", "tinyllm.rnn.lstm"))
        other = mutagrade(checkout, "grade", str(suite))
        assert other.returncode == 2 and "tinyllm.rnn.lstm" in other.stdout  # another module: the policy refuses
    finally:
        shutil.rmtree(suite, ignore_errors=True)
