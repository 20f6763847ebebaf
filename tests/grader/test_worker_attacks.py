"""Attacks on the worker itself, from a test run in one of its children (the policy check is not
involved: these run as submitted code would with it off). Each must fail inside the test, be
reported as that test's failure with a message, and leave the next run unharmed."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.core.models import Outcome, WorkerRun
from grader.core.paths import default_layout
from grader.run.runner import run_suites
from tests.limits import unbudgeted
from grader.sandbox.base import Layer
from grader.sandbox.status import sandbox_status

LAYOUT = default_layout()
REFERENCE = LAYOUT.module_source.read_text()
LIMITS = unbudgeted(test_timeout_s=20.0, run_timeout_s=60.0)

HEADER = "import os\nimport numpy as np\n\n"
ATTACKS = {
    # A run sees no /proc of its own; where it does, the worker is non-dumpable: its /proc files
    # are root's, closed to its children.
    "read_the_workers_memory": '''
def test_attack():
    pid = os.getppid()
    with open(f"/proc/{pid}/maps") as maps:
        start = int(maps.readline().split("-")[0], 16)
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(start)
        assert mem.read(16)
''',
    "read_the_workers_environment": '''
def test_attack():
    with open(f"/proc/{os.getppid()}/environ", "rb") as env:
        assert b"PYTHONHASHSEED" in env.read()
''',
    # No new process from a child: the fork itself fails, numpy or not.
    "fork_with_numpy_only": '''
def test_attack():
    data = np.arange(10)
    pid = os.fork()
    if pid == 0:
        np.save("/tmp/forked.npy", data)
        os._exit(0)
    os.waitpid(pid, 0)
''',
    # A grandchild writing forged results into every descriptor it might reach.
    "report_pipe_from_a_grandchild": '''
def test_attack():
    pid = os.fork()
    if pid == 0:
        for fd in range(3, 64):
            try:
                os.write(fd, b'{"result": {"test_id": "x", "outcome": "passed"}}\\n')
            except OSError:
                pass
        os._exit(0)
    os.waitpid(pid, 0)
''',
    # 100 MB on one line: the child's output is a file capped at the sandbox's file size.
    "a_hundred_megabytes_on_one_line": '''
def test_attack():
    print("x" * 100_000_000, flush=True)
''',
}
# A run's /proc is empty where it has namespaces of its own; elsewhere the worker's files there
# are root's (it is non-dumpable).
_NO_PROC = ("No such file or directory", "PermissionError")
EXPECTED = {
    "read_the_workers_memory": _NO_PROC,
    "read_the_workers_environment": _NO_PROC,
    "fork_with_numpy_only": "PermissionError",
    "report_pipe_from_a_grandchild": "PermissionError",
    "a_hundred_megabytes_on_one_line": "File too large",
}
NORMAL = '''
from tinyllm.rnn.gru import GRU


def test_builds():
    assert GRU(2, 3).num_layers == 1
'''


def _suite(folder: Path, body: str) -> Path:
    folder.mkdir()
    (folder / "test_attack.py").write_text(HEADER + body)
    return folder


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_on_the_worker_fails_in_its_test_and_harms_nothing(attack, tmp_path):
    status = sandbox_status()
    assert status.active(Layer.SECCOMP) and status.active(Layer.BUBBLEWRAP), status.render()
    [run] = run_suites(layout=LAYOUT, tests_dir=_suite(tmp_path / "attack", ATTACKS[attack]),
                       runs=[WorkerRun(variant="reference", source=REFERENCE)], hash_seed=1, limits=LIMITS)
    assert run.crashed == "", f"{attack}: the run itself died: {run.crashed}"
    [result] = run.results
    assert result.test_id == "test_attack.py::test_attack"
    assert result.outcome is Outcome.FAILED, f"{attack}: the attack went through: {result}"
    expected = EXPECTED[attack] if isinstance(EXPECTED[attack], tuple) else (EXPECTED[attack],)
    assert any(text in result.message for text in expected), f"{attack}: {result.message}"

    [after] = run_suites(layout=LAYOUT, tests_dir=_suite(tmp_path / "normal", NORMAL),
                         runs=[WorkerRun(variant="reference", source=REFERENCE)], hash_seed=1, limits=LIMITS)
    assert after.crashed == "" and after.collection_errors == ()
    assert [(r.test_id, r.outcome) for r in after.results] == [("test_attack.py::test_builds", Outcome.PASSED)]


def test_the_worker_imports_neither_pydantic_nor_rich():
    """The worker starts cold for every grading: its path is the standard library, numpy and
    pytest only (grader.core.protocol carries the job, not the pydantic models)."""
    import subprocess
    import sys

    code = (
        "import sys, grader.worker, _pytest.config, _pytest.main, _pytest.python, numpy\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'pydantic_core', 'rich'}))"
    )
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, cwd=LAYOUT.root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
