"""One intake: the same twelve odd submissions through every way in (``mutagrade grade``,
``grade-batch``, the service over HTTP, Gradescope's ``run_autograder``) get the same verdict,
and a journal the same verification.

Each submission is a folder as a student hands it in; the service and Gradescope take it as an
archive (an upload; Gradescope packs the folder it unpacked), the command line and the batch as
the folder. The decisions they state are in docs/grading.md ("What a submission may look like").
"""

from __future__ import annotations

import ast
import csv
import json
import os
import shutil
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from grader.core.paths import default_layout
from tests.api.conftest import make_server, wait_done

LAYOUT = default_layout()
STUDENT = LAYOUT.examples / "student"
STUDENT_TESTS = Path(LAYOUT.student_tests)  # python/tests/l3-3-gru
BIN = Path(sys.executable).parent  # the venv's bin: `mutagrade` is there, as setup.sh puts it on PATH
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
TINY = ("test_hand_example_gru_cell", "test_cell_matches_my_numpy_formula_with_nonzero_b_hn",
        "test_state_dict_keys_follow_torch")
OUR_FOLDERS = ("mutagrade-intake-", "mutagrade-autograder", "submission.tar.gz")  # the grader's own names


@dataclass(frozen=True)
class Outcome:
    """What one intake made of one submission."""

    verdict: str  # "passed", "not passed" or "refused" (bad input: nothing graded, or refused unrun)
    journal: str | None = None  # "verified", "not verified", "none"; None when refused
    why: str = ""  # the refusal, or the journal's first problem, as the intake words it


# What every intake must answer (the decisions: two nested wrapping folders and two folders of
# tests at the top are refused, naming them; a malformed journal is one that does not verify,
# which the default assignment, not requiring a journal, does not hold against the suite).
EXPECTED = {
    "at-the-root": ("not passed", "none"),
    "one-wrapper": ("not passed", "none"),
    "two-wrappers": ("refused", None),
    "repository": ("passed", "verified"),
    "malformed-journal": ("passed", "not verified"),
    "journal-does-not-verify": ("passed", "not verified"),
    "empty": ("refused", None),
    "no-test-file": ("refused", None),
    "syntax-error": ("refused", None),
    "policy-violation": ("refused", None),
    "link": ("refused", None),
    "two-test-folders": ("refused", None),
}


# ------------------------------------------------------------------------ the submissions
def tiny_suite() -> str:
    """Three of the bundled student's tests, with the helpers before them."""
    source = (STUDENT / STUDENT_TESTS / "test_gru.py").read_text()
    tree = ast.parse(source)
    first = min(n.lineno for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))
    head = "\n".join(source.splitlines()[: first - 1])
    tests = [ast.get_source_segment(source, n) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in TINY]
    return head + "\n\n" + "\n\n\n".join(tests) + "\n"


def repository(dest: Path) -> Path:
    shutil.copytree(STUDENT, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def suite(dest: Path, *extra: tuple[str, str]) -> Path:
    dest.mkdir(parents=True)
    (dest / "test_gru.py").write_text(tiny_suite())
    for name, text in extra:
        (dest / name).write_text(text)
    return dest


def build(name: str, dest: Path) -> None:
    """The submission ``name``, a folder at ``dest``."""
    if name == "at-the-root":
        suite(dest)
    elif name == "one-wrapper":
        suite(dest / "mytests")
    elif name == "two-wrappers":
        suite(dest / "l3-3-gru-main" / "mytests")
    elif name == "repository":
        repository(dest)
    elif name == "malformed-journal":
        journal = repository(dest) / ".tdd" / "journal.jsonl"
        journal.write_text(journal.read_text().replace("\n", "\nnot json\n", 1))  # line 2
    elif name == "journal-does-not-verify":
        tests = repository(dest) / STUDENT_TESTS / "test_gru.py"
        edited = tests.read_text().replace("atol=1e-12", "atol=1e-11")  # after its green
        assert edited != tests.read_text()
        tests.write_text(edited)
    elif name == "empty":
        dest.mkdir()
    elif name == "no-test-file":
        suite(dest).joinpath("test_gru.py").rename(dest / "helpers.py")
    elif name == "syntax-error":
        suite(dest, ("test_broken.py", "def test_broken(:\n    pass\n"))
    elif name == "policy-violation":
        suite(dest, ("test_env.py", "import os\n\n\ndef test_env():\n    assert os.environ\n"))
    elif name == "link":
        suite(dest)
        (dest / "test_course.py").symlink_to(next(LAYOUT.course_tests.glob("test_*.py")))
    elif name == "two-test-folders":
        suite(dest / "old")
        suite(dest / "new")
    else:
        raise AssertionError(name)


def tar_gz(folder: Path, dest: Path) -> Path:
    """The folder as an archive, each entry by its own name at the top, links kept as links."""
    with tarfile.open(dest, "w:gz") as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name)
    return dest


@dataclass(frozen=True)
class Inputs:
    folders: Path  # one folder per submission, named after it (grade-batch's students)
    archives: Path  # <name>.tar.gz of each


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    root = tmp_path_factory.mktemp("one-intake")
    made = Inputs(root / "submissions", root / "archives")
    made.archives.mkdir()
    for name in EXPECTED:
        build(name, made.folders / name)
        tar_gz(made.folders / name, made.archives / f"{name}.tar.gz")
    return made


def each(work: Callable[[str], Outcome]) -> dict[str, Outcome]:
    """``work`` on every submission, two at a time (each grading has two workers of its own)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(EXPECTED, pool.map(work, EXPECTED)))


# ------------------------------------------------------------------------ reading an answer
def of_journal(journal: dict) -> str:
    if not journal.get("checked"):
        return "none"
    return "verified" if journal["ok"] else "not verified"


def of_report(report: dict) -> Outcome:
    """A report's outcome: refused when the policy or a rule of the grader refused the suite."""
    if not report["policy"]["ok"] or report.get("refused"):
        return Outcome("refused", why=" | ".join(map(str, report["reasons"])))
    problems = report["journal"].get("problems") or [""]
    return Outcome("passed" if report["passed"] else "not passed", of_journal(report["journal"]), problems[0])


def of_results(results: dict) -> Outcome:
    """Gradescope's results.json: a "Submission" test when it could not be graded, a failed
    "Policy" check when the suite was refused, else the "Verdict" and "Journal" checks."""
    tests = {test["name"]: test for test in results["tests"]}
    if "Submission" in tests:
        return Outcome("refused", why=results["output"])
    if tests.get("Policy", {}).get("status") == "failed":
        return Outcome("refused", why=tests["Policy"]["output"])
    journal = tests.get("Journal")
    shown = "none" if journal is None else "verified" if journal["status"] == "passed" else "not verified"
    lines = journal["output"].splitlines()[1:] if journal else []
    verdict = "passed" if tests["Verdict"]["status"] == "passed" else "not passed"
    return Outcome(verdict, shown, lines[0].removeprefix("- ") if lines else "")


# ------------------------------------------------------------------------ the four intakes
@pytest.fixture(scope="module")
def by_grade(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    out = tmp_path_factory.mktemp("grade")

    def grade(name: str) -> Outcome:
        report = out / f"{name}.json"
        done = subprocess.run(
            [sys.executable, "-m", "grader.cli", "grade", str(inputs.folders / name), "--format", "json",
             "--output", str(report)], capture_output=True, text=True, timeout=300, env=ENV, cwd=LAYOUT.root)
        assert done.returncode in (0, 1, 2), done.stderr
        if not report.is_file():
            assert done.returncode == 2, done.stderr
            return Outcome("refused", why=done.stderr.strip().splitlines()[-1])
        outcome = of_report(json.loads(report.read_text()))
        assert done.returncode == {"passed": 0, "not passed": 1, "refused": 2}[outcome.verdict], done.stderr
        return outcome

    return each(grade)


@pytest.fixture(scope="module")
def by_batch(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    out = tmp_path_factory.mktemp("batch")
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade-batch", str(inputs.folders), "--output", str(out / "grades.csv"),
         "--reports", str(out / "reports")], capture_output=True, text=True, timeout=600, env=ENV, cwd=LAYOUT.root)
    assert done.returncode == 0, done.stderr
    with (out / "grades.csv").open(newline="", encoding="utf-8") as handle:
        cells = {row["student"]: row["journal"] for row in csv.DictReader(handle)}
    outcomes = {}
    for name in EXPECTED:
        document = json.loads((out / "reports" / f"{name}.json").read_text())
        if "error" in document:  # mutagrade.not-graded/1
            outcomes[name] = Outcome("refused", why=document["error"])
            continue
        outcome = of_report(document)
        if outcome.journal is not None:  # the gradebook's cell says what the report says
            assert cells[name].split(":")[0] == outcome.journal, (cells[name], outcome)
        outcomes[name] = outcome
    return outcomes


@pytest.fixture(scope="module")
def by_service(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    server = make_server(tmp_path_factory.mktemp("service"), rate_limit="100", max_in_flight="20")
    server.start()
    try:
        with server.client("alice") as alice:
            posted = {}
            for name in EXPECTED:
                archive = inputs.archives / f"{name}.tar.gz"
                posted[name] = alice.post("/v1/submissions", files={"archive": (archive.name, archive.read_bytes())})
            outcomes = {}
            for name, answer in posted.items():
                if answer.status_code != 202:
                    assert 400 <= answer.status_code < 500, answer.text
                    outcomes[name] = Outcome("refused", why=answer.json()["detail"])
                    continue
                body = wait_done(alice, answer.json()["id"], timeout=300)
                if body["status"] == "error":
                    outcomes[name] = Outcome("refused", why=body["error"])
                else:
                    outcomes[name] = of_report(body["report"])
        yield outcomes
    finally:
        server.stop()


@pytest.fixture(scope="module")
def by_gradescope(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    out = tmp_path_factory.mktemp("gradescope")
    env = {**ENV, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def autograde(name: str) -> Outcome:
        root = out / name  # laid out as Gradescope lays /autograder out
        (root / "source").mkdir(parents=True)
        shutil.copy(LAYOUT.root / "scripts" / "gradescope" / "run_autograder", root / "run_autograder")
        shutil.copytree(inputs.folders / name, root / "submission", symlinks=True)
        done = subprocess.run(["bash", str(root / "run_autograder")], capture_output=True, text=True, timeout=300,
                              cwd=root, env={**env, "MUTAGRADE_AUTOGRADER_ROOT": str(root)})
        assert done.returncode == 0, done.stdout + done.stderr
        results = json.loads((root / "results" / "results.json").read_text())
        assert "autograder failed" not in results.get("output", ""), done.stdout[-4000:] + done.stderr[-2000:]
        return of_results(results)

    return {name: autograde(name) for name in EXPECTED}  # one at a time, as Gradescope runs each


# ------------------------------------------------------------------------ the same answer
@pytest.mark.parametrize("name", EXPECTED)
def test_every_intake_gives_a_submission_the_same_verdict(name, by_grade, by_batch, by_service, by_gradescope):
    answers = {"grade": by_grade[name], "grade-batch": by_batch[name], "service": by_service[name],
               "gradescope": by_gradescope[name]}
    got = {intake: (outcome.verdict, outcome.journal) for intake, outcome in answers.items()}
    assert got == dict.fromkeys(answers, EXPECTED[name]), {i: o for i, o in answers.items()}
    for intake, outcome in answers.items():  # the student's names for files, never the grader's folders
        assert not any(folder in outcome.why for folder in OUR_FOLDERS), (intake, outcome.why)


def test_a_malformed_journal_is_one_that_does_not_verify_naming_the_file_and_line(
    by_grade, by_batch, by_service, by_gradescope
):
    for intake, answers in {"grade": by_grade, "grade-batch": by_batch, "service": by_service,
                            "gradescope": by_gradescope}.items():
        why = answers["malformed-journal"].why
        assert ".tdd/journal.jsonl:2: expected one JSON object per line" in why, (intake, why)


@pytest.mark.parametrize(("name", "named"), [("two-wrappers", "mytests"), ("two-test-folders", "new")])
def test_a_refused_shape_names_the_folders_it_found(name, named, by_grade, by_batch, by_service, by_gradescope):
    for intake, answers in {"grade": by_grade, "grade-batch": by_batch, "service": by_service,
                            "gradescope": by_gradescope}.items():
        why = answers[name].why
        assert f"{named}/" in why and "python/tests/l3-3-gru/" in why, (intake, why)
