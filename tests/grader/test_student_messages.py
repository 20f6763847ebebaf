"""What a student reads, tried as a student would, through the real command (a subprocess, its
output and its exit code): the text of a failed assertion reaches every report and the tdd
refusals; a folder without a test file is an error, not a grade; an archive is graded as the
service grades an upload; ``--format html`` is a page of its own; ``submit`` to a server that
is not there says so in one line."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grader.core.models import Report
from grader.core.paths import default_layout
from grader.report import render
from tests.student_text import FILE, SUITE

LAYOUT = default_layout()
STUDENT = LAYOUT.examples / "student"
STUDENT_TESTS = Path("python") / "tests" / "l3-3-gru"

HEADER = '''import math
import numpy as np
import pytest
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, gru_cell


def hand(h=0.5):
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    return gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[h]], dtype=np.float64), *w)


def test_hand():
    assert np.allclose(hand().data, [[0.25 * np.tanh(0.75) + 0.375]])
'''
# Fails on the reference: numpy's message starts on its second line ("\nNot equal to tolerance").
WRONG = '''

def test_wrong_expectation():
    np.testing.assert_allclose(hand().data, [[0.6]])
'''
# Passes on the reference, fails on the wheat w03 (its own wording of the error): pytest's
# message for a regular expression that did not match runs over three lines.
BRITTLE = '''

def test_error_wording():
    with pytest.raises(ValueError, match="must be a positive int"):
        GRU(3, 0)
'''


def mutagrade(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", **(env or {})}, cwd=cwd or LAYOUT.root,
    )


def folder(tmp_path: Path, files: dict[str, str], name: str = "tests") -> Path:
    root = tmp_path / name
    root.mkdir()
    for path, text in files.items():
        (root / path).write_text(text)
    return root


# ------------------------------------------------------------ assertion text everywhere
@pytest.fixture(scope="module")
def wrong_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return folder(tmp_path_factory.mktemp("wrong"), {"test_gru.py": HEADER + WRONG + BRITTLE})


@pytest.fixture(scope="module")
def wrong_json(wrong_suite: Path) -> dict:
    done = mutagrade("grade", str(wrong_suite), "--format", "json")
    assert done.returncode == 1, done.stderr
    return json.loads(done.stdout)


def _test(report: dict, name: str) -> dict:
    [test] = [t for t in report["tests"] if t["id"].endswith(f"::{name}")]
    return test


def test_a_wrong_allclose_test_says_what_mismatched_in_the_json_report(wrong_json: dict) -> None:
    wrong = _test(wrong_json, "test_wrong_expectation")
    assert wrong["status"] == "wrong"
    reason = wrong["reason"]
    assert "AssertionError" in reason and "Not equal to tolerance" in reason, reason
    assert "Mismatched elements: 1 / 1" in reason, reason
    assert "not run on the wheats or mutants" in reason


def test_a_brittle_test_says_how_the_correct_implementation_failed_it(wrong_json: dict) -> None:
    brittle = _test(wrong_json, "test_error_wording")
    assert brittle["status"] == "brittle"
    reason = brittle["reason"]
    assert "w03" in reason and "Expected regex: 'must be a positive int'" in reason and "Actual message:" in reason, reason


def test_a_wrong_allclose_test_says_what_mismatched_in_the_text_report(wrong_suite: Path) -> None:
    done = mutagrade("grade", str(wrong_suite))
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    [at] = [i for i, line in enumerate(lines) if "Mismatched elements" in line]
    # Under the test it belongs to, indented with the rest of its reason.
    assert lines[at].startswith("      ") and "test_wrong_expectation -- wrong" in "\n".join(lines[at - 4:at])


def test_every_format_carries_the_assertion_text(wrong_json: dict) -> None:
    report = Report.model_validate(wrong_json)
    for fmt in ("text", "json", "junit", "gradescope", "github", "html"):
        assert "Mismatched elements" in render(report, fmt), fmt
    # The Markdown keeps the reason's lines apart (a hard line break each), inside its list item.
    markdown = render(report, "github")
    assert re.search(r"\\\n +Mismatched elements: 1 / 1", markdown), markdown


def test_tdd_green_refused_names_the_assertion_text(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(LAYOUT.reference / "tinyllm", repo / "python" / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    gru = repo / "python" / "tinyllm" / "rnn" / "gru.py"
    right = "    return (1 - z) * n + z * h\n"
    gru.write_text(gru.read_text().replace(right, "    return z * n + (1 - z) * h\n"))
    tests = repo / STUDENT_TESTS
    tests.mkdir(parents=True)
    body = HEADER.replace("def test_hand():\n    assert np.allclose(hand().data, ",
                          "def test_hand():\n    np.testing.assert_allclose(hand().data, ")
    (tests / "test_gru.py").write_text(body)

    def tdd(phase: str) -> subprocess.CompletedProcess:
        return mutagrade("tdd", phase, "--repo", str(repo), timeout=120)

    assert tdd("red").returncode == 0
    done = tdd("green")  # the implementation is still the swapped one
    assert done.returncode == 1, done.stdout
    assert "not every test passes yet: test_gru.py::test_hand (failed)" in done.stderr, done.stderr
    assert "Not equal to tolerance" in done.stderr and "Mismatched elements: 1 / 1" in done.stderr, done.stderr


# ------------------------------------------------------------ suites that run nothing
def test_a_folder_without_a_test_file_is_bad_input(tmp_path: Path) -> None:
    tests = folder(tmp_path, {"helpers.py": "def helper():\n    return 1\n", "gru_tests.py": "def test_x():\n    pass\n"})
    done = mutagrade("grade", str(tests))
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""  # an error, not a report
    [line] = done.stderr.splitlines()
    assert str(tests) in line and "test_*.py" in line and "*_test.py" in line, line
    assert "helpers.py" in line  # what it did find


def test_a_test_file_named_the_other_way_is_graded(tmp_path: Path) -> None:
    tests = folder(tmp_path, {"gru_test.py": HEADER})
    done = mutagrade("grade", str(tests), "--format", "json")
    assert done.returncode == 1, done.stderr  # graded: one valid test, too few kills
    assert [t["id"] for t in json.loads(done.stdout)["tests"]] == ["gru_test.py::test_hand"]


def test_a_suite_that_does_not_parse_is_not_reported_as_having_no_mutants(tmp_path: Path) -> None:
    tests = folder(tmp_path, {"test_gru.py": "def test_x(:\n    pass\n"})
    done = mutagrade("grade", str(tests), "--format", "json")
    assert done.returncode == 2, done.stderr
    report = Report.model_validate_json(done.stdout)
    assert report.score.total == 12 and report.score.killed == 0
    text, markdown = render(report, "text"), render(report, "github")
    page = render(report, "html")
    for rendered in (text, markdown, page):
        assert "none to kill" not in rendered and "every mutant was caught" not in rendered
        assert "not run" in rendered.lower()
    assert "Mutants: not run: the suite was refused: a test file has a syntax error (listed under Policy); " \
           "none of the 12 is killed" in text


def _verdict(text: str) -> list[str]:
    """The reasons under the verdict of a text report."""
    block = text.split("\n\n")[1].splitlines()
    assert block[0].startswith("VERDICT: "), text
    return [line.removeprefix("  - ") for line in block[1:]]


def test_a_syntax_error_is_named_as_one_not_as_a_policy_failure(tmp_path: Path) -> None:
    tests = folder(tmp_path, {"test_x.py": "import numpy as np\n\n\ndef test_x(:\n    pass\n"})
    done = mutagrade("grade", str(tests))
    assert done.returncode == 2, done.stderr
    assert _verdict(done.stdout) == ["a test file has a syntax error: nothing was run"], done.stdout
    assert "policy check failed" not in done.stdout
    assert "  * test_x.py:4:11: syntax error: invalid syntax, Python cannot parse this file" in done.stdout, done.stdout


def test_syntax_errors_and_other_violations_are_counted_apart(tmp_path: Path) -> None:
    broken = "def test_x(:\n    pass\n"
    tests = folder(tmp_path, {"test_x.py": broken, "test_y.py": broken, "test_z.py": "import os\n\n\ndef test_z():\n    pass\n"})
    report = json.loads(mutagrade("grade", str(tests), "--format", "json").stdout)
    assert report["reasons"] == [
        "2 test files have syntax errors, and the policy check found 1 other violation: nothing was run"]
    assert report["policy"]["syntax_errors"] == 2
    only_os = folder(tmp_path, {"test_z.py": "import os\n\n\ndef test_z():\n    pass\n"}, name="os")
    done = mutagrade("grade", str(only_os))
    assert done.returncode == 2
    assert _verdict(done.stdout) == ["the policy check failed (1 violation(s)): nothing was run"], done.stdout


def test_the_kill_matrix_of_a_refused_suite_points_where_the_reason_is(tmp_path: Path) -> None:
    tests = folder(tmp_path, {"test_x.py": "import os\n\n\ndef test_x():\n    pass\n"})
    text = mutagrade("grade", str(tests)).stdout
    lines = text.splitlines()
    [matrix] = [i for i, line in enumerate(lines) if line.startswith("Kill matrix:")]
    assert lines[matrix] == ("Kill matrix: nothing was run: the suite was refused: the policy check failed "
                             "(1 violation(s)) (listed under Policy)."), text
    # ... and the violation is where it says: under Policy, after the matrix.
    [policy] = [i for i, line in enumerate(lines) if line.startswith("Policy:")]
    assert policy > matrix and "test_x.py:1:0: import of 'os'" in lines[policy + 1], text
    assert "see why above" not in text


def test_a_suite_without_a_test_function_says_what_pytest_collects(tmp_path: Path) -> None:
    tests = folder(tmp_path, {"test_gru.py": "def check_gru():\n    assert True\n\n\nclass GRUTests:\n"
                                             "    def test_it(self):\n        assert True\n"})
    done = mutagrade("grade", str(tests))
    assert done.returncode == 1, done.stderr
    [reason] = [r for r in _verdict(done.stdout) if r.startswith("no test was collected")]
    assert reason == ("no test was collected: pytest collects the functions whose names start with `test` "
                      "(or such methods of a class named `Test*` without an `__init__`) "
                      "from files named `test_*.py` or `*_test.py`"), reason
    # What the reason says is collected is: a `Test*` class's method, in a file named `*_test.py`.
    renamed = folder(tmp_path, {"gru_test.py": "class TestGRU:\n    def test_it(self):\n        assert True\n"},
                     name="renamed")
    report = json.loads(mutagrade("grade", str(renamed), "--format", "json").stdout)
    assert [t["id"] for t in report["tests"]] == ["gru_test.py::TestGRU::test_it"]


def test_a_suite_that_does_not_import_says_so_not_how_to_name_tests(tmp_path: Path) -> None:
    tests = folder(tmp_path, {"test_gru.py": "from tinyllm.rnn.gru import no_such_name\n\n\ndef test_x():\n    pass\n"})
    done = mutagrade("grade", str(tests))
    assert done.returncode == 1, done.stderr
    [reason] = [r for r in _verdict(done.stdout) if r.startswith("no test was collected")]
    assert reason == "no test was collected: a test file could not be collected (see the problems while running)"
    assert "no_such_name" in done.stdout


def test_the_students_check_names_a_syntax_error_as_one(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(LAYOUT.reference / "tinyllm", repo / "python" / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / STUDENT_TESTS.parent).mkdir(parents=True)
    folder(repo / STUDENT_TESTS.parent, {"test_gru.py": HEADER + "\n\ndef test_broken(:\n    pass\n"}, name="l3-3-gru")
    done = subprocess.run([sys.executable, "-m", "grader.student_cli", "check", str(repo)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Mutation grade: not submitted: a test file has a syntax error; fix what Policy lists above first" \
        in done.stdout, done.stdout


# ------------------------------------------------------------ archives, as the service takes them
def _tar_gz(files: dict[str, bytes], *, prefix: str = "") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(prefix + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _student_files() -> dict[str, bytes]:
    """The bundled student's tests and journal, as ``mutagrade submit`` packs them."""
    files = {}
    for part in (STUDENT_TESTS, Path(".tdd")):
        for path in sorted((STUDENT / part).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(STUDENT).as_posix()] = path.read_bytes()
    return files


def test_a_tar_gz_is_graded_with_its_journal(tmp_path: Path) -> None:
    archive = tmp_path / "alice.tgz"
    archive.write_bytes(_tar_gz(_student_files()))
    done = mutagrade("grade", str(archive), "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passed"] is True and report["score"]["killed"] == 12
    assert report["journal"]["checked"] and report["journal"]["ok"] and report["journal"]["entries"] == 20
    assert report["submission"] == "alice.tgz"
    assert str(tmp_path) not in done.stdout.replace(str(archive), "")  # no temporary folder named


def test_a_zip_wrapped_in_a_folder_is_graded(tmp_path: Path) -> None:
    archive = tmp_path / "bob.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("mytests/test_gru.py", HEADER + WRONG)
    done = mutagrade("grade", str(archive))
    assert done.returncode == 1, done.stderr
    assert "mutagrade report for bob.zip" in done.stdout and "Mismatched elements" in done.stdout


@pytest.mark.parametrize("member, rule", [
    ("../evil/test_gru.py", "'..' is not allowed in a path"),
    ("/etc/test_gru.py", "absolute paths are not allowed"),
])
def test_an_archive_breaking_an_upload_rule_is_bad_input(tmp_path: Path, member: str, rule: str) -> None:
    archive = tmp_path / "eve.tar.gz"
    archive.write_bytes(_tar_gz({"test_ok.py": HEADER.encode(), member: b"def test_x():\n    pass\n"}))
    done = mutagrade("grade", str(archive))
    assert done.returncode == 2 and done.stdout == "", done.stdout
    [line] = done.stderr.splitlines()
    assert "eve.tar.gz" in line and repr(member) in line and rule in line, line
    assert not (tmp_path / "evil").exists()


def test_a_link_in_an_archive_is_bad_input(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = HEADER.encode()
        info = tarfile.TarInfo("test_ok.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("test_link.py")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    archive = tmp_path / "eve.tgz"
    archive.write_bytes(buffer.getvalue())
    done = mutagrade("grade", str(archive))
    assert done.returncode == 2 and "member 'test_link.py': links are not allowed" in done.stderr, done.stderr


def test_an_archive_over_the_upload_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    archive = tmp_path / "big.zip"
    with archive.open("wb") as handle:
        handle.write(b"PK\x03\x04")
        handle.truncate(3 * 1024 * 1024)
    done = mutagrade("grade", str(archive))
    assert done.returncode == 2, done.stderr
    assert "big.zip" in done.stderr and "at most 2097152 are accepted" in done.stderr, done.stderr


def test_a_file_that_is_neither_a_folder_nor_an_archive_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "test_gru.py").write_text(HEADER)
    done = mutagrade("grade", str(tmp_path / "test_gru.py"))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert "test_gru.py" in line and ".zip" in line and ".tar.gz" in line and "folder" in line, line
    fake = tmp_path / "notes.tar.gz"
    fake.write_text("not an archive")
    done = mutagrade("grade", str(fake))
    assert done.returncode == 2 and "notes.tar.gz" in done.stderr and "found neither" in done.stderr, done.stderr


# ------------------------------------------------------------ the HTML page
class _Page(HTMLParser):
    """An HTML document's elements, checked to nest properly, and its text."""

    VOID = {"meta", "br", "hr", "img", "input", "link", "col", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.cells: list[list[str]] = []  # the kill matrix, row by row
        self._in_matrix = False
        self.doctype = False

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table" and dict(attrs).get("id") == "matrix":
            self._in_matrix = True
        if self._in_matrix and tag == "tr":
            self.cells.append([])
        if self._in_matrix and tag in ("td", "th"):
            self.cells[-1].append("")
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()
        if tag == "table":
            self._in_matrix = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_matrix and self.cells and self.cells[-1]:
            self.cells[-1][-1] += data.strip()


def _parse(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    parsed.close()
    assert parsed.doctype and parsed.open == [], parsed.open
    return parsed


def test_format_html_writes_a_standalone_page_with_the_verdict_and_the_matrix(wrong_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = mutagrade("grade", str(wrong_suite), "--format", "html", "--output", str(out))
    assert done.returncode == 1, done.stderr
    page = _parse(out.read_text(encoding="utf-8"))
    text = " ".join(" ".join(page.text).split())
    assert "NOT PASSED" in text and "Mismatched elements" in text
    [verdict] = [attrs for tag, attrs in page.tags if "verdict" in (attrs.get("class") or "")]
    assert "failed" in verdict["class"]
    header, *rows, footer = page.cells
    assert header[:4] == ["test", "status", "reference", "w01"] and "s02" in header and len(header) == 2 + 17
    assert [row[0] for row in rows] == ["test_gru.py::test_hand", "test_gru.py::test_wrong_expectation",
                                        "test_gru.py::test_error_wording"]
    assert rows[0][1] == "valid" and rows[0][2] == "✓" and rows[1][2] == "✗"
    assert footer[0] == "killed?" and set(footer[7:]) <= {"yes", "no"}
    # Nothing is fetched or run: no script, no external resource, a policy that forbids both.
    assert not [tag for tag, _ in page.tags if tag in ("script", "link", "img", "iframe")]
    [policy] = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in policy["content"]


def test_the_html_page_shows_hostile_student_text_as_text(tmp_path: Path) -> None:
    tests = folder(tmp_path, {FILE: SUITE})
    done = mutagrade("grade", str(tests), "--format", "html")
    assert done.returncode == 1, done.stderr
    page = _parse(done.stdout)
    assert {tag for tag, _ in page.tags} <= {
        "html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p", "small", "ul", "li",
        "table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td", "code", "pre", "span", "strong",
    }
    assert not any(name.startswith("on") for _, attrs in page.tags for name in attrs)
    text = "".join(page.text)
    assert "<script>alert(1)</script>" in text and '=HYPERLINK("http://x")' in text


# ------------------------------------------------------------ submit, and the README
def test_submit_to_a_server_that_is_not_there_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}"
    done = mutagrade("submit", str(STUDENT), "--server", url, env={"MUTAGRADE_TOKEN": "t"}, timeout=60)
    assert done.returncode == 4, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("mutagrade submit: ") and url in line and "could not be reached" in line, line
    assert done.stdout == ""
    readme = (LAYOUT.root / "README.md").read_text(encoding="utf-8")
    exit_codes = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert "| `4` | the server could not be reached" in exit_codes, exit_codes


def test_a_server_address_that_is_not_http_is_bad_input() -> None:
    done = mutagrade("submit", str(STUDENT), "--server", "ftp://127.0.0.1:21", env={"MUTAGRADE_TOKEN": "t"})
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert "ftp://127.0.0.1:21" in line and "http://" in line, line


def test_the_readme_links_nothing_outside_the_repository() -> None:
    """Every link, and every document it names by its path, is a file of a fresh clone."""
    root = LAYOUT.root.resolve()
    readme = (root / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s#]+)", readme) + re.findall(r"`([^`\s]*/[^`\s]+\.md)`", readme)
    assert targets
    for target in targets:
        if "://" in target:
            continue
        path = (root / target).resolve()
        assert path.is_relative_to(root) and path.exists(), target


def test_every_command_offers_every_report_format() -> None:
    from grader.cli import FORMATS
    from grader.report import RENDERERS

    assert FORMATS == tuple(RENDERERS)


def test_grading_an_archive_uses_no_part_of_the_service() -> None:
    code = ("import sys, grader.flows.grade_command, grader.report.html; "
            "print(sorted(m for m in ('fastapi', 'sqlalchemy', 'starlette', 'jinja2', 'httpx') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=LAYOUT.root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
