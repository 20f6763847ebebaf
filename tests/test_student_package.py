"""The student package (``make student-package``): built, installed in a fresh venv as a
student installs it, it runs ``tdd``, ``check`` and ``submit`` against a student repository,
lists no staff command, and holds nothing of the answer key (no line of the reference's
``gru.py``, of a patch or of the manifest; no hidden mutant's title or pitfall).

The fresh venv gets its runtime dependencies, offline, as copies of the distributions this
environment has installed (``pip check`` then confirms they satisfy what the wheel requires); the
student wheel itself is installed by pip from the file, with no index (tests/student_wheel.py).
The module builds the wheel once and installs it twice: without torch, and with torch (for the
live comparison). A repository made by ``mutagrade starter`` goes red, then green, with it."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from grader.core.paths import default_layout
from grader.flows.starter import write_starter
from tests.services import ApiProcess, free_port, service_env
from tests.student_wheel import Installed, build_wheel, readable_folder, student_venv

LAYOUT = default_layout()
REPO = LAYOUT.root
STUDENT_COMMANDS = {"tdd", "check", "submit"}
STAFF_COMMANDS = (
    "grade", "grade-batch", "serve", "worker", "admin", "variants", "calibrate", "golden", "bundle", "demo", "doctor",
    "starter",
)
# Modules a shipped one imports that the student package leaves out on purpose.
NOT_SHIPPED = {
    ("grader.flows.check", "grader.flows.grading"): "in check_repo only: the staff check, which grades by the mutants",
}
# Right, but seconds of work: past a 1 s test limit, well within the shipped 10 s.
SLOW = "def test_slow_but_right():\n    n = 0\n    for _ in range(2 * 10**8):\n        n += 1\n"
MIN_LINE = 25  # shorter lines (`return out`, `import numpy as np`) say nothing of the answer key
NEW_RED = '''from tinyllm.rnn.gru import GRU


def test_a_new_red_test():
    """Fails against the example's implementation: the shape is (3 * 3, 2), not (3, 2)."""
    assert GRU(2, 3).weight_ih_l0.shape == (3, 2)
'''


@pytest.fixture(scope="module")
def wheel() -> Iterator[Path]:
    dist = readable_folder("mutagrade-student-wheel-")
    try:
        yield build_wheel(dist)
    finally:
        shutil.rmtree(dist, ignore_errors=True)


@pytest.fixture(scope="module")
def installed(wheel: Path) -> Iterator[Installed]:
    root = readable_folder("mutagrade-student-package-")
    try:
        yield student_venv(root, wheel, [])
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def installed_with_torch(wheel: Path) -> Iterator[Installed]:
    """The same, in a venv that has torch too (as the dev venv has it: its files are linked)."""
    root = readable_folder("mutagrade-student-package-torch-")
    try:
        yield student_venv(root, wheel, [Requirement("torch")])
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------ what it holds
def _answer_key() -> tuple[set[str], list[str]]:
    """The distinctive lines of the reference's gru.py, of every patch and of the manifest,
    and the hidden mutants' titles and pitfalls (to find as substrings). A line the course hands
    out anyway (the contract stub, the course tests, the framework around gru.py) is none."""
    answers = set(LAYOUT.answer_files)  # the reference module of every assignment: none is handed out
    framework = [path for path in (LAYOUT.reference / "tinyllm").rglob("*.py") if path not in answers]
    course = {
        line.strip()
        for path in [LAYOUT.reference / "tinyllm" / "rnn" / "gru.pyi", *LAYOUT.course_tests.glob("*.py"), *framework]
        for line in path.read_text(encoding="utf-8").splitlines()
    }
    lines = LAYOUT.module_source.read_text(encoding="utf-8").splitlines()
    for patch in sorted((LAYOUT.mutants / "patches").glob("*.patch")):
        for line in patch.read_text(encoding="utf-8").splitlines():
            if line.startswith(("+++", "---", "@@")):
                continue
            lines.append(line[1:])
    lines += (LAYOUT.mutants / "manifest.toml").read_text(encoding="utf-8").splitlines()
    # A line found within a handed-out one counts as handed out too (gru.py's `def __init__(...)
    # -> None:` is the stub's line without its `...`).
    handed_out = "\n".join(course)
    distinctive = {
        s for s in (line.strip() for line in lines)
        if len(s) >= MIN_LINE and not s.startswith("#") and s not in course and s not in handed_out
    }
    manifest = tomllib.loads((LAYOUT.mutants / "manifest.toml").read_text(encoding="utf-8"))
    secrets = [v[key] for v in manifest["variant"] if v.get("hidden") for key in ("title", "pitfall") if v.get(key)]
    assert len(distinctive) > 50 and secrets, "the answer key was not read: the scan would prove nothing"
    return distinctive, secrets


def _installed_files(installed: Installed) -> list[Path]:
    [info] = installed.site.glob("mutagrade_student-*.dist-info")
    record = (info / "RECORD").read_text(encoding="utf-8").splitlines()
    files = [(installed.site / line.rsplit(",", 2)[0]).resolve() for line in record if line]
    return [f for f in files if f.is_file()]


def test_make_builds_the_wheel_with_the_student_modules_and_no_answer_key(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("grader/flows/tdd.py", "grader/core/journal.py", "grader/flows/check.py", "grader/student_cli.py",
                   "grader/worker/serve.py", "grader/flows/submit.py", _course(LAYOUT.course_tests / "conftest.py"),
                   _course(LAYOUT.course_tests / "test_gru_golden.py"), _course(LAYOUT.goldens),
                   "grader/core/assignment.py", _course(LAYOUT.assignment), "grader/course/assignments/course.toml",
                   _course(LAYOUT.golden_code)):
        assert needed in names, f"{needed} is missing from the wheel"
    for staff in ("grader/cli.py", "grader/core/variants.py", "grader/flows/grading.py", "grader/flows/calibration.py",
                  "grader/flows/automutants.py", "grader/flows/bundle.py", "api/main.py", "api/store/crud.py"):
        assert staff not in names, f"{staff} is a staff module, but the student wheel holds it"
    assert not [n for n in names if n.startswith("api/")], "the student package ships no part of the service"
    # Of the mutants of each assignment folder, the assignment alone (its threshold and limits):
    # no patch, no manifest, no pool of automatic mutants.
    assert sorted(n for n in names if (n.startswith("grader/course/assignments/") and n.endswith((".toml", ".json")))
                  or "manifest" in n or "patches/" in n or n.startswith("tinyllm/") or n.endswith(".patch")) == sorted(
        ["grader/course/assignments/course.toml",
         *(_course(LAYOUT.root / "assignments" / name / "assignment.toml") for name in LAYOUT.available())])


def _course(path: Path) -> str:
    """Where the wheel stages a file of this checkout's course material."""
    return f"grader/course/{path.relative_to(REPO).as_posix()}"


def _imported(source: str, module: str, is_package: bool) -> set[str]:
    """Every module of grader/ and api/ that ``source`` imports, at any depth of its code."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(n for n in names if n.partition(".")[0] in ("grader", "api"))
    return found


def test_every_module_a_shipped_module_imports_is_shipped(wheel):
    """Statically, so that a module added to the staff tree and imported by a shipped one (in a
    function body too) is named here, not found missing by a student."""
    with zipfile.ZipFile(wheel) as archive:
        sources = {
            name[:-3].replace("/", ".").removesuffix(".__init__"): (archive.read(name).decode(), name.endswith("__init__.py"))
            for name in archive.namelist() if name.endswith(".py") and not name.startswith("grader/course/")
        }
    missing = []
    for module, (source, is_package) in sources.items():
        for name in _imported(source, module, is_package):
            # `from grader.report import render` names a function: only modules must be shipped.
            as_module = (REPO / Path(*name.split("."))).with_suffix(".py").is_file() or (
                REPO / Path(*name.split(".")) / "__init__.py").is_file()
            if as_module and name not in sources and (module, name) not in NOT_SHIPPED:
                missing.append(f"{module} imports {name}")
    assert not missing, "add these to packaging/student/pyproject.toml (or leave them unimported): " + "; ".join(
        sorted(missing))


def test_no_line_of_the_reference_or_of_a_mutant_is_installed(installed):
    distinctive, secrets = _answer_key()
    files = _installed_files(installed)
    assert len(files) > 30, files
    found = []
    for path in files:
        data = path.read_bytes()
        text = data.decode("utf-8", errors="replace")
        found += [f"{path}: line {line!r}" for line in distinctive if line in text or line.encode() in data]
        found += [f"{path}: hidden mutant text {secret[:60]!r}" for secret in secrets if secret in text]
        assert not path.as_posix().endswith(("tinyllm/rnn/gru.py", "manifest.toml")), path
    assert not found, "\n".join(found[:20])


def test_staff_modules_cannot_be_imported_from_the_student_install(installed):
    for module in ("grader.cli", "grader.core.variants", "grader.flows.grading", "tinyllm.rnn.gru"):
        done = installed.run("python", "-c", f"import {module}")
        assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr, (module, done.stderr)


# ------------------------------------------------------------------- the commands
def test_help_lists_the_student_commands_only(installed):
    done = installed.run("mutagrade", "--help")
    assert done.returncode == 0, done.stderr
    menus = set(re.findall(r"\{([a-z,-]+)\}", done.stdout))
    assert {frozenset(m.split(",")) for m in menus} == {frozenset(STUDENT_COMMANDS)}, done.stdout
    words = set(re.findall(r"[a-z-]+", done.stdout))
    assert not {"grade-batch", "calibrate", "variants", "serve", "admin", "bundle", "starter"} & words, done.stdout
    for staff in STAFF_COMMANDS:
        refused = installed.run("mutagrade", staff, "s04")
        assert refused.returncode == 2 and "invalid choice" in refused.stderr, (staff, refused.stderr)
    shown = installed.run("mutagrade", "variants", "show", "s04")
    assert shown.returncode == 2 and "pitfall" not in shown.stdout + shown.stderr


def test_tdd_status_and_red_on_a_student_repository(installed):
    repo = installed.student_repo("tdd")
    status = installed.run("mutagrade", "tdd", "status", cwd=repo)
    assert status.returncode == 0, status.stderr
    assert "20 entries" in status.stdout and "Next: write ONE new test" in status.stdout, status.stdout

    refused = installed.run("mutagrade", "tdd", "red", cwd=repo)  # the suite runs, but nothing is new
    assert refused.returncode == 2 and "no test is new since the last green" in refused.stderr, refused.stderr

    (repo / "python/tests/l3-3-gru/test_new_red.py").write_text(NEW_RED)
    red = installed.run("mutagrade", "tdd", "red", cwd=repo)
    assert red.returncode == 0, red.stdout + red.stderr
    assert "red recorded (entry 21): new failing test(s): test_new_red.py::test_a_new_red_test" in red.stdout


def test_a_starter_repository_goes_red_then_green_with_the_student_package(installed):
    """What a student starts from (``mutagrade starter``): the given test is the first red
    against the stub, and a written GRU turns it green; the journal then verifies."""
    repo = installed.home / "starter"
    write_starter(LAYOUT, repo)
    status = installed.run("mutagrade", "tdd", "status", cwd=repo)
    assert status.returncode == 0 and "0 entries" in status.stdout, status.stdout + status.stderr
    red = installed.run("mutagrade", "tdd", "red", cwd=repo)
    assert red.returncode == 0, red.stdout + red.stderr
    assert "red recorded (entry 1): new failing test(s): test_gru.py::test_hand_example_gru_cell" in red.stdout
    (repo / "python/tinyllm/rnn/gru.py").write_bytes(LAYOUT.module_source.read_bytes())  # the student writes it
    green = installed.run("mutagrade", "tdd", "green", cwd=repo)
    assert green.returncode == 0 and "green recorded (entry 2)" in green.stdout, green.stdout + green.stderr
    done = installed.run("mutagrade", "check", cwd=repo)
    assert done.returncode == 0 and "Journal: verified (2 entries" in done.stdout, done.stdout + done.stderr


def test_check_without_a_server_checks_locally_and_says_how_to_get_the_grade(installed):
    repo = installed.student_repo("check-local")
    done = installed.run("mutagrade", "check", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Policy: ok" in done.stdout
    assert "10/10 course tests pass (fixture goldens; torch not installed)" in done.stdout, done.stdout
    assert "Journal: verified (20 entries" in done.stdout, done.stdout
    [line] = [x for x in done.stdout.splitlines() if x.startswith("Mutation grade:")]
    assert "MUTAGRADE_SERVER" in line and "MUTAGRADE_TOKEN" in line and "mutagrade submit" in line, line

    broken = installed.student_repo("check-broken")
    gru = broken / "python/tinyllm/rnn/gru.py"
    gru.write_text(gru.read_text().replace("return n + z * (h - n)", "return z * n + (1 - z) * h"))
    failed = installed.run("mutagrade", "check", cwd=broken)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "FAILS" in failed.stdout and "test_hand_example_gru_cell: failed" in failed.stdout, failed.stdout

    missing = installed.run("mutagrade", "check", str(installed.home / "nowhere"))
    assert missing.returncode == 2 and "nowhere" in missing.stderr, missing.stderr
    (broken / "python/tests/l3-3-gru/test_sneaky.py").write_text("import os\n\n\ndef test_env():\n    assert os.environ\n")
    refused = installed.run("mutagrade", "check", cwd=broken)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Policy: VIOLATED" in refused.stdout and "test_sneaky.py:1:0: import of 'os'" in refused.stdout, refused.stdout
    assert "Mutation grade: not submitted: fix the policy violations above first" in refused.stdout

    gru.unlink()
    no_gru = installed.run("mutagrade", "check", cwd=broken)
    assert no_gru.returncode == 2 and "python/tinyllm/rnn/gru.py: no implementation" in no_gru.stderr, no_gru.stderr
    shutil.rmtree(broken / "python/tests")
    no_tests = installed.run("mutagrade", "check", cwd=broken)
    assert no_tests.returncode == 2 and "python/tests/l3-3-gru: no such folder of tests" in no_tests.stderr, no_tests.stderr


def test_tdd_and_check_run_each_test_under_the_courses_assignment_limit(installed):
    """The installed course's assignment gives each test its limit, as grading's replay does: a
    test past it is a time-out for ``tdd`` and for ``check``'s replay alike."""
    assignment = installed.site / _course(LAYOUT.assignment)
    shipped = assignment.read_text(encoding="utf-8")
    assert "test_timeout_s = 10.0" in shipped
    tight = shipped.replace("test_timeout_s = 10.0", "test_timeout_s = 1.0")
    # Seconds of work on any machine: far past 1 s, well within 60 s (not 10: a slower CPU).
    loose = shipped.replace("test_timeout_s = 10.0", "test_timeout_s = 60.0")
    repo = installed.student_repo("limits")
    (repo / "python/tests/l3-3-gru/test_slow.py").write_text(SLOW)
    try:
        assignment.write_text(tight, encoding="utf-8")
        red = installed.run("mutagrade", "tdd", "red", cwd=repo)  # a time-out is a failure
        assert red.returncode == 0 and "test_slow.py::test_slow_but_right" in red.stdout, red.stdout + red.stderr
        green = installed.run("mutagrade", "tdd", "green", cwd=repo)
        assert green.returncode == 1, green.stdout + green.stderr
        assert "test_slow.py::test_slow_but_right (timeout)" in green.stderr, green.stderr

        assignment.write_text(loose, encoding="utf-8")  # a longer limit: the same green is recorded
        green = installed.run("mutagrade", "tdd", "green", cwd=repo)
        assert green.returncode == 0, green.stdout + green.stderr
        assignment.write_text(tight, encoding="utf-8")
        done = installed.run("mutagrade", "check", cwd=repo)
    finally:
        assignment.write_text(shipped, encoding="utf-8")
    assert done.returncode == 1 and "Journal: NOT VERIFIED" in done.stdout, done.stdout + done.stderr
    assert "test_slow.py::test_slow_but_right: timeout when its green snapshot was replayed" in done.stdout, done.stdout


def test_submit_names_a_server_it_cannot_reach(installed):
    repo = installed.student_repo("submit")
    unreachable = installed.run("mutagrade", "submit", "--server", f"http://127.0.0.1:{free_port()}", cwd=repo,
                                env={**installed.env, "MUTAGRADE_TOKEN": "t"})
    # The service's side of things (3, or the code `submit` keeps for an unreachable server).
    assert unreachable.returncode > 2 and "reach" in unreachable.stderr, unreachable.stderr
    assert "127.0.0.1" in unreachable.stderr and "Traceback" not in unreachable.stderr, unreachable.stderr
    no_server = installed.run("mutagrade", "submit", cwd=repo)
    assert no_server.returncode == 2 and "--server URL or MUTAGRADE_SERVER" in no_server.stderr, no_server.stderr


def test_check_with_torch_and_a_server_compares_with_torch_and_submits(installed_with_torch, tmp_path):
    """Everything ``check`` does at once: live torch where it is installed, and the mutation
    grade from a real ``mutagrade serve`` (started from the staff checkout)."""
    env = service_env(database_url=f"sqlite:///{tmp_path / 'mutagrade.db'}")
    api = ApiProcess(port=free_port(), env=env, log=tmp_path / "serve.log")
    api.start()
    try:
        created = subprocess.run(
            [sys.executable, "-m", "api.cli", "admin", "token", "create", "--user", "alice", "--role", "student"],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert created.returncode == 0, created.stderr
        repo = installed_with_torch.student_repo("check-server")
        student = {**installed_with_torch.env, "MUTAGRADE_SERVER": api.url, "MUTAGRADE_TOKEN": created.stdout.strip()}
        done = installed_with_torch.run("mutagrade", "check", cwd=repo, env=student)
    finally:
        api.stop()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "11/11 course tests pass (fixture goldens and live torch)" in done.stdout, done.stdout
    assert "Journal: verified (20 entries" in done.stdout
    assert f"Mutation grade: submitting your tests and journal to {api.url}" in done.stdout
    assert "VERDICT: PASSED" in done.stdout and "killed (12/12)" in done.stdout, done.stdout[-3000:]
    assert f"report page: {api.url}/submissions/1" in done.stderr, done.stderr


def test_a_student_who_loosens_the_packages_limits_is_still_judged_by_the_courses(installed, tmp_path):
    """The attack: edit the installed package's copy of the assignment so that a test too slow
    for the course goes green locally. Grading replays the journal under the server's own
    assignment (here 1 s a test), never the student's copy: the journal does not verify."""
    assignment = installed.site / _course(LAYOUT.assignment)
    shipped = assignment.read_text(encoding="utf-8")
    repo = installed.student_repo("loosened")
    (repo / "python/tests/l3-3-gru/test_slow.py").write_text(SLOW)
    try:
        # Red as the existing test does it (a time-out is a failure), then green on a copy
        # loosened to 60 s a test.
        assignment.write_text(shipped.replace("test_timeout_s = 10.0", "test_timeout_s = 1.0"), encoding="utf-8")
        red = installed.run("mutagrade", "tdd", "red", cwd=repo)
        assert red.returncode == 0, red.stdout + red.stderr
        assignment.write_text(shipped.replace("test_timeout_s = 10.0", "test_timeout_s = 60.0"), encoding="utf-8")
        green = installed.run("mutagrade", "tdd", "green", cwd=repo)
        assert green.returncode == 0, green.stdout + green.stderr  # recorded under the loosened copy
    finally:
        assignment.write_text(shipped, encoding="utf-8")
    course = tmp_path / "assignment.toml"  # 1 s a test, and the journal required: it must verify to pass
    text = LAYOUT.assignment.read_text()
    assert "test_timeout_s = 10.0" in text and "require_journal = false" in text
    course.write_text(text.replace("test_timeout_s = 10.0", "test_timeout_s = 1.0")
                      .replace("require_journal = false", "require_journal = true"))
    graded = subprocess.run(
        [sys.executable, "-m", "api.cli", "grade", str(repo / "python/tests/l3-3-gru"), "--journal",
         str(repo / ".tdd/journal.jsonl"), "--assignment", str(course), "--format", "json"],
        capture_output=True, text=True, timeout=600, cwd=LAYOUT.root,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    report = json.loads(graded.stdout)
    assert graded.returncode == 1 and not report["journal"]["ok"], graded.stderr[-2000:]
    assert "the red-then-green journal does not verify" in report["reasons"], report["reasons"]
    assert any("test_slow.py::test_slow_but_right: timeout when its green snapshot was replayed" in p
               for p in report["journal"]["problems"]), report["journal"]["problems"]


def _interpreter(name: str) -> str:
    """A working ``name`` (python3.12): on the PATH, or among pyenv's versions."""
    candidates = [shutil.which(name), *map(str, sorted(Path.home().glob(f".pyenv/versions/*/bin/{name}")))]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "--version"], capture_output=True).returncode == 0:
            return candidate
    raise AssertionError(f"no working {name} on this machine (PATH or ~/.pyenv/versions)")


@pytest.mark.parametrize("python", ["python3.11", "python3.12"])
def test_the_package_builds_from_a_fresh_venv_of_each_supported_python(python, tmp_path):
    """A new instructor's venv: 3.11's comes with an old setuptools, 3.12's with none; the build
    brings its own pinned setuptools in an isolated environment either way."""
    found = _interpreter(python)
    venv = tmp_path / "venv"
    subprocess.run([found, "-m", "venv", str(venv)], check=True, capture_output=True)
    done = subprocess.run([str(venv / "bin" / "python"), "packaging/student/build.py", "--dist", str(tmp_path / "dist")],
                          cwd=LAYOUT.root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    [built] = (tmp_path / "dist").glob("mutagrade_student-*-py3-none-any.whl")
    with zipfile.ZipFile(built) as archive:
        assert "grader/student_cli.py" in archive.namelist()


def test_the_package_checks_an_lstm_repository_by_its_tests_folder(installed):
    """The package carries every module's student-facing part: the LSTM example repository is
    checked by its own course tests and goldens, its journal replayed, with no --assignment:
    the repository's python/tests/l3-2-lstm/ says which module it is."""
    repo = installed.home / "lstm-check"
    shutil.copytree(LAYOUT.examples / "lstm-student", repo, ignore=shutil.ignore_patterns("__pycache__"))
    done = installed.run("mutagrade", "check", cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10/10 course tests pass (fixture goldens; torch not installed)" in done.stdout, done.stdout
    assert "Journal: verified (20 entries" in done.stdout, done.stdout
    status = installed.run("mutagrade", "tdd", "status", cwd=repo)
    assert status.returncode == 0 and "python/tests/l3-2-lstm" in status.stdout, status.stdout
