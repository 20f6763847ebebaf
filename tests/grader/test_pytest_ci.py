"""The CI rule: a skipped test fails a run when CI=true, except tests marked gpu."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SUITE = '''
import pytest

def test_runs():
    assert True

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("no CUDA device")
'''


def _pytest(tmp_path, ci: bool, extra: str = "") -> subprocess.CompletedProcess:
    (tmp_path / "test_suite.py").write_text(SUITE + extra)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(tmp_path),
         "-p", "grader.pytest_ci", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )


SKIPPING = '''
def test_skipped():
    pytest.skip("not today")
'''


@pytest.mark.parametrize(("ci", "extra", "code"), [(True, SKIPPING, 1), (False, SKIPPING, 0), (True, "", 0)])
def test_a_skip_fails_only_in_ci_and_gpu_skips_never(tmp_path, ci, extra, code):
    done = _pytest(tmp_path, ci, extra)
    assert done.returncode == code, done.stdout
    if code == 1:
        assert "CI: 1 test(s) skipped, and a skip fails CI: test_suite.py::test_skipped" in done.stdout
