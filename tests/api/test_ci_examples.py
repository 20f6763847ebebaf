"""The CI examples (examples/ci/): each parses as YAML, and its commands (``run:`` and
``script:``) run for real, in bash as the CI runs them, with the environment the CI would set,
against a real ``mutagrade serve``: the install step included (pip finds the client already
installed here, and is told not to reach any index)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.api.conftest import LAYOUT, STUDENT, Server, make_server

CI = LAYOUT.examples / "ci"
GITHUB = CI / "github-classroom.yml"
GITLAB = CI / "gitlab-ci.yml"
BIN = Path(sys.executable).parent  # the venv's bin: python, pip and mutagrade, as the install step leaves them
CLIENT = "mutagrade[service]"  # the client requirement (installed here already)
WEAK = "from tinyllm.rnn.gru import GRU\n\n\ndef test_keys():\n    assert 'bias_hh_l0' in GRU(2, 3).state_dict()\n"
_EXPRESSION = re.compile(r"\$\{\{\s*(secrets|vars)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("ci-server"))
    srv.start()
    yield srv
    srv.stop()


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


def _base_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "CI": "true",
        "OPENBLAS_NUM_THREADS": "1",
        "PIP_NO_INDEX": "1",  # the install step must find the client installed, never download
        "HOME": str(tmp_path / "home"),
    }


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


def _run_github(repo: Path, tmp_path: Path, *, secrets: dict[str, str], variables: dict[str, str]) -> tuple[list[Step], Path]:
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
            **_base_env(tmp_path),
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


def test_the_github_workflow_grades_on_the_server_and_writes_the_job_summary(server: Server, tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    before = _files(repo)
    steps, summary = _run_github(repo, tmp_path, secrets={"MUTAGRADE_TOKEN": server.token("gh-alice")},
                                 variables={"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": CLIENT})
    assert [s.returncode for s in steps] == [0, 0], steps
    grade = steps[-1]
    assert "VERDICT: PASSED" in grade.stdout and "report page:" in grade.stderr
    markdown = summary.read_text()
    assert markdown.startswith("## ✅ mutagrade: PASSED") and "(12/12)" in markdown
    assert _files(repo) == before  # the job leaves the student's repository as it found it
    with server.client("prof", "staff") as prof:
        mine = [s for s in prof.get("/v1/submissions").json() if s["student"] == "gh-alice"]
    assert len(mine) == 1 and mine[0]["passed"] is True


def test_the_github_workflow_fails_the_job_for_a_suite_that_does_not_pass(server: Server, tmp_path: Path) -> None:
    repo = _repository(tmp_path, weak=True)
    steps, summary = _run_github(repo, tmp_path, secrets={"MUTAGRADE_TOKEN": server.token("gh-bob")},
                                 variables={"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": CLIENT})
    assert [s.returncode for s in steps] == [0, 1], steps
    assert "VERDICT: NOT PASSED" in steps[-1].stdout
    assert summary.read_text().startswith("## ❌")


def test_the_github_workflow_without_the_token_says_which_secret_to_set(server: Server, tmp_path: Path) -> None:
    repo = _repository(tmp_path, weak=True)
    steps, summary = _run_github(repo, tmp_path, secrets={},
                                 variables={"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": CLIENT})
    assert [s.returncode for s in steps] == [0, 1], steps
    assert "set the Actions secret MUTAGRADE_TOKEN" in steps[-1].stderr
    assert summary.read_text() == ""
    steps, _ = _run_github(repo, tmp_path, secrets={}, variables={"MUTAGRADE_SERVER": server.url})
    assert [s.returncode for s in steps] == [1] and "set the Actions variable MUTAGRADE_CLIENT" in steps[0].stderr
    steps, _ = _run_github(repo, tmp_path, secrets={"MUTAGRADE_TOKEN": "t"}, variables={"MUTAGRADE_CLIENT": CLIENT})
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


def _run_gitlab(repo: Path, tmp_path: Path, variables: dict[str, str]) -> subprocess.CompletedProcess:
    """The job's ``script:`` lines in one bash, as GitLab's runner runs them (set -eo pipefail)."""
    job = _gitlab_job()
    env = {**_base_env(tmp_path), "GITLAB_CI": "true", "CI_PROJECT_DIR": str(repo), **job.get("variables", {}), **variables}
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


def test_the_gitlab_job_grades_on_the_server_and_writes_the_junit_report(server: Server, tmp_path: Path) -> None:
    repo = _repository(tmp_path)
    variables = {"MUTAGRADE_SERVER": server.url, "MUTAGRADE_TOKEN": server.token("gl-carol"), "MUTAGRADE_CLIENT": CLIENT}
    done = _run_gitlab(repo, tmp_path, variables)
    assert done.returncode == 0, done.stderr
    report = repo / _gitlab_job()["artifacts"]["reports"]["junit"]
    mutants = next(s for s in ET.parse(report).getroot().iter("testsuite") if s.get("name") == "mutagrade.mutants")
    assert int(mutants.get("tests")) == 12 and int(mutants.get("failures")) == 0


def test_the_gitlab_job_fails_for_a_suite_that_does_not_pass_and_still_reports(server: Server, tmp_path: Path) -> None:
    repo = _repository(tmp_path, weak=True)
    variables = {"MUTAGRADE_SERVER": server.url, "MUTAGRADE_TOKEN": server.token("gl-dave"), "MUTAGRADE_CLIENT": CLIENT}
    done = _run_gitlab(repo, tmp_path, variables)
    assert done.returncode == 1, done.stderr
    report = repo / _gitlab_job()["artifacts"]["reports"]["junit"]
    mutants = next(s for s in ET.parse(report).getroot().iter("testsuite") if s.get("name") == "mutagrade.mutants")
    assert int(mutants.get("failures")) == 12
    unset = _run_gitlab(repo, tmp_path, {"MUTAGRADE_SERVER": server.url, "MUTAGRADE_CLIENT": CLIENT})
    assert unset.returncode == 1 and "set the CI/CD variable MUTAGRADE_TOKEN" in unset.stderr
