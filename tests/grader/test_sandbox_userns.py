"""Grading by a user without root: user namespaces stand in for the sandbox users.

Each test runs the real command line as ``mutagrade-staff``, an ordinary user this set-up
creates (a staff member without root, on a machine whose root made the sandbox users), with
this checkout read-only and this venv's packages (hard links in a venv of the system's own
Python: the venv's interpreter may sit where only root can reach it); run by an ordinary user,
the tests run as that user, with this venv.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import site
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.core.paths import default_layout
from grader.sandbox.base import Layer, LayerStatus, SandboxMode, SandboxStatus
from grader.sandbox.users import user_processes
from grader.sandbox.userns import kernel_refusal, layer_detail

LAYOUT = default_layout()
EXAMPLE = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
STAFF = "mutagrade-staff"
PLAIN_PATH = "/usr/local/bin:/usr/bin:/bin"
CANARY = "canary\n"


@pytest.fixture(scope="module")
def staff() -> pwd.struct_passwd:
    """The user the grader runs as: ``mutagrade-staff`` (made when missing) if this is root,
    else whoever runs the tests."""
    refusal = kernel_refusal()
    assert not refusal, f"this machine's kernel refuses unprivileged user namespaces: {refusal}"
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid())
    try:
        return pwd.getpwnam(STAFF)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", "--comment", "mutagrade staff without root (tests)", STAFF],
            check=True, capture_output=True, env={**os.environ, "PATH": f"{PLAIN_PATH}:/usr/sbin:/sbin"},
        )
        return pwd.getpwnam(STAFF)


@pytest.fixture(scope="module")
def mutagrade(staff: pwd.struct_passwd) -> Iterator[list[str]]:
    """The command line the staff user runs: this venv's, or, as root, a venv of the system's
    Python of the same version whose packages are hard links to this venv's (read-only)."""
    if os.geteuid() != 0:
        yield [sys.executable, "-m", "grader.cli"]
        return
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    python = shutil.which(version, path="/usr/bin:/bin:/usr/local/bin")
    assert python is not None, f"no {version} outside root's home for the staff user to run"
    base = Path(tempfile.mkdtemp(prefix="mutagrade-staff-venv-"))
    base.chmod(0o755)
    try:
        subprocess.run([python, "-m", "venv", "--without-pip", str(base / "venv")], check=True, capture_output=True)
        [packages] = (base / "venv" / "lib").glob("python3*/site-packages")
        packages.rmdir()
        [ours] = [path for path in site.getsitepackages() if Path(path, "numpy").is_dir()]
        subprocess.run(["cp", "-al", ours, str(packages)], check=True, capture_output=True)
        yield [str(base / "venv" / "bin" / "python"), "-m", "grader.cli"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def home(staff: pwd.struct_passwd) -> Iterator[Path]:
    """A folder of the staff user's own (its home for the run: the variant cache goes there),
    outside pytest's, which only root may enter."""
    path = Path(tempfile.mkdtemp(prefix="mutagrade-staff-"))
    os.chown(path, staff.pw_uid, staff.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _owned(path: Path, staff: pwd.struct_passwd) -> Path:
    for item in [path, *path.rglob("*")]:
        os.chown(item, staff.pw_uid, staff.pw_gid, follow_symlinks=False)
    return path


def _as_staff(argv: list[str], staff: pwd.struct_passwd, home: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """``argv`` as the staff user, in a bare login environment (nothing of this run's own)."""
    env = {
        "HOME": str(home), "PATH": PLAIN_PATH, "LANG": "C.UTF-8", "USER": staff.pw_name,
        "OPENBLAS_NUM_THREADS": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1",
    }
    how: dict = {}
    if os.geteuid() == 0:
        how = {"user": staff.pw_uid, "group": staff.pw_gid, "extra_groups": []}
    return subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=timeout, **how)


def _grade(mutagrade: list[str], suite: Path, staff: pwd.struct_passwd, home: Path,
           *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = _as_staff([*mutagrade, "grade", str(suite), "--format", "json", *extra], staff, home)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {done.returncode}): {done.stderr[-3000:]}")
    return done, report


# ------------------------------------------------------------------------------- doctor
def test_doctor_without_root_shows_the_namespaces_standing_in_for_the_sandbox_users(mutagrade, staff, home):
    done = _as_staff([*mutagrade, "doctor"], staff, home, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {line.split("]", 1)[1].split()[0]: line for line in done.stdout.splitlines() if line.startswith("  [")}
    assert lines["uid"].startswith("  [OFF]") and "not root" in lines["uid"], done.stdout
    assert lines["userns"].startswith("  [on ]") and "user namespace" in lines["userns"], done.stdout
    for layer in ("workdir", "seccomp", "bubblewrap"):
        assert lines[layer].startswith("  [on ]"), done.stdout
    assert f"readable by uid {staff.pw_uid} only" in lines["workdir"], done.stdout
    assert "  mode auto: ready" in done.stdout and "  mode strict: ready" in done.stdout, done.stdout


def test_either_the_uid_or_the_userns_layer_is_enough_and_without_both_both_are_named():
    def status(*off: Layer) -> SandboxStatus:
        return SandboxStatus(tuple(LayerStatus(layer, layer not in off, f"{layer.value} detail") for layer in Layer))

    for mode in (SandboxMode.AUTO, SandboxMode.STRICT):
        assert status(Layer.UID).missing(mode) == []
        assert status(Layer.USERNS).missing(mode) == []
        assert [s.layer for s in status(Layer.UID, Layer.USERNS).missing(mode)] == [Layer.UID, Layer.USERNS]
    assert [s.layer for s in status(Layer.UID, Layer.BUBBLEWRAP).missing(SandboxMode.STRICT)] == [Layer.BUBBLEWRAP]
    lines = status(Layer.UID).lines()
    assert "  mode auto: ready" in lines
    assert any(line.startswith("  [OFF] uid") for line in lines)


def test_the_userns_layer_says_why_it_is_off():
    failing = (False, "/usr/bin/bwrap fails here: setting up uid map: Permission denied")
    active, detail = layer_detail(root=False, uid=1234, bubblewrap=failing)
    assert not active and "setting up uid map: Permission denied" in detail
    active, detail = layer_detail(root=True, uid=0, bubblewrap=(True, "bubblewrap 0.8.0"))
    assert not active and "the uid layer" in detail  # root keeps the sandbox users
    active, detail = layer_detail(root=False, uid=1234, bubblewrap=(True, "bubblewrap 0.8.0"))
    assert active and "uid 1234" in detail


# ------------------------------------------------------------------------------ grading
def test_a_user_without_root_grades_the_bundled_example_in_the_sandbox_as_root_grades_it(mutagrade, staff, home):
    suite = home / "unseen" / "l3-3-gru"
    shutil.copytree(EXAMPLE, suite, ignore=shutil.ignore_patterns("__pycache__"))
    _owned(home / "unseen", staff)
    suite.chmod(0o700)  # the staff user's own: nobody else could read it

    # strict: refused unless every layer is on (userns, seccomp and bubblewrap among them).
    done, report = _grade(mutagrade, suite, staff, home, "--sandbox", "strict")
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["passed"] is True and report["reasons"] == [], report["reasons"]
    assert (report["score"]["killed"], report["score"]["total"]) == (12, 12), report["score"]

    if os.geteuid() == 0:  # the same verdict, test by test, as the sandbox users give
        as_root = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(EXAMPLE), "--format", "json"],
                                 capture_output=True, text=True, timeout=180)
        assert as_root.returncode == 0, as_root.stderr[-3000:]
        expected = json.loads(as_root.stdout)
        assert report["score"] == expected["score"]
        assert [(t["id"], t["outcomes"]) for t in report["tests"]] == [(t["id"], t["outcomes"]) for t in expected["tests"]]
    if os.geteuid() == 0:
        assert user_processes(staff.pw_uid) == [], "a process of the grading outlived it"


HOSTILE = '''
import os
import socket

FOUND_IN = (b"pytest", b"mutagrade grade")


def test_write_outside():
    wrote = []
    for path in {targets!r}:
        try:
            with open(path, "a") as handle:
                handle.write("owned\\n")
            wrote.append(path)
        except OSError:
            pass
    assert wrote, "nothing outside could be written"


def test_see_other_processes():
    found = []
    try:
        os.kill({pytest_pid}, 0)
        found.append("signal")
    except OSError:
        pass
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    for name in [str({pytest_pid}), *names]:
        try:
            with open(f"/proc/{{name}}/cmdline", "rb") as handle:
                if any(word in handle.read() for word in FOUND_IN):
                    found.append(name)
        except OSError:
            pass
    assert found, f"nothing of another process in sight: pid={{os.getpid()}} ppid={{os.getppid()}} proc={{names}}"


def test_network():
    with socket.create_connection(("127.0.0.1", {port}), timeout=1) as conn:
        conn.sendall(b"hello from the sandbox")
'''


def test_a_hostile_suite_graded_without_root_cannot_write_out_see_other_processes_or_connect(mutagrade, staff, home):
    outside = home / "outside"
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text(CANARY)
    _owned(outside, staff)
    suite = home / "hostile"
    host_tmp = Path(tempfile.gettempdir()) / f"mutagrade-staff-escape-{os.getpid()}"
    targets = [str(canary), str(outside / "new.txt"), str(suite / "test_hostile.py"), str(host_tmp), str(home / "new.txt")]
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.setblocking(False)
        suite.mkdir()
        (suite / "test_hostile.py").write_text(
            HOSTILE.format(targets=targets, pytest_pid=os.getpid(), port=server.getsockname()[1])
        )
        original = (suite / "test_hostile.py").read_text()
        _owned(suite, staff)

        done, report = _grade(mutagrade, suite, staff, home, "--sandbox", "strict", "--policy", "off")

        reasons = {t["id"].split("::")[1]: (t["outcomes"]["reference"], t["reason"]) for t in report["tests"]}
        assert set(reasons) == {"test_write_outside", "test_see_other_processes", "test_network"}, done.stderr[-3000:]
        for name, (outcome, reason) in reasons.items():
            assert outcome != "passed", f"{name}: the attack went through: {reason}"
        assert "nothing outside could be written" in reasons["test_write_outside"][1]
        # Its own pid namespace (pid 1, no parent in sight, an empty /proc): the run's own
        # namespaces, made inside the worker's user namespace.
        assert "pid=1 ppid=0 proc=[]" in reasons["test_see_other_processes"][1]
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing reached the port
    finally:
        server.close()
    assert canary.read_text() == CANARY
    assert sorted(p.name for p in outside.iterdir()) == ["canary.txt"]
    assert (suite / "test_hostile.py").read_text() == original
    assert not host_tmp.exists() and not (home / "new.txt").exists()
    if os.geteuid() == 0:
        assert user_processes(staff.pw_uid) == [], "a process of the grading outlived it"


POOLED = '''
import json
import os
import sys
from pathlib import Path

from grader.core.assignment import load_assignment
from grader.flows.grading import grade_suite
from grader.run.runner import RunLimits
from grader.run.pool import WorkerPool
from grader.core.paths import default_layout
from grader.sandbox.users import user_processes

before = set(user_processes(os.getuid()))  # this user's own (the tests' runner among them)
layout = default_layout()
assignment = load_assignment(layout.assignment)
example, leaves = Path(sys.argv[1]), Path(sys.argv[2])
with WorkerPool(layout=layout, limits=RunLimits.of(assignment)) as pool:
    reports = [grade_suite(suite, layout=layout, assignment=assignment, pool=pool, policy=suite != leaves)
               for suite in (example, leaves, example)]
    workers = [worker.sandbox for worker in pool._pair]
    seen = {
        "layers": sorted({layer.value for worker in workers for layer in worker.layers}),
        "users": [worker.user for worker in workers],
        "workdirs": [str(worker.workdir) for worker in workers],
        "modes": [oct(worker.workdir.stat().st_mode & 0o777) for worker in workers],
    }
seen["left"] = sorted(set(user_processes(os.getuid())) - before)
seen["workdirs_left"] = [path for path in seen["workdirs"] if os.path.exists(path)]
seen["passed"] = [report.passed for report in reports]
seen["leaves"] = [t.outcomes["reference"].value for t in reports[1].tests]
print(json.dumps(seen))
'''
LEAVES = '''
import os
import tempfile
import time


def test_leaves_traces():
    with open(os.path.join(tempfile.gettempdir(), "left-by-the-last-student.txt"), "w") as handle:
        handle.write("a secret")
'''


def test_a_pool_of_warm_workers_without_root_grades_one_submission_after_another_and_leaves_nothing(
        mutagrade, staff, home):
    """The service's way: two workers kept for one grading after another, each submission
    staged into their namespaces; once closed, no process of theirs and no copy is left."""
    leaves = home / "leaves"
    leaves.mkdir()
    (leaves / "test_leaves.py").write_text(LEAVES)
    example = home / "example"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("__pycache__"))
    _owned(leaves, staff)
    _owned(example, staff)
    python = mutagrade[0]
    done = _as_staff([python, "-c", POOLED, str(example), str(leaves)], staff, home)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert "userns" in seen["layers"] and "uid" not in seen["layers"], seen
    assert seen["users"] == [None, None] and seen["modes"] == ["0o700", "0o700"], seen
    assert seen["passed"] == [True, False, True] and seen["leaves"] == ["passed"], seen
    assert seen["left"] == [] and seen["workdirs_left"] == [], seen


KILLED = '''
import os
import signal
import sys
from pathlib import Path

from grader.run.launch import launch_worker
from grader.core.paths import default_layout

worker = launch_worker(layout=default_layout(), tests_dir=Path(sys.argv[1]), hash_seed=1, mode="auto")
print(worker.workdir, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # killed before it could close its worker
'''
CLOSED = '''
import sys
from pathlib import Path

from grader.run.launch import launch_worker
from grader.core.paths import default_layout

launch_worker(layout=default_layout(), tests_dir=Path(sys.argv[1]), hash_seed=1, mode="auto").close()
'''


def test_what_a_killed_grader_without_root_leaves_goes_with_its_next_worker(mutagrade, staff, home):
    """Killed right after it started a worker: its bubblewrap may still be setting the
    namespaces up (then it waits for ever), and its work directory stays; both go once a worker
    of the same user starts, a minute later."""
    example = home / "example"
    shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns("__pycache__"))
    _owned(example, staff)
    before = set(user_processes(staff.pw_uid))
    killed = _as_staff([mutagrade[0], "-c", KILLED, str(example)], staff, home)
    assert killed.returncode == -9, killed.stderr[-3000:]
    left = Path(killed.stdout.strip())
    assert left.is_dir() and left.stat().st_uid == staff.pw_uid

    young = _as_staff([mutagrade[0], "-c", CLOSED, str(example)], staff, home)
    assert young.returncode == 0, young.stderr[-3000:]
    assert left.is_dir()  # a minute old at least before it counts as left behind (one just made is not held yet)
    os.utime(left, (time.time() - 120, time.time() - 120))
    again = _as_staff([mutagrade[0], "-c", CLOSED, str(example)], staff, home)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not left.exists()
    deadline = time.monotonic() + 10
    while set(user_processes(staff.pw_uid)) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(user_processes(staff.pw_uid)) - before == set()
