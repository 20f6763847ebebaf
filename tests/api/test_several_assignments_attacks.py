"""Attacks on one service hosting several modules, as a hostile student or a hurried member of
staff would make them: reading another module's hidden mutants, making a submission for one
module count in another's gradebook, statistics, similarity or export, moving another module's
due date with an extension, dodging a refusing due date by naming another module, sending odd
``assignment`` values, and staff forms and regrades that land in the wrong module.

Every bad input must be a 4xx that names the field (never a 500), and the next request must be
served as usual."""

from __future__ import annotations

import csv
import io
import re
import shutil
import tarfile
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from grader.core.models import Audience
from grader.core.paths import ASSIGNMENTS, COURSE_FILE, layout_for
from grader.core.scoring import shown_ids
from grader.core.variants import VariantKind, build_variants
from grader.flows.submit import pack
from tests.api.conftest import LAYOUT, Server, example_archive, make_server, tar_gz, wait_done

GRU, LSTM = "l3-3-gru", "l3-2-lstm"
LSTM_STUDENT = LAYOUT.examples / "lstm-student"
CSRF = re.compile(r'<input type="hidden" name="csrf" value="([^"]+)">')
BERLIN_FREE = timezone.utc


def hidden_of(name: str) -> dict[str, str]:
    """A module's hidden mutants: their ids, by the titles staff read."""
    variants = build_variants(layout_for(LAYOUT.root, name))
    shown = shown_ids(variants, Audience.STUDENT)
    return {v.id: v.spec.title for v in variants if v.kind is VariantKind.MUTANT and shown[v.id] != v.id}


HIDDEN = {GRU: hidden_of(GRU), LSTM: hidden_of(LSTM)}


def lstm_archive() -> bytes:
    return pack(LSTM_STUDENT, layout_for(LAYOUT.root, LSTM).student_tests)


def both_archive() -> bytes:
    """An archive holding a suite in each module's tests folder (the GRU's and the LSTM's)."""
    files: dict[str, bytes] = {}
    for data in (example_archive(), lstm_archive()):
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for member in tar.getmembers():
                if member.isfile():
                    files.setdefault(member.name, tar.extractfile(member).read())
    return tar_gz(files)


def post(client: httpx.Client, data: bytes, assignment: str | None = None, path: str = "/v1/submissions",
         **kwargs) -> httpx.Response:
    return client.post(path, files={"archive": ("sub.tar.gz", data)},
                       data={"assignment": assignment} if assignment is not None else None, **kwargs)


def rows_of(text: str) -> dict[str, dict]:
    return {row["student"]: row for row in csv.DictReader(io.StringIO(text))}


def form_token(http: httpx.Client, path: str) -> str:
    found = CSRF.search(http.get(path).text)
    assert found, f"no form token on {path}"
    return found.group(1)


def names_no_hidden(text: str, module: str) -> None:
    """``text`` (a report in any format) names none of ``module``'s hidden mutants, by id or title."""
    for mutant, title in HIDDEN[module].items():
        assert not re.search(rf"\b{mutant}\b", text), (module, mutant)
        assert title not in text, (module, title)


def served(server: Server) -> None:
    """The service answers the next request as usual."""
    answer = httpx.get(f"{server.url}/v1/assignments", timeout=30)
    assert answer.status_code == 200 and [a["assignment"] for a in answer.json()] == [GRU, LSTM]


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Server:
    server = make_server(tmp_path_factory.mktemp("attacks"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def graded(course: Server) -> dict[str, int]:
    """eve's LSTM submission and ada's GRU submission, both graded."""
    eve, ada = course.client("eve"), course.client("ada")
    lstm = post(eve, lstm_archive(), LSTM)
    gru = post(ada, example_archive(), GRU)
    assert lstm.status_code == gru.status_code == 202, (lstm.text, gru.text)
    done = {LSTM: wait_done(eve, lstm.json()["id"], timeout=300), GRU: wait_done(ada, gru.json()["id"], timeout=300)}
    assert all(d["status"] == "done" for d in done.values()), done
    return {name: d["id"] for name, d in done.items()}


# ------------------------------------------------------------------ hidden mutants
def test_a_student_reads_no_hidden_mutant_of_a_module_in_any_report_format(course, graded):
    eve = course.client("eve")
    sid = graded[LSTM]
    base = f"/v1/submissions/{sid}"
    for path in (base, f"{base}/report.json", f"{base}/report.md", f"{base}/report.junit.xml",
                 f"{base}/report.gradescope.json", f"{base}/report.html"):
        answer = eve.get(path)
        assert answer.status_code == 200, (path, answer.text[:300])
        names_no_hidden(answer.text, LSTM)
    # The LSTM report is read with the LSTM's secrets, not the GRU's: a mutant hidden in the GRU
    # (s04) is an ordinary one of the LSTM, shown by its id.
    report = eve.get(f"{base}/report.json").json()
    assert "s04" in report["variants"] and report["score"]["total"] == 15
    page = course.signed_in("eve").get(f"/submissions/{sid}")
    assert page.status_code == 200 and f"for {LSTM}" in page.text
    names_no_hidden(page.text, LSTM)
    # Staff read every mutant of it.
    staff = course.client("prof", "staff").get(f"{base}/report.json").json()
    assert set(HIDDEN[LSTM]) <= set(staff["variants"])


def test_the_public_assignment_listings_name_no_hidden_mutant_of_any_module(course):
    listed = httpx.get(f"{course.url}/v1/assignments", timeout=30)
    assert listed.status_code == 200
    for one in listed.json():
        names_no_hidden(str(one), one["assignment"])
    for name in (GRU, LSTM):
        answer = httpx.get(f"{course.url}/v1/assignment", params={"assignment": name}, timeout=30)
        assert answer.status_code == 200 and answer.json()["assignment"] == name
        names_no_hidden(answer.text, name)
        assert sum(m["hidden"] for m in answer.json()["mutants"]) == len(HIDDEN[name])


def test_another_student_reads_nothing_of_a_submission_for_another_module(course, graded):
    mallory = course.client("mallory")
    sid = graded[LSTM]
    for path in (f"/v1/submissions/{sid}", f"/v1/submissions/{sid}/report.json",
                 f"/v1/submissions/{sid}/report.gradescope.json"):
        assert mallory.get(path).status_code == 404, path
    for name in (GRU, LSTM):
        assert mallory.get("/v1/submissions", params={"assignment": name}).json() == []
    # Her own listing, filtered by a module, holds only her own for it.
    assert [s["id"] for s in course.client("eve").get("/v1/submissions", params={"assignment": GRU}).json()] == []


# ------------------------------------------------------------------ per-module views
def test_a_submission_counts_only_in_its_own_modules_gradebook_and_exports(course, graded):
    prof = course.client("prof", "staff")
    for fmt in ("csv", "canvas", "moodle"):
        for name, owner, other in ((GRU, "ada", "eve"), (LSTM, "eve", "ada")):
            answer = prof.get("/v1/gradebook.csv", params={"assignment": name, "format": fmt})
            assert answer.status_code == 200, answer.text
            assert name in answer.headers["content-disposition"]
            if fmt == "csv":
                rows = rows_of(answer.text)
                assert rows[owner]["record_id"] == str(graded[name])
                assert rows[other]["record_id"] == "", (name, rows[other])
    pages = course.signed_in("prof", "staff")
    for name, other in ((GRU, LSTM), (LSTM, GRU)):
        book = pages.get("/gradebook", params={"assignment": name})
        assert book.status_code == 200
        assert f'href="/submissions/{graded[name]}"' in book.text
        assert f'href="/submissions/{graded[other]}"' not in book.text
    for name, other in ((GRU, LSTM), (LSTM, GRU)):
        answer = prof.get("/v1/submissions.zip", params={"assignment": name})
        assert answer.status_code == 200
        with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
            names = archive.namelist()
            manifest = archive.read("manifest.csv").decode()
        assert any(n.startswith(f"{'ada' if name == GRU else 'eve'}/{graded[name]}-") for n in names), names
        assert not any(f"/{graded[other]}-" in n for n in names), names
        assert str(graded[other]) not in [r.get("submission_id") for r in csv.DictReader(io.StringIO(manifest))]


def test_statistics_and_their_cache_are_per_module(course, graded):
    prof = course.client("prof", "staff")
    # Asked in turn, each module's figures are its own (a kept result is never the other's).
    for _ in range(2):
        for name, total in ((GRU, 12), (LSTM, 15)):
            stats = prof.get("/v1/stats.json", params={"assignment": name}).json()
            assert stats["submissions"] == [graded[name]], (name, stats["submissions"])
            assert len(stats["stats"]["mutants"]) == total
    pages = course.signed_in("prof", "staff")
    lstm_page = pages.get("/staff/stats", params={"assignment": LSTM})
    assert lstm_page.status_code == 200
    assert f"/staff/stats/kill_rates.svg?assignment={LSTM}" in lstm_page.text
    plots = {name: pages.get("/staff/stats/kill_rates.svg", params={"assignment": name}) for name in (GRU, LSTM)}
    assert all(p.status_code == 200 for p in plots.values())
    assert plots[GRU].text != plots[LSTM].text


def test_similarity_compares_only_one_modules_suites(course, graded):
    prof = course.client("prof", "staff")
    for name in (GRU, LSTM):
        answer = prof.get("/v1/similarity.json", params={"assignment": name, "threshold": 0.0})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body["submissions"].values()) == {graded[name]}, body["submissions"]
        assert body["result"]["pairs"] == []
        assert all(f"assignment={name}" in link for link in body["links"])
    # The pair page of a module knows only its students' suites: eve's is no GRU suite.
    pages = course.signed_in("prof", "staff")
    pair = pages.get("/staff/similarity/pair", params={"a": "ada", "b": "eve", "assignment": GRU})
    assert pair.status_code == 404 and "eve" in pair.text


# ------------------------------------------------------------------ odd names
ODD = ["L3-3-GRU", "l3-3-gru ", " l3-3-gru", "l3-3-gru\n", "l3-3-gru\x00", "../l3-3-gru", "l3-3-gru/",
       "assignments/l3-3-gru", "ｌ3-3-gru", "l3-3-grü", "x" * 100, "x" * 101, "y" * 3000, "-", ".", "..",
       "%00", "l3-3-gru;l3-2-lstm", "l3-3-gru,l3-2-lstm"]


@pytest.mark.parametrize("path", ["/v1/assignment", "/v1/gradebook.csv", "/v1/stats.json",
                                  "/v1/similarity.json", "/v1/submissions.zip"])
def test_an_odd_assignment_in_a_query_is_a_422_naming_the_field(course, path):
    prof = course.client("prof", "staff")
    for value in ODD:
        answer = prof.get(path, params={"assignment": value})
        assert answer.status_code == 422, (path, value, answer.status_code, answer.text[:300])
        assert "assignment" in answer.json()["detail"], (path, value)
    # An empty value is no assignment's name either.
    assert prof.get(path, params={"assignment": ""}).status_code in (200, 422)
    served(course)


def test_a_listing_filtered_by_a_module_not_hosted_is_refused_not_an_empty_list(course, graded):
    """``GET /v1/submissions?assignment=`` with a name in another case, or one the service does
    not host, reads as "no submissions" to staff on deadline night: it must be a 422 listing the
    modules hosted, as every other ``?assignment=`` is."""
    prof = course.client("prof", "staff")
    assert [s["id"] for s in prof.get("/v1/submissions", params={"assignment": LSTM}).json()] == [graded[LSTM]]
    for value in ("L3-2-LSTM", "l3-2-LSTM", "l9-9-transformer"):
        answer = prof.get("/v1/submissions", params={"assignment": value})
        assert answer.status_code == 422, (value, answer.status_code, answer.text[:300])
        assert LSTM in answer.json()["detail"] and GRU in answer.json()["detail"]
    for value in ODD:  # those no folder is named: refused by the name's pattern
        if value.lower() in (GRU.lower(), "x" * 100):
            continue
        answer = prof.get("/v1/submissions", params={"assignment": value})
        assert answer.status_code == 422 and "assignment" in answer.json()["detail"], (value, answer.text[:300])


@pytest.mark.parametrize("path", ["/submissions", "/gradebook", "/staff/roster", "/staff/stats",
                                  "/staff/similarity"])
def test_an_odd_assignment_on_a_page_is_a_4xx_naming_the_field(course, path):
    prof = course.signed_in("prof", "staff")
    for value in ODD:
        answer = prof.get(path, params={"assignment": value})
        assert 400 <= answer.status_code < 500, (path, value, answer.status_code)
        assert "assignment" in answer.text, (path, value)
    assert prof.get(path, params={"assignment": LSTM}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/submissions", "/v1/previews"])
def test_an_odd_assignment_in_an_upload_is_refused_and_nothing_is_stored(course, path):
    zed = course.client("zed")
    for value in ODD:
        answer = post(zed, example_archive(), value, path=path)
        assert answer.status_code == 422, (path, value, answer.status_code, answer.text[:300])
        assert "assignment" in answer.json()["detail"], (path, value)
    assert zed.get("/v1/submissions").json() == []
    served(course)


def test_an_odd_assignment_in_the_upload_form_is_refused_on_the_page(course):
    http = course.signed_in("yan")
    for value in ODD:
        token = form_token(http, "/submissions")
        answer = http.post("/submissions", data={"csrf": token, "assignment": value},
                           files={"archive": ("sub.tar.gz", example_archive())})
        assert answer.status_code == 422, (value, answer.status_code, answer.text[:300])
        assert "assignment" in answer.text and "text/html" in answer.headers["content-type"], value
    assert course.client("yan").get("/v1/submissions").json() == []
    assert http.get("/submissions").status_code == 200


@pytest.mark.parametrize("path", ["/v1/submissions", "/v1/previews"])
def test_an_assignment_field_sent_twice_is_refused_by_the_rest_upload_and_nothing_is_stored(course, path):
    """Two values of one field (an archive with a suite for each module): which one was meant
    cannot be told, so the upload is refused, naming the field and both values."""
    kai = course.client("kai")
    answer = kai.post(path, files={"archive": ("sub.tar.gz", both_archive())}, data={"assignment": [LSTM, GRU]})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert "assignment" in detail and "2 times" in detail and LSTM in detail and GRU in detail, detail
    assert kai.get("/v1/submissions").json() == []
    served(course)


def test_an_assignment_field_sent_twice_is_refused_by_the_page_and_nothing_is_stored(course):
    http = course.signed_in("kai")
    token = form_token(http, "/submissions")
    form = http.post("/submissions", files={"archive": ("sub.tar.gz", both_archive())},
                     data={"csrf": token, "assignment": [LSTM, GRU]})
    assert form.status_code == 422 and "2 times" in form.text, form.text[:300]
    assert course.client("kai").get("/v1/submissions").json() == []
    served(course)


def test_an_assignment_sent_as_a_file_part_is_refused_by_the_page(course):
    http = course.signed_in("lin")
    token = form_token(http, "/submissions")
    form = http.post("/submissions", data={"csrf": token},
                     files={"archive": ("sub.tar.gz", lstm_archive()), "assignment": ("name.txt", LSTM.encode())})
    # The page's form takes one file: a second is refused as the body is read (400), before any field is.
    assert form.status_code == 400 and "files" in form.text.lower(), form.text[:300]
    assert course.client("lin").get("/v1/submissions").json() == []


def test_an_assignment_sent_as_a_file_part_is_refused(course):
    lin = course.client("lin")
    answer = lin.post("/v1/submissions", files={"archive": ("sub.tar.gz", lstm_archive()),
                                                "assignment": ("name.txt", LSTM.encode())})
    assert answer.status_code == 422 and "assignment" in answer.json()["detail"], answer.text
    assert lin.get("/v1/submissions").json() == []


def test_an_archive_sent_for_the_wrong_module_is_refused_however_the_module_is_named(course):
    ben = course.client("ben")
    # Named in the query only (the upload's module is a form field): not silently the default's.
    answer = ben.post("/v1/submissions", params={"assignment": LSTM}, files={"archive": ("s.tar.gz", lstm_archive())})
    assert answer.status_code in (202, 422), answer.text
    if answer.status_code == 202:
        assert ben.get(f"/v1/submissions/{answer.json()['id']}").json()["assignment"] == LSTM
    else:
        assert "assignment" in answer.json()["detail"] or "python/tests/l3-3-gru" in answer.json()["detail"]
    # The GRU's suite sent as the LSTM's is refused with where its tests belong.
    wrong = post(ben, example_archive(), LSTM)
    assert wrong.status_code == 422 and "l3-2-lstm" in wrong.json()["detail"], wrong.text


# ------------------------------------------------------------------ golden runs and regrades
def test_a_golden_run_for_a_submission_keeps_the_submissions_module(course, graded):
    prof = course.client("prof", "staff")
    refused = prof.post("/v1/golden", json={"cases": 1, "submission_id": graded[LSTM], "assignment": GRU})
    assert refused.status_code == 422 and "assignment" in refused.json()["detail"], refused.text
    for value in ("", "L3-2-LSTM", "l3-2-lstm\x00", "../l3-2-lstm", "x" * 101):
        answer = prof.post("/v1/golden", json={"cases": 1, "assignment": value})
        assert answer.status_code == 422 and "assignment" in answer.json()["detail"], (value, answer.text)
    for bad in (7, ["l3-2-lstm"], {"name": LSTM}):
        answer = prof.post("/v1/golden", json={"cases": 1, "assignment": bad})
        assert answer.status_code == 422 and "assignment" in answer.json()["detail"], (bad, answer.text)
    assert prof.post("/v1/golden", json={"cases": 1, "submission_id": 10**6, "assignment": LSTM}).status_code == 404
    served(course)


def test_a_regrade_keeps_the_submissions_module(course, graded):
    prof = course.client("prof", "staff")
    sid = graded[LSTM]
    answer = prof.post(f"/v1/submissions/{sid}/regrade", params={"assignment": GRU},
                       data={"assignment": GRU})
    assert answer.status_code == 202, answer.text
    again = wait_done(prof, sid, timeout=300)
    assert again["status"] == "done" and again["assignment"] == LSTM
    assert again["report"]["score"]["total"] == 15
    assert sid not in prof.get("/v1/stats.json", params={"assignment": GRU}).json()["submissions"]
    assert sid in prof.get("/v1/stats.json", params={"assignment": LSTM}).json()["submissions"]


# ------------------------------------------------------------------ pages' forms
def test_the_upload_form_sends_the_module_chosen(course):
    http = course.signed_in("uma")
    page = http.get("/submissions", params={"assignment": LSTM})
    assert f'<option value="{LSTM}" selected>' in page.text and 'action="/submissions"' in page.text
    token = form_token(http, f"/submissions?assignment={LSTM}")
    answer = http.post("/submissions", data={"csrf": token, "assignment": LSTM},
                       files={"archive": ("lstm.tar.gz", lstm_archive())})
    assert answer.status_code == 303, answer.text
    sid = int(answer.headers["location"].rsplit("/", 1)[1])
    mine = course.client("uma").get(f"/v1/submissions/{sid}").json()
    assert mine["assignment"] == LSTM
    # Listed on the LSTM's page, not on the GRU's.
    assert f'href="/submissions/{sid}"' in http.get("/submissions", params={"assignment": LSTM}).text
    assert f'href="/submissions/{sid}"' not in http.get("/submissions", params={"assignment": GRU}).text


def test_roster_forms_post_to_the_module_shown(course):
    course.token("rosa")
    prof = course.signed_in("prof", "staff")
    page = prof.get("/staff/roster", params={"assignment": LSTM})
    for action in ("/staff/roster/import", "/staff/roster/extension", "/staff/roster/remove"):
        assert f'action="{action}?assignment={LSTM}"' in page.text, action
    token = CSRF.search(page.text).group(1)
    granted = prof.post(f"/staff/roster/extension?assignment={LSTM}",
                        data={"csrf": token, "login": "rosa", "due": "2031-03-03T12:00", "timezone": "UTC",
                              "reason": "lstm only"})
    assert granted.status_code == 303 and granted.headers["location"] == f"/staff/roster?assignment={LSTM}"
    assert "2031-03-03" in prof.get("/staff/roster", params={"assignment": LSTM}).text
    assert "2031-03-03" not in prof.get("/staff/roster", params={"assignment": GRU}).text
    # A revoke form of the GRU's page ends nothing of the LSTM's.
    token = form_token(prof, f"/staff/roster?assignment={GRU}")
    revoked = prof.post(f"/staff/roster/extension/revoke?assignment={GRU}", data={"csrf": token, "login": "rosa"})
    assert revoked.status_code in (303, 400)
    assert "2031-03-03" in prof.get("/staff/roster", params={"assignment": LSTM}).text
    assert 'action="/staff/roster/extension/revoke?assignment=l3-2-lstm"' in prof.get(
        "/staff/roster", params={"assignment": LSTM}).text


def test_a_roster_form_naming_an_odd_module_changes_nothing(course):
    course.token("otto")
    prof = course.signed_in("prof", "staff")
    for value in ("L3-2-LSTM", "l3-2-lstm\x00", "../l3-2-lstm", "x" * 101, "ｌ3-2-lstm"):
        token = form_token(prof, "/staff/roster")
        answer = prof.post("/staff/roster/extension", params={"assignment": value},
                           data={"csrf": token, "login": "otto", "due": "2032-04-04T12:00", "timezone": "UTC",
                                 "reason": "odd"})
        assert 400 <= answer.status_code < 500 and "assignment" in answer.text, (value, answer.status_code)
    for name in (GRU, LSTM):
        assert "2032-04-04" not in prof.get("/staff/roster", params={"assignment": name}).text


def test_an_extension_form_naming_the_module_in_its_body_is_not_granted_for_another(course):
    """The extension form's module is its address's ``?assignment=``; one sent in the form's
    body instead (as a script would send it) must not move the default module's due date."""
    course.token("pia")
    prof = course.signed_in("prof", "staff")
    token = form_token(prof, "/staff/roster")
    answer = prof.post("/staff/roster/extension",
                       data={"csrf": token, "login": "pia", "due": "2033-05-05T12:00", "timezone": "UTC",
                             "reason": "for the lstm", "assignment": LSTM})
    assert answer.status_code in (303, 422), answer.text
    assert "2033-05-05" not in prof.get("/staff/roster", params={"assignment": GRU}).text, \
        "an extension sent for the LSTM was granted for the GRU"
    if answer.status_code == 422:
        assert "assignment" in answer.text
    else:
        assert "2033-05-05" in prof.get("/staff/roster", params={"assignment": LSTM}).text


# ------------------------------------------------------------------ a module no longer hosted
def test_a_service_no_longer_hosting_a_module_refuses_to_regrade_it_and_keeps_its_grade(
        course, graded, tmp_path_factory):
    sid = graded[LSTM]
    before = course.client("prof", "staff").get(f"/v1/submissions/{sid}").json()
    assert before["status"] == "done" and before["report"] is not None
    gru_only = make_server(tmp_path_factory.mktemp("gru-only"), course.database_url, assignments=GRU, workers="0")
    gru_only.tokens = course.tokens
    gru_only.start()
    try:
        prof, eve = gru_only.client("prof", "staff"), gru_only.client("eve")
        # The student is told her module is not hosted (not a 500, not another module's view).
        for path in (f"/v1/submissions/{sid}", f"/v1/submissions/{sid}/report.md"):
            answer = eve.get(path)
            assert answer.status_code == 409 and LSTM in answer.json()["detail"], (path, answer.text)
        page = gru_only.signed_in("prof", "staff").get(f"/submissions/{sid}")
        assert page.status_code < 500, page.text
        # A regrade there could only fail and would throw away the grade it has: refused.
        regrade = prof.post(f"/v1/submissions/{sid}/regrade")
        assert regrade.status_code == 409 and LSTM in regrade.json()["detail"], regrade.text
        after = prof.get(f"/v1/submissions/{sid}").json()
        assert after["status"] == "done" and after["report"] == before["report"]
    finally:
        gru_only.stop()
        wait_done(course.client("prof", "staff"), sid, timeout=300)  # graded again by the course, if queued


# ------------------------------------------------------------------ due dates per module
def dated_root(tmp: Path, *, gru: str, lstm: str) -> Path:
    """A course root of this checkout's two modules, each ``assignment.toml`` with the
    ``[deadline]`` lines given."""
    root = tmp / "course"
    for name, deadline in ((GRU, gru), (LSTM, lstm)):
        folder = layout_for(LAYOUT.root, name).assignment_dir
        shutil.copytree(folder, root / ASSIGNMENTS / name, ignore=shutil.ignore_patterns("__pycache__"))
        toml = root / ASSIGNMENTS / name / "assignment.toml"
        head, limits = toml.read_text(encoding="utf-8").split("[limits]", 1)
        toml.write_text(head + "\n" + deadline + "\n[limits]" + limits, encoding="utf-8")
    shutil.copyfile(LAYOUT.root / ASSIGNMENTS / COURSE_FILE, root / ASSIGNMENTS / COURSE_FILE)
    for part in ("reference", "examples"):
        (root / part).symlink_to(LAYOUT.root / part)
    return root


def due(days: float) -> str:
    return (datetime.now(BERLIN_FREE) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M+00:00")


@pytest.fixture(scope="module")
def dated(tmp_path_factory) -> Server:
    """The GRU refuses late work and was due two days ago; the LSTM was due two days ago and
    takes late work with a penalty. Nothing is graded."""
    tmp = tmp_path_factory.mktemp("dated")
    root = dated_root(tmp, gru=f'[deadline]\ndue = "{due(-2)}"\nlate = "refuse"\n',
                      lstm=f'[deadline]\ndue = "{due(-2)}"\nlate = "penalty"\npenalty_per_day = 0.1\n')
    server = make_server(tmp, root=str(root), workers="0", max_in_flight="50")
    server.start()
    yield server
    server.stop()


def grant(server: Server, login: str, module: str, days: float) -> None:
    server.token(login)
    prof = server.signed_in("prof", "staff")
    token = form_token(prof, f"/staff/roster?assignment={module}")
    answer = prof.post(f"/staff/roster/extension?assignment={module}",
                       data={"csrf": token, "login": login, "due": due(days)[:16], "timezone": "UTC",
                             "reason": f"{module} only"})
    assert answer.status_code == 303, answer.text


def test_a_refusing_due_date_is_not_dodged_by_naming_another_module(dated):
    dan = dated.client("dan")
    assert post(dan, example_archive(), GRU).status_code == 403
    assert post(dan, example_archive()).status_code == 403  # no field: the default, the GRU
    dodged = post(dan, example_archive(), LSTM)
    assert dodged.status_code == 422 and "l3-3-gru" in dodged.json()["detail"], dodged.text
    assert dan.get("/v1/submissions").json() == []
    # An archive holding both suites is for the module it names: the LSTM's, stamped late, and
    # nothing of it counts for the GRU.
    both = post(dan, both_archive(), LSTM)
    assert both.status_code == 202, both.text
    stored = dan.get(f"/v1/submissions/{both.json()['id']}").json()
    assert stored["assignment"] == LSTM and stored["timeliness"] == "late" and stored["penalty"] > 0
    prof = dated.client("prof", "staff")
    assert rows_of(prof.get("/v1/gradebook.csv", params={"assignment": GRU}).text)["dan"]["record_id"] == ""


def test_an_extension_for_one_module_moves_no_other_modules_due_date(dated):
    grant(dated, "fay", LSTM, 5)
    fay = dated.client("fay")
    refused = post(fay, example_archive(), GRU)
    assert refused.status_code == 403, refused.text
    on_time = post(fay, lstm_archive(), LSTM)
    assert on_time.status_code == 202
    assert fay.get(f"/v1/submissions/{on_time.json()['id']}").json()["timeliness"] == "on_time"
    grant(dated, "gil", GRU, 5)
    gil = dated.client("gil")
    assert post(gil, example_archive(), GRU).status_code == 202
    late = post(gil, lstm_archive(), LSTM)
    assert late.status_code == 202
    assert gil.get(f"/v1/submissions/{late.json()['id']}").json()["timeliness"] == "late"
    # Each page's due notice is the module's own.
    pages = dated.signed_in("fay")
    assert "your extension" in pages.get("/submissions", params={"assignment": LSTM}).text
    assert "your extension" not in pages.get("/submissions", params={"assignment": GRU}).text


def test_ending_one_modules_extension_leaves_the_others(dated):
    grant(dated, "hal", GRU, 3)
    grant(dated, "hal", LSTM, 4)
    prof = dated.signed_in("prof", "staff")
    token = form_token(prof, f"/staff/roster?assignment={LSTM}")
    ended = prof.post(f"/staff/roster/extension/revoke?assignment={LSTM}", data={"csrf": token, "login": "hal"})
    assert ended.status_code == 303
    assert post(dated.client("hal"), example_archive(), GRU).status_code == 202  # the GRU's extension holds
    late = post(dated.client("hal"), lstm_archive(), LSTM)
    assert late.status_code == 202
    assert dated.client("hal").get(f"/v1/submissions/{late.json()['id']}").json()["timeliness"] == "late"
