"""The CI examples (examples/ci/): each parses as YAML, and its commands (``run:`` and
``script:``) run for real, in bash as the CI runs them, with the environment the CI would set,
against a real ``mutagrade serve``. The runner's Python is a fresh venv holding pip and the
student package's dependencies; the install step installs the student package itself (the wheel
``make student-package`` writes, named by ``MUTAGRADE_CLIENT``, from the file: pip is told not to
reach any index), and refuses the full ``mutagrade``, which holds the reference GRU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from packaging.requirements import Requirement

from tests.api.conftest import LAYOUT, STUDENT, Server, make_server
from tests.student_wheel import build_wheel, readable_folder, student_venv

CI = LAYOUT.examples / "ci"
GITHUB = CI / "github-classroom.yml"
GITLAB = CI / "gitlab-ci.yml"
FULL = "mutagrade[service]"  # the full package (the grader and the reference): the install step refuses it
WEAK = "from tinyllm.rnn.gru import GRU\n\n\ndef test_keys():\n    assert 'bias_hh_l0' in GRU(2, 3).state_dict()\n"
_EXPRESSION = re.compile(r"\$\{\{\s*(secrets|vars)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class Runner:
    """A CI runner's Python (``bin``: python and pip; ``mutagrade`` once the install step has run)
    and the requirement staff set in ``MUTAGRADE_CLIENT``: the student wheel's path."""

    bin: Path
    client: str


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("ci-server"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def runner() -> Iterator[Runner]:
    root = readable_folder("mutagrade-ci-runner-")
    try:
        wheel = build_wheel(root / "dist")
        venv = student_venv(root, wheel, [Requirement("pip")], install=False)
        yield Runner(bin=venv.venv / "bin", client=str(wheel))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _repository(tmp_path: Path, *, weak: bool = False) -> Path:
    """A student's repository as the CI checks it out: the bundled student, or a weak suite."""
    repo = tmp_path / "repo"
    if weak:
        (repo / "python" / "tests" / "l3-3-gru").mkdir(parents=True)
        (repo / "python" / "tests" / "l3-3-gru" / "test_gru.py").write_text(WEAK)
    else:
        shutil.copytree(STUDENT, repo)
    return repo


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _base_env(tmp_path: Path, runner: Runner) -> dict[str, str]:
    """A runner's environment: its Python first on PATH, then the system's, nothing of this
    environment's own venv."""
    return {
        "PATH": f"{runner.bin}{os.pathsep}/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "CI": "true",
        "OPENBLAS_NUM_THREADS": "1",
        "PIP_NO_INDEX": "1",  # the install step installs the wheel from its file, never downloads
        "HOME": str(tmp_path / "home"),
    }


def _student_package_only(runner: Runner) -> None:
    """What the install step left on the runner is the student package: its commands, and
    neither the reference GRU nor a staff command."""
    assert (runner.bin / "mutagrade").is_file(), "the install step installed no mutagrade command"
    reference = subprocess.run([str(runner.bin / "python"), "-I", "-c", "import tinyllm.rnn.gru"],
                               capture_output=True, text=True, timeout=120)
    assert reference.returncode == 1 and "ModuleNotFoundError" in reference.stderr, reference.stderr
    shown = subprocess.run([str(runner.bin / "mutagrade"), "--help"], capture_output=True, text=True, timeout=120)
    assert "{tdd,check,submit}" in shown.stdout and "grade-batch" not in shown.stdout, shown.stdout


# ---------------------------------------------------------------------- GitHub Actions
@dataclass
class Step:
    name: str
    returncode: int
    stdout: str
    stderr: str


def _github_steps() -> list[dict]:
    workflow = yaml.safe_load(GITHUB.read_text())
    (job,) = workflow["jobs"].values()
    return job["steps"]


def _github_value(value: object, context: dict[str, dict[str, str]]) -> str:
    """``${{ secrets.X }}`` and ``${{ vars.X }}`` as GitHub fills them in (unset: empty)."""
    text = str(value)
    rest = _EXPRESSION.sub("", text)
    assert "${{" not in rest, f"an expression this test does not fill in: {text}"
    return _EXPRESSION.sub(lambda m: context[m.group(1)].get(m.group(2), ""), text)


def _run_github(repo: Path, tmp_path: Path, runner: Runner, *, secrets: dict[str, str],
                variables: dict[str, str]) -> tuple[list[Step], Path]:
    """Every ``run:`` step of the workflow, in order, stopping at the first that fails."""
    workflow = yaml.safe_load(GITHUB.read_text())
    (job,) = workflow["jobs"].values()
    shell = workflow.get("defaults", {}).get("run", {}).get("shell")
    assert shell == "bash"
    summary = tmp_path / "step_summary.md"
    summary.touch()
    context = {"secrets": secrets, "vars": variables}
    done: list[Step] = []
    for index, step in enumerate(job["steps"]):
        if "run" not in step:
            assert step["uses"].split("@")[0] in ("actions/checkout", "actions/setup-python"), step
            continue
        env = {
            **_base_env(tmp_path, runner),
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(repo),
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(tmp_path),
            **{k: _github_value(v, context) for k, v in {**workflow.get("env", {}), **job.get("env", {}), **step.get("env", {})}.items()},
        }
        script = tmp_path / f"step{index}.sh"
        script.write_text(step["run"])
        # GitHub's `shell: bash`: bash --noprofile --norc -eo pipefail {0}
        result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                                cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        done.append(Step(step.get("name", step.get("id", "")), result.returncode, result.stdout, result.stderr))
        if result.returncode != 0:
            break
    return done, summary


def test_the_github_workflow_is_yaml_with_a_job_of_steps() -> None:
    workflow = yaml.safe_load(GITHUB.read_text())
    assert workflow["name"] == "mutagrade"
    assert "push" in workflow[True]  # YAML 1.1 reads the key `on` as true
    assert workflow["permissions"] == {"contents": "read"}
    ids = [s.get("id") for s in _github_steps()]
    assert "install" in ids and "grade" in ids


def test_the_github_workflow_grades_on_the_server_and_writes_the_job_summary(server: Server, runner: Runner, tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    before = _files(repo)
    steps, summary = _run_github(repo, tmp_path, runner, secrets={"MUTAGRADE_TOKEN": server.token("gh-alice")},
                                 variables={"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": runner.client})
    assert [s.returncode for s in steps] == [0, 0], steps
    grade = steps[-1]
    assert "VERDICT: PASSED" in grade.stdout and "report page:" in grade.stderr
    markdown = summary.read_text()
    assert markdown.startswith("## ✅ mutagrade: PASSED") and "(12/12)" in markdown
    assert _files(repo) == before  # the job leaves the student's repository as it found it
    with server.client("prof", "staff") as prof:
        mine = [s for s in prof.get("/v1/submissions").json() if s["student"] == "gh-alice"]
    assert len(mine) == 1 and mine[0]["passed"] is True
    _student_package_only(runner)


def test_the_github_workflow_fails_the_job_for_a_suite_that_does_not_pass(server: Server, runner: Runner, tmp_path: Path) -> None:
    repo = _repository(tmp_path, weak=True)
    steps, summary = _run_github(repo, tmp_path, runner, secrets={"MUTAGRADE_TOKEN": server.token("gh-bob")},
                                 variables={"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": runner.client})
    assert [s.returncode for s in steps] == [0, 1], steps
    assert "VERDICT: NOT PASSED" in steps[-1].stdout
    assert summary.read_text().startswith("## ❌")


def test_the_github_workflow_without_the_token_says_which_secret_to_set(server: Server, runner: Runner, tmp_path: Path) -> None:
    repo = _repository(tmp_path, weak=True)
    steps, summary = _run_github(repo, tmp_path, runner, secrets={},
                                 variables={"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": runner.client})
    assert [s.returncode for s in steps] == [0, 1], steps
    assert "set the Actions secret MUTAGRADE_TOKEN" in steps[-1].stderr
    assert summary.read_text() == ""
    steps, _ = _run_github(repo, tmp_path, runner, secrets={}, variables={"MUTAGRADE_SERVER": server.url})
    assert [s.returncode for s in steps] == [1] and "set the Actions variable MUTAGRADE_CLIENT" in steps[0].stderr
    steps, _ = _run_github(repo, tmp_path, runner, secrets={"MUTAGRADE_TOKEN": "t"}, variables={"MUTAGRADE_CLIENT": runner.client})
    assert [s.returncode for s in steps] == [0, 1] and "set the Actions variable MUTAGRADE_SERVER" in steps[-1].stderr


def test_the_github_workflow_puts_no_expression_in_a_shell_and_grades_only_on_the_server() -> None:
    """Values reach the shell as environment variables, never pasted into its text (a branch
    name or a secret would be code there), and nothing grades locally: that would need the key."""
    for step in _github_steps():
        if "run" in step:
            assert "${{" not in step["run"], step["run"]
            assert "mutagrade grade" not in step["run"] and "mutagrade check" not in step["run"]
    assert any("mutagrade submit" in step.get("run", "") for step in _github_steps())
    assert "${{ secrets.MUTAGRADE_TOKEN }}" in GITHUB.read_text()



# ---------------------------------------------------------------------------- GitLab CI
def _gitlab_job() -> dict:
    pipeline = yaml.safe_load(GITLAB.read_text())
    return pipeline["mutagrade"]


def _run_gitlab(repo: Path, tmp_path: Path, runner: Runner, variables: dict[str, str]) -> subprocess.CompletedProcess:
    """The job's ``script:`` lines in one bash, as GitLab's runner runs them (set -eo pipefail)."""
    job = _gitlab_job()
    env = {**_base_env(tmp_path, runner), "GITLAB_CI": "true", "CI_PROJECT_DIR": str(repo), **job.get("variables", {}), **variables}
    script = tmp_path / "job.sh"
    script.write_text("set -eo pipefail\n" + "\n".join(job["script"]) + "\n")
    return subprocess.run(["bash", "--noprofile", "--norc", str(script)], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_gitlab_job_is_yaml_that_keeps_the_junit_report_always() -> None:
    job = _gitlab_job()
    assert job["artifacts"]["when"] == "always"
    assert job["artifacts"]["reports"]["junit"] == "mutagrade-junit.xml"
    assert any("mutagrade submit" in line for line in job["script"])
    assert not any("mutagrade grade" in line or "mutagrade check" in line for line in job["script"])


def test_the_gitlab_job_grades_on_the_server_and_writes_the_junit_report(server: Server, runner: Runner, tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    variables = {"MUTAGRADE_SERVER": server.url, "MUTAGRADE_TOKEN": server.token("gl-carol"), "MUTAGRADE_CLIENT": runner.client}
    done = _run_gitlab(repo, tmp_path, runner, variables)
    assert done.returncode == 0, done.stderr
    report = repo / _gitlab_job()["artifacts"]["reports"]["junit"]
    mutants = next(s for s in ET.parse(report).getroot().iter("testsuite") if s.get("name") == "mutagrade.mutants")
    assert int(mutants.get("tests")) == 12 and int(mutants.get("failures")) == 0
    _student_package_only(runner)


def test_the_gitlab_job_fails_for_a_suite_that_does_not_pass_and_still_reports(server: Server, runner: Runner, tmp_path: Path) -> None:
    repo = _repository(tmp_path, weak=True)
    variables = {"MUTAGRADE_SERVER": server.url, "MUTAGRADE_TOKEN": server.token("gl-dave"), "MUTAGRADE_CLIENT": runner.client}
    done = _run_gitlab(repo, tmp_path, runner, variables)
    assert done.returncode == 1, done.stderr
    report = repo / _gitlab_job()["artifacts"]["reports"]["junit"]
    mutants = next(s for s in ET.parse(report).getroot().iter("testsuite") if s.get("name") == "mutagrade.mutants")
    assert int(mutants.get("failures")) == 12
    unset = _run_gitlab(repo, tmp_path, runner, {"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": runner.client})
    assert unset.returncode == 1 and "set the CI/CD variable MUTAGRADE_TOKEN" in unset.stderr


@pytest.mark.parametrize("client", [FULL, "https://grading.example.edu/dist/mutagrade-0.1.0-py3-none-any.whl"])
def test_the_ci_refuses_to_install_the_full_package(runner: Runner, tmp_path: Path, client: str) -> None:
    """The full ``mutagrade`` holds the reference GRU: named in ``MUTAGRADE_CLIENT``, the install
    step stops before pip runs, in either CI, and says what to name instead."""
    repo = _repository(tmp_path, weak=True)
    steps, _ = _run_github(repo, tmp_path, runner, secrets={"MUTAGRADE_TOKEN": "t"},
                           variables={"MUTAGRADE_SERVER": "http://127.0.0.1:9", "MUTAGRADE_CLIENT": client})
    assert [s.returncode for s in steps] == [1], steps
    assert "MUTAGRADE_CLIENT must name the student package" in steps[0].stderr, steps[0].stderr
    done = _run_gitlab(repo, tmp_path, runner, {"MUTAGRADE_SERVER": "http://127.0.0.1:9", "MUTAGRADE_TOKEN": "t",
                                                "MUTAGRADE_CLIENT": client})
    assert done.returncode == 1 and "MUTAGRADE_CLIENT must name the student package" in done.stderr, done.stderr
    untouched = subprocess.run([str(runner.bin / "python"), "-I", "-c", "import tinyllm"], capture_output=True, timeout=120)
    assert untouched.returncode == 1  # nothing of the full package reached the runner
