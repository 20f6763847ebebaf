"""tinyllm is installed with the project: importable anywhere in the venv, and the course tests
run there as they are, with no PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from grader.core.paths import default_layout

LAYOUT = default_layout()
# What a fresh shell has: none of this test run's own path set-up (tests/conftest.py).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_installed_tinyllm_is_the_reference(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", "import tinyllm.rnn.gru as gru; print(gru.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == LAYOUT.module_source.resolve()


def test_the_course_tests_run_in_the_venv_with_no_pythonpath():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         LAYOUT.course_tests.relative_to(LAYOUT.root).as_posix()],
        capture_output=True, text=True, cwd=LAYOUT.root, env=ENV, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1].startswith("10 passed"), done.stdout[-500:]
