"""A term, end to end, against a real server on PostgreSQL: staff import a roster of 200 from a
Canvas export, students preview and submit (some late, one with an extension), staff read the
class's statistics and similarity pages in a browser, answer a regrade request and export the
grades to Canvas. Every count is checked against what the test planted.

The suites are the students' own (tests/api/term_suites.py): each has its own golden values,
and only students 0 and 1 share one (1's is 0's with its names changed and its lines wrapped).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from tests.api.chromium import Chromium
from tests.api.conftest import Server, make_server, tar_gz
from tests.api.dated_course import course_root, minute
from tests.api.term_suites import copied, suite

STUDENTS = 200
MUTANTS = 12
POINTS = 50.0
TITLE = "L3.3 GRU (torch gate order)"
EXTENDED = 7                       # submits after the due date, within an extension
LATE = range(180, 198)             # submit after the due date: one day late, 10 % off
PREVIEW_ONLY = (198, 199)          # preview, never submit
PREVIEWS = (*range(10), *PREVIEW_ONLY)
COPY = (0, 1)                      # 1 submits 0's suite, renamed and re-wrapped
ASKS = 5                           # asks for a regrade
ON_TIME = [i for i in range(STUDENTS) if i not in LATE and i not in PREVIEW_ONLY and i != EXTENDED]


def login(i: int) -> str:
    return f"student{i:03d}"


def canvas_roster(path: Path) -> Path:
    rows = [["Student", "ID", "SIS User ID", "SIS Login ID", "Section"],
            ["    Points Possible", "", "", "", ""]]
    rows += [[f"Family{i}, Given{i}", str(5000 + i), f"SIS{i:04d}", login(i), f"Section {i % 3 + 1}"]
             for i in range(STUDENTS)]
    with path.open("w", newline="", encoding="utf-8-sig") as out:
        csv.writer(out).writerows(rows)
    return path


def archive(i: int) -> bytes:
    text = copied(suite(COPY[0]), to=f"s{i}") if i == COPY[1] else suite(i)
    return tar_gz({"tests/test_gru.py": text})


def admin(srv: Server, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "api.cli", "admin", *args], capture_output=True, text=True,
                          env=srv.env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def upload(client: httpx.Client, i: int, *, preview: bool = False) -> dict:
    path = "/v1/previews" if preview else "/v1/submissions"
    answer = client.post(path, files={"archive": (f"{login(i)}.tar.gz", archive(i), "application/gzip")})
    assert answer.status_code == 202, (i, answer.text)
    return answer.json()


def wait_all_graded(staff: httpx.Client, expected: int, timeout: float = 1500) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = staff.get("/v1/submissions", params={"limit": 1000}).json()
        if len(rows) == expected and all(r["status"] in ("done", "error") for r in rows):
            return rows
        time.sleep(2)
    raise AssertionError(f"not all {expected} submissions graded within {timeout} s")


def expected_points(report: dict, penalty: float) -> float:
    """The assignment's rule, worked here: full points when passed, else half a mutant's share
    per killed mutant; the late penalty taken off."""
    killed = report["score"]["killed"]
    raw = POINTS if report["passed"] else POINTS * 0.5 * killed / MUTANTS
    return round(raw * (1 - penalty), 2)


@pytest.fixture(scope="module")
def term(tmp_path_factory: pytest.TempPathFactory, postgres) -> dict:
    tmp = tmp_path_factory.mktemp("term")
    now = datetime.now(timezone.utc)
    # Due at the start of a minute at least 90 s away: every on-time upload is in well before it.
    due = minute(now) + timedelta(minutes=3 if now.second > 30 else 2)
    root = course_root(tmp, due=due, late="penalty", penalty_per_day=0.1, penalty_cap=0.5,
                       top=f'points = {POINTS}\ngrade_of_record = "latest_on_time"\n')
    srv = make_server(tmp, postgres.create_database("term"), root=str(root), max_in_flight="3")
    srv.start()
    try:
        yield _run_term(srv, tmp, due)
    finally:
        srv.stop()


def _run_term(srv: Server, tmp: Path, due: datetime) -> dict:
    imported = admin(srv, "roster", "import", str(canvas_roster(tmp / "canvas.csv")), "--out", str(tmp / "tokens.csv"))
    with (tmp / "tokens.csv").open(encoding="utf-8") as handle:
        tokens = {row["login"]: row["token"] for row in csv.DictReader(handle)}
    admin(srv, "roster", "import", str(tmp / "canvas.csv"), "--out", str(tmp / "again.csv"))
    with (tmp / "again.csv").open(encoding="utf-8") as handle:
        second = list(csv.DictReader(handle))
    admin(srv, "extension", "grant", login(EXTENDED), "--due", (due + timedelta(days=3)).isoformat(),
          "--reason", "illness, with a note")
    clients = {i: httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {tokens[login(i)]}"},
                               timeout=60) for i in range(STUDENTS)}
    ids: dict[int, int] = {}
    previews = [upload(clients[i], i, preview=True)["id"] for i in PREVIEWS]
    for i in ON_TIME:
        ids[i] = upload(clients[i], i)["id"]
    on_time_done = datetime.now(timezone.utc)
    time.sleep(max(0.0, (due - datetime.now(timezone.utc)).total_seconds()) + 2)
    for i in (*LATE, EXTENDED):
        ids[i] = upload(clients[i], i)["id"]
    staff = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {srv.token('prof', 'staff')}"},
                         timeout=120)
    rows = wait_all_graded(staff, len(ids) + len(previews))
    return {"srv": srv, "staff": staff, "clients": clients, "ids": ids, "previews": previews, "rows": rows,
            "tokens": tokens, "imported": imported, "second": second, "due": due, "on_time_done": on_time_done}


def test_the_roster_import_gives_each_student_a_token_once(term: dict) -> None:
    tokens = term["tokens"]
    assert len(tokens) == STUDENTS and all(tokens.values()) and len(set(tokens.values())) == STUDENTS
    # The same file again: nobody is new, every token is kept (and still signs in below).
    assert len(term["second"]) == STUDENTS and not any(row["token"] for row in term["second"])
    assert term["on_time_done"] < term["due"], "the on-time uploads must end before the due date"


def test_every_submission_is_stamped_as_planted(term: dict) -> None:
    rows = {r["id"]: r for r in term["rows"]}
    stamped = {i: rows[sid] for i, sid in term["ids"].items()}
    assert sum(r["kind"] == "submission" for r in rows.values()) == STUDENTS - len(PREVIEW_ONLY)
    assert sorted(i for i, r in stamped.items() if r["timeliness"] == "late") == list(LATE)
    assert all(r["days_late"] == 1 and r["penalty"] == pytest.approx(0.1) for i, r in stamped.items() if i in LATE)
    assert stamped[EXTENDED]["timeliness"] == "on_time" and stamped[EXTENDED]["penalty"] == 0
    assert [rows[p]["kind"] for p in term["previews"]] == ["preview"] * len(PREVIEWS)
    assert all(r["status"] == "done" for r in rows.values()), [r for r in rows.values() if r["status"] != "done"]


def reports(term: dict) -> dict[int, dict]:
    staff = term["staff"]
    return {i: staff.get(f"/v1/submissions/{sid}/report.json").json() for i, sid in term["ids"].items()}


def test_the_canvas_export_holds_each_students_points_of_record(term: dict) -> None:
    by_student = reports(term)
    answer = term["staff"].get("/v1/gradebook.csv", params={"format": "canvas"})
    assert answer.status_code == 200, answer.text
    lines = list(csv.reader(io.StringIO(answer.text)))
    assert lines[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", TITLE]
    assert lines[1][0].strip() == "Points Possible" and float(lines[1][5]) == POINTS
    body = {line[3]: line for line in lines[2:]}
    assert len(body) == STUDENTS
    for i in range(STUDENTS):
        line = body[login(i)]
        assert line[:3] == [f"Family{i}, Given{i}", str(5000 + i), f"SIS{i:04d}"], line
        if i in PREVIEW_ONLY:
            assert line[5] == "", f"{login(i)} only previewed, and a preview is never a grade: {line}"
            continue
        penalty = 0.1 if i in LATE else 0.0
        assert float(line[5]) == pytest.approx(expected_points(by_student[i], penalty), abs=0.011), (i, line)


def test_the_statistics_count_what_the_reports_hold(term: dict) -> None:
    by_student = reports(term)
    stats = term["staff"].get("/v1/stats.json").json()["stats"]
    assert stats["graded"] == STUDENTS - len(PREVIEW_ONLY) and stats["errors"] == 0
    assert stats["passed"] == sum(r["passed"] for r in by_student.values())
    killed = {m["id"]: m["killed"] for m in stats["mutants"]}
    for mutant in killed:
        planted = sum(any(m["id"] == mutant and m["killed"] for m in r["mutants"]) for r in by_student.values())
        assert killed[mutant] == planted, mutant
    assert sum(b["count"] for b in stats["histogram"]) == stats["graded"]


def test_the_similarity_finds_the_planted_pair_alone(term: dict) -> None:
    answer = term["staff"].get("/v1/similarity.json", params={"threshold": 0.9}, timeout=600).json()
    pairs = [{p["a"], p["b"]} for p in answer["result"]["pairs"]]
    assert pairs == [{login(COPY[0]), login(COPY[1])}], answer["result"]["pairs"][:5]


def test_a_regrade_request_is_asked_and_answered(term: dict) -> None:
    student, staff = term["clients"][ASKS], term["staff"]
    asked = student.post(f"/v1/submissions/{term['ids'][ASKS]}/regrade-requests",
                         json={"message": "my padded test should count"})
    assert asked.status_code == 201, asked.text
    open_ = staff.get("/v1/regrade-requests").json()
    assert [r["id"] for r in open_] == [asked.json()["id"]]
    answered = staff.post(f"/v1/regrade-requests/{asked.json()['id']}/answer",
                          json={"answer": "it fails on a correct GRU: not counted", "regrade": False})
    assert answered.status_code == 200, answered.text
    assert staff.get("/v1/regrade-requests").json() == []
    mine = student.get(f"/v1/submissions/{term['ids'][ASKS]}/regrade-requests").json()
    assert [r["state"] for r in mine] == ["answered"] and "not counted" in mine[0]["answer"]


def test_the_staff_pages_render_in_a_browser(term: dict, tmp_path: Path) -> None:
    srv = term["srv"]
    term["staff"].get("/v1/similarity.json", params={"threshold": 0.9}, timeout=600)  # computed once, then cached
    with Chromium(tmp_path) as browser:
        browser.block_other_origins(srv.url)
        browser.resize(1280, 900)
        browser.sign_in(srv.url, srv.token("prof", "staff"))
        images = json.loads(browser.visit(f"{srv.url}/staff/stats", "JSON.stringify(Array.from(document.images)"
                                          ".map(i => i.naturalWidth))").found)
        wide = json.loads(browser.evaluate("JSON.stringify([document.documentElement.scrollWidth, innerWidth])"))
        links = json.loads(browser.visit(
            f"{srv.url}/staff/similarity?threshold=0.9",
            "JSON.stringify(Array.from(document.querySelectorAll('a[href^=\"/staff/similarity/\"]'))"
            ".map(a => a.getAttribute('href')))").found)
        roster = browser.visit(f"{srv.url}/staff/roster", "document.querySelectorAll('tbody tr').length").found
    assert len(images) == 3 and all(width > 0 for width in images), images
    assert wide[0] <= wide[1] == 1280, wide
    assert links == [f"/staff/similarity/pair?a={login(COPY[0])}&b={login(COPY[1])}&assignment=l3-3-gru"], links
    assert int(roster) >= STUDENTS
