"""One exit code per outcome, whatever the command (README.md, "Exit codes"; grader/core/exits.py):
a suite that breaks the policy is bad input, exit 2, to ``grade``, ``check``, ``tdd red`` and
``tdd green`` (the staff command's and the student package's) and ``submit`` alike. Each is
run as a user runs it, a process of its own, on one student repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.exits import EXIT_BAD_INPUT, EXIT_OK
from grader.core.paths import default_layout
from tests.grader.test_tdd import HAND  # the given first test, as the tdd tests write it
from tests.services import ApiProcess, free_port, service_env

LAYOUT = default_layout()
TESTS = Path("python") / "tests" / "l3-3-gru"
GRU = Path("python") / "tinyllm" / "rnn" / "gru.py"
# A compiled file among the tests breaks the policy, and leaves the test files (what a green
# must keep byte for byte) as they were.
COMPILED = TESTS / "helpers.pyc"


def command(*args: str, student: bool = False, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``mutagrade ARGS``: the staff command, or the student package's (``student``)."""
    module = "grader.student_cli" if student else "api.cli"
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=300,
                          env=env or service_env(), cwd=LAYOUT.root)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A student repository whose implementation still fails its one test (the update swapped)."""
    root = tmp_path / "repo"
    shutil.copytree(LAYOUT.reference / "tinyllm", root / "python" / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    gru = root / GRU
    gru.write_text(gru.read_text().replace("    return (1 - z) * n + z * h\n", "    return z * n + (1 - z) * h\n"))
    (root / TESTS).mkdir(parents=True)
    (root / TESTS / "test_gru.py").write_text(HAND)
    return root


def test_a_policy_violation_is_exit_2_to_every_command(repo: Path, tmp_path: Path) -> None:
    (repo / COMPILED).write_bytes(b"\x00compiled")
    codes: dict[str, int] = {}
    for student in (False, True):
        name = "student " if student else ""
        done = command("tdd", "red", "--repo", str(repo), student=student)
        assert "helpers.pyc" in done.stderr, done.stderr
        codes[f"{name}tdd red"] = done.returncode
    (repo / COMPILED).unlink()
    assert command("tdd", "red", "--repo", str(repo)).returncode == EXIT_OK
    (repo / COMPILED).write_bytes(b"\x00compiled")
    for student in (False, True):
        name = "student " if student else ""
        done = command("tdd", "green", "--repo", str(repo), student=student)
        assert "helpers.pyc" in done.stderr, done.stderr
        codes[f"{name}tdd green"] = done.returncode
        codes[f"{name}check"] = command("check", str(repo), student=student).returncode
    codes["grade"] = command("grade", str(repo / TESTS)).returncode
    env = service_env(database_url=f"sqlite:///{tmp_path / 'mutagrade.db'}")
    api = ApiProcess(port=free_port(), env=env, log=tmp_path / "serve.log")
    api.start()
    try:
        token = command("admin", "token", "create", "--user", "alice", "--role", "student", env=env).stdout.strip()
        client = {**env, "MUTAGRADE_SERVER": api.url, "MUTAGRADE_TOKEN": token}
        codes["submit"] = command("submit", str(repo), student=True, env=client).returncode
    finally:
        api.stop()
    assert codes == dict.fromkeys(codes, EXIT_BAD_INPUT), codes
    assert len(codes) == 8


def test_a_red_refuses_an_import_the_policy_forbids_as_grading_does(repo: Path) -> None:
    (repo / TESTS / "test_gru.py").write_text("import os\n" + HAND)
    done = command("tdd", "red", "--repo", str(repo))
    assert done.returncode == EXIT_BAD_INPUT and "your tests would be rejected at grading" in done.stderr, done.stderr
    assert "test_gru.py:1:0: import of 'os'" in done.stderr, done.stderr
    assert command("grade", str(repo / TESTS)).returncode == EXIT_BAD_INPUT
    assert not (repo / ".tdd").exists()
    assert os.listdir(repo) == ["python"]
