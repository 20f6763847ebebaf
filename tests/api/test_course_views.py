"""The staff's class statistics and similarity pages, on a live server where a few students
submitted real suites (small pieces of the bundled example student's tests, and one planted
copy of another's suite with every name changed), graded by the local queue.

The figures the service states are checked against the reports themselves, counted here; the
plots are checked as SVG documents and as images a browser loads (headless Chromium, every
other host blocked); the similarity is checked to find the planted pair and no honest one.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from sqlalchemy.orm import sessionmaker

from api.store.db import Submission, User
from tests.api.chromium import Chromium
from grader.core.assignment import load_assignment
from tests.api.conftest import LAYOUT, STUDENT, Server, make_server, tar_gz, wait_done
from tests.disguise import disguise

SOURCE = (STUDENT / "python/tests/l3-3-gru/test_gru.py").read_text(encoding="utf-8")
SVG = "{http://www.w3.org/2000/svg}"
PLOTS = ("kill_rates", "scores", "validity")
SCRIPT = "</script><script>alert(1)</script>"
WRONG = "\n\ndef test_hidden_size_is_four():\n    assert GRU(2, 3).hidden_size == 4\n"  # fails on the reference
THRESHOLD = 0.5
WIDTH = 1280


def pick(*names: str) -> str:
    """The example's opening (docstring and imports) and its functions ``names`` (helpers and
    tests), in the example's order: a small suite of real tests."""
    tree = ast.parse(SOURCE)
    lines = SOURCE.splitlines(keepends=True)
    first = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    chosen = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in chosen} == set(names), names
    parts = ["".join(lines[: first.lineno - 1]).rstrip() + "\n"]
    parts += ["".join(lines[n.lineno - 1: n.end_lineno]) for n in chosen]
    return "\n\n".join(parts)


ANA = pick("sigmoid", "numpy_cell", "random_weights", "test_cell_matches_my_numpy_formula_with_nonzero_b_hn",
           "test_padded_batch_freezes_the_state_and_zeroes_the_outputs",
           "test_two_layers_match_my_cells_stacked_from_a_nonzero_state")
# What each student hands in, in order (the last is their grade of record): honest suites of
# their own, cy's copy of ana's, eve's second suite better than her first, and fay's two
# folders of tests, which cannot be graded.
PLANTED: dict[str, list[bytes]] = {
    "ana": [tar_gz({"test_gru.py": ANA})],
    "ben": [tar_gz({"test_hand.py": pick("test_hand_example_gru_cell", "test_hand_example_gradient_with_respect_to_h",
                                         "test_state_dict_keys_follow_torch")})],
    "cy": [tar_gz({"test_my_gru.py": disguise(ANA, comment=SCRIPT)})],
    "dee": [tar_gz({"test_init.py": pick("test_each_recurrent_block_is_orthogonal_and_biases_are_zero") + WRONG})],
    "eve": [tar_gz({"test_first.py": pick("test_dropout_is_ignored_by_a_one_layer_gru")}),
            tar_gz({"test_more.py": pick("random_weights", "test_dropout_is_ignored_by_a_one_layer_gru",
                                         "test_evaluation_mode_has_no_dropout",
                                         "test_no_state_means_zeros_and_bad_arguments_raise")})],
    "fay": [tar_gz({"a/test_x.py": "def test_x():\n    assert True\n",
                    "b/test_y.py": "def test_y():\n    assert True\n"})],
}
GRADED = ("ana", "ben", "cy", "dee", "eve")
COPIED = frozenset(("ana", "cy"))


@dataclass
class Course:
    server: Server
    records: dict[str, dict] = field(default_factory=dict)  # student -> their last submission, graded
    superseded: dict[str, dict] = field(default_factory=dict)  # student -> an earlier one
    reports: dict[str, dict] = field(default_factory=dict)  # student -> the staff report of their record


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Course]:
    srv = make_server(tmp_path_factory.mktemp("course"))
    srv.start()
    try:
        done = Course(server=srv)
        posted: dict[str, list[int]] = {}
        for student, archives in PLANTED.items():
            with srv.client(student) as http:
                for archive in archives:
                    answer = http.post("/v1/submissions", files={"archive": (f"{student}.tar.gz", archive)})
                    assert answer.status_code == 202, answer.text
                    posted.setdefault(student, []).append(answer.json()["id"])
        with srv.client("prof", "staff") as staff:
            for student, ids in posted.items():
                bodies = [wait_done(staff, i, timeout=300) for i in ids]
                done.records[student] = bodies[-1]
                if len(bodies) > 1:
                    done.superseded[student] = bodies[0]
            for student in GRADED:
                answer = staff.get(f"/v1/submissions/{done.records[student]['id']}/report.json")
                assert answer.status_code == 200, answer.text
                done.reports[student] = answer.json()
        assert {s: b["status"] for s, b in done.records.items()} == {**dict.fromkeys(GRADED, "done"), "fay": "error"}
        assert done.superseded["eve"]["status"] == "done"
        yield done
    finally:
        srv.stop()


def staff_json(course: Course, path: str) -> httpx.Response:
    with course.server.client("prof", "staff") as staff:
        return staff.get(path)


# -- the statistics ------------------------------------------------------------------------------

def test_the_stats_count_what_the_reports_of_record_hold(course: Course) -> None:
    answer = staff_json(course, "/v1/stats.json")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    reports = [course.reports[s] for s in GRADED]
    stats = body["stats"]

    assert sorted(body["submissions"]) == sorted(course.records[s]["id"] for s in GRADED)
    assert course.superseded["eve"]["id"] not in body["submissions"]
    assert (stats["graded"], stats["errors"]) == (5, 1)  # fay's could not be graded
    assert stats["passed"] == sum(r["passed"] for r in reports)
    assert stats["not_passed"] == 5 - stats["passed"]

    killed = Counter(m["id"] for r in reports for m in r["mutants"] if m["killed"])
    listed = {m["id"]: m for m in stats["mutants"]}
    assert set(listed) == {m["id"] for r in reports for m in r["mutants"]}
    assert {i: m["killed"] for i, m in listed.items()} == {i: killed[i] for i in listed}
    assert all(m["suites"] == 5 and m["kill_rate"] == pytest.approx(killed[i] / 5) for i, m in listed.items())
    rates = [m["kill_rate"] for m in stats["mutants"]]
    assert rates == sorted(rates) and rates[0] < rates[-1]  # the most missed first, and they differ

    bins = Counter(min(9, 10 * r["score"]["killed"] // r["score"]["total"]) for r in reports)
    assert [b["count"] for b in stats["histogram"]] == [bins[n] for n in range(10)]
    statuses = Counter(t["status"] for r in reports for t in r["tests"])
    assert stats["tests"] == {s: statuses.get(s, 0) for s in stats["tests"]}
    assert stats["tests"]["wrong"] >= 1  # dee's
    # eve's first suite is not her grade of record, and the figures would differ if it were.
    assert course.superseded["eve"]["report"]["score"]["killed"] < course.reports["eve"]["score"]["killed"]


@pytest.mark.parametrize("name", PLOTS)
def test_each_plot_is_an_svg_document_with_a_title_and_nothing_from_elsewhere(course: Course, name: str) -> None:
    with course.server.signed_in("prof", "staff") as staff:
        answer = staff.get(f"/staff/stats/{name}.svg")
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("image/svg+xml")
    assert "script-src 'none'" in answer.headers["content-security-policy"]
    assert answer.headers["x-content-type-options"] == "nosniff"
    root = ET.fromstring(answer.content)
    assert root.tag == f"{SVG}svg"
    title = root.find(f"{SVG}title")
    assert title is not None and "5 graded suites" in title.text
    for element in root.iter():
        assert element.tag not in (f"{SVG}script", f"{SVG}image", f"{SVG}foreignObject")
        for attribute, value in element.attrib.items():
            if attribute.endswith("href"):
                assert value.startswith("#"), (attribute, value)
    assert not re.search(r"url\(\s*['\"]?(?!#)", answer.text)
    assert "@import" not in answer.text


def test_an_unknown_plot_is_404(course: Course) -> None:
    with course.server.signed_in("prof", "staff") as staff:
        answer = staff.get("/staff/stats/pie.svg")
    assert answer.status_code == 404
    assert "kill_rates" in answer.text  # the names there are


# -- the similarity ------------------------------------------------------------------------------

def test_the_similarity_finds_the_planted_copy_and_no_honest_pair(course: Course) -> None:
    answer = staff_json(course, f"/v1/similarity.json?threshold={THRESHOLD}")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    result = body["result"]
    assert result["threshold"] == pytest.approx(THRESHOLD)
    assert sorted(result["students"]) == sorted(GRADED)
    assert body["submissions"] == {s: course.records[s]["id"] for s in GRADED}
    pairs = result["pairs"]
    assert [frozenset((p["a"], p["b"])) for p in pairs] == [COPIED], [(p["a"], p["b"], p["similarity"]) for p in pairs]
    [pair] = pairs
    assert pair["similarity"] >= 0.8 and pair["regions_a"] and pair["regions_b"]
    assert body["links"] == ["/staff/similarity/pair?a=ana&b=cy&assignment=l3-3-gru"]  # one per pair, in order

    everything = staff_json(course, "/v1/similarity.json?threshold=0").json()["result"]["pairs"]
    honest = [p for p in everything if frozenset((p["a"], p["b"])) != COPIED]
    assert honest and all(p["similarity"] < THRESHOLD for p in honest)
    assert everything[0]["similarity"] == pair["similarity"]  # the most similar first
    assert [p["similarity"] for p in everything] == sorted((p["similarity"] for p in everything), reverse=True)


def test_a_second_visit_is_served_from_the_cache(course: Course) -> None:
    path = "/v1/similarity.json?threshold=0.42"
    first = staff_json(course, path).json()
    started = time.monotonic()
    second = staff_json(course, path).json()
    took = time.monotonic() - started
    assert second["computed_at"] == first["computed_at"] and took < 1.0, took
    computed = datetime.fromisoformat(first["computed_at"])
    assert abs(datetime.now(timezone.utc) - computed) < timedelta(minutes=10)
    with course.server.signed_in("prof", "staff") as staff:
        page = staff.get("/staff/similarity?threshold=0.42")
    assert page.status_code == 200
    assert re.search(r"[Cc]omputed[^<]*<time datetime=\"" + re.escape(first["computed_at"][:19]), page.text)


def test_a_threshold_out_of_range_is_refused_naming_it(course: Course) -> None:
    answer = staff_json(course, "/v1/similarity.json?threshold=2")
    assert answer.status_code == 422 and "threshold" in answer.json()["detail"]
    with course.server.signed_in("prof", "staff") as staff:
        page = staff.get("/staff/similarity?threshold=lots")
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    assert "threshold" in page.text and "lots" in page.text


def test_the_pair_page_escapes_the_suites_and_marks_the_matches(course: Course) -> None:
    with course.server.signed_in("prof", "staff") as staff:
        page = staff.get("/staff/similarity/pair?a=cy&b=ana")
        unknown = staff.get("/staff/similarity/pair?a=ana&b=nobody")
    assert page.status_code == 200, page.text
    assert "<script" not in page.text.lower()
    unmarked = re.sub(r"</?mark[^>]*>", "", page.text)
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in unmarked
    assert page.text.count("<mark") >= 2
    assert unknown.status_code == 404 and "nobody" in unknown.text


# -- in a browser --------------------------------------------------------------------------------

IMAGES = """JSON.stringify(Array.from(document.images).map(i => ({
  src: i.getAttribute('src'), alt: i.alt, width: i.naturalWidth, done: i.complete,
  table: !!i.closest('section') && !!i.closest('section').querySelector('table')})))"""
PAGE_LAYOUT = """JSON.stringify({
  wide: document.documentElement.scrollWidth, window: window.innerWidth,
  unlabelled: Array.from(document.querySelectorAll('input, select, textarea'))
    .filter(e => e.type !== 'hidden' && e.labels.length === 0).map(e => e.name),
  untabbable: document.querySelectorAll('[tabindex^="-"], div[onclick], span[onclick]').length,
  links: Array.from(document.querySelectorAll('a[href^="/staff/similarity/"]')).map(a => a.getAttribute('href'))})"""
MARKS = """JSON.stringify(Array.from(document.querySelectorAll('.side')).map(s => s.querySelectorAll('mark').length))"""


def test_the_pages_render_in_chromium_with_their_plots_loaded(course: Course, tmp_path: Path) -> None:
    srv = course.server
    with Chromium(tmp_path) as browser:
        browser.block_other_origins(srv.url)
        browser.resize(WIDTH, 900)
        browser.sign_in(srv.url, srv.token("prof", "staff"))
        images = json.loads(browser.visit(f"{srv.url}/staff/stats", IMAGES).found)
        stats_layout = json.loads(browser.evaluate(PAGE_LAYOUT))
        similarity_layout = json.loads(browser.visit(f"{srv.url}/staff/similarity", PAGE_LAYOUT).found)
        landed = browser.click('a[href^="/staff/similarity/"]')
        marks = json.loads(browser.evaluate(MARKS))
        pair_layout = json.loads(browser.evaluate(PAGE_LAYOUT))
        blocked = list(browser.blocked)

    assert sorted(i["src"] for i in images) == sorted(f"/staff/stats/{name}.svg?assignment=l3-3-gru" for name in PLOTS)
    for image in images:
        assert image["done"] and image["width"] > 0, image
        assert len(image["alt"]) > 20 and image["table"], image
    assert similarity_layout["links"] == ["/staff/similarity/pair?a=ana&b=cy&assignment=l3-3-gru"]
    assert landed == f"{srv.url}/staff/similarity/pair?a=ana&b=cy&assignment=l3-3-gru"
    assert len(marks) == 2 and all(n > 0 for n in marks), marks
    for layout in (stats_layout, similarity_layout, pair_layout):
        assert layout["wide"] <= layout["window"] == WIDTH, layout
        assert layout["unlabelled"] == [] and layout["untabbable"] == 0, layout
    assert blocked == []


# -- who may see them ----------------------------------------------------------------------------

STAFF_PAGES = ("/staff/stats", "/staff/stats/scores.svg", "/staff/similarity", "/staff/similarity/pair?a=ana&b=cy")


def test_a_student_is_refused_every_staff_view(course: Course) -> None:
    with course.server.signed_in("ana") as student:
        for path in STAFF_PAGES:
            page = student.get(path)
            assert page.status_code == 403, path
            assert page.headers["content-type"].startswith("text/html"), path
            assert "course staff only" in page.text and "signed in as ana (student)" in page.text, path
            assert "<table" not in page.text and "<img" not in page.text, path
    with course.server.client("ana") as student:
        for path in ("/v1/stats.json", "/v1/similarity.json"):
            answer = student.get(path)
            assert answer.status_code == 403 and "staff" in answer.json()["detail"], path
    with httpx.Client(base_url=course.server.url, timeout=30) as anonymous:
        assert anonymous.get("/v1/stats.json").status_code == 401
        assert anonymous.get("/staff/stats").status_code == 303  # to the sign-in form


# -- the store, on both databases ----------------------------------------------------------------

SCORE = {"kill_rate": 0.5, "killed": 6, "total": 12, "threshold": 0.8, "required": [], "required_missing": []}


def test_the_submissions_of_record_on_each_database(make_session: sessionmaker) -> None:
    """Each current student's grade of record (not a later one still queued, not a preview, not
    one that failed, nor a removed student's or staff's), the students whose every submission
    failed counted apart, and the reports and archives read back by id."""
    from api.store.course_stats import recorded_submissions, stored_archives, stored_reports, ungraded_students

    assignment = load_assignment(LAYOUT.assignment)
    with make_session() as session:
        people = {name: User(name=name, role=role) for name, role in
                  (("ann", "student"), ("bo", "student"), ("cat", "student"), ("dan", "student"),
                   ("gone", "student"), ("staff", "staff"))}
        people["gone"].removed_at = datetime.now(timezone.utc)
        session.add_all(people.values())
        rows = [
            ("ann", "done", "submission"), ("ann", "done", "submission"), ("ann", "queued", "submission"),
            ("ann", "done", "preview"), ("bo", "error", "submission"), ("bo", "done", "submission"),
            ("bo", "error", "submission"), ("cat", "error", "submission"), ("dan", "done", "preview"),
            ("gone", "done", "submission"), ("staff", "done", "submission"),
        ]
        made = []
        for n, (name, status, kind) in enumerate(rows):
            report = json.dumps({"n": n, "passed": False, "score": SCORE}) if status == "done" else None
            made.append(Submission(user=people[name], assignment="l3-3-gru", status=status, kind=kind, archive=b"bytes %d" % n,
                                   archive_name=f"{name}.zip", report_json=report))
            session.add(made[-1])
            session.flush()
        session.commit()
        records = recorded_submissions(session, name="l3-3-gru", assignment=assignment)
        assert [(r.student, r.id, r.graded) for r in records] == [("ann", made[1].id, True), ("bo", made[5].id, True)]
        assert ungraded_students(session, name="l3-3-gru", recorded=[r.student for r in records]) == 1  # cat
        assert ungraded_students(session, name="l3-3-gru", recorded=[]) == 2  # bo too, were he not recorded
        ids = [made[1].id, made[5].id, made[7].id]
        assert [(i, json.loads(text)["n"]) for i, text in stored_reports(session, ids)] == [
            (made[1].id, 1), (made[5].id, 5)]
        assert [(i, data) for i, _, data in stored_archives(session, ids)] == [
            (made[1].id, b"bytes 1"), (made[5].id, b"bytes 5"), (made[7].id, b"bytes 7")]


def test_the_views_run_in_the_thread_pool_never_on_the_event_loop() -> None:
    """Reading two hundred suites and comparing every pair takes a while: the routes are plain
    functions, which the server runs in its thread pool, so other requests are answered meanwhile."""
    from api.web.routes import class_stats, similarity

    routes = [r for module in (class_stats, similarity) for r in module.router.routes]
    assert len(routes) == 6
    assert [r.path for r in routes if inspect.iscoroutinefunction(r.endpoint)] == []


def test_a_pair_link_carries_any_login_as_it_is() -> None:
    from urllib.parse import parse_qs, urlsplit

    from api.web.routes.similarity import pair_link
    from grader.core.similarity import SimilarPair

    pair = SimilarPair(a="a/b", b="..", similarity_a=1.0, similarity_b=1.0, similarity=1.0, overlap=10,
                       regions_a=[], regions_b=[])
    link = urlsplit(pair_link(pair, "l3-3-gru"))
    assert link.path == "/staff/similarity/pair"
    assert parse_qs(link.query) == {"a": ["a/b"], "b": [".."], "assignment": ["l3-3-gru"]}
