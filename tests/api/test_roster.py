"""The course's roster and extensions in the service: the store's functions on SQLite (an import
is idempotent and keeps tokens, a removed student's token ends, an extension needs an aware
time), ``mutagrade admin roster|extension`` as a staff member runs it, and the roster page in
headless Chromium, used with the keyboard; students are refused, and a bad roster file is a 4xx
that names its line."""

from __future__ import annotations

import csv
import html
import io
import os
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator
from zoneinfo import ZoneInfo

import httpx
import pytest
from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.store.audit import events
from api.store.db import Extension, make_engine, make_sessionmaker
from api.store.extensions import extension_of, grant_extension, list_extensions, parse_due, revoke_extension
from api.store.migrate import upgrade
from api.store.roster import (
    MAIL_MERGE_HEADER, RosterChange, RosterConflict, find_user, import_roster, list_roster, mail_merge_rows,
    remove_student,
)
from grader.core.roster import RosterEntry
from tests.api.chromium import Chromium
from tests.api.conftest import Server, make_server

ROOT = Path(__file__).resolve().parents[2]
MUTAGRADE = ROOT / ".venv" / "bin" / "mutagrade"
CANVAS = (
    "Student,ID,SIS User ID,SIS Login ID,Section,L3.3 GRU (4711),Current Score\r\n"
    "    Points Possible,,,,,100.00,(read only)\r\n"
    '"Lovelace, Ada",101,S-001,ada,Lab A,85,85\r\n'
    '"Hopper, Grace",102,S-002,ghopper,Lab B,,\r\n'
)
DUPLICATE = (
    "First name,Last name,Username,ID number,Email address\n"
    "Ada,Lovelace,ada,1,a@x\nGrace,Hopper,grace,2,g@x\nAda,King,ADA,3,k@x\n"
)
UNKNOWN_HEADER = "name,login\nAda,ada\n"
CSRF = re.compile(r'<input type="hidden" name="csrf" value="([^"]+)">')
TOKEN = re.compile(r"mg_[A-Za-z0-9_-]{20,}")
BERLIN = ZoneInfo("Europe/Berlin")


def entry(login: str, name: str, *, section: str | None = None, email: str | None = None) -> RosterEntry:
    return RosterEntry(login=login, name=name, email=email, sis_id=None, lms_id=None, section=section)


ADA = entry("ada", "Lovelace, Ada", section="Lab A", email="ada@uni.example")
GRACE = entry("ghopper", "Hopper, Grace", section="Lab B")


@pytest.fixture
def make_session(tmp_path: Path) -> Iterator[sessionmaker]:
    url = f"sqlite:///{tmp_path / 'roster.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield make_sessionmaker(engine)
    engine.dispose()


# ------------------------------------------------------------------------ the store
def test_an_import_gives_new_students_tokens_and_says_so(make_session: sessionmaker) -> None:
    with make_session() as session:
        result = import_roster(session, [ADA, GRACE], actor="prof")
    assert (result.created, result.updated, result.restored, result.unchanged) == (2, 0, 0, 0)
    assert [(s.login, s.name, s.email, s.change) for s in result.students] == [
        ("ada", "Lovelace, Ada", "ada@uni.example", RosterChange.CREATED),
        ("ghopper", "Hopper, Grace", None, RosterChange.CREATED)]
    tokens = [s.token for s in result.students]
    assert all(t and t.startswith("mg_") for t in tokens) and len(set(tokens)) == 2
    assert all(t not in repr(result) for t in tokens)  # a result printed to a log shows no token
    with make_session() as session:
        ada = crud.user_by_token(session, token=tokens[0])
        assert (ada.name, ada.role, ada.display_name, ada.email, ada.section) == (
            "ada", "student", "Lovelace, Ada", "ada@uni.example", "Lab A")
        assert [e.action for e in events(session, subject="student ada")] == ["roster.create"]
        assert "2 new" in events(session, subject="roster")[0].detail


def test_importing_again_keeps_each_token_and_updates_the_fields(make_session: sessionmaker) -> None:
    with make_session() as session:
        first = import_roster(session, [ADA, GRACE], actor="prof")
        moved = ADA.model_copy(update={"section": "Lab C"})
        again = import_roster(session, [moved, GRACE, entry("103", "Student, Test")], actor="prof")
    assert (again.created, again.updated, again.restored, again.unchanged) == (1, 1, 0, 1)
    assert [s.token is None for s in again.students] == [True, True, False]
    rows = mail_merge_rows(again)
    assert MAIL_MERGE_HEADER == ("login", "name", "email", "token", "note")
    assert [(r[0], r[3] == "", r[4]) for r in rows] == [
        ("ada", True, "already had a token"), ("ghopper", True, "already had a token"), ("103", False, "new")]
    with make_session() as session:
        for student in first.students:  # the old tokens still sign in
            assert crud.user_by_token(session, token=student.token).name == student.login
        assert crud.user_by_name(session, name="ada").section == "Lab C"
        assert [e.action for e in events(session, subject="student ada")] == ["roster.update", "roster.create"]
        assert "Lab A" in events(session, subject="student ada")[0].detail


def test_a_login_in_another_case_is_the_same_student(make_session: sessionmaker) -> None:
    with make_session() as session:
        import_roster(session, [ADA], actor="prof")
        again = import_roster(session, [entry("ADA", "Lovelace, Ada", section="Lab A", email="ada@uni.example")],
                              actor="prof")
    assert again.unchanged == 1 and again.students[0].login == "ada"


def test_removing_a_student_ends_their_token_and_keeps_their_submissions(make_session: sessionmaker) -> None:
    with make_session() as session:
        [ada] = import_roster(session, [ADA], actor="prof").students
        user = crud.user_by_name(session, name="ada")
        crud.create_submission(session, user=user, assignment="l3-3-gru", archive=b"x", name="tests.tar.gz")
        assert remove_student(session, login="ada", actor="prof") is True
        assert remove_student(session, login="ada", actor="prof") is False  # removed already
        assert crud.user_by_token(session, token=ada.token) is None
        assert len(crud.list_submissions(session, student="ada")) == 1
        [listed] = list_roster(session, assignment="l3-3-gru")
        assert (listed.login, listed.has_token, listed.removed_at is not None) == ("ada", False, True)
        assert [e.action for e in events(session, subject="student ada")] == ["roster.remove", "roster.create"]
        with pytest.raises(LookupError, match="'nobody': no such student"):
            remove_student(session, login="nobody", actor="prof")
        back = import_roster(session, [ADA], actor="prof")
    assert back.restored == 1 and back.students[0].change == RosterChange.RESTORED
    assert mail_merge_rows(back)[0][4] == "restored"
    with make_session() as session:
        assert crud.user_by_token(session, token=ada.token) is None  # the old one stays ended
        restored = crud.user_by_token(session, token=back.students[0].token)
        assert restored.name == "ada" and restored.removed_at is None


def test_staff_are_never_made_students(make_session: sessionmaker) -> None:
    with make_session() as session:
        crud.create_user(session, name="ta", role="staff")
        with pytest.raises(RosterConflict, match="'ta'.*staff"):
            import_roster(session, [ADA, entry("ta", "Assistant, Teaching")], actor="prof")
        assert crud.user_by_name(session, name="ada") is None  # nothing of the import was kept
        assert crud.user_by_name(session, name="ta").role == "staff"
        with pytest.raises(RosterConflict, match="'ta'.*staff"):
            remove_student(session, login="ta", actor="prof")


def test_an_extension_needs_an_aware_time_and_replaces_the_last(make_session: sessionmaker) -> None:
    due = datetime(2026, 12, 12, 23, 59, tzinfo=BERLIN)
    with make_session() as session:
        import_roster(session, [ADA, GRACE], actor="prof")
        with pytest.raises(ValueError, match="due.*time zone.*2026-12-12T23:59"):
            grant_extension(session, assignment="l3-3-gru", login="ada", due=datetime(2026, 12, 12, 23, 59),
                            reason="ill", actor="prof")
        with pytest.raises(LookupError, match="'nobody'"):
            grant_extension(session, assignment="l3-3-gru", login="nobody", due=due, reason="", actor="prof")
        grant_extension(session, assignment="l3-3-gru", login="ada", due=due, reason="ill", actor="prof")
        later = grant_extension(session, assignment="l3-3-gru", login="ada", due=due + timedelta(days=2), reason="still ill", actor="tutor")
        assert (later.login, later.reason, later.granted_by) == ("ada", "still ill", "tutor")
        assert session.query(Extension).count() == 1
        ada = crud.user_by_name(session, name="ada")
        got = extension_of(session, ada.id, assignment="l3-3-gru")
        assert got == due + timedelta(days=2) and got.tzinfo is not None
        assert extension_of(session, crud.user_by_name(session, name="ghopper").id, assignment="l3-3-gru") is None
        assert [(e.login, e.due) for e in list_extensions(session)] == [("ada", due + timedelta(days=2))]
        assert [r.extension for r in list_roster(session, assignment="l3-3-gru")] == [due + timedelta(days=2), None]
        assert revoke_extension(session, login="ada", assignment="l3-3-gru", actor="prof") is True
        assert revoke_extension(session, login="ada", assignment="l3-3-gru", actor="prof") is False
        assert extension_of(session, ada.id, assignment="l3-3-gru") is None
        actions = [e.action for e in events(session, subject="student ada")]
    assert actions[:3] == ["extension.revoke", "extension.grant", "extension.grant"]


def test_a_due_date_is_read_with_its_zone() -> None:
    assert parse_due("2026-12-12T23:59", timezone="Europe/Berlin") == datetime(2026, 12, 12, 23, 59, tzinfo=BERLIN)
    assert parse_due("2026-12-12T22:59Z", timezone=None) == datetime(2026, 12, 12, 22, 59, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match=r"'2026-12-12T23:59' has no time zone: give a time zone name .* or an offset"):
        parse_due("2026-12-12T23:59", timezone=None)
    with pytest.raises(ValueError, match="'Mars/Olympus'"):
        parse_due("2026-12-12T23:59", timezone="Mars/Olympus")
    with pytest.raises(ValueError, match="'next friday'"):
        parse_due("next friday", timezone="UTC")


# ---------------------------------------------------------------------- the command
def admin(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(MUTAGRADE), "admin", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MUTAGRADE_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}"}


def test_the_roster_commands(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "canvas.csv").write_text(CANVAS, encoding="utf-8")
    done = admin("roster", "import", "canvas.csv", "--out", "tokens.csv", env=cli_env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "2 new" in done.stderr and "tokens.csv" in done.stderr
    assert (tmp_path / "tokens.csv").stat().st_mode & 0o077 == 0  # tokens: for the owner's eyes only
    rows = list(csv.reader((tmp_path / "tokens.csv").open(encoding="utf-8")))
    assert rows[0] == ["login", "name", "email", "token", "note"]
    assert [(r[0], r[1], r[4]) for r in rows[1:]] == [("ada", "Lovelace, Ada", "new"),
                                                     ("ghopper", "Hopper, Grace", "new")]
    assert all(TOKEN.fullmatch(r[3]) for r in rows[1:])
    refused = admin("roster", "import", "canvas.csv", "--out", "tokens.csv", env=cli_env, cwd=tmp_path)
    assert refused.returncode == 2 and "tokens.csv" in refused.stderr and "exists" in refused.stderr

    again = admin("roster", "import", "canvas.csv", env=cli_env, cwd=tmp_path)  # the CSV to stdout
    assert again.returncode == 0, again.stderr
    assert "2 unchanged" in again.stderr
    assert [(r[0], r[3], r[4]) for r in csv.reader(io.StringIO(again.stdout))][1:] == [
        ("ada", "", "already had a token"), ("ghopper", "", "already had a token")]

    removed = admin("roster", "remove", "ghopper", env=cli_env, cwd=tmp_path)
    assert removed.returncode == 0 and "ghopper" in removed.stdout
    listed = admin("roster", "list", env=cli_env, cwd=tmp_path)
    assert listed.returncode == 0
    lines = [line.split("\t") for line in listed.stdout.splitlines()]
    assert [(line[0], line[-2]) for line in lines[1:]] == [("ada", "active"), ("ghopper", "removed")]
    unknown = admin("roster", "remove", "nobody", env=cli_env, cwd=tmp_path)
    assert unknown.returncode == 2 and "'nobody': no such student" in unknown.stderr


@pytest.mark.parametrize(("text", "expected"), [
    (UNKNOWN_HEADER, r"roster\.csv:1: .*found: name, login"),
    (DUPLICATE, r"roster\.csv:4: column 'Username': login 'ADA' repeats line 2's 'ada'"),
])
def test_a_bad_roster_file_is_a_usage_error_naming_its_line(
    tmp_path: Path, cli_env: dict[str, str], text: str, expected: str,
) -> None:
    (tmp_path / "roster.csv").write_text(text, encoding="utf-8")
    done = admin("roster", "import", "roster.csv", "--out", "tokens.csv", env=cli_env, cwd=tmp_path)
    assert done.returncode == 2 and re.search(expected, done.stderr), done.stderr
    assert not (tmp_path / "tokens.csv").exists()


def test_the_extension_commands(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "canvas.csv").write_text(CANVAS, encoding="utf-8")
    assert admin("roster", "import", "canvas.csv", "--out", "t.csv", env=cli_env, cwd=tmp_path).returncode == 0
    granted = admin("extension", "grant", "ada", "--due", "2026-12-12T23:59", "--timezone", "Europe/Berlin",
                    "--reason", "ill", env=cli_env, cwd=tmp_path)
    assert granted.returncode == 0, granted.stderr
    assert "2026-12-12T22:59:00+00:00" in granted.stdout
    listed = admin("extension", "list", env=cli_env, cwd=tmp_path)
    assert listed.stdout.splitlines()[1].split("\t")[:4] == ["ada", "l3-3-gru", "2026-12-12T22:59:00+00:00", "ill"]
    for bad, said in ((["--due", "2026-12-12", "--timezone", "UTC"], "'2026-12-12'"),
                      (["--due", "2026-12-12T23:59", "--timezone", "Mars/Olympus"], "'Mars/Olympus'")):
        done = admin("extension", "grant", "ada", *bad, env=cli_env, cwd=tmp_path)
        assert done.returncode == 2 and said in done.stderr, done.stderr
    nobody = admin("extension", "grant", "nobody", "--due", "2026-12-12T23:59Z", env=cli_env, cwd=tmp_path)
    assert nobody.returncode == 2 and "'nobody'" in nobody.stderr
    revoked = admin("extension", "revoke", "ada", env=cli_env, cwd=tmp_path)
    assert revoked.returncode == 0 and "ada" in revoked.stdout
    assert admin("extension", "list", env=cli_env, cwd=tmp_path).stdout.splitlines()[1:] == []


# ------------------------------------------------------------------------- the pages
@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server grading nothing, whose log holds every request (to look for tokens in it)."""
    srv = make_server(tmp_path_factory.mktemp("roster"), workers="0", log_level="info")
    srv.start()
    yield srv
    srv.stop()


def form_token(http: httpx.Client, path: str = "/staff/roster") -> str:
    found = CSRF.search(http.get(path).text)
    assert found, f"no form token on {path}"
    return found.group(1)


def import_file(http: httpx.Client, text: str, name: str = "canvas.csv") -> httpx.Response:
    return http.post("/staff/roster/import", data={"csrf": form_token(http)},
                     files={"roster": (name, text.encode(), "text/csv")})


def test_the_roster_is_for_staff_only(live: Server) -> None:
    with live.signed_in("roster-student") as http:
        page = http.get("/staff/roster")
        assert page.status_code == 403 and "for course staff only" in page.text
        token = form_token(http, "/submissions")
        for path, data in (("/staff/roster/extension", {"login": "roster-student", "due": "2030-01-01T00:00",
                                                        "timezone": "UTC", "reason": "me"}),
                           ("/staff/roster/remove", {"login": "roster-student"})):
            answer = http.post(path, data={"csrf": token, **data})
            assert answer.status_code == 403, path
        answer = http.post("/staff/roster/import", data={"csrf": token},
                           files={"roster": ("c.csv", CANVAS.encode(), "text/csv")})
        assert answer.status_code == 403
    with httpx.Client(base_url=live.url) as anonymous:
        assert anonymous.get("/staff/roster").headers["location"] == "/login"


def test_a_post_without_the_form_token_is_refused(live: Server) -> None:
    with live.signed_in("roster-prof", "staff") as http:
        answer = http.post("/staff/roster/remove", data={"login": "nobody"})
    assert answer.status_code == 403 and "form&#39;s token is missing" in answer.text


@pytest.mark.parametrize(("text", "expected"), [
    (UNKNOWN_HEADER, "bad.csv:1: "),
    (DUPLICATE, "bad.csv:4: column &#39;Username&#39;: login &#39;ADA&#39; repeats line 2"),
])
def test_a_bad_roster_upload_is_a_400_page_naming_the_line(live: Server, text: str, expected: str) -> None:
    with live.signed_in("roster-prof", "staff") as http:
        answer = import_file(http, text, "bad.csv")
    assert answer.status_code == 400 and expected in answer.text, answer.text[-2000:]
    assert "/tmp" not in answer.text  # the file's own name, not where the server kept it


def test_a_bad_extension_is_a_400_page_naming_the_field(live: Server) -> None:
    with live.signed_in("roster-prof", "staff") as http:
        token = form_token(http)
        answer = http.post("/staff/roster/extension", data={"csrf": token, "login": "nobody",
                                                            "due": "2030-01-01T00:00", "timezone": "UTC"})
        assert answer.status_code == 400 and "&#39;nobody&#39;" in answer.text
        answer = http.post("/staff/roster/extension", data={"csrf": token, "login": "roster-prof",
                                                            "due": "soon", "timezone": "UTC"})
        assert answer.status_code == 400 and "&#39;soon&#39;" in answer.text


def test_import_and_remove_through_the_pages_with_tokens_only_in_the_answer(live: Server) -> None:
    with live.signed_in("roster-prof", "staff") as http:
        answer = import_file(http, CANVAS.replace("ada", "page-ada").replace("ghopper", "page-grace"))
        assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
        tokens = TOKEN.findall(answer.text)
        assert len(set(tokens)) == 2
        # A student's token works on the REST API; removed, it no longer does.
        with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {tokens[0]}"}) as student:
            assert student.get("/v1/submissions").status_code == 200
            removed = http.post("/staff/roster/remove", data={"csrf": form_token(http), "login": "page-ada"})
            assert removed.status_code == 303
            assert student.get("/v1/submissions").status_code == 401
        again = import_file(http, CANVAS.replace("ada", "page-ada").replace("ghopper", "page-grace"))
        assert "1 restored" in again.text and "1 unchanged" in again.text and tokens[1] not in again.text
        with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {tokens[1]}"}) as student:
            assert student.get("/v1/submissions").status_code == 200  # imported again, the old token still works
        # Saving the tokens as a file: the text posted back, answered as an attachment.
        csv_text = html.unescape(re.search(r"<textarea[^>]*>(.*?)</textarea>", answer.text, re.S).group(1))
        saved = http.post("/staff/roster/tokens.csv", data={"csrf": form_token(http), "csv": csv_text})
        assert saved.status_code == 200 and saved.headers["content-type"].startswith("text/csv")
        assert "attachment" in saved.headers["content-disposition"] and saved.headers["cache-control"] == "no-store"
        rows = list(csv.reader(io.StringIO(saved.text)))
        assert rows[1][:2] == ["page-ada", "Lovelace, Ada"] and rows[2][3] == tokens[1]
        not_ours = http.post("/staff/roster/tokens.csv", data={"csrf": form_token(http), "csv": "<b>hi</b>"})
        assert not_ours.status_code == 400 and "text/html" in not_ours.headers["content-type"]
    assert not any(token in live.log.read_text() for token in tokens)


def press(browser: Chromium, key: str) -> None:
    """Press and release ``key`` (Tab, Enter) as the keyboard does."""
    codes = {"Tab": 9, "Enter": 13}
    extra = {"text": "\r"} if key == "Enter" else {}
    for kind in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", session=browser.session, type=kind, key=key, code=key,
                     windowsVirtualKeyCode=codes[key], **(extra if kind == "keyDown" else {}))


def until(browser: Chromium, expression: str, timeout: float = 30.0) -> object:
    """Poll ``expression`` in the page until it is truthy (a page loaded by a key press)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = browser.evaluate(expression)
        except RuntimeError:  # the page is being replaced
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{expression} never held")


FOCUSED = ("(() => { const e = document.activeElement; "
           "return e ? [e.tagName.toLowerCase(), e.name || e.textContent.trim(), e.form?.action || ''] : null; })()")


def test_the_roster_page_in_chromium_with_the_keyboard(live: Server, tmp_path: Path) -> None:
    roster = tmp_path / "canvas.csv"
    roster.write_text(CANVAS.replace("ada", "kb-ada").replace("ghopper", "kb-grace"), encoding="utf-8")
    with Chromium(tmp_path) as browser:
        browser.sign_in(live.url, live.token("roster-chromium", "staff"))
        visit = browser.visit(f"{live.url}/staff/roster", "document.querySelectorAll('label').length")
        assert visit.found >= 5 and not visit.dialogs
        # Every form control has a label and is reached with Tab.
        unlabelled = browser.evaluate("[...document.querySelectorAll('main input:not([type=hidden]), main textarea')]"
                                      ".filter(e => !e.labels || e.labels.length === 0).map(e => e.name)")
        assert unlabelled == []
        reached = []
        for _ in range(60):
            press(browser, "Tab")
            reached.append(browser.evaluate(FOCUSED))
        names = {r[1] for r in reached if r}
        assert {"roster", "login", "due", "timezone", "reason", "Import", "Grant the extension"} <= names, reached

        browser.choose_file('input[name="roster"]', roster)
        landed = browser.click('form[action^="/staff/roster/import"] button[type="submit"]')
        assert landed.endswith("/staff/roster/import?assignment=l3-3-gru")
        shown = browser.evaluate("document.querySelector('textarea[readonly]').value")
        assert shown.startswith("login,name,email,token,note") and len(TOKEN.findall(shown)) == 2

        browser.visit(f"{live.url}/staff/roster", "null")
        table = browser.evaluate("document.querySelector('table').innerText")
        assert "kb-ada" in table and "Lovelace, Ada" in table and "Lab B" in table
        # The extension form, filled in and sent with the keyboard alone.
        browser.evaluate("document.getElementById('extension-login').focus()")
        browser.call("Input.insertText", session=browser.session, text="kb-ada")
        browser.evaluate("document.getElementById('extension-due').value = '2026-12-12T23:59'")
        browser.evaluate("document.getElementById('extension-timezone').value = 'Europe/Berlin'")
        browser.evaluate("document.getElementById('extension-reason').focus()")
        browser.call("Input.insertText", session=browser.session, text="a week in hospital")
        press(browser, "Enter")
        row = until(browser, "[...document.querySelectorAll('tr')].map(r => r.innerText)"
                             ".find(t => t.includes('kb-ada') && t.includes('2026-12-12'))")
        assert "2026-12-12 22:59:00 UTC" in row and "a week in hospital" in row  # 23:59 in Berlin, in winter


@pytest.mark.parametrize("written", ["0001-01-01T00:30", "9999-12-31T23:59"])
def test_a_due_date_at_the_calendars_ends_is_refused_naming_the_year(written: str) -> None:
    with pytest.raises(ValueError, match="due: expected a year from 1971 to 9000"):
        parse_due(written, timezone="Europe/Berlin")


def test_a_far_extension_is_refused_before_it_is_stored(make_session: sessionmaker) -> None:
    with make_session() as session:
        import_roster(session, [ADA], actor="prof")
        with pytest.raises(ValueError, match="due: expected a year"):
            grant_extension(session, assignment="l3-3-gru", login="ada", due=datetime(9999, 12, 31, 23, 59, tzinfo=timezone.utc),
                            actor="prof")
        assert extension_of(session, find_user(session, login="ada").id, assignment="l3-3-gru") is None


def test_a_login_with_a_nul_is_nobodys(make_session: sessionmaker) -> None:
    with make_session() as session:
        import_roster(session, [ADA], actor="prof")
        assert find_user(session, login="ada\x00") is None
        with pytest.raises(LookupError):
            remove_student(session, login="ada\x00", actor="prof")


def test_an_extension_is_for_one_assignment(make_session: sessionmaker) -> None:
    due = datetime(2026, 12, 20, 23, 59, tzinfo=timezone.utc)
    with make_session() as session:
        import_roster(session, [ADA], actor="prof")
        ada = find_user(session, login="ada")
        grant_extension(session, login="ada", assignment="l3-2-lstm", due=due, reason="ill", actor="prof")
        assert extension_of(session, ada.id, assignment="l3-2-lstm") == due
        assert extension_of(session, ada.id, assignment="l3-3-gru") is None
        grant_extension(session, login="ada", assignment="l3-3-gru", due=due + timedelta(days=1), actor="prof")
        assert [(e.assignment, e.due) for e in list_extensions(session)] == [
            ("l3-2-lstm", due), ("l3-3-gru", due + timedelta(days=1))]
        assert [r.extension for r in list_roster(session, assignment="l3-2-lstm")] == [due]
        assert revoke_extension(session, login="ada", assignment="l3-2-lstm", actor="prof") is True
        assert extension_of(session, ada.id, assignment="l3-3-gru") == due + timedelta(days=1)
