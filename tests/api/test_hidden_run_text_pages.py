"""The service shows a student nothing of a hidden mutant's run: a student submits the suite of
``tests/hidden_run_text.py`` that the policy check lets through (on the hidden mutants it
prints, skips, fails, raises and calls ``pytest.exit`` with a marked message), through the real
service, for each module it hosts. No marked text is in the student's status JSON, any download or the report page; the
staff's report keeps it. A report stored under ``mutagrade.report/1`` is shown the same way.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Iterator

import pytest

from tests.api.conftest import Server, make_server, tar_gz, wait_done
from tests.hidden_run_text import FILE, MARK, SPIES

STUDENT = "spy"
DOWNLOADS = ("", "/report.json", "/report.md", "/report.junit.xml", "/report.gradescope.json", "/report.html")


@dataclass
class Graded:
    server: Server
    id: int
    assignment: str


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("hidden-run-text"))  # hosts every module
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module", params=sorted(SPIES))
def graded(server: Server, request: pytest.FixtureRequest) -> Graded:
    srv, assignment = server, request.param
    with srv.client(STUDENT) as student:
        answer = student.post("/v1/submissions", data={"assignment": assignment},
                              files={"archive": ("spy.tar.gz", tar_gz({FILE: SPIES[assignment].policy_clean}),
                                                 "application/gzip")})
        assert answer.status_code == 202, answer.text
        body = wait_done(student, answer.json()["id"])
    assert body["status"] == "done" and body["assignment"] == assignment, body
    return Graded(server=srv, id=body["id"], assignment=assignment)


def _student_sees(graded: Graded) -> dict[str, str]:
    """Everything the student can fetch of the submission: each download and the report page."""
    base = f"/v1/submissions/{graded.id}"
    seen = {}
    with graded.server.client(STUDENT) as student:
        for path in DOWNLOADS:
            answer = student.get(base + path)
            assert answer.status_code == 200, (path, answer.text)
            seen[base + path] = answer.text
    with graded.server.signed_in(STUDENT) as browser:
        page = browser.get(f"/submissions/{graded.id}")
        assert page.status_code == 200, page.text
        seen[f"/submissions/{graded.id}"] = page.text
    return seen


def _staff_report(graded: Graded) -> dict:
    with graded.server.client("spy-staff", "staff") as staff:
        answer = staff.get(f"/v1/submissions/{graded.id}/report.json")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_staff_read_the_text_the_hidden_runs_produced(graded: Graded) -> None:
    report = _staff_report(graded)
    problems = [p["text"].format(*p["variants"]) if isinstance(p, dict) else p for p in report["problems"]]
    for mutant in SPIES[graded.assignment].by_output:
        assert any(p.startswith(f"{mutant}: ") and f"{MARK}EXIT" in p for p in problems), (mutant, problems)


def test_a_student_reads_nothing_of_a_hidden_run_anywhere(graded: Graded) -> None:
    for path, text in _student_sees(graded).items():
        assert MARK not in text, path
    with graded.server.client(STUDENT) as student:
        document = student.get(f"/v1/submissions/{graded.id}/report.json").json()
    killed = [m for m in document["mutants"] if m["hidden"] and m["killed"]]
    assert killed, document["mutants"]  # the attack caught its mutant, and that is all it says


def test_a_report_stored_under_the_old_schema_shows_nothing_of_a_hidden_run(graded: Graded) -> None:
    """The stored staff report, as ``mutagrade.report/1`` stored it: every line a sentence."""
    report = _staff_report(graded)
    old = {
        **report,
        "schema": "mutagrade.report/1",
        "problems": [p["text"].format(*p["variants"]) if isinstance(p, dict) else p for p in report["problems"]],
        "reasons": [r["text"].format(*r["variants"]) if isinstance(r, dict) else r for r in report["reasons"]],
    }
    assert MARK in json.dumps(old)
    database = graded.server.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(database) as connection:
        [(stored,)] = connection.execute("SELECT report_json FROM submissions WHERE id = ?", (graded.id,))
        connection.execute("UPDATE submissions SET report_json = ? WHERE id = ?", (json.dumps(old), graded.id))
    try:
        for path, text in _student_sees(graded).items():
            assert MARK not in text, path
    finally:
        with sqlite3.connect(database) as connection:
            connection.execute("UPDATE submissions SET report_json = ? WHERE id = ?", (stored, graded.id))
