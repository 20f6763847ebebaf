"""``mutagrade bundle gradescope``: the autograder zip, and its ``run_autograder`` run for real
(the ``mutagrade`` of this checkout on PATH) on a folder laid out as Gradescope lays it out."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.core.paths import default_layout
from grader.core.variants import VariantKind, build_variants

LAYOUT = default_layout()
STUDENT = LAYOUT.examples / "student"
STUDENT_TESTS = Path("python") / "tests" / "l3-3-gru"
BIN = Path(sys.executable).parent  # the venv's bin: `mutagrade` is there, as setup.sh puts it on PATH
WEAK = "from tinyllm.rnn.gru import GRU\n\n\ndef test_keys():\n    assert 'bias_hh_l0' in GRU(2, 3).state_dict()\n"


def mutagrade(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", *args], capture_output=True, text=True, timeout=300,
        cwd=cwd or LAYOUT.root, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The bundle, and what the command printed."""
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    done = mutagrade("bundle", "gradescope", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote {out}" in done.stdout
    return out, done.stdout


@pytest.fixture(scope="module")
def bundle(bundled: tuple[Path, str]) -> Path:
    return bundled[0]


def points_to_set(stdout: str) -> float:
    """The points the command tells staff to set on Gradescope."""
    found = re.findall(r"^Set the assignment's points to (\d+(?:\.\d+)?) on Gradescope", stdout, re.MULTILINE)
    assert len(found) == 1, stdout
    return float(found[0])


def _mode(info: zipfile.ZipInfo) -> int:
    return (info.external_attr >> 16) & 0o7777


# ---------------------------------------------------------------------------- the zip
def test_the_zip_has_the_two_scripts_at_its_root_executable(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        infos = {i.filename: i for i in archive.infolist()}
    assert {"setup.sh", "run_autograder"} <= set(infos)
    assert _mode(infos["setup.sh"]) == _mode(infos["run_autograder"]) == 0o755
    assert stat.S_ISREG(infos["run_autograder"].external_attr >> 16)


def test_the_zip_holds_an_installable_checkout_and_nothing_built(bundle: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
    for needed in ("pyproject.toml", "README.md", "grader/cli.py", "grader/worker/serve.py",
                   "reference/tinyllm/rnn/gru.py", "assignments/course.toml", "assignments/l3-3-gru/manifest.toml",
                   "assignments/l3-3-gru/assignment.toml", "scripts/setup-sandbox.sh"):
        assert f"mutagrade/{needed}" in names, needed
    patches = {p.name for p in (LAYOUT.mutants / "patches").iterdir()}
    assert patches <= {Path(n).name for n in names if n.startswith("mutagrade/assignments/l3-3-gru/patches/")}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or ".egg-info" in n]
    assert not [n for n in names if n.startswith(("mutagrade/tests/", "mutagrade/.venv/", "mutagrade/examples/"))]


def test_the_scripts_are_bash_that_parses_and_setup_installs_what_it_should(bundle: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(bundle) as archive:
        archive.extractall(tmp_path)
    for script in ("setup.sh", "run_autograder"):
        assert (tmp_path / script).read_text().startswith("#!/usr/bin/env bash\n")
        done = subprocess.run(["bash", "-n", str(tmp_path / script)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    setup = (tmp_path / "setup.sh").read_text()
    assert 'pip install --quiet -e "$SRC"' in setup and "scripts/setup-sandbox.sh" in setup
    assert "/usr/local/bin/mutagrade" in setup


def test_the_command_tells_staff_the_points_to_set_on_gradescope(bundled: tuple[Path, str], tmp_path: Path) -> None:
    """One point per mutant of the manifest, whichever way the assignment scores."""
    mutants = [v for v in build_variants(LAYOUT) if v.kind is VariantKind.MUTANT]
    assert points_to_set(bundled[1]) == len(mutants) == 12
    kills = tmp_path / "assignment.toml"
    kills.write_text(LAYOUT.assignment.read_text().replace('gradescope_score = "verdict"', 'gradescope_score = "kills"'))
    done = mutagrade("bundle", "gradescope", "--output", str(tmp_path / "k.zip"), "--assignment", str(kills))
    assert done.returncode == 0, done.stderr
    assert points_to_set(done.stdout) == len(mutants)


# -------------------------------------------------- setup.sh: which Python it installs on
@pytest.fixture(scope="module")
def pythons() -> dict[tuple[int, int], Path]:
    """Real CPython interpreters of this machine, one per version, by their real paths: those on
    PATH and pyenv's (this machine's kind has 3.10 there, as Ubuntu 22.04 has as python3)."""
    found: dict[tuple[int, int], Path] = {}
    candidates = [shutil.which(f"python3.{minor}") for minor in range(8, 15)] + [sys.executable]
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        root = subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout.strip()
        candidates += sorted(str(p) for p in Path(root or "/nonexistent").glob("versions/3.*/bin/python3"))
    for candidate in filter(None, candidates):
        done = subprocess.run(
            [candidate, "-c", "import os, sys; print(sys.implementation.name, *sys.version_info[:2], "
             "os.path.realpath(sys.executable))"],
            capture_output=True, text=True, timeout=60,
        )
        if done.returncode == 0 and done.stdout.startswith("cpython "):
            _, major, minor, path = done.stdout.strip().split(" ", 3)
            found.setdefault((int(major), int(minor)), Path(path))
    return found


def _setup_choice(tmp_path: Path, bundle: Path, on_path: dict[str, Path]) -> str:
    """``setup.sh --print-python`` from the zip, with nothing on PATH but ``on_path`` (names to
    real interpreters): the Python it would use, or how it would install one."""
    with zipfile.ZipFile(bundle) as archive:
        (tmp_path / "setup.sh").write_bytes(archive.read("setup.sh"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, target in on_path.items():
        (bin_dir / name).symlink_to(target)
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run([bash, str(tmp_path / "setup.sh"), "--print-python"], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_dir), "MUTAGRADE_PREFIX": str(tmp_path / "never")})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "never").exists()  # it installs nothing
    return done.stdout.strip()


def test_setup_uses_the_images_python_when_it_is_3_11_or_newer(
    tmp_path: Path, bundle: Path, pythons: dict[tuple[int, int], Path]
) -> None:
    """Ubuntu 24.04: python3 is 3.12. Here the newest of this machine's (the venv's at least)."""
    newer = {v: p for v, p in pythons.items() if v >= (3, 11)}
    assert newer  # the venv's interpreter at least
    version = max(newer)
    choice = _setup_choice(tmp_path, bundle, {"python3": newer[version]})
    assert choice == str(tmp_path / "bin" / "python3")
    done = subprocess.run([choice, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True)
    assert tuple(map(int, done.stdout.split())) == version


def test_setup_installs_python_3_11_with_uv_when_the_images_is_older(
    tmp_path: Path, bundle: Path, pythons: dict[tuple[int, int], Path]
) -> None:
    """Ubuntu 22.04: python3 is 3.10, and the image has no python3.11 (which setup.sh asked apt for)."""
    older = {v: p for v, p in pythons.items() if v < (3, 11)}
    if not older:
        pytest.skip("no CPython older than 3.11 on this machine to stand as the image's python3")
    assert _setup_choice(tmp_path, bundle, {"python3": older[max(older)]}) == "uv python install 3.11"


def test_setup_prefers_a_python3_11_beside_an_older_python3(
    tmp_path: Path, bundle: Path, pythons: dict[tuple[int, int], Path]
) -> None:
    older = {v: p for v, p in pythons.items() if v < (3, 11)}
    if not older or (3, 11) not in pythons:
        pytest.skip("no CPython older than 3.11, or none of 3.11, on this machine")
    choice = _setup_choice(tmp_path, bundle, {"python3": older[max(older)], "python3.11": pythons[(3, 11)]})
    assert choice == str(tmp_path / "bin" / "python3.11")


def test_setup_installs_python_with_uv_on_an_image_without_any(tmp_path: Path, bundle: Path) -> None:
    assert _setup_choice(tmp_path, bundle, {}) == "uv python install 3.11"


def test_the_bundle_is_the_same_byte_for_byte_each_time(bundle: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.zip"
    assert mutagrade("bundle", "gradescope", "--output", str(again)).returncode == 0
    assert again.read_bytes() == bundle.read_bytes()


def test_a_repository_bundle_clones_the_course_repository_instead(tmp_path: Path) -> None:
    out = tmp_path / "remote.zip"
    url = "https://git.example.edu/course/mutagrade.git"
    done = mutagrade("bundle", "gradescope", "--output", str(out), "--repository", url, "--ref", "v2026.1")
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        assert archive.read("repository").decode() == f"{url}\nv2026.1\n"
        assert archive.read("assignment").decode() == "l3-3-gru\n"  # the assignment run_autograder grades
    assert {"setup.sh", "run_autograder", "repository", "assignment"} == names


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--repository", "https://x.edu/a b.git"], "--repository: expected a git URL"),
        (["--repository", "https://x.edu/a.git\nrm -rf /"], "--repository: expected a git URL"),
        (["--repository=--upload-pack=touch /tmp/x"], "--repository: expected a git URL"),
        (["--repository=-uhttps://x.edu/a.git"], "--repository: expected a git URL"),
        (["--repository", "https://x.edu/a.git", "--ref=-b"], "--ref: expected a branch or tag"),
        (["--repository", "https://x.edu/a.git", "--ref", "v1 v2"], "--ref: expected a branch or tag"),
        (["--ref", "main"], "--ref needs --repository"),
    ],
)
def test_a_bad_repository_or_ref_is_refused_naming_the_option(tmp_path: Path, args: list[str], expected: str) -> None:
    out = tmp_path / "x.zip"
    done = mutagrade("bundle", "gradescope", "--output", str(out), *args)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert not out.exists()


def test_an_assignment_given_goes_into_the_bundle_checked_first(tmp_path: Path) -> None:
    good = tmp_path / "assignment.toml"
    good.write_text(LAYOUT.assignment.read_text().replace('gradescope_score = "verdict"', 'gradescope_score = "kills"'))
    out = tmp_path / "a.zip"
    done = mutagrade("bundle", "gradescope", "--output", str(out), "--assignment", str(good))
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(out) as archive:
        assert 'gradescope_score = "kills"' in archive.read("mutagrade/assignments/l3-3-gru/assignment.toml").decode()
    bad = tmp_path / "bad.toml"
    bad.write_text(LAYOUT.assignment.read_text().replace('gradescope_score = "verdict"', 'gradescope_score = "all"'))
    done = mutagrade("bundle", "gradescope", "--output", str(tmp_path / "b.zip"), "--assignment", str(bad))
    assert done.returncode == 2 and str(bad) in done.stderr and "gradescope_score" in done.stderr
    assert not (tmp_path / "b.zip").exists()


def test_an_output_in_a_missing_folder_is_exit_2(tmp_path: Path) -> None:
    done = mutagrade("bundle", "gradescope", "--output", str(tmp_path / "nope" / "a.zip"))
    assert done.returncode == 2 and "nope: no such folder to write the bundle into" in done.stderr


# --------------------------------------------------------------- run_autograder, for real
def _autograder(tmp_path: Path, bundle: Path) -> Path:
    """A folder laid out as Gradescope lays /autograder out: source/ (the zip), submission/."""
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as archive:
        for name in ("setup.sh", "run_autograder"):
            (root / "source").mkdir(parents=True, exist_ok=True)
            (root / "source" / name).write_bytes(archive.read(name))
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    return root


def _run(root: Path) -> tuple[subprocess.CompletedProcess, dict]:
    env = {
        **os.environ, "OPENBLAS_NUM_THREADS": "1", "MUTAGRADE_AUTOGRADER_ROOT": str(root),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    done = subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, text=True, timeout=300,
                          cwd=root, env=env)
    results = root / "results" / "results.json"
    assert results.is_file(), done.stdout + done.stderr
    return done, json.loads(results.read_text())


@pytest.mark.parametrize("wrapper", ["", "l3-3-gru-main"])
def test_run_autograder_grades_a_student_repository_with_its_journal(
    tmp_path: Path, bundled: tuple[Path, str], wrapper: str
) -> None:
    """As the repository is, or in the one folder GitHub's "Download ZIP" wraps it in (which
    Gradescope unpacks as it is): graded the same, as every other intake takes it."""
    root = _autograder(tmp_path, bundled[0])
    repository = root / "submission" / wrapper
    shutil.copytree(STUDENT, repository, dirs_exist_ok=True)
    cache = repository / STUDENT_TESTS / "__pycache__"  # left by the student's pytest: not packed
    cache.mkdir()
    (cache / "test_gru.cpython-311-pytest-9.2.0.pyc").write_bytes(b"\x00" * 64)
    done, results = _run(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results["score"] == results["max_score"] == 12.0
    assert results["max_score"] == points_to_set(bundled[1])  # what staff were told to set
    assert isinstance(results["execution_time"], int) and results["stdout_visibility"] == "hidden"
    checks = {t["name"]: t["status"] for t in results["tests"]}
    assert checks["Verdict"] == "passed" and checks["Journal"] == "passed"
    assert sum(name.startswith(("s", "hidden mutant")) for name in checks) == 12
    hidden = [v.spec.title for v in build_variants(LAYOUT) if v.kind is VariantKind.MUTANT and v.spec.hidden]
    assert not any(title in json.dumps(results) for title in hidden)


def test_run_autograder_grades_tests_at_the_top_and_a_weak_suite_scores_less(tmp_path: Path, bundle: Path) -> None:
    root = _autograder(tmp_path, bundle)
    (root / "submission" / "test_weak.py").write_text(WEAK)
    (root / "submission" / "notes.txt").write_text("not a test")
    done, results = _run(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results["max_score"] == 12.0 and results["score"] == 0.0
    assert results["output"].startswith("NOT PASSED")
    assert not any(t["name"] == "Journal" for t in results["tests"])  # not checked: not shown as passed


@pytest.mark.parametrize("wrapper", ["", "mytests"])
def test_run_autograder_grades_test_files_in_one_wrapping_folder_or_none(
    tmp_path: Path, bundle: Path, wrapper: str
) -> None:
    """``zip -r sub.zip mytests``: Gradescope unpacks it into submission/mytests/test_*.py."""
    root = _autograder(tmp_path, bundle)
    (root / "submission" / wrapper).mkdir(exist_ok=True)
    shutil.copy(STUDENT / STUDENT_TESTS / "test_gru.py", root / "submission" / wrapper / "test_gru.py")
    done, results = _run(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results["score"] == results["max_score"] == 12.0, results["output"]
    assert results["output"].startswith("PASSED")
    assert not any(t["name"] == "Journal" for t in results["tests"])


def test_what_no_intake_grades_is_not_packed_and_counts_against_no_limit(tmp_path: Path, bundle: Path) -> None:
    """A repository's .git/ and the caches pytest leaves (__pycache__/), however many files."""
    root = _autograder(tmp_path, bundle)
    (root / "submission" / "test_weak.py").write_text(WEAK)
    for folder in (".git/objects", "__pycache__"):
        (root / "submission" / folder).mkdir(parents=True)
        for n in range(250):  # the service takes at most 200 files and folders
            (root / "submission" / folder / f"{n:03d}.pyc").write_bytes(b"\x00" * 16)
    done, results = _run(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results["max_score"] == 12.0 and results["output"].startswith("NOT PASSED"), results["output"]


@pytest.mark.parametrize("where", ["folder", "file", "inside", "wrapped"])
def test_a_link_to_the_course_tests_is_refused_not_graded(tmp_path: Path, bundle: Path, where: str) -> None:
    """The attack: point the graded tests at the course's own (they kill every mutant)."""
    root = _autograder(tmp_path, bundle)
    course = LAYOUT.course_tests
    if where == "folder":
        (root / "submission" / "python" / "tests").mkdir(parents=True)
        (root / "submission" / STUDENT_TESTS).symlink_to(course, target_is_directory=True)
    elif where == "file":
        test_file = next(course.glob("test_*.py"))
        (root / "submission" / "test_gru.py").symlink_to(test_file)
    elif where == "wrapped":
        (root / "submission" / "mytests").mkdir()
        (root / "submission" / "mytests" / "test_gru.py").symlink_to(next(course.glob("test_*.py")))
    else:
        (root / "submission" / STUDENT_TESTS).mkdir(parents=True)
        (root / "submission" / STUDENT_TESTS / "test_gru.py").write_text(WEAK)
        (root / "submission" / STUDENT_TESTS / "test_course.py").symlink_to(next(course.glob("test_*.py")))
    done, results = _run(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert results["score"] == 0.0
    assert "links are not allowed" in results["output"] and results["tests"][0]["status"] == "failed"


def test_a_submission_with_no_tests_gets_a_result_that_says_so(tmp_path: Path, bundle: Path) -> None:
    root = _autograder(tmp_path, bundle)
    (root / "submission" / "README.md").write_text("my tests are elsewhere")
    done, results = _run(root)
    assert done.returncode == 0
    assert results["score"] == 0.0 and "the submission holds no Python file" in results["output"]
    assert "python/tests/l3-3-gru/" in results["output"]


def test_a_folder_without_test_files_gets_a_result_naming_no_folder_of_the_autograders(
    tmp_path: Path, bundle: Path
) -> None:
    root = _autograder(tmp_path, bundle)
    (root / "submission" / "mytests").mkdir()
    (root / "submission" / "mytests" / "notes.py").write_text("x = 1\n")
    done, results = _run(root)
    assert done.returncode == 0
    assert results["score"] == 0.0 and "could not be graded" in results["output"]
    assert "no test_*.py or *_test.py file was found" in results["output"] and "notes.py" in results["output"]
    assert results["output"].startswith("This submission could not be graded: no test_*.py"), results["output"]
    assert "mutagrade-grade-" not in results["output"] and "/tmp" not in results["output"]


def test_a_malformed_journal_is_graded_as_one_that_does_not_verify_naming_the_line(tmp_path: Path, bundle: Path) -> None:
    """As at every intake: the suite is graded, and the journal's check fails naming the file
    and line as the student's repository has them."""
    root = _autograder(tmp_path, bundle)
    (root / "submission" / STUDENT_TESTS).mkdir(parents=True)
    (root / "submission" / STUDENT_TESTS / "test_weak.py").write_text(WEAK)
    (root / "submission" / ".tdd").mkdir()
    (root / "submission" / ".tdd" / "journal.jsonl").write_text("{not json\n")
    done, results = _run(root)
    assert done.returncode == 0
    tests = {test["name"]: test for test in results["tests"]}
    assert "Submission" not in tests and tests["Verdict"]["status"] == "failed"  # graded: the weak suite fails
    assert tests["Journal"]["status"] == "failed"
    assert tests["Journal"]["output"].startswith("Does not verify.\n- .tdd/journal.jsonl:1: expected one JSON object")
    written = json.dumps(results)  # the staging folder and the packed name are not the student's business
    assert "mutagrade-autograder" not in written and "submission.tar.gz" not in written


def test_without_mutagrade_on_path_the_result_says_the_autograder_is_not_set_up(tmp_path: Path, bundle: Path) -> None:
    root = _autograder(tmp_path, bundle)
    (root / "submission" / "test_weak.py").write_text(WEAK)
    env = {"PATH": "/usr/bin:/bin", "MUTAGRADE_AUTOGRADER_ROOT": str(root)}
    done = subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert results["score"] == 0.0 and "not set up" in results["output"]
