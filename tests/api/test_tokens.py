"""Tokens on the real server: the pages take one only through the sign-in form and its cookie
(a ``?token=`` signs no one in), signing out clears the cookie, ``admin token create`` replaces
a user's token or role only when told to, ``admin token revoke`` ends a token at once, and no
token is ever written to the server's log, access log included."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.api.chromium import Chromium
from tests.api.conftest import Server, make_server, mutagrade, tar_gz

ARCHIVE = tar_gz({"test_a.py": "def test_a():\n    assert 1\n"})


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("tokens"), workers="0")  # nothing here needs a grade
    srv.start()
    yield srv
    srv.stop()


def _browser(server: Server) -> httpx.Client:
    """A client that keeps cookies and does not follow redirects, as a browser's first hop."""
    return httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)


def _submit(server: Server, token: str) -> int:
    answer = httpx.post(f"{server.url}/v1/submissions", files={"archive": ("a.tar.gz", ARCHIVE)},
                        headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def _create(server: Server, user: str, role: str, *extra: str):
    return mutagrade("admin", "token", "create", "--user", user, "--role", role, *extra, env=server.env)


def test_a_token_in_the_query_string_signs_no_one_in(live: Server) -> None:
    student, staff = live.token("qs-student"), live.token("qs-staff", "staff")
    submission = _submit(live, student)
    with _browser(live) as anonymous:
        for path, token in ((f"/submissions?token={student}", student),
                            (f"/submissions/{submission}?token={student}", student),
                            (f"/gradebook?token={staff}", staff)):
            page = anonymous.get(path)
            assert (page.status_code, page.headers["location"]) == (303, "/login"), path
        for path in (f"/v1/submissions?token={student}", f"/v1/submissions/{submission}/report.html?token={student}"):
            answer = anonymous.get(path)
            assert answer.status_code == 401 and "missing token" in answer.json()["detail"], path
        assert "mutagrade_token" not in anonymous.cookies
        # Nor does a bearer header open a page: the pages are for browsers, signed in by the form.
        assert anonymous.get("/submissions", headers={"Authorization": f"Bearer {student}"}).status_code == 303
    # The control: the same tokens open the same pages once signed in with the form.
    with _browser(live) as browser:
        assert browser.post("/login", data={"token": student}).status_code == 303
        assert browser.get(f"/submissions/{submission}").status_code == 200
    with _browser(live) as browser:
        assert browser.post("/login", data={"token": staff}).status_code == 303
        assert browser.get("/gradebook").status_code == 200


def test_signing_in_and_out_in_a_browser(live: Server, tmp_path: Path) -> None:
    token = live.token("browsing")
    with Chromium(tmp_path) as browser:
        assert browser.visit(f"{live.url}/submissions?token={token}", "location.pathname").found == "/login"
        assert browser.sign_in(live.url, token) == f"{live.url}/submissions"
        page = browser.visit(f"{live.url}/submissions", "document.body.innerText")
        assert "signed in as browsing (student)" in page.found and "Sign out" in page.found
        assert browser.click('form[action="/logout"] button[type="submit"]') == f"{live.url}/login"
        after = browser.visit(f"{live.url}/submissions", "[location.pathname, document.body.innerText]")
        assert after.found[0] == "/login" and "signed in as" not in after.found[1] and "Sign out" not in after.found[1]


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_logout_clears_the_cookie_and_goes_to_the_sign_in_page(live: Server, method: str) -> None:
    with _browser(live) as browser:
        assert browser.post("/login", data={"token": live.token("leaving")}).status_code == 303
        assert browser.get("/submissions").status_code == 200
        out = browser.request(method, "/logout")
        assert (out.status_code, out.headers["location"]) == (303, "/login")
        assert "mutagrade_token=" in out.headers["set-cookie"] and "Max-Age=0" in out.headers["set-cookie"]
        assert "mutagrade_token" not in browser.cookies
        assert browser.get("/submissions").status_code == 303
    with live.client("leaving") as api:  # signing out of the pages does not end the token
        assert api.get("/v1/submissions").status_code == 200


def test_token_create_replaces_a_token_or_role_only_with_replace(live: Server) -> None:
    first = _create(live, "ren", "student")
    assert first.returncode == 0, first.stderr
    old = first.stdout.strip()
    for role in ("student", "staff"):
        again = _create(live, "ren", role)
        assert again.returncode == 2 and again.stdout == ""
        assert "user 'ren' already has a token (role student)" in again.stderr and "--replace" in again.stderr
    assert "ren\tstudent" in mutagrade("admin", "token", "list", env=live.env).stdout
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {old}"}, timeout=30) as api:
        assert api.get("/v1/submissions").status_code == 200  # nothing changed
        assert api.get("/v1/gradebook.csv").status_code == 403

    replaced = _create(live, "ren", "staff", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    new = replaced.stdout.strip()
    assert new != old and "replaced" in replaced.stderr
    assert httpx.get(f"{live.url}/v1/submissions", headers={"Authorization": f"Bearer {old}"}).status_code == 401
    assert httpx.get(f"{live.url}/v1/gradebook.csv", headers={"Authorization": f"Bearer {new}"}).status_code == 200


def test_token_revoke_ends_a_token_at_once(live: Server) -> None:
    token = live.token("gone")
    with _browser(live) as browser, live.client("gone") as api:
        assert browser.post("/login", data={"token": token}).status_code == 303
        assert browser.get("/submissions").status_code == 200 and api.get("/v1/submissions").status_code == 200

        done = mutagrade("admin", "token", "revoke", "gone", env=live.env)
        assert done.returncode == 0 and "revoked the token of gone" in done.stdout, done.stderr

        refused = api.get("/v1/submissions")
        assert refused.status_code == 401 and refused.json()["detail"] == "unknown or revoked token"
        assert browser.get("/submissions").status_code == 303  # the cookie holds a dead token
        assert browser.post("/login", data={"token": token}).status_code == 401
    assert "gone\tstudent\t" in (listed := mutagrade("admin", "token", "list", env=live.env).stdout)
    assert any(line.startswith("gone\t") and line.endswith("\trevoked") for line in listed.splitlines())

    unknown = mutagrade("admin", "token", "revoke", "nobody", env=live.env)
    assert unknown.returncode == 2 and "user 'nobody': no such user" in unknown.stderr
    assert _create(live, "gone", "student").returncode == 2  # a new token is a replacement too
    renewed = _create(live, "gone", "student", "--replace")
    assert renewed.returncode == 0
    fresh = {"Authorization": f"Bearer {renewed.stdout.strip()}"}
    assert httpx.get(f"{live.url}/v1/submissions", headers=fresh).status_code == 200


def test_no_token_is_written_to_the_server_log(tmp_path: Path) -> None:
    srv = make_server(tmp_path, log_level="debug", workers="0")
    srv.start()
    try:
        student, staff = srv.token("logged"), srv.token("logged-staff", "staff")
        submission = _submit(srv, student)
        with srv.client("logged") as api:
            assert api.get(f"/v1/submissions/{submission}").status_code == 200
            assert api.get("/v1/submissions").status_code == 200
        with _browser(srv) as browser:
            assert browser.post("/login", data={"token": student + "x"}).status_code == 401
            assert browser.post("/login", data={"token": student}).status_code == 303
            assert browser.get("/submissions").status_code == 200
            assert browser.get(f"/submissions/{submission}").status_code == 200
            assert browser.get(f"/submissions?token={student}").status_code == 200  # by the cookie, not the query
            assert browser.post("/logout").status_code == 303
        with _browser(srv) as browser:
            assert browser.post("/login", data={"token": staff}).status_code == 303
            assert browser.get("/gradebook").status_code == 200
            assert browser.get(f"/gradebook?access_token={staff}&token={staff}").status_code == 200
            assert browser.get("/logout").status_code == 303
        assert httpx.get(f"{srv.url}/{student}").status_code == 404  # pasted where a path goes
    finally:
        srv.stop()
    log = srv.log.read_text()
    # The access log is on: each request above has its line ...
    for line in ('"POST /login HTTP/1.1" 303', '"GET /gradebook HTTP/1.1" 200', '"POST /logout HTTP/1.1" 303',
                 f'"GET /submissions/{submission} HTTP/1.1" 200', '"POST /v1/submissions HTTP/1.1" 202',
                 '"GET /submissions?token=[redacted] HTTP/1.1" 200'):
        assert line in log, f"{line} not in the log:\n{log[-3000:]}"
    # ... and no token, nor any part of one long enough to matter, is in it.
    for token in (student, staff):
        assert token not in log and token[3:20] not in log
