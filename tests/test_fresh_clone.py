"""The fresh-machine path the README promises: a new clone of the committed HEAD, where
``make demo`` sets everything up itself, as a user with nothing set up (who cannot set the
sandbox users up: where the kernel allows unprivileged user namespaces each worker gets
namespaces of its own instead, and the demo and an unseen suite are graded in the sandbox;
elsewhere the demo says so and runs its trusted example with none) and as root (who sets the
sandbox up first). What is not committed is not in the clone, so this checks what lands."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from grader.core.paths import default_layout
from grader.sandbox.userns import kernel_refusal
from tests.services import free_port, kill_group

REPO = default_layout().root
COURSE_TESTS = default_layout().course_tests.relative_to(REPO).as_posix()  # assignments/l3-3-gru/tests
DEMO_USER = "mutagrade-demo"  # an ordinary user with a home, made for this test
PLAIN_PATH = "/usr/local/bin:/usr/bin:/bin"
GRADED = ("10 passed, 0 failed", "h′ = 0.25 × n + 0.75 × 0.5 = 0.533787", "VERDICT: PASSED", "killed (12/12)")
NO_SANDBOX = "sandbox: not set up here"
HAND_TEST = (default_layout().root / "examples" / "starter" / "python" / "tests" / "l3-3-gru" / "test_gru.py").read_text()


def _demo_user() -> pwd.struct_passwd:
    """The unprivileged user the demo runs as: created (with a home) when missing."""
    try:
        return pwd.getpwnam(DEMO_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", "--comment", "mutagrade fresh-clone test", DEMO_USER],
            check=True, capture_output=True, env={**os.environ, "PATH": f"{PLAIN_PATH}:/usr/sbin:/sbin"},
        )
        return pwd.getpwnam(DEMO_USER)


def _clone(dest: Path) -> Path:
    # --no-local: a real transport, and no object files hard-linked with this checkout's.
    subprocess.run(["git", "clone", "--quiet", "--no-local", str(REPO), str(dest)], check=True, capture_output=True)
    return dest


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A folder outside pytest's own (which only its owner may enter); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="mutagrade-fresh-clone-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _as_user(user: pwd.struct_passwd | None) -> dict:
    """How to run a command as ``user`` (None: as this process), in a fresh login's bare
    environment: none of this run's own (no venv, no PYTHONPATH, no make of its own)."""
    me = user or pwd.getpwuid(os.getuid())
    env = {"HOME": me.pw_dir, "PATH": PLAIN_PATH, "LANG": "C.UTF-8", "USER": me.pw_name, "LOGNAME": me.pw_name}
    how: dict = {"env": env}
    if user is not None:
        how.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
    return how


def _run(argv: list[str], clone: Path, how: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=clone, capture_output=True, text=True, timeout=timeout, **how)


def test_make_demo_on_a_fresh_clone_as_an_unprivileged_user(workdir):
    user = _demo_user() if os.geteuid() == 0 else None
    clone = _clone(workdir / "clone")
    how = _as_user(user)

    # A suite this clone has never graded, the user's own.
    unseen = workdir / "unseen"
    unseen.mkdir()
    shutil.copy(clone / "examples/student/python/tests/l3-3-gru/test_gru.py", unseen / "test_my_gru.py")
    if user is not None:
        subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(workdir)], check=True)
    namespaces = not kernel_refusal() and shutil.which("bwrap", path=PLAIN_PATH) is not None

    demo = _run(["make", "demo"], clone, how, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    for text in GRADED:
        assert text in demo.stdout, demo.stdout[-3000:]
    # The demo's install is the light one: no torch.
    assert _run([".venv/bin/python", "-c", "import torch"], clone, how, timeout=60).returncode != 0
    grade = _run([".venv/bin/mutagrade", "grade", str(unseen)], clone, how, timeout=120)
    if namespaces:
        # In the sandbox: each worker in a user namespace of its own (the doctor's lines, printed
        # by the setup script), the demo and the unseen suite graded in mode auto.
        assert "[on ] userns" in demo.stdout and "mode auto: ready" in demo.stdout, demo.stdout[:3000]
        assert NO_SANDBOX not in demo.stdout
        assert grade.returncode == 0 and "VERDICT: PASSED" in grade.stdout, grade.stdout[-3000:] + grade.stderr
    else:
        [line] = [line for line in demo.stdout.splitlines() if line.startswith(NO_SANDBOX)]
        assert "--sandbox none" in line
        # Untrusted grading still refuses here.
        assert grade.returncode == 2 and "sandbox mode auto needs layer(s)" in grade.stderr, grade.stderr

    # The service's commands run from the demo's venv, and the README's three commands give a
    # first served submission.
    for command in (["serve", "--help"], ["admin", "--help"], ["submit", "--help"], ["worker", "--help"]):
        done = _run([".venv/bin/mutagrade", *command], clone, how, timeout=60)
        assert done.returncode == 0, (command, done.stderr[-2000:])
    if namespaces:
        _first_served_submission(clone, how, workdir)

    # tinyllm comes with the install: the course tests run in the venv with no PYTHONPATH.
    course = _run([".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider", COURSE_TESTS], clone, how, timeout=300)
    assert course.returncode == 0, course.stdout[-3000:]
    assert course.stdout.splitlines()[-1].startswith("10 passed"), course.stdout[-500:]


def _first_served_submission(clone: Path, how: dict, workdir: Path) -> None:
    """The README's quick start of the service (serve, a token, a submit that waits for its
    report), then a student's first hour against it: the student package built and installed
    from its wheel, a red with a typo in the test (refused), a red, an undo, the red again, a
    green, and a submit."""
    port = free_port()
    server = subprocess.Popen([".venv/bin/mutagrade", "serve", "--port", str(port)], cwd=clone,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, **how)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read().decode(errors="replace")[-3000:]
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        token = _run([".venv/bin/mutagrade", "admin", "token", "create", "--user", "alice", "--role", "student"],
                     clone, how, timeout=120)
        assert token.returncode == 0, token.stderr[-2000:]
        env = {**how["env"], "MUTAGRADE_TOKEN": token.stdout.strip()}
        submit = _run([".venv/bin/mutagrade", "submit", "examples/student", "--server", url],
                      clone, {**how, "env": env}, timeout=300)
        assert submit.returncode == 0 and "VERDICT: PASSED" in submit.stdout, submit.stdout[-3000:] + submit.stderr[-2000:]
        _a_students_first_hour(clone, {**how, "env": env}, workdir, url)
    finally:
        kill_group(server)


TYPO = HAND_TEST.replace("gru_cell(Tensor([[1.0]]", "gru_cel(Tensor([[1.0]]")


def _a_students_first_hour(clone: Path, how: dict, workdir: Path, url: str) -> None:
    built = _run(["make", "student-package", f"STUDENT_DIST={workdir / 'dist'}"], clone, how, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = (workdir / "dist").glob("mutagrade_student-*.whl")
    venv = workdir / "student-venv"
    for argv in (["python3", "-m", "venv", str(venv)], [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)]):
        done = _run(argv, workdir, how, timeout=600)
        assert done.returncode == 0, (argv, done.stdout[-2000:] + done.stderr[-2000:])
    repo = workdir / "repo"
    shutil.copytree(clone / "examples" / "starter", repo)
    if "user" in how:  # the student's own repository
        subprocess.run(["chown", "-R", f"{how['user']}:{how['group']}", str(repo)], check=True)
    tests = repo / "python" / "tests" / "l3-3-gru" / "test_gru.py"
    given = tests.read_text()
    mutagrade = str(venv / "bin" / "mutagrade")

    def student(*argv: str, cwd: Path = repo) -> subprocess.CompletedProcess:
        return _run([mutagrade, *argv], cwd, how, timeout=300)

    tests.write_text(TYPO)
    typo = student("tdd", "red", cwd=repo / "python")  # from a subfolder, as git would
    assert typo.returncode == 2 and "NameError" in typo.stdout + typo.stderr, typo.stdout + typo.stderr
    tests.write_text(given)
    for step in (("tdd", "red"), ("tdd", "undo"), ("tdd", "red")):
        done = student(*step)
        assert done.returncode == 0, (step, done.stdout + done.stderr)
    gru = repo / "python" / "tinyllm" / "rnn" / "gru.py"
    gru.write_bytes((clone / "examples" / "student" / "python" / "tinyllm" / "rnn" / "gru.py").read_bytes())
    green = student("tdd", "green")
    assert green.returncode == 0 and "green recorded (entry 2)" in green.stdout, green.stdout + green.stderr
    submitted = student("submit", "--server", url)
    assert submitted.returncode in (0, 1) and "Journal: verified" in submitted.stdout, submitted.stdout[-3000:]


def test_make_demo_on_a_fresh_clone_as_root_sets_the_sandbox_up_first(workdir):
    if os.geteuid() != 0:
        pytest.skip("needs root (CI runs as root): make demo then sets the sandbox up")
    clone = _clone(workdir / "clone")
    demo = _run(["make", "demo"], clone, _as_user(None), timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "setup-sandbox:" in demo.stdout and "mode auto: ready" in demo.stdout, demo.stdout[:3000]
    for text in GRADED:
        assert text in demo.stdout, demo.stdout[-3000:]
    assert NO_SANDBOX not in demo.stdout
