"""Student text is data in every export: a suite whose test ids, parametrize ids, assertion
messages and file name carry HTML, Markdown and spreadsheet formulas is graded through the real
grader (policy, sandbox, scoring), and each format gives that text back as written, inert.

The service's HTML pages are checked in headless Chromium (tests/api/test_student_text_pages.py).
"""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from grader.core.assignment import load_assignment
from grader.flows.batch import BatchRow, grade_batch, write_csv
from grader.core.models import Report
from grader.core.paths import default_layout
from grader.report import render
from grader.report.spreadsheet import spreadsheet_cell
from tests.student_text import EXPECTED_IDS, FILE, MESSAGE, SUITE

LAYOUT = default_layout()
STUDENT = '=HYPERLINK("evil.example","grade")'  # a folder name: the gradebook's student cell


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> BatchRow:
    submissions = tmp_path_factory.mktemp("submissions")
    (submissions / STUDENT).mkdir()
    (submissions / STUDENT / FILE).write_text(SUITE)
    [row] = grade_batch(submissions, layout=LAYOUT, assignment=load_assignment(LAYOUT.assignment))
    assert row.report is not None, row.problems
    return row


@pytest.fixture(scope="module")
def report(graded: BatchRow) -> Report:
    assert {t.id for t in graded.report.tests} == EXPECTED_IDS  # the grader kept every id as written
    return graded.report


def test_the_text_report_prints_student_text_as_written(report: Report) -> None:
    text = render(report, "text")
    for test_id in EXPECTED_IDS:
        assert test_id in text
    assert MESSAGE.split(" |")[0] in text


def test_json_gives_back_every_id_and_message(report: Report) -> None:
    document = json.loads(render(report, "json"))
    assert {t["id"] for t in document["tests"]} == EXPECTED_IDS
    [wrong] = [t for t in document["tests"] if t["id"].endswith("test_message_is_data")]
    assert MESSAGE in wrong["reason"]
    assert Report.model_validate(document) == report


def test_junit_is_well_formed_and_gives_back_every_id(report: Report) -> None:
    root = ET.fromstring(render(report, "junit").encode())
    [tests] = [s for s in root.iter("testsuite") if s.get("name") == "mutagrade.tests"]
    assert {case.get("name") for case in tests.iter("testcase")} == EXPECTED_IDS
    assert not list(root.iter("script")) and not list(root.iter("img"))
    reasons = [failure.text for failure in tests.iter("failure")]
    assert any(MESSAGE in (reason or "") for reason in reasons), reasons


class _Html(HTMLParser):
    """Every tag of an HTML fragment, its text, and the text of each <code> element."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.codes: list[str] = []
        self.text: list[str] = []
        self._code: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "code":
            self._code = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "code" and self._code is not None:
            self.codes.append("".join(self._code))
            self._code = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._code is not None:
            self._code.append(data)


# What the summary itself writes; raw HTML in Markdown is passed through (as GitHub does
# before it sanitises), so any other tag could only come from student text.
SUMMARY_TAGS = {"h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "code", "strong", "br"}


def test_the_github_summary_lets_no_student_tag_through(report: Report) -> None:
    markdown = render(report, "github")
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)
    page = _Html()
    page.feed(html)
    assert set(page.tags) <= SUMMARY_TAGS, sorted(set(page.tags) - SUMMARY_TAGS)
    for test_id in EXPECTED_IDS:  # each id is one code span, whole: no pipe split its cell
        assert test_id in page.codes, test_id
    assert MESSAGE in "".join(page.text)  # the assertion message, shown as written


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ("=1+2", "'=1+2"),
        ("+SUM(1)", "'+SUM(1)"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("pat", "pat"),
        ("0.4167", "0.4167"),
        ("a=1", "a=1"),
        ("", ""),
        (7, "7"),
    ],
)
def test_a_cell_a_spreadsheet_would_compute_is_made_text(value: object, cell: str) -> None:
    assert spreadsheet_cell(value) == cell


def test_the_batch_gradebook_neutralises_formulas(graded: BatchRow, tmp_path: Path) -> None:
    others = [
        graded.model_copy(update={"student": name, "problems": [f"{name} problem"]})
        for name in ("+1", "-1", "@me", "\tTAB", "\rCR")
    ]
    path = tmp_path / "grades.csv"
    write_csv([graded, *others], path)
    with path.open(newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    assert header[0] == "student" and len(rows) == 6
    assert rows[0][0] == "'" + STUDENT
    assert [row[0] for row in rows[1:]] == ["'+1", "'-1", "'@me", "'\tTAB", "'\rCR"]
    assert [row[-1] for row in rows[1:]] == ["'+1 problem", "'-1 problem", "'@me problem", "'\tTAB problem", "'\rCR problem"]
    assert float(rows[0][header.index("kill_rate")]) == round(graded.kill_rate, 4)  # numbers stay numbers
    for row in rows:
        assert row[0][0] not in "=+-@\t\r"
