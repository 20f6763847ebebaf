"""The grade of record and what staff download: the gradebook in the service's CSV, Canvas's and
Moodle's import formats (read back with the csv module and every value checked), the grade
chosen by the assignment's rule with its late penalty and staff's override, previews and removed
students left out, and one zip of every student's grade-of-record archive with a manifest.

A course due 1 day and 1 hour ago, late work losing 10 % a day (tests/api/dated_course.py):

- ada: an upload on time (under an extension), graded 10 of 12 killed, not passed: 41.67
  points; a second, 1 day late, passed: 100 less 10; a preview after both, passed;
- ghopper: an upload 2 days late, 6 of 12 killed: 25 points less 5, overridden by staff to 30;
  a second that could not be graded;
- mallory: nothing submitted, a name that would be a formula; gone: removed from the roster.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from api.store.grades import grade_records
from grader.core.assignment import load_assignment
from grader.core.paths import Layout
from tests.api.chromium import Chromium
from tests.api.conftest import Server, tar_gz
from tests.api.dated_course import (
    course_root, database, dated_server, days, grant_extension, grade, minute, now, report, user_of,
)
from tests.api.test_deadlines import text_of

TITLE = "L3.3 GRU (torch gate order)"
EVIL = '=HYPERLINK("http://evil.example","x")'
ROSTER = {
    "ada": dict(display_name="Lovelace, Ada", email="ada@uni.example", sis_id="S-001", lms_id="101", section="Lab A"),
    "ghopper": dict(display_name="Hopper, Grace", email="grace@uni.example", sis_id="S-002", lms_id="102",
                    section="Lab B"),
    "mallory": dict(display_name=EVIL, lms_id="103"),
    "gone": dict(display_name="Gone, Long", lms_id="104"),
}
ARCHIVES = {name: tar_gz({"test_gru.py": f"# {name}\ndef test_it():\n    assert True\n"})
            for name in ("ada1", "ada2", "preview", "ghopper1", "ghopper2", "gone")}


@dataclass
class Course:
    server: Server
    root: Path
    ids: dict[str, int]  # which upload: its submission id


def _upload(client: httpx.Client, archive: str, *, name: str = "tests.tar.gz", path: str = "/v1/submissions") -> int:
    answer = client.post(path, files={"archive": (name, ARCHIVES[archive], "application/gzip")})
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def _enrol(server: Server) -> None:
    """The roster's fields, as a roster import writes them; ``gone`` removed from it."""
    with database(server) as session:
        for login, fields in ROSTER.items():
            user = user_of(session, login)
            for name, value in fields.items():
                setattr(user, name, value)
        user_of(session, "gone").removed_at = now()
        session.commit()


def _override(server: Server, submission_id: int, points: float, reason: str) -> None:
    """Staff's override of one submission's grade, as the overrides page stores it."""
    with database(server) as session:
        [submission] = [s for s in user_of(session, "ghopper").submissions if s.id == submission_id]
        submission.override_points, submission.override_reason = points, reason
        submission.override_by, submission.override_at = "prof", now()
        session.commit()


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Course]:
    tmp = tmp_path_factory.mktemp("gradebook")
    root = course_root(tmp, due=minute(now() - days(1) - days(1 / 24)))
    server = dated_server(tmp, root)
    server.start()
    ids: dict[str, int] = {}
    try:
        with server.client("ada") as ada, server.client("ghopper") as ghopper, server.client("gone") as gone:
            server.token("mallory")
            server.token("prof", "staff")
            grant_extension(server, "ada", now() + days(2))
            ids["ada1"] = _upload(ada, "ada1", name="../ada's tests (v1).tar.gz")
            grant_extension(server, "ada", now() - days(3 / 24))  # now 1 day late
            ids["ada2"] = _upload(ada, "ada2")
            ids["preview"] = _upload(ada, "preview", path="/v1/previews")
            ids["ghopper1"] = _upload(ghopper, "ghopper1")
            ids["ghopper2"] = _upload(ghopper, "ghopper2")
            ids["gone"] = _upload(gone, "gone")
        _enrol(server)
        grade(server, ids["ada1"], report(killed=10, passed=False))
        grade(server, ids["ada2"], report(killed=12, passed=True))
        grade(server, ids["preview"], report(killed=12, passed=True))
        grade(server, ids["ghopper1"], report(killed=6, passed=False))
        grade(server, ids["ghopper2"], error="could not be graded: no test was collected")
        grade(server, ids["gone"], report(killed=12, passed=True))
        _override(server, ids["ghopper1"], 30.0, "hand-graded: the journal was fine")
        yield Course(server=server, root=root, ids=ids)
    finally:
        server.stop()


def _download(course: Course, path: str, **params: str) -> httpx.Response:
    with course.server.client("prof", "staff") as prof:
        answer = prof.get(path, params=params)
    assert answer.status_code == 200, answer.text
    return answer


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_canvas_export_reads_back_with_the_final_points(course: Course) -> None:
    answer = _download(course, "/v1/gradebook.csv", format="canvas")
    assert answer.headers["content-type"].startswith("text/csv")
    assert 'filename="gradebook-l3-3-gru-canvas.csv"' in answer.headers["content-disposition"]
    assert _rows(answer.text) == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", TITLE],
        ["Points Possible", "", "", "", "", "100"],
        ["Lovelace, Ada", "101", "S-001", "ada", "Lab A", "41.67"],  # the latest on time, not the better late one
        ["Hopper, Grace", "102", "S-002", "ghopper", "Lab B", "30"],  # staff's override
        ["'" + EVIL, "103", "", "mallory", "", ""],  # nothing submitted: no grade; the name stays text
    ]


def test_moodle_export_has_the_grade_and_says_why_in_the_feedback(course: Course) -> None:
    rows = _rows(_download(course, "/v1/gradebook.csv", format="moodle").text)
    assert rows[0] == ["First name", "Last name", "Email address", "ID number", TITLE, "Feedback"]
    by_email = {row[2]: row for row in rows[1:]}
    assert by_email["ada@uni.example"][:5] == ["Ada", "Lovelace", "ada@uni.example", "S-001", "41.67"]
    grace = by_email["grace@uni.example"]
    assert grace[4] == "30"
    assert "late, 2 days" in grace[5] and "overridden by staff: hand-graded: the journal was fine" in grace[5], grace
    assert len(rows) == 4  # ada, ghopper, mallory: no one removed, no staff


def test_the_plain_csv_keeps_its_columns_and_adds_the_grade_of_record(course: Course) -> None:
    answer = _download(course, "/v1/gradebook.csv")
    assert answer.text.startswith("student,submissions,latest_id")
    rows = {row["student"]: row for row in csv.DictReader(io.StringIO(answer.text, newline=""))}
    assert set(rows) == {"ada", "ghopper", "mallory"}
    ada, grace, mallory = rows["ada"], rows["ghopper"], rows["mallory"]
    ids = course.ids
    # The preview, graded last and passed, is neither latest, best, nor counted.
    assert (ada["submissions"], ada["latest_id"], ada["best_id"]) == ("2", str(ids["ada2"]), str(ids["ada2"]))
    assert (ada["rule"], ada["record_id"], ada["timeliness"]) == ("latest_on_time", str(ids["ada1"]), "on_time")
    assert (ada["points"], ada["late_penalty"], ada["override"], ada["final_points"]) == ("41.67", "0", "", "41.67")
    assert (grace["submissions"], grace["record_id"], grace["timeliness"]) == ("2", str(ids["ghopper1"]), "late")
    assert (grace["points"], grace["late_penalty"], grace["override"], grace["final_points"]) == ("25", "5", "30", "30")
    assert (mallory["submissions"], mallory["record_id"], mallory["final_points"]) == ("0", "", "")
    assert mallory["name"] == "'" + EVIL


def test_the_best_rule_takes_the_most_final_points(course: Course) -> None:
    best = load_assignment(Layout(course.root).assignment).model_copy(update={"grade_of_record": "best"})
    with database(course.server) as session:
        records = {r.user.name: r for r in grade_records(session, name="l3-3-gru", assignment=best)}
    assert list(records) == ["ada", "ghopper", "mallory"]
    ada = records["ada"]
    assert ada.submission is not None and ada.submission.id == course.ids["ada2"] and ada.rule == "best"
    assert (ada.points, ada.penalty_points, ada.final_points) == pytest.approx((100.0, 10.0, 90.0))
    assert ada.submissions == 2 and not ada.overridden
    grace = records["ghopper"]
    assert grace.submission.id == course.ids["ghopper1"] and grace.overridden
    assert (grace.points, grace.penalty_points, grace.final_points) == pytest.approx((25.0, 5.0, 30.0))
    assert records["mallory"].submission is None and records["mallory"].final_points is None


def test_a_bad_format_is_refused_and_students_get_none_of_it(course: Course) -> None:
    with course.server.client("prof", "staff") as prof:
        bad = prof.get("/v1/gradebook.csv", params={"format": "xlsx"})
    assert bad.status_code == 422 and "format" in bad.json()["detail"], bad.text
    with course.server.client("ada") as ada:
        for path in ("/v1/gradebook.csv?format=canvas", "/v1/submissions.zip"):
            refused = ada.get(path)
            assert refused.status_code == 403 and "staff" in refused.json()["detail"], path


def test_the_zip_holds_each_grade_of_record_archive_and_a_manifest(course: Course) -> None:
    answer = _download(course, "/v1/submissions.zip")
    assert answer.headers["content-type"] == "application/zip"
    ids = course.ids
    with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
        ada_member = f"ada/{ids['ada1']}-ada_s_tests__v1_.tar.gz"
        grace_member = f"ghopper/{ids['ghopper1']}-tests.tar.gz"
        assert sorted(archive.namelist()) == sorted([ada_member, grace_member, "manifest.csv"])
        assert archive.read(ada_member) == ARCHIVES["ada1"]
        assert archive.read(grace_member) == ARCHIVES["ghopper1"]
        manifest = list(csv.DictReader(io.StringIO(archive.read("manifest.csv").decode(), newline="")))
    with course.server.client("prof", "staff") as prof:
        stamped = prof.get(f"/v1/submissions/{ids['ada1']}").json()["created_at"]
    assert [row["login"] for row in manifest] == ["ada", "ghopper", "mallory"]
    assert manifest[0] == {"login": "ada", "submission_id": str(ids["ada1"]), "stamped_at": stamped,
                           "timeliness": "on_time", "final_points": "41.67"}
    assert (manifest[1]["timeliness"], manifest[1]["final_points"]) == ("late", "30")
    assert (manifest[2]["submission_id"], manifest[2]["final_points"]) == ("", "")


def test_the_gradebook_page_shows_the_grade_of_record_and_links_the_downloads(course: Course, tmp_path: Path) -> None:
    with course.server.signed_in("prof", "staff") as prof:
        page = prof.get("/gradebook")
    assert page.status_code == 200
    shown = text_of(page.text)
    assert "the latest submission made on time" in shown, shown
    for link in ("/v1/gradebook.csv?assignment=l3-3-gru", "/v1/gradebook.csv?format=canvas&amp;assignment=l3-3-gru",
                 "/v1/gradebook.csv?format=moodle&amp;assignment=l3-3-gru", "/v1/submissions.zip?assignment=l3-3-gru"):
        assert f'href="{link}"' in page.text, link
    assert f'href="/submissions/{course.ids["ada1"]}"' in page.text
    assert "41.67" in shown and "hand-graded: the journal was fine" in shown and "30" in shown
    assert "Gone, Long" not in shown and "gone" not in shown.split()

    with Chromium(tmp_path) as browser:
        browser.sign_in(course.server.url, course.server.token("prof", "staff"))
        browser.resize(1280, 900)
        width = browser.visit(f"{course.server.url}/gradebook", "JSON.stringify([document.documentElement.scrollWidth,"
                              " document.documentElement.clientWidth])").found
    scroll_width, client_width = json.loads(width)
    assert scroll_width <= client_width <= 1280
