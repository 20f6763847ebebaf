"""Regrade requests and grade overrides on the real server (SQLite): a student asks about a graded
submission of their own (one open request at a time; nobody else's), staff answer and grade it
again or override its grade with a reason, every staff action lands in the audit trail; the same
in headless Chromium: a student asks from the submission page with the keyboard alone, staff
answer from /staff/regrades and override from the submission page. Store rules that the REST
routes cannot reach (a preview, a submission still in flight, two answers at once) are checked on
the store itself.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from sqlalchemy import update

from api.store import audit, regrades
from api.store.db import Submission, User, make_engine, make_sessionmaker
from api.store.migrate import upgrade
from grader.core.assignment import load_assignment
from grader.core.states import JobStatus, RegradeState, Role, SubmissionKind
from tests.api.chromium import Chromium
from tests.api.conftest import LAYOUT, Server, make_server, tar_gz, wait_done

SMALL = tar_gz({"test_a.py": "def test_a():\n    assert 1\n"})
CSRF = re.compile(r'<input type="hidden" name="csrf" value="([^"]+)">')
POINTS = load_assignment(LAYOUT.assignment).points


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that grades, on SQLite."""
    srv = make_server(tmp_path_factory.mktemp("regrades"))
    srv.start()
    yield srv
    srv.stop()


def _graded(server: Server, student: str) -> dict:
    """A new submission of ``student``'s, graded."""
    with server.client(student) as api:
        answer = api.post("/v1/submissions", files={"archive": ("a.tar.gz", SMALL, "application/gzip")})
        assert answer.status_code == 202, answer.text
        body = wait_done(api, answer.json()["id"])
    assert body["status"] == "done", body
    return body


def _events(server: Server, submission_id: int) -> list[tuple[str, str, str]]:
    """The audit trail of a submission, read from the server's database: (actor, action, detail)."""
    engine = make_engine(server.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            return [(e.actor, e.action, e.detail) for e in audit.events(session, subject=f"submission {submission_id}")]
    finally:
        engine.dispose()


def _form_token(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, f"no form token on {page.url}"
    return found.group(1)


# -- REST ------------------------------------------------------------------------------------------

def test_a_student_asks_once_at_a_time_and_nobody_else_can(live: Server) -> None:
    graded = _graded(live, "ada")
    path = f"/v1/submissions/{graded['id']}/regrade-requests"
    with live.client("ada") as ada:
        asked = ada.post(path, json={"message": "  test_a should kill m03: it checks the gate order  "})
        assert asked.status_code == 201, asked.text
        request = asked.json()
        assert (request["submission_id"], request["student"], request["state"]) == (graded["id"], "ada", "open")
        assert request["message"] == "test_a should kill m03: it checks the gate order"  # stripped
        again = ada.post(path, json={"message": "and again"})
        assert again.status_code == 409, again.text
        assert f"request {request['id']}" in again.json()["detail"] and "open" in again.json()["detail"]
        blank = ada.post(path, json={"message": "   "})
        long = ada.post(path, json={"message": "x" * 4001})
        mine = ada.get(path)
    for refused in (blank, long):
        assert refused.status_code == 422 and "message" in refused.json()["detail"], refused.text
    assert mine.status_code == 200 and [r["id"] for r in mine.json()] == [request["id"]]

    with live.client("bob") as bob:  # another student: as if the submission did not exist
        assert bob.post(path, json={"message": "please"}).status_code == 404
        assert bob.get(path).status_code == 404
        listing = bob.get("/v1/regrade-requests")
    assert listing.status_code == 403

    with live.client("sam", "staff") as sam:
        staff_asks = sam.post(path, json={"message": "staff do not ask"})
        open_now = sam.get("/v1/regrade-requests").json()
        answered_now = sam.get("/v1/regrade-requests", params={"state": "answered"}).json()
        bad_state = sam.get("/v1/regrade-requests", params={"state": "closed"})
    assert staff_asks.status_code == 403
    assert request["id"] in [r["id"] for r in open_now]
    assert request["id"] not in [r["id"] for r in answered_now]
    assert bad_state.status_code == 422 and "state" in bad_state.json()["detail"]


def test_staff_answer_with_a_regrade_and_the_submission_is_graded_again(live: Server) -> None:
    graded = _graded(live, "cy")
    with live.client("cy") as cy:
        request = cy.post(f"/v1/submissions/{graded['id']}/regrade-requests", json={"message": "please look"}).json()
    answer_path = f"/v1/regrade-requests/{request['id']}/answer"
    with live.client("cy") as cy:
        assert cy.post(answer_path, json={"answer": "no", "regrade": False}).status_code == 403
    with live.client("sam", "staff") as sam:
        assert sam.post(answer_path, json={"answer": "", "regrade": True}).status_code == 422
        assert sam.post("/v1/regrade-requests/999999/answer", json={"answer": "x", "regrade": False}).status_code == 404
        answered = sam.post(answer_path, json={"answer": "Graded again with the full matrix.", "regrade": True})
        assert answered.status_code == 200, answered.text
        twice = sam.post(answer_path, json={"answer": "again", "regrade": False})
        still_open = [r["id"] for r in sam.get("/v1/regrade-requests").json()]
        now_answered = [r["id"] for r in sam.get("/v1/regrade-requests", params={"state": "answered"}).json()]
    body = answered.json()
    assert (body["state"], body["answer"], body["answered_by"]) == ("answered", "Graded again with the full matrix.",
                                                                      "sam")
    assert twice.status_code == 409 and "already answered" in twice.json()["detail"]
    assert request["id"] not in still_open and request["id"] in now_answered

    with live.client("cy") as cy:
        after = wait_done(cy, graded["id"])
        seen = cy.get(f"/v1/submissions/{graded['id']}/regrade-requests").json()
        # Answered: the student may ask again.
        again = cy.post(f"/v1/submissions/{graded['id']}/regrade-requests", json={"message": "one more thing"})
    assert after["status"] == "done"
    assert datetime.fromisoformat(after["finished_at"]) > datetime.fromisoformat(graded["finished_at"])
    assert [(r["state"], r["answer"]) for r in seen] == [("answered", "Graded again with the full matrix.")]
    assert again.status_code == 201, again.text
    actions = [(actor, action) for actor, action, _ in _events(live, graded["id"])]
    assert ("sam", "answer regrade request") in actions and ("sam", "grade again") in actions


def test_staff_override_a_grade_with_a_reason_recorded_and_shown(live: Server) -> None:
    graded = _graded(live, "dee")
    path = f"/v1/submissions/{graded['id']}/override"
    with live.client("dee") as dee:
        assert dee.post(path, json={"points": POINTS, "reason": "mine"}).status_code == 403
    with live.client("sam", "staff") as sam:
        over = sam.post(path, json={"points": POINTS + 1, "reason": "too many"})
        under = sam.post(path, json={"points": -1, "reason": "too few"})
        no_reason = sam.post(path, json={"points": 1, "reason": "  "})
        missing = sam.post("/v1/submissions/999999/override", json={"points": 1, "reason": "x"})
        done = sam.post(path, json={"points": POINTS * 0.75, "reason": "test_a counts: <b>checked by hand</b>"})
    assert over.status_code == 422 and f"between 0 and {POINTS:g}" in over.json()["detail"], over.text
    assert under.status_code == 422 and f"between 0 and {POINTS:g}" in under.json()["detail"], under.text
    assert no_reason.status_code == 422 and "reason" in no_reason.json()["detail"], no_reason.text
    assert missing.status_code == 404
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["points"] == pytest.approx(POINTS * 0.75) and body["points_possible"] == pytest.approx(POINTS)
    assert (body["reason"], body["by"]) == ("test_a counts: <b>checked by hand</b>", "sam")

    [(actor, action, detail)] = [e for e in _events(live, graded["id"]) if e[1] == "override grade"]
    assert actor == "sam" and f"{POINTS * 0.75:g}" in detail and "checked by hand" in detail

    with live.signed_in("dee") as student:  # the student sees the override and its reason, escaped
        page = student.get(f"/submissions/{graded['id']}").text
    notice = re.search(r'<p class="override">(.*?)</p>', page, re.S)
    assert notice, page[:3000]
    assert f"{POINTS * 0.75:g}" in notice.group(1) and f"of {POINTS:g}" in notice.group(1)
    assert "&lt;b&gt;checked by hand&lt;/b&gt;" in notice.group(1)
    with live.signed_in("sam", "staff") as staff:
        staff_page = staff.get(f"/submissions/{graded['id']}").text
    assert re.search(r'<table class="audit">.*override grade.*</table>', staff_page, re.S)

    with live.client("sam", "staff") as sam:
        cleared = sam.post(path, json={"points": None, "reason": "graded again instead"})
    assert cleared.status_code == 200 and cleared.json()["points"] is None
    assert ("sam", "clear override") in [(a, b) for a, b, _ in _events(live, graded["id"])]
    with live.signed_in("dee") as student:
        assert '<p class="override">' not in student.get(f"/submissions/{graded['id']}").text


# -- the store's own rules -------------------------------------------------------------------------

@pytest.fixture
def session(tmp_path: Path) -> Iterator:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        yield session
    engine.dispose()


def _submission(session, user: User, **fields) -> Submission:
    row = Submission(user_id=user.id, assignment="l3-3-gru", archive=b"", archive_name="a.tar.gz", **fields)
    session.add(row)
    session.commit()
    return row


def test_the_store_refuses_previews_submissions_in_flight_and_a_second_answer(session) -> None:
    ada, sam = User(name="ada", role=Role.STUDENT), User(name="sam", role=Role.STAFF)
    session.add_all([ada, sam])
    session.commit()
    preview = _submission(session, ada, status=JobStatus.DONE, kind=SubmissionKind.PREVIEW)
    queued = _submission(session, ada, status=JobStatus.QUEUED)
    failed = _submission(session, ada, status=JobStatus.ERROR)

    with pytest.raises(regrades.Conflict, match=rf"submission {preview.id} is a preview"):
        regrades.request_regrade(session, submission=preview, user=ada, message="why")
    with pytest.raises(regrades.Conflict, match=rf"submission {queued.id} is queued"):
        regrades.request_regrade(session, submission=queued, user=ada, message="why")
    with pytest.raises(regrades.NotAllowed):
        regrades.request_regrade(session, submission=failed, user=sam, message="why")
    with pytest.raises(regrades.Invalid, match="message: .*4000"):
        regrades.request_regrade(session, submission=failed, user=ada, message="y" * 4001)
    with pytest.raises(regrades.Invalid, match="message: must not hold a NUL character"):
        regrades.request_regrade(session, submission=failed, user=ada, message="a\x00b")
    asked = regrades.request_regrade(session, submission=failed, user=ada, message=" it crashed \n")
    assert (asked.state, asked.message) == (RegradeState.OPEN, "it crashed")
    assert [r.id for r in regrades.open_requests(session)] == [asked.id]
    assert regrades.student_names(session, [asked]) == {asked.id: "ada"}

    answered = regrades.answer_request(session, request_id=asked.id, actor="sam", answer=" fixed ", regrade=False)
    assert (answered.state, answered.answer, answered.answered_by) == (RegradeState.ANSWERED, "fixed", "sam")
    # A second answer (another member of staff at the same moment) finds it answered already.
    session.execute(update(type(asked)).where(type(asked).id == asked.id).values(state=RegradeState.OPEN))
    session.commit()
    regrades.answer_request(session, request_id=asked.id, actor="kim", answer="me too", regrade=False)
    with pytest.raises(regrades.Conflict, match="already answered by kim"):
        regrades.answer_request(session, request_id=asked.id, actor="sam", answer="x", regrade=False)
    with pytest.raises(regrades.NotFound):
        regrades.answer_request(session, request_id=asked.id + 100, actor="sam", answer="x", regrade=False)

    with pytest.raises(regrades.Conflict, match="preview"):
        regrades.override_grade(session, submission=preview, points=1, reason="r", actor="sam", points_possible=10)
    with pytest.raises(regrades.Invalid, match=r"points: .*between 0 and 10 .*got nan"):
        regrades.override_grade(session, submission=failed, points=float("nan"), reason="r", actor="sam",
                                points_possible=10)
    done = regrades.override_grade(session, submission=failed, points=10, reason="by hand", actor="sam",
                                   points_possible=10)
    assert (done.override_points, done.override_reason, done.override_by) == (10, "by hand", "sam")
    assert [e.action for e in audit.events(session, subject=f"submission {failed.id}")] == [
        "override grade", "answer regrade request", "answer regrade request"]


# -- the pages ---------------------------------------------------------------------------------------

KEYS = {"Tab": ("Tab", 9, ""), "Enter": ("Enter", 13, "\r")}


def _press(browser: Chromium, key: str) -> None:
    """Press and release ``key`` as a keyboard does."""
    code, number, text = KEYS[key]
    common = {"key": key, "code": code, "windowsVirtualKeyCode": number, "nativeVirtualKeyCode": number}
    browser.call("Input.dispatchKeyEvent", session=browser.session, type="keyDown", text=text, **common)
    browser.call("Input.dispatchKeyEvent", session=browser.session, type="keyUp", **common)


def _tab_to(browser: Chromium, selector: str, most: int = 80) -> None:
    """Press Tab until ``selector``'s element has the focus."""
    for _ in range(most):
        _press(browser, "Tab")
        if browser.evaluate(f"document.activeElement === document.querySelector({json.dumps(selector)})"):
            return
    raise AssertionError(f"{selector!r} is not reached with Tab in {most} presses")


def _mark(browser: Chromium) -> None:
    """Mark the page shown now, so that :func:`_landed` knows when another has replaced it."""
    browser.evaluate("window.leftBehind = true")


def _landed(browser: Chromium, url: str, timeout: float = 30) -> None:
    """Wait until a new page at ``url`` (not the one :func:`_mark` marked) has loaded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = browser.evaluate("[location.href, document.readyState, window.leftBehind === true].join(' ')")
        if now == f"{url} complete false":
            return
        browser.wait(0.2)
    raise AssertionError(f"no new page at {url}: {browser.evaluate('location.href')}")


ASK = 'form[action$="/ask-for-regrade"]'


def test_a_student_asks_with_the_keyboard_and_staff_answer_from_the_regrades_page(live: Server, tmp_path: Path) -> None:
    graded = _graded(live, "eve")
    page_url = f"{live.url}/submissions/{graded['id']}"
    message = "test_a should count: <i>see line 2</i>"
    (tmp_path / "student").mkdir()
    with Chromium(tmp_path / "student") as browser:
        browser.sign_in(live.url, live.token("eve"))
        form = browser.visit(page_url, f"""JSON.stringify((() => {{
          const area = document.querySelector('{ASK} textarea');
          return area && {{ label: area.labels[0]?.innerText, required: area.required, max: area.maxLength,
                            button: document.querySelector('{ASK} button[type=submit]').innerText }};
        }})())""")
        found = json.loads(form.found)
        assert found["button"] == "Ask for a regrade" and found["required"] and found["max"] == 4000
        assert found["label"], "the message has no label"
        _tab_to(browser, f"{ASK} textarea")
        browser.call("Input.insertText", session=browser.session, text=message)
        _tab_to(browser, f"{ASK} button[type=submit]")
        _mark(browser)
        _press(browser, "Enter")
        _landed(browser, page_url)
        shown = browser.evaluate("""JSON.stringify([...document.querySelectorAll('.regrade-request')].map(
          r => [r.dataset.state, r.querySelector('.message').innerText]))""")
        assert json.loads(shown) == [["open", message]]
        assert browser.evaluate(f"document.querySelector('{ASK}') === null"), "asked twice is offered"

    [request] = [r for r in _staff_list(live, "open") if r["submission_id"] == graded["id"]]
    (tmp_path / "staff").mkdir()
    with Chromium(tmp_path / "staff") as browser:
        browser.sign_in(live.url, live.token("sam", "staff"))
        row = browser.visit(f"{live.url}/staff/regrades", f"""JSON.stringify((() => {{
          const row = document.querySelector('tr[data-request="{request['id']}"]');
          return row && [row.querySelector('.student').innerText, row.querySelector('a').getAttribute('href'),
                         row.querySelector('.message').innerText, !!row.querySelector('time')];
        }})())""")
        assert json.loads(row.found) == ["eve", f"/submissions/{graded['id']}", message, True]
        browser.evaluate(f"document.getElementById('answer-{request['id']}').value = 'Graded again: it counts now.'")
        browser.evaluate(f"document.getElementById('regrade-{request['id']}').checked = true")
        action = f"/staff/regrades/{request['id']}/answer"
        assert browser.click(f'form[action="{action}"] button[type="submit"]') == f"{live.url}/staff/regrades"
        answered = browser.evaluate(f"""JSON.stringify((() => {{
          const row = document.querySelector('.answered tr[data-request="{request['id']}"]');
          return row && row.querySelector('.answer').innerText;
        }})())""")
        assert json.loads(answered) == "Graded again: it counts now."

        # The override, from the submission page, once it is graded again.
        with live.client("eve") as eve:
            again = wait_done(eve, graded["id"])
        assert datetime.fromisoformat(again["finished_at"]) > datetime.fromisoformat(graded["finished_at"])
        browser.visit(page_url, "null")
        browser.evaluate(f"document.getElementById('override-points').value = '{POINTS / 2:g}'")
        browser.evaluate("document.getElementById('override-reason').value = 'half: one test was a copy'")
        assert browser.click('form[action$="/override"] button[type="submit"]') == page_url
        staff_sees = browser.evaluate("document.querySelector('.override')?.innerText ?? ''")
        audit_rows = browser.evaluate("[...document.querySelectorAll('table.audit tbody tr')].map(r => r.innerText)")
    assert f"{POINTS / 2:g} of {POINTS:g}" in staff_sees and "half: one test was a copy" in staff_sees
    assert any("override grade" in r for r in audit_rows) and any("answer regrade request" in r for r in audit_rows)

    with live.signed_in("eve") as student:  # the answer and the override, on the student's page
        page = student.get(f"/submissions/{graded['id']}")
    assert "Graded again: it counts now." in page.text and "half: one test was a copy" in page.text
    assert "&lt;i&gt;see line 2&lt;/i&gt;" in page.text  # the student's text, escaped
    assert 'action="/staff/regrades/' not in page.text and 'id="override-points"' not in page.text
    assert "/regrade" not in page.text  # no address of staff's own buttons on a student's page


def _staff_list(server: Server, state: str) -> list[dict]:
    with server.client("sam", "staff") as sam:
        return sam.get("/v1/regrade-requests", params={"state": state}).json()


def test_the_regrade_forms_are_staff_only_and_need_the_form_token(live: Server) -> None:
    graded = _graded(live, "fay")
    path = f"/submissions/{graded['id']}"
    with live.signed_in("fay") as student:
        assert student.get("/staff/regrades").status_code == 403
        token = _form_token(student.get(path))
        no_token = student.post(f"{path}/ask-for-regrade", data={"message": "please"})
        asked = student.post(f"{path}/ask-for-regrade", data={"csrf": token, "message": "please"})
        twice = student.post(f"{path}/ask-for-regrade", data={"csrf": token, "message": "please"})
        override = student.post(f"{path}/override", data={"csrf": token, "points": "1", "reason": "me"})
    assert no_token.status_code == 403
    assert asked.status_code == 303 and asked.headers["location"] == path
    assert twice.status_code == 409 and "already" in twice.text
    assert override.status_code == 403 and "Staff only" in override.text
    [request] = [r for r in _staff_list(live, "open") if r["submission_id"] == graded["id"]]
    with live.signed_in("sam", "staff") as staff:
        token = _form_token(staff.get("/staff/regrades"))
        bad_points = staff.post(f"{path}/override", data={"csrf": token, "points": "lots", "reason": "r"})
        no_answer = staff.post(f"/staff/regrades/{request['id']}/answer", data={"csrf": token, "answer": " "})
    assert bad_points.status_code == 422 and "points" in bad_points.text and "lots" in bad_points.text
    assert no_answer.status_code == 422 and "answer" in no_answer.text
