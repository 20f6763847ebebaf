"""The sandbox against hostile submissions, for real: every attack ends as a clear per-test
error, the grader finishes, nothing outside the work directory changes, no process of a
sandbox user survives, and the next submission is graded right.

The battery runs in mode ``strict`` (every layer active; a machine without them fails here
rather than pass untested) with short limits, through the runner alone (no policy check).
"""

from __future__ import annotations

import ast
import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.core.models import Outcome, SuiteRun, WorkerRun
from grader.core.paths import default_layout
from grader.run.runner import RunLimits, WorkerProcess
from grader.sandbox.base import (
    Layer,
    LayerStatus,
    SandboxLimits,
    SandboxMode,
    SandboxStatus,
    SandboxUnavailable,
)
from grader.sandbox.seccomp import CHILD_SYSCALLS, child_syscalls_here
from grader.sandbox.status import check_mode, doctor_lines, sandbox_status
from grader.sandbox.users import (
    SandboxUser,
    _kill_pid,
    _kill_user,
    _lock_user,
    _processes_of,
    _uids_of,
    claim_user,
    kill_users,
    sandbox_users,
    user_processes,
)
from tests.calls import record_calls
from tests.limits import unbudgeted

LAYOUT = default_layout()
REFERENCE = LAYOUT.module_source.read_text()
LIMITS = unbudgeted(run_timeout_s=12.0, test_timeout_s=2.0, memory_mb=1024, jobs=1, sandbox=SandboxMode.STRICT)
SECRET = "TOPSECRET-4f1c9"
ENV_SECRET = "ENVSECRET-77d2a"

HEADER = '''
import ctypes
import os
import signal
import socket
import sys
import tempfile

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell
'''

NORMAL = '''
import math

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def test_hand():
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    out = gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[0.5]], dtype=np.float64), *w)
    assert np.allclose(out.data, [[0.25 * np.tanh(0.75) + 0.375]])
'''

# Each attack is the body of ``test_hostile``; it fails (or errs) when the attack is stopped.
# ``{outside}``, ``{port}``, ``{grader}`` and the like are filled in per test.
ATTACKS = {
    "fork_bomb": '''
    while True:
        os.fork()
''',
    "allocate_50_gb": '''
    block = bytearray(50 * 10**9)
    assert len(block) > 0
''',
    "memory_growth": '''
    chunks = []
    while True:
        chunks.append(bytearray(32 * 2**20))
''',
    "infinite_loop": '''
    while True:
        pass
''',
    "file_of_5_gb": '''
    chunk = b"x" * 2**20
    with open(os.path.join(tempfile.gettempdir(), "big"), "wb") as handle:
        for _ in range(5 * 1024):
            handle.write(chunk)
''',
    "many_open_files": '''
    folder = tempfile.mkdtemp()
    handles = [open(os.path.join(folder, f"f{{i}}"), "w") for i in range(100_000)]
    assert len(handles) == 100_000
''',
    "many_files_created": '''
    folder = tempfile.mkdtemp()
    for i in range(10**7):
        open(os.path.join(folder, f"f{{i}}"), "w").close()
''',
    "write_outside_the_work_dir": '''
    targets = [{canary!r}, {new_file!r}, {grader_file!r}, {reference_file!r}, {original!r}, "/etc/passwd", "/usr/bin/python3"]
    wrote = []
    for path in targets:
        try:
            with open(path, "a") as handle:
                handle.write("owned\\n")
            wrote.append(path)
        except OSError:
            pass
    assert wrote, "nothing outside could be written"
''',
    "output_of_1_gb": '''
    chunk = "x" * 2**20
    for _ in range(1024):
        sys.stdout.write(chunk)
        sys.stderr.write(chunk)
    sys.stdout.flush()
''',
    "tcp_connect_to_localhost": '''
    with socket.create_connection(("127.0.0.1", {port}), timeout=1) as conn:
        conn.sendall(b"hello from the sandbox")
''',
    "raw_and_netlink_sockets": '''
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
''',
    "read_a_root_only_secret": '''
    with open({secret_file!r}) as handle:
        assert {secret!r} in handle.read()
''',
    "read_the_graders_environment": '''
    found = []
    for pid in [{grader_pid}] + [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            with open(f"/proc/{{pid}}/environ", "rb") as handle:
                if {env_secret!r}.encode() in handle.read():
                    found.append(pid)
        except OSError:
            pass
    assert found, "no environment held the secret"
''',
    "read_the_graders_data": '''
    for path in {grader_data!r}:
        with open(path) as handle:
            handle.read()
''',
    "kill_the_parent": '''
    errors = []
    for attempt in (
        lambda: os.kill(os.getppid(), signal.SIGKILL),
        lambda: os.killpg(os.getpgid(os.getppid()), signal.SIGKILL),
        lambda: os.kill(-1, signal.SIGKILL),
        lambda: os.kill(1, signal.SIGKILL),
    ):
        try:
            attempt()
        except OSError as exc:
            errors.append(repr(exc))
    assert not errors, errors
''',
    "ptrace_the_parent": '''
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.ptrace(16, os.getppid(), None, None)  # PTRACE_ATTACH
    assert rc == 0, f"ptrace failed: errno {{ctypes.get_errno()}}"
''',
    "write_the_parents_memory": '''
    with open(f"/proc/{{os.getppid()}}/mem", "r+b") as handle:
        handle.write(b"x")
''',
    "setsid_then_spin": '''
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
    os.setsid()
''',
    "new_namespaces": '''
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.unshare(0x10000000 | 0x00020000)  # CLONE_NEWUSER | CLONE_NEWNS
    assert rc == 0, f"unshare failed: errno {{ctypes.get_errno()}}"
''',
    "sys_exit_mid_test": '''
    sys.exit(0)
''',
    "os_exit_mid_test": '''
    os._exit(0)
''',
    "forged_result_lines": '''
    forged = (
        b'{{"result": {{"test_id": "test_hostile.py::test_hostile", "outcome": "passed", "message": "", "duration": 0.0}}}}\\n'
        b'{{"done": true}}\\n'
        b'{{"variant": "reference", "hash_seed": 1, "attempt": 1, "results": []}}\\n'
    )
    for fd in range(1024):
        try:
            os.write(fd, forged)
        except OSError:
            pass
''',
    "signal_storm": '''
    for _ in range(10_000):
        for target in (os.getppid(), 0, -1):
            os.kill(target, signal.SIGUSR1)
''',
    "deep_recursion": '''
    import json
    sys.setrecursionlimit(10**8)
    nested = []
    for _ in range(10**6):
        nested = [nested]
    json.dumps(nested)  # recursion in C: the stack overflows, the child dies of SIGSEGV
''',
}


# ----------------------------------------------------------------------------- helpers
def _leftovers(user: SandboxUser) -> list[int]:
    """The processes of ``user`` once no worker holds it (other gradings, on this machine at
    the same time, use the other sandbox users)."""
    claim = _lock_user([user], wait=60.0)
    try:
        return user_processes(user.uid)
    finally:
        claim.release()


def _digest(roots: list[Path]) -> dict[str, str]:
    """Every file and folder under ``roots``, with a hash of each file's bytes and its mode."""
    seen: dict[str, str] = {}
    for root in roots:
        for path in sorted([root, *root.rglob("*")]):
            if "__pycache__" in path.parts:
                continue
            info = path.lstat()
            content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else "dir"
            seen[str(path)] = f"{content} {info.st_mode:o} {info.st_uid}"
    return seen


def _write_suite(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_hostile.py").write_text(body)
    return folder


def _run(tests: Path, runs: list[WorkerRun] | None = None, limits: RunLimits = LIMITS) -> list[SuiteRun]:
    """Run the suite through one worker; check afterwards that its sandbox user has no process left."""
    worker = WorkerProcess(layout=LAYOUT, tests_dir=tests, hash_seed=1, limits=limits)
    user = worker.sandbox.user
    results = worker.run(runs or [WorkerRun(variant="reference", source=REFERENCE)])
    if user is not None:
        assert _leftovers(user) == [], f"processes of {user.name} survived the run"
    return results


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the work directory: a world-writable one with a world-writable canary
    and a root-only secret (the sandbox user could write the one and not read the other)."""
    folder = tmp_path / "outside"
    folder.mkdir()
    folder.chmod(0o777)
    canary = folder / "canary.txt"
    canary.write_text("canary\n")
    canary.chmod(0o666)
    secret = folder / "secret.txt"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    return folder


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


# ----------------------------------------------------------------------------- battery
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_is_a_per_test_error_and_harms_nothing(attack, tmp_path, outside, listener, monkeypatch):
    monkeypatch.setenv("MUTAGRADE_BATTERY_SECRET", ENV_SECRET)
    tests = tmp_path / "tests"
    values = {
        "canary": str(outside / "canary.txt"),
        "new_file": str(outside / "new.txt"),
        "grader_file": str(LAYOUT.root / "grader" / "worker" / "serve.py"),
        "reference_file": str(LAYOUT.module_source),
        "original": str(tests / "test_hostile.py"),
        "port": listener.getsockname()[1],
        "secret_file": str(outside / "secret.txt"),
        "secret": SECRET,
        "env_secret": ENV_SECRET,
        "grader_pid": os.getpid(),
        "grader_data": [str(LAYOUT.root / "pyproject.toml"), str(LAYOUT.mutants / "manifest.toml")],
    }
    body = ATTACKS[attack].format(**values)
    _write_suite(tests, HEADER + "\n\ndef test_hostile():" + body)
    # The grader's own code the attacks aim at (not all of grader/: it may be edited meanwhile).
    code = [LAYOUT.root / "grader" / name for name in ("worker/serve.py", "worker/child.py", "sandbox", "run/runner.py")]
    watched = [*code, LAYOUT.reference, LAYOUT.course_tests, LAYOUT.goldens.parent, outside, tests]
    before = _digest(watched)
    # The next submission's worker starts alongside, as the grader starts its workers ahead:
    # the attack must not reach it either.
    normal = WorkerProcess(layout=LAYOUT, tests_dir=_write_suite(tmp_path / "normal", NORMAL), hash_seed=1, limits=LIMITS)

    [run] = _run(tests)

    hostile = next((r for r in run.results if r.test_id == "test_hostile.py::test_hostile"), None)
    assert hostile is not None, f"the hostile test was not reported: {run}"
    assert hostile.outcome is not Outcome.PASSED, f"{attack}: the attack went through: {hostile}"
    assert hostile.message.strip(), f"{attack}: no message says what happened: {hostile}"
    assert _digest(watched) == before, f"{attack}: a file outside the work directory changed"
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing reached the port the test opened

    [after] = normal.run([WorkerRun(variant="reference", source=REFERENCE)])
    assert after.crashed == "" and after.collection_errors == ()
    assert [(r.test_id, r.outcome) for r in after.results] == [("test_hostile.py::test_hand", Outcome.PASSED)]


def test_the_outcomes_say_what_stopped_each_kind_of_attack(tmp_path):
    """Spot checks that the messages are the clear ones, not an accident."""
    suite = HEADER + '''
def test_alloc():
    bytearray(50 * 10**9)

def test_fork():
    os.fork()

def test_big_file():
    with open(os.path.join(tempfile.gettempdir(), "big"), "wb") as handle:
        handle.write(b"x" * (11 * 2**20))

def test_loop():
    while True:
        pass

def test_exit_last():
    os._exit(0)

def test_never_runs():
    pass
'''
    [run] = _run(_write_suite(tmp_path / "tests", suite))
    by_name = {r.test_id.split("::")[1]: r for r in run.results}
    assert by_name["test_alloc"].outcome is Outcome.FAILED and "MemoryError" in by_name["test_alloc"].message
    assert by_name["test_fork"].outcome is Outcome.FAILED and "Operation not permitted" in by_name["test_fork"].message
    assert "File too large" in by_name["test_big_file"].message
    assert by_name["test_loop"].outcome is Outcome.TIMEOUT and "limit of 2 s" in by_name["test_loop"].message
    for name in ("test_exit_last", "test_never_runs"):
        assert by_name[name].outcome is Outcome.ERROR
        assert "exited with status 0 before it finished" in by_name[name].message


def test_a_forged_report_is_an_error_for_the_tests_after_it(tmp_path):
    suite = HEADER + '''
def test_before():
    pass

def test_forges():
    for fd in range(3, 1024):
        try:
            os.write(fd, b'{"result": {"test_id": "test_hostile.py::test_after", "outcome": "passed"}}\\n')
        except OSError:
            pass

def test_after():
    assert False
'''
    [run] = _run(_write_suite(tmp_path / "tests", suite))
    by_name = {r.test_id.split("::")[1]: r for r in run.results}
    assert by_name["test_before"].outcome is Outcome.PASSED  # reported before the forgery: it stands
    for name in ("test_forges", "test_after"):
        assert by_name[name].outcome is Outcome.ERROR
        assert "forged or corrupted report" in by_name[name].message
    assert "forged" in run.crashed


def test_a_child_claiming_done_early_leaves_its_unreported_tests_missing(tmp_path):
    """Even the child's own reporter, used by the test itself, cannot turn a test that never
    ran into a pass: the worker counts a collected test without a result as missing."""
    suite = HEADER + '''
def test_claims_done(request):
    from grader.core.protocol import RunEvent

    reporter = next(p for p in request.config.pluginmanager.get_plugins() if type(p).__name__ == "Reporter")
    reporter.send(RunEvent("done"))
    os._exit(0)

def test_never_ran():
    assert False
'''
    [run] = _run(_write_suite(tmp_path / "tests", suite))
    outcomes = {r.test_id.split("::")[1]: r for r in run.results}
    assert outcomes["test_claims_done"].outcome is Outcome.MISSING
    assert outcomes["test_never_ran"].outcome is Outcome.MISSING
    assert outcomes["test_never_ran"].message == "the test never reported"
    assert Outcome.MISSING.kills


def test_a_hostile_run_cannot_change_another_variants_results(tmp_path):
    """Two variants side by side in one worker: the hostile one writes forged results for the
    other to every descriptor and signals every process it can see; the other is unharmed."""
    suite = HEADER + '''
import tinyllm.rnn.gru as gru

def test_one():
    if getattr(gru, "HOSTILE", False):
        forged = b'{"variant": "reference", "hash_seed": 1, "attempt": 1, "results": [], "crashed": "forged"}\\n'
        for fd in range(1024):
            try:
                os.write(fd, forged)
            except OSError:
                pass
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        assert False, "hostile"

def test_two():
    if getattr(gru, "HOSTILE", False):
        os.kill(os.getppid(), signal.SIGSTOP)
'''
    tests = _write_suite(tmp_path / "tests", suite)
    runs = [
        WorkerRun(variant="hostile", source=REFERENCE + "\nHOSTILE = True\n"),
        WorkerRun(variant="reference", source=REFERENCE),
    ]
    hostile, reference = _run(tests, runs, limits=unbudgeted(
        run_timeout_s=12.0, test_timeout_s=2.0, memory_mb=1024, jobs=2, sandbox=SandboxMode.STRICT,
    ))
    assert reference.crashed == "" and [r.outcome for r in reference.results] == [Outcome.PASSED] * 2
    assert hostile.variant == "hostile" and all(r.outcome is not Outcome.PASSED for r in hostile.results)


def test_a_child_holds_no_descriptor_but_its_own_report_pipe(tmp_path):
    """The worker's stdout (where results go to the grader), its job pipe and the other
    children's pipes are closed in each child before any test runs (its /proc is empty: each
    descriptor number is asked instead)."""
    suite = HEADER + '''
import stat


def test_descriptors():
    kinds = {}
    for fd in range(1024):
        try:
            info = os.fstat(fd)
        except OSError:
            continue
        kind = ("socket" if stat.S_ISSOCK(info.st_mode) else "pipe" if stat.S_ISFIFO(info.st_mode)
                else "device" if stat.S_ISCHR(info.st_mode) else "file")
        kinds[fd] = (kind, info.st_ino, info.st_nlink)
    assert False, repr(kinds)
'''
    runs = [WorkerRun(variant=name, source=REFERENCE) for name in ("reference", "twin")]
    limits = unbudgeted(run_timeout_s=12.0, test_timeout_s=2.0, memory_mb=1024, jobs=2, sandbox=SandboxMode.STRICT)
    for run in _run(_write_suite(tmp_path / "tests", suite), runs, limits=limits):
        kinds = ast.literal_eval(run.results[0].message.split("AssertionError: ")[-1].splitlines()[0])
        assert [k for k, *_ in kinds.values()].count("socket") == 1, kinds  # its own report socket
        assert "pipe" not in [k for k, *_ in kinds.values()], kinds
        # Standard input reads nothing; its output goes to one unnamed file of its own.
        assert kinds[0][0] == "device" and kinds[1] == kinds[2] and kinds[1][0] == "file" and kinds[1][2] == 0, kinds


def test_a_run_that_cannot_start_is_reported_as_such(tmp_path):
    """A process limit the worker itself fills: no child can be forked, and each run says so."""
    limits = unbudgeted(
        run_timeout_s=12.0, test_timeout_s=2.0, memory_mb=1024, jobs=1, sandbox=SandboxMode.STRICT,
        sandbox_limits=SandboxLimits(processes=1),
    )
    [run] = _run(_write_suite(tmp_path / "tests", NORMAL), limits=limits)
    assert run.results == () and "could not be started" in run.crashed, run
    assert "Resource temporarily unavailable" in run.crashed


def test_what_a_killed_grader_leaves_behind_goes_with_the_next_claim_of_its_user(tmp_path):
    """A grader killed outright cannot close its worker: bubblewrap's sandbox dies with it, and
    whatever is left (the copy, any process of the user) goes when the user is claimed again."""
    tests = _write_suite(tmp_path / "tests", NORMAL)
    grader = subprocess.Popen(
        [sys.executable, "-c", KILLED_GRADER, str(tests)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=LAYOUT.root,
    )
    line = grader.stdout.readline()
    assert line.startswith("sandbox "), line + grader.stdout.read()
    uid, workdir = line.split()[1:]
    assert Path(workdir).is_dir()
    grader.kill()
    grader.wait()
    grader.stdout.close()
    user = next(u for u in sandbox_users() if u.uid == int(uid))
    held = _lock_user([user], wait=60.0)
    try:  # the worker died with its grader (bubblewrap's --die-with-parent), unaided
        deadline = time.monotonic() + 30.0
        while user_processes(user.uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert user_processes(user.uid) == []
    finally:
        held.release()
    claim = claim_user([user], wait=60.0)
    claim.release()
    assert not Path(workdir).exists()


KILLED_GRADER = '''
import sys, time
from pathlib import Path
from grader.core.paths import default_layout
from grader.core.assignment import Limits
from grader.run.runner import RunLimits, WorkerProcess
from grader.sandbox.base import SandboxMode
from grader.sandbox.users import user_processes

worker = WorkerProcess(
    layout=default_layout(), tests_dir=Path(sys.argv[1]), hash_seed=1,
    limits=RunLimits(limits=Limits(test_timeout_s=20.0, budget_cpu_s=None, budget_wall_s=None, budget_memory_mb=None),
                     jobs=1, sandbox=SandboxMode.STRICT),
)
uid = worker.sandbox.user.uid
while not user_processes(uid):  # the worker is up: bubblewrap has tied it to this process
    time.sleep(0.01)
print("sandbox", uid, worker.sandbox.workdir, flush=True)
time.sleep(120)
'''


def test_submitted_code_runs_as_a_sandbox_user_with_only_its_copy_in_sight(tmp_path):
    suite = HEADER + f'''
def test_who_and_where():
    seen = sorted(os.listdir({str(LAYOUT.root)!r}))
    folder = {str(LAYOUT.assignment_dir)!r}  # only its goldens/ are the runs' to read
    inside = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    assert False, f"uid={{os.getuid()}} gid={{os.getgid()}} groups={{os.getgroups()}} seen={{seen}} inside={{inside}} cwd={{os.getcwd()}}"
'''
    tests = _write_suite(tmp_path / "tests", suite)
    [run] = _run(tests)
    message = run.results[0].message
    uids = {user.uid for user in sandbox_users()}
    uid = int(message.split("uid=")[1].split()[0])
    assert uid in uids and uid != os.getuid()
    assert "groups=[]" in message
    seen = message.split("seen=")[1].split(" inside=")[0]
    for hidden in ("mutants", "pyproject.toml", ".git", "tests", "examples"):
        assert f"'{hidden}'" not in seen, hidden
    # The assignment's folder shows its goldens, and none of its variants, rules or course tests.
    inside = message.split(" inside=")[1].split(" cwd=")[0]
    assert inside in ("[]", "['goldens']"), inside
    assert f"cwd={tests}" in message  # the copy sits where the tests were: messages name real paths


# ------------------------------------------------------------------ the children's allow-list
# Calls a test has no business making, each harmless and each allowed to the sandbox user by
# the kernel and by the worker's own filter: only the children's allow-list refuses them.
UNLISTED = HEADER + '''
import stat


def _checked(rc):
    """A libc call's -1 as the OSError Python would raise for it."""
    if rc == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def test_unix_socket():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()


def test_socketpair():
    for end in socket.socketpair():
        end.close()


def test_mknod_fifo():
    os.mknod(os.path.join(tempfile.mkdtemp(), "fifo"), stat.S_IFIFO | 0o600)


def test_personality():
    _checked(ctypes.CDLL(None, use_errno=True).personality(-1))  # only asks for the current one


def test_inotify():
    fd = ctypes.CDLL(None, use_errno=True).inotify_init1(0)
    _checked(fd)
    os.close(fd)


def test_wait_without_children():
    os.wait()


def test_after_the_refusals(tmp_path):
    (tmp_path / "kept.npy").write_bytes(b"")
    np.save(tmp_path / "kept.npy", np.arange(4.0))
    assert np.load(tmp_path / "kept.npy").sum() == 6.0
'''
REFUSED = ("test_unix_socket", "test_socketpair", "test_mknod_fifo", "test_personality", "test_inotify")


def test_a_call_off_the_childrens_allow_list_fails_its_own_test_with_eperm(tmp_path):
    [run] = _run(_write_suite(tmp_path / "tests", UNLISTED))
    by_name = {r.test_id.split("::")[1]: r for r in run.results}
    assert run.crashed == "" and len(by_name) == len(REFUSED) + 2, run
    for name in (*REFUSED, "test_wait_without_children"):
        assert by_name[name].outcome is Outcome.FAILED, by_name[name]
        assert "[Errno 1] Operation not permitted" in by_name[name].message, by_name[name]
    assert by_name["test_after_the_refusals"].outcome is Outcome.PASSED, by_name["test_after_the_refusals"]


def test_without_the_sandbox_the_same_calls_go_through(tmp_path):
    """The control: what refused the calls above is the children's filter, not the kernel."""
    limits = unbudgeted(run_timeout_s=12.0, test_timeout_s=2.0, jobs=1, sandbox=SandboxMode.NONE)
    [run] = _run(_write_suite(tmp_path / "tests", UNLISTED), limits=limits)
    by_name = {r.test_id.split("::")[1]: r for r in run.results}
    for name in (*REFUSED, "test_after_the_refusals"):
        assert by_name[name].outcome is Outcome.PASSED, by_name[name]
    wait = by_name["test_wait_without_children"]
    assert wait.outcome is Outcome.FAILED and "[Errno 10] No child processes" in wait.message, wait


# What ordinary tests do, in a run of its own: none of it may trip the allow-list.
LEGITIMATE = '''
import collections
import datetime
import decimal
import fractions
import functools
import json
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU

HERE = Path(__file__).parent


def test_tmp_path(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.txt").write_text("x")
    shutil.copy2(tmp_path / "a" / "b.txt", tmp_path / "c.txt")
    shutil.copytree(tmp_path / "a", tmp_path / "d")
    os.rename(tmp_path / "c.txt", tmp_path / "e.txt")
    os.chmod(tmp_path / "e.txt", 0o600)
    os.utime(tmp_path / "e.txt")
    np.save(tmp_path / "arr.npy", np.arange(5))
    np.savez_compressed(tmp_path / "z.npz", a=np.ones(3))
    assert np.load(tmp_path / "arr.npy").sum() == 10 and np.load(tmp_path / "z.npz")["a"].sum() == 3
    shutil.rmtree(tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "arr.npy", "e.txt", "z.npz"]


def test_tmp_path_factory_and_tempfile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    (folder / "f").write_bytes(b"1")
    with tempfile.NamedTemporaryFile(dir=folder) as handle:
        handle.write(b"abc")
        handle.flush()
        os.fsync(handle.fileno())
    with tempfile.TemporaryDirectory() as other:
        Path(other, "x").touch()
    assert (folder / "f").read_bytes() == b"1"


def test_reading_files_beside_the_tests():
    assert json.loads((HERE / "data.json").read_text()) == {"a": 1}
    assert "test_reading_files_beside_the_tests" in Path(__file__).read_text()
    assert "data.json" in os.listdir(HERE) and os.path.getsize(HERE / "data.json") > 0


def test_numpy_and_the_gru():
    rng = np.random.default_rng(0)
    out, h_n = GRU(3, 4, num_layers=2)(Tensor(rng.standard_normal((5, 2, 3))))
    assert out.data.shape == (5, 2, 4) and h_n.data.shape == (2, 2, 4)
    a = rng.standard_normal((64, 64))
    np.testing.assert_allclose(np.linalg.inv(a) @ a, np.eye(64), atol=1e-8)
    np.linalg.svd(a)
    np.linalg.eigvals(a)
    np.fft.fft(a[0])
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        np.ones(1) / np.zeros(1)


def test_raises_and_warnings(recwarn):
    with pytest.raises(ZeroDivisionError):
        1 / 0
    with pytest.warns(UserWarning):
        warnings.warn("w", UserWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DeprecationWarning):
            warnings.warn("d", DeprecationWarning)
    warnings.warn("kept", RuntimeWarning)
    assert len(recwarn) == 1


def test_time_and_random():
    start, clock = time.time(), time.perf_counter()
    time.monotonic(), time.process_time(), time.thread_time()
    time.sleep(0.01)
    assert time.perf_counter() - clock >= 0.01 and time.time() >= start
    datetime.datetime.now().astimezone()
    time.strftime("%c", time.localtime())
    random.seed(1)
    random.random()
    random.SystemRandom().random()
    assert len(os.urandom(16)) == 16
    np.random.seed(0)
    np.random.default_rng().random()
    assert statistics.mean([1, 2, 3]) == 2 and fractions.Fraction(1, 2) == 0.5 and decimal.Decimal("0.5") * 2 == 1


def test_capsys_monkeypatch_and_caplog(capsys, monkeypatch, caplog):
    print("hello")
    assert capsys.readouterr().out == "hello\\n"
    monkeypatch.setenv("SOME_SETTING", "1")
    monkeypatch.chdir(HERE)
    import logging
    logging.getLogger("t").warning("logged")
    assert "logged" in caplog.text and os.environ["SOME_SETTING"] == "1"


def test_threads():
    out = []
    worker = threading.Thread(target=lambda: out.append(sum(range(1000))))
    worker.start()
    worker.join()
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(abs, [-1, -2])) == [1, 2]
    assert out == [499500]


def test_what_the_process_may_ask_about_itself():
    os.getpid(), os.getppid(), os.getuid(), os.getcwd(), os.cpu_count(), os.sched_getaffinity(0)
    os.times(), os.uname(), os.getloadavg()
    import getpass
    import platform
    import resource
    resource.getrlimit(resource.RLIMIT_AS)
    resource.getrusage(resource.RUSAGE_SELF)
    assert getpass.getuser() and platform.platform()
    read, write = os.pipe()
    os.write(write, b"x")
    assert os.read(read, 1) == b"x"


def test_signals_to_itself():
    import signal
    seen = []
    signal.signal(signal.SIGUSR1, lambda *_: seen.append(1))
    os.kill(os.getpid(), signal.SIGUSR1)
    signal.raise_signal(signal.SIGUSR1)
    assert seen == [1, 1]


@pytest.mark.parametrize("value", [1, 2])
def test_parametrized(value):
    assert value in (1, 2)


@pytest.fixture
def with_teardown(tmp_path):
    yield tmp_path
    (tmp_path / "teardown").write_text("x")


def test_fixture_with_teardown(with_teardown):
    assert with_teardown.is_dir()
'''


def test_legitimate_tests_pass_in_children_under_the_allow_list(tmp_path):
    tests = _write_suite(tmp_path / "tests", LEGITIMATE)
    (tests / "data.json").write_text('{"a": 1}')
    [run] = _run(tests)
    not_passed = {r.test_id: r.message for r in run.results if r.outcome is not Outcome.PASSED}
    assert run.crashed == "" and run.collection_errors == (), run
    assert not_passed == {} and len(run.results) == 13


FILTER_IN_A_PROCESS = '''
import ctypes, os, sys
from grader.core.protocol import WorkerSandbox
from grader.sandbox.harden import ChildHardening
from grader.sandbox.seccomp import load_libseccomp

hardening = ChildHardening(
    settings=WorkerSandbox(seccomp=True), run_timeout=5.0,
    libseccomp=load_libseccomp(), allow_list=sys.argv[1] == "allow",
)
hardening.apply()
libc = ctypes.CDLL(None, use_errno=True)
seen = {}
for name, call in (("personality", lambda: libc.personality(-1)), ("fork", libc.fork), ("getppid", libc.getppid)):
    seen[name] = "refused" if call() == -1 and ctypes.get_errno() == 1 else "allowed"
print(seen)
'''


@pytest.mark.parametrize(("kind", "personality"), [("allow", "refused"), ("deny", "allowed")])
def test_the_deny_list_is_the_fallback_and_keeps_its_rules(kind, personality):
    """Where the allow-list cannot be installed, a child installs the deny-list: what is not
    named there goes through, and fork is refused under both."""
    done = subprocess.run(
        [sys.executable, "-c", FILTER_IN_A_PROCESS, kind], capture_output=True, text=True, cwd=LAYOUT.root, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = ast.literal_eval(done.stdout.strip())
    assert seen == {"personality": personality, "fork": "refused", "getppid": "allowed"}


def test_the_allow_list_is_named_in_groups_and_resolved_here():
    assert len(CHILD_SYSCALLS) >= 100 and "read" in CHILD_SYSCALLS
    for unlisted in ("socket", "socketpair", "mknod", "mknodat", "personality", "execve", "fork", "setsid", "chroot", "ptrace"):
        assert unlisted not in CHILD_SYSCALLS, unlisted
    resolved = child_syscalls_here()
    assert 100 <= len(resolved) <= len(CHILD_SYSCALLS) and "read" in resolved and "_llseek" not in resolved


def test_doctor_says_each_child_runs_under_the_allow_list():
    [line] = [line for line in doctor_lines() if "] seccomp" in line]
    assert line.startswith("  [on ]"), line
    assert f"in each child an allow-list of {len(child_syscalls_here())} system calls" in line, line
    assert "everything else fails with EPERM" in line and "deny-list" not in line, line


# ------------------------------------------------------------------------ status, modes
def test_a_gradings_workers_start_while_bubblewrap_is_probed(monkeypatch):
    """The bubblewrap probe (a sandbox of its own, about 10 ms) runs beside the workers' start
    instead of before it; the workers are the ones the probe's answer calls for, and they get
    nothing to run before that answer is in."""
    import grader.run.launch as launch
    import grader.sandbox.status as status

    order: list[str] = []
    record_calls(monkeypatch, order, probe=(status, "probe_bubblewrap"), worker=(launch, "start_worker"))
    status._ANSWERS.clear()  # forget this process's earlier answer
    launched = launch.launch_grading(layout=LAYOUT, tests_dir=LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru",
                                     mode=SandboxMode.STRICT)
    try:
        assert order == ["worker", "worker", "probe"]  # the probe's answer is collected last
        for worker in (launched.seed_one, launched.seed_two):
            assert Layer.BUBBLEWRAP in worker.layers and worker.settings(budget=1.0).seccomp
        assert launched.seed_one.process.poll() is None  # running, in bubblewrap
    finally:
        launched.close()


def _failing_here(real):
    """The bubblewrap probe's command, ending in /bin/false: bubblewrap "fails here"."""

    def failing():
        command, why = real()
        return ([*command[:-1], "/bin/false"] if command else command), why

    return failing


def test_the_bubblewrap_probe_survives_workers_claiming_the_sandbox_users():
    """A worker's start kills every process of the sandbox user it claims (what a dead grader
    left). The probe must not run as one of them: in the service, a grading thread's probe was
    killed by the other thread's worker start ("bwrap fails here: exit status 137"), and that
    answer, kept for the life of the process, refused every later submission."""
    import threading

    import grader.sandbox.status as status

    users = sandbox_users()
    assert users, "the sandbox users are set up by make test (scripts/setup-sandbox.sh)"
    stop = threading.Event()
    # The first sandbox user, held (no other grading on this machine uses it meanwhile) and
    # cleared again and again, as each worker start that takes it does.
    claim = claim_user(users[:1], wait=30.0)

    def claims() -> None:
        while not stop.is_set():
            _kill_user(claim.user.uid)

    killer = threading.Thread(target=claims)
    killer.start()
    try:
        answers = [sandbox_status(fresh=True).get(Layer.BUBBLEWRAP) for _ in range(60)]
    finally:
        stop.set()
        killer.join()
        claim.release()
        status._ANSWERS.clear()
    assert [a.detail for a in answers if not a.active] == []


def test_a_failed_bubblewrap_probe_is_tried_again_after_a_while(monkeypatch):
    """A long-running process (the service) keeps the sandbox's answer; a failed bubblewrap run
    is kept only for RETRY_FAILED_PROBE_S, then tried again, so that a passing failure does not
    refuse every grading until a restart."""
    import grader.sandbox.bubblewrap as bubblewrap
    import grader.sandbox.status as status

    real = bubblewrap._bubblewrap_probe
    assert real()[0] is not None, real()[1]  # bubblewrap is set up by make test
    monkeypatch.setattr(bubblewrap, "_bubblewrap_probe", _failing_here(real))
    assert not sandbox_status(fresh=True).active(Layer.BUBBLEWRAP)
    monkeypatch.setattr(bubblewrap, "_bubblewrap_probe", real)  # it works again
    try:
        assert not sandbox_status().active(Layer.BUBBLEWRAP)  # kept for a while
        monkeypatch.setattr(status, "RETRY_FAILED_PROBE_S", 0.0)
        assert sandbox_status().active(Layer.BUBBLEWRAP)  # then tried again
        assert status.provisional_status().active(Layer.BUBBLEWRAP)
    finally:
        status._ANSWERS.clear()


def test_threads_checking_the_sandbox_at_once_share_one_probe(monkeypatch):
    """The service's grading threads all check the sandbox when the first submissions come:
    one bubblewrap probe answers them all."""
    import threading

    import grader.sandbox.status as status

    order: list[str] = []
    record_calls(monkeypatch, order, probe=(status, "probe_bubblewrap"))
    status._ANSWERS.clear()
    answers: list[SandboxStatus] = []
    threads = [threading.Thread(target=lambda: answers.append(sandbox_status())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert order == ["probe"]
    assert len(answers) == 4 and all(a is answers[0] for a in answers)


def test_workers_started_for_bubblewrap_are_started_again_without_it_when_its_probe_fails(monkeypatch):
    import grader.run.launch as launch
    import grader.sandbox.bubblewrap as bubblewrap
    import grader.sandbox.process as process
    import grader.sandbox.status as status

    monkeypatch.setattr(bubblewrap, "_bubblewrap_probe", _failing_here(bubblewrap._bubblewrap_probe))
    status._ANSWERS.clear()
    tests = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            launch.launch_grading(layout=LAYOUT, tests_dir=tests, mode=SandboxMode.STRICT)
        # The answer is known now: a later grading in this process does not guess again.
        order: list[str] = []
        record_calls(monkeypatch, order, worker=(process, "claim_user"))
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            launch.launch_grading(layout=LAYOUT, tests_dir=tests, mode=SandboxMode.STRICT)
        assert order == []  # refused before any worker was started
        if status.sandbox_status().missing(SandboxMode.AUTO):
            # Here the uid layer needs bubblewrap too (the interpreter lies under a closed home).
            with pytest.raises(SandboxUnavailable, match="mode auto needs"):
                launch.launch_grading(layout=LAYOUT, tests_dir=tests, mode=SandboxMode.AUTO)
        else:
            launched = launch.launch_grading(layout=LAYOUT, tests_dir=tests, mode=SandboxMode.AUTO)
            users = [worker.user for worker in (launched.seed_one, launched.seed_two) if worker.user is not None]
            try:
                for worker in (launched.seed_one, launched.seed_two):
                    assert Layer.BUBBLEWRAP not in worker.layers and Layer.UID in worker.layers
                    assert worker.process.poll() is None
            finally:
                launched.close()
            assert len(users) == 2
            # The workers started ahead are gone, every process of their users with them (other
            # sandbox users may be grading something else meanwhile: only these two are asked).
            for user in users:
                assert user_processes(user.uid) == []
    finally:
        status._ANSWERS.clear()


def test_a_grading_finds_the_same_layers_without_the_doctors_descriptions():
    """A grading needs which layers are on, not how each is set up: it neither forks a child to
    try the allow-list nor asks bubblewrap its version (about 10 ms off every grading's start)."""
    quick = sandbox_status(fresh=True)
    full = sandbox_status(fresh=True, describe=True)
    assert [(s.layer, s.active) for s in quick.layers] == [(s.layer, s.active) for s in full.layers]
    assert "allow-list of" in full.get(Layer.SECCOMP).detail
    assert "allow-list of" not in quick.get(Layer.SECCOMP).detail
    assert "bubblewrap 0." in full.get(Layer.BUBBLEWRAP).detail
    assert "bubblewrap 0." not in quick.get(Layer.BUBBLEWRAP).detail


def test_doctor_lines_name_every_layer_and_what_each_mode_does():
    lines = doctor_lines()
    text = "\n".join(lines)
    for layer in Layer:
        assert f"] {layer.value}" in text
    assert "mode auto: ready" in text and "mode strict: ready" in text  # the set-up script ran
    assert any(line.startswith("  mode none:") for line in lines)


def test_a_mode_needing_a_missing_layer_names_it():
    status = SandboxStatus(layers=tuple(
        LayerStatus(layer=layer, active=layer is not Layer.BUBBLEWRAP, detail="bwrap not found" if layer is Layer.BUBBLEWRAP else "ok")
        for layer in Layer
    ))
    assert status.missing(SandboxMode.AUTO) == []
    assert [s.layer for s in status.missing(SandboxMode.STRICT)] == [Layer.BUBBLEWRAP]
    assert status.missing(SandboxMode.NONE) == []
    assert "mode strict: refuses to run: missing bubblewrap" in status.render()


def test_an_unknown_mode_is_refused_and_none_is_always_possible():
    with pytest.raises(ValueError, match="'sometimes' is not a valid SandboxMode"):
        check_mode("sometimes")
    assert check_mode("none").active(Layer.RLIMITS)
    assert issubclass(SandboxUnavailable, RuntimeError)


def test_mode_none_runs_in_place_as_the_grader(tmp_path):
    suite = HEADER + '''
def test_who():
    assert False, f"uid={os.getuid()} cwd={os.getcwd()}"
'''
    tests = _write_suite(tmp_path / "tests", suite)
    [run] = _run(tests, limits=unbudgeted(run_timeout_s=12.0, test_timeout_s=2.0, jobs=1, sandbox=SandboxMode.NONE))
    assert f"uid={os.getuid()} cwd={tests}" in run.results[0].message


# ----------------------------------------------------------------------------- the uid scan
def _sleeping_as(user: SandboxUser) -> subprocess.Popen:
    return subprocess.Popen(["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
                             "sleep", "60"])


def _two_users_held():
    users = sandbox_users()
    if len(users) < 2:
        pytest.fail("the sandbox users are not set up (scripts/setup-sandbox.sh): make test does it")
    first = _lock_user(users, wait=60.0)
    second = _lock_user([u for u in users if u != first.user], wait=60.0)
    return first, second


def test_the_uid_scan_reads_each_process_uids_and_passes_over_zombies():
    own = os.getresuid()
    assert _uids_of(os.getpid()) == own
    first, second = _two_users_held()
    sleeper = _sleeping_as(first.user)
    zombie = os.fork()
    if zombie == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10.0
        while _uids_of(sleeper.pid) != (first.user.uid,) * 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # setpriv has not changed its uids yet
        assert _uids_of(sleeper.pid) == (first.user.uid,) * 3
        assert _processes_of({first.user.uid}) == [sleeper.pid]
        assert _processes_of({second.user.uid}) == []
        while Path(f"/proc/{zombie}/status").read_text().split("State:")[1].split()[0] != "Z":
            time.sleep(0.01)
        assert _uids_of(zombie) == ()  # exited, not yet reaped: not a live process
        assert _uids_of(2**22 + 1) == ()  # no such process
    finally:
        os.waitpid(zombie, 0)
        sleeper.kill()
        sleeper.wait()
        first.release()
        second.release()


def test_a_process_whose_first_thread_ended_is_still_found_and_killed():
    """Its first thread gone (``pthread_exit``), the process reads as a zombie while its other
    threads run on: the scan must not pass over it. (This process's own uid here: killing is
    aimed at the one pid.)"""
    script = (
        "import ctypes, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "print('up', flush=True)\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"
    )
    leader = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert leader.stdout.readline() == b"up\n"
        deadline = time.monotonic() + 10.0
        while "\nState:\tZ" not in Path(f"/proc/{leader.pid}/status").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        status = Path(f"/proc/{leader.pid}/status").read_text()
        assert "\nState:\tZ" in status and "\nThreads:\t2" in status
        assert _uids_of(leader.pid) == os.getresuid()
        assert leader.pid in _processes_of({os.getuid()})
        _kill_pid(leader.pid, {os.getuid()})
        assert leader.wait(timeout=10) == -9
    finally:
        leader.kill()
        leader.wait()
        leader.stdout.close()


def test_one_pass_kills_the_processes_of_several_users():
    first, second = _two_users_held()
    sleepers = [_sleeping_as(first.user), _sleeping_as(first.user), _sleeping_as(second.user)]
    try:
        uids = {first.user.uid, second.user.uid}
        deadline = time.monotonic() + 10.0
        while len(_processes_of(uids)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(_processes_of(uids)) == sorted(s.pid for s in sleepers)
        kill_users(uids)
        assert _processes_of(uids) == []
        assert [s.wait(timeout=10) for s in sleepers] == [-9, -9, -9]
    finally:
        for s in sleepers:
            s.kill()
            s.wait()
        first.release()
        second.release()
