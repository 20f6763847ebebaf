"""The service's pages treat student text as data: a student whose name is a script tag submits
an archive named like an HTML attribute break, holding the suite of ``tests/student_text.py``
(ids, a file name and an assertion message made of HTML), through the real service. Every page
that shows any of it, to the student and to the staff, is loaded in headless Chromium: no dialog
opens, nothing is written to the console, no element or event handler of the student's appears,
and the text reads as the student wrote it. The downloads and the gradebook CSV keep it as data.
"""

from __future__ import annotations

import csv
import io
import json
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Iterator

import pytest

from tests.api.chromium import Chromium
from tests.api.conftest import Server, make_server, tar_gz, wait_done
from tests.student_text import EXPECTED_IDS, FILE, IDS, MESSAGE, SUITE

STUDENT = "<script>alert(3)</script>"
ARCHIVE = '"><img src=x onerror=alert(4)>.tar.gz'
FORMULA_STUDENTS = ('=HYPERLINK("evil.example","x")', "@SUM(1)", "+1")
# What a page holds that the student could have put there: elements that run or load
# something, event handler attributes, and the text as the browser shows it.
INSPECT = """JSON.stringify({
  elements: Array.from(document.querySelectorAll('script,img,iframe,object,embed,svg,math,b,a[href^="javascript"]'))
    .map(e => e.tagName),
  handlers: Array.from(document.querySelectorAll('*'))
    .flatMap(e => Array.from(e.attributes).filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name)),
  text: document.body.innerText,
})"""


@dataclass
class Submitted:
    server: Server
    id: int
    body: dict


@pytest.fixture(scope="module")
def submitted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Submitted]:
    srv = make_server(tmp_path_factory.mktemp("student-text"))
    srv.start()
    try:
        for name in FORMULA_STUDENTS:
            srv.token(name)
        with srv.client(STUDENT) as student:
            answer = student.post("/v1/submissions", files={"archive": (ARCHIVE, tar_gz({FILE: SUITE}), "application/gzip")})
            assert answer.status_code == 202, answer.text
            body = wait_done(student, answer.json()["id"])
        assert body["status"] == "done", body["error"]
        yield Submitted(server=srv, id=body["id"], body=body)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    with Chromium(tmp_path_factory.mktemp("chromium")) as chromium:
        yield chromium


def test_the_browser_check_sees_a_script_that_runs(browser: Chromium) -> None:
    """The control: the same text written into a page raw opens a dialog and leaves its element."""
    raw = "<p>" + IDS[1] + "</p>"
    visit = browser.visit("data:text/html," + urllib.parse.quote(raw), INSPECT)
    assert visit.dialogs == ["1"]
    assert json.loads(visit.found)["elements"] == ["IMG"]


def _pages(submitted: Submitted) -> list[tuple[str, str, list[str]]]:
    """(who, path, the student's text the page must show) for each page that shows some."""
    archive = submitted.body["archive_name"]  # as the server got it (httpx sends '"' as %22)
    assert "<img src=x onerror=alert(4)>" in archive, archive
    report_text = [*sorted(EXPECTED_IDS), MESSAGE, archive]
    return [
        (STUDENT, f"/submissions/{submitted.id}", [*report_text, STUDENT]),
        (STUDENT, "/submissions", [STUDENT]),
        ("text-staff", f"/submissions/{submitted.id}", [*report_text, STUDENT]),
        ("text-staff", "/submissions", [STUDENT]),
        ("text-staff", "/gradebook", [STUDENT, *FORMULA_STUDENTS]),
    ]


def test_every_page_showing_student_text_shows_it_inert(submitted: Submitted, browser: Chromium) -> None:
    srv = submitted.server
    srv.token("text-staff", "staff")
    for who, path, shown in _pages(submitted):
        browser.sign_in(srv.url, srv.token(who))
        visit = browser.visit(f"{srv.url}{path}", INSPECT)
        found = json.loads(visit.found)
        where = f"{path} as {who}"
        assert visit.dialogs == [], f"{where}: a dialog opened: {visit.dialogs}"
        assert visit.console == [], f"{where}: something ran: {visit.console}"
        assert found["elements"] == [] and found["handlers"] == [], f"{where}: {found['elements']} {found['handlers']}"
        for text in shown:
            assert text in found["text"], f"{where}: {text!r} is not shown as written"


def test_pages_forbid_scripts_outright_and_keep_their_style(submitted: Submitted, browser: Chromium) -> None:
    """Defence in depth: the pages use no JavaScript, and say so to the browser; their own
    inline style sheet still applies."""
    srv = submitted.server
    with srv.signed_in(STUDENT) as student:
        page = student.get(f"/submissions/{submitted.id}")
    policy = page.headers["content-security-policy"]
    assert "script-src 'none'" in policy and "default-src 'none'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    browser.sign_in(srv.url, srv.token(STUDENT))
    url = f"{srv.url}/submissions/{submitted.id}"
    header = browser.visit(url, "getComputedStyle(document.querySelector('header')).backgroundColor")
    assert header.found == "rgb(36, 52, 71)"  # #243447, from base.html's <style>


def test_the_downloads_give_back_the_students_text(submitted: Submitted) -> None:
    with submitted.server.client(STUDENT) as student:
        document = student.get(f"/v1/submissions/{submitted.id}/report.json").json()
        junit = student.get(f"/v1/submissions/{submitted.id}/report.junit.xml")
    assert {t["id"] for t in document["tests"]} == EXPECTED_IDS
    root = ET.fromstring(junit.content)
    [tests] = [s for s in root.iter("testsuite") if s.get("name") == "mutagrade.tests"]
    assert {case.get("name") for case in tests.iter("testcase")} == EXPECTED_IDS


def test_the_gradebook_csv_makes_formulas_text(submitted: Submitted) -> None:
    with submitted.server.client("text-staff", "staff") as staff:
        answer = staff.get("/v1/gradebook.csv")
    assert answer.status_code == 200
    header, *rows = list(csv.reader(io.StringIO(answer.text)))
    students = {row[0] for row in rows}
    assert {"'" + name for name in FORMULA_STUDENTS} <= students
    assert STUDENT in students  # not a formula: as written
    assert all(not name.startswith(("=", "+", "-", "@")) for name in students), students
    [graded] = [row for row in rows if row[0] == STUDENT]
    assert graded[header.index("latest_id")] == str(submitted.id)
