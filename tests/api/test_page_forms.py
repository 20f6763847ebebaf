"""The pages' forms on the real server: a student uploads from the submissions page (in headless
Chromium, up to the verdict), each refusal of the REST upload is shown on the page, a post from
another site is refused (by the form token and by the request's origin, a same-site page on
another port included), and staff regrade from a submission's page while students cannot.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.api.chromium import Chromium
from tests.api.conftest import Server, example_archive, make_server, tar_gz, wait_done

SMALL = tar_gz({"test_a.py": "def test_a():\n    assert 1\n"})
CSRF = re.compile(r'<input type="hidden" name="csrf" value="([^"]+)">')


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that grades."""
    srv = make_server(tmp_path_factory.mktemp("forms"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that grades nothing (what is posted stays in flight), with low limits."""
    srv = make_server(tmp_path_factory.mktemp("forms-strict"), workers="0", max_in_flight="2", rate_limit="3",
                      max_upload_bytes="4096")
    srv.start()
    yield srv
    srv.stop()


def _form_token(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, f"no form token on {page.url}"
    return found.group(1)


def _upload(http: httpx.Client, archive: bytes, name: str = "tests.tar.gz", **headers: str) -> httpx.Response:
    """Send the submissions page's upload form as a browser does."""
    token = _form_token(http.get("/submissions"))
    return http.post("/submissions", data={"csrf": token}, files={"archive": (name, archive, "application/gzip")},
                     headers=headers)


def _own(server: Server, user: str) -> list[dict]:
    with server.client(user) as api:
        return api.get("/v1/submissions").json()


def _alert(page: httpx.Response) -> str:
    found = re.search(r'<p class="verdict failed" role="alert">(.*?)</p>', page.text, re.S)
    assert found, f"no message on the page:\n{page.text[:2000]}"
    return " ".join(found.group(1).split()).replace("&#39;", "'").replace("&#34;", '"')


# -- uploading ------------------------------------------------------------------------------------

def test_a_student_uploads_from_the_submissions_page_and_sees_the_verdict(live: Server, tmp_path: Path) -> None:
    archive = tmp_path / "my-tests.tar.gz"
    archive.write_bytes(example_archive())
    (tmp_path / "profile").mkdir()
    with Chromium(tmp_path / "profile") as browser:
        browser.sign_in(live.url, live.token("uploader"))
        form = browser.visit(f"{live.url}/submissions", """JSON.stringify((() => {
          const input = document.querySelector('form[action="/submissions"] input[type=file]');
          return input && { name: input.name, accept: input.accept, required: input.required,
                            enctype: input.form.enctype, method: input.form.method };
        })())""")
        assert json.loads(form.found) == {"name": "archive", "accept": ".tar.gz,.tgz,.zip", "required": True,
                                          "enctype": "multipart/form-data", "method": "post"}
        browser.choose_file('form[action="/submissions"] input[type=file]', archive)
        landed = browser.click('form[action="/submissions"] button[type="submit"]')
        found = re.fullmatch(rf"{re.escape(live.url)}/submissions/(\d+)", landed)
        assert found, landed
        submission = int(found.group(1))
        deadline, verdict = time.monotonic() + 120, ""
        while time.monotonic() < deadline:  # a person reloads until the verdict is there
            verdict = browser.visit(landed, "document.querySelector('.verdict')?.innerText ?? ''").found
            if verdict in ("PASSED", "NOT PASSED", "Could not be graded"):
                break
            time.sleep(0.5)
    assert verdict == "PASSED"
    [mine] = _own(live, "uploader")
    assert (mine["id"], mine["archive_name"], mine["status"], mine["passed"]) == (submission, "my-tests.tar.gz", "done", True)


def test_a_pending_submission_page_reloads_itself(strict: Server) -> None:
    with strict.signed_in("waiting") as http:
        created = _upload(http, SMALL)
        assert created.status_code == 303, created.text
        page = http.get(created.headers["location"])
    assert "Queued" in page.text
    assert re.search(r'<meta http-equiv="refresh" content="\d+">', page.text)


def test_every_refusal_of_an_upload_is_told_on_the_page(strict: Server) -> None:
    with strict.signed_in("refused") as http:
        cases = [
            ("not an archive", _upload(http, b"just some notes\n" * 10, "notes.txt"), 415,
             "archive 'notes.txt': "),
            ("too large", _upload(http, bytes(range(256)) * 20, "big.tar.gz"), 413,
             "archive 'big.tar.gz': the archive is larger than 4096 bytes"),
            ("a member escaping", _upload(http, tar_gz({"../evil.py": "x = 1\n"}), "evil.tar.gz"), 422,
             "archive 'evil.tar.gz': "),
        ]
        for what, page, status, message in cases:
            assert page.status_code == status, (what, page.status_code, page.text[:500])
            assert page.headers["content-type"].startswith("text/html"), what
            assert _alert(page).startswith(message), (what, _alert(page))
            assert 'name="archive" type="file"' in page.text, what  # the form is there to try again
        # The rate limit: three posts a minute here, refused ones count too.
        limited = _upload(http, SMALL)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        assert _alert(limited).startswith("at most 3 submissions per 60 s; try again in ")
        token = _form_token(http.get("/submissions"))
        no_file = http.post("/submissions", data={"csrf": token})
        assert no_file.status_code == 400 and _alert(no_file) == "choose a .tar.gz or .zip of your tests to upload"
        left_empty = http.post("/submissions", data={"csrf": token}, files={"archive": ("", b"")})  # as a browser sends it
        assert left_empty.status_code == 400 and _alert(left_empty) == _alert(no_file)
        two = http.post("/submissions", data={"csrf": token},
                        files=[("archive", ("a.tar.gz", SMALL)), ("archive", ("b.tar.gz", SMALL))])
        assert two.status_code == 400 and "Maximum number of files is 1" in _alert(two)
        not_a_form = http.post("/submissions", content=b"\x00" * 100, headers={"content-type": "multipart/form-data"})
        assert 400 <= not_a_form.status_code < 500
        assert http.get("/submissions").status_code == 200  # served as if nothing happened
    assert _own(strict, "refused") == []

    with strict.signed_in("busy") as http:
        for _ in range(2):
            assert _upload(http, SMALL).status_code == 303
        third = _upload(http, SMALL)
    assert third.status_code == 429 and third.headers["retry-after"] == "10"
    assert _alert(third).startswith("you have 2 submissions in flight (queued or being graded) and at most 2 may be")
    assert len(_own(strict, "busy")) == 2


# -- posts from elsewhere ------------------------------------------------------------------------------

def test_a_post_without_the_pages_form_token_or_from_another_origin_is_refused(strict: Server) -> None:
    with strict.signed_in("other") as other:
        others = _form_token(other.get("/submissions"))
    with strict.signed_in("target") as http:
        token = _form_token(http.get("/submissions"))
        files = {"archive": ("a.tar.gz", SMALL, "application/gzip")}
        attempts = {
            "no form token": http.post("/submissions", files=files),
            "a wrong form token": http.post("/submissions", data={"csrf": "0" * len(token)}, files=files),
            "another user's form token": http.post("/submissions", data={"csrf": others}, files=files),
            "the token, from another site": http.post(
                "/submissions", data={"csrf": token}, files=files,
                headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}),
            "the token, from another origin of this site": http.post(
                "/submissions", data={"csrf": token}, files=files,
                headers={"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}),
            "the token, from an opaque origin": http.post(
                "/submissions", data={"csrf": token}, files=files, headers={"Origin": "null"}),
        }
        for what, refused in attempts.items():
            assert refused.status_code == 403, (what, refused.status_code)
            assert "Refused" in refused.text and "send it again from this site" in refused.text, what
        # Nor does the REST upload take the cookie (it has no form token to check); reading does.
        rest = http.post("/v1/submissions", files=files)
        assert rest.status_code == 401 and "cookie opens pages and downloads only" in rest.json()["detail"]
        assert http.get("/v1/submissions").status_code == 200
        assert _own(strict, "target") == []
        # The control: the same post from the page's own origin goes through.
        own = http.post("/submissions", data={"csrf": token}, files=files,
                        headers={"Origin": strict.url, "Sec-Fetch-Site": "same-origin"})
        assert own.status_code == 303, own.text
    assert len(_own(strict, "target")) == 1


class _Attacker(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: object) -> None:
        pass


def _attack_page(target: str, leaked: str) -> bytes:
    """A page on another port of the same host (same site: the SameSite=Strict cookie goes with
    its requests) posting an archive to ``target``: by script, to the page with a wrong form token
    and with a leaked one, and to the REST upload, then by a form that sends itself."""
    archive = base64.b64encode(SMALL).decode()
    return f"""<!doctype html><html><body>
<form id="f" method="post" action="{target}/submissions" enctype="multipart/form-data">
<input type="hidden" name="csrf" value="{leaked}"><input type="file" name="archive" id="a"></form>
<script>
const bytes = Uint8Array.from(atob("{archive}"), c => c.charCodeAt(0));
async function post(path, token) {{
  const form = new FormData();
  form.append("csrf", token);
  form.append("archive", new Blob([bytes]), "evil.tar.gz");
  await fetch("{target}" + path, {{method: "POST", body: form, credentials: "include", mode: "no-cors"}});
}}
(async () => {{
  await post("/submissions", "guessed");
  await post("/submissions", "{leaked}");
  await post("/v1/submissions", "");
  const files = new DataTransfer();
  files.items.add(new File([bytes], "evil.tar.gz"));
  document.getElementById("a").files = files.files;
  document.getElementById("f").submit();
}})();
</script></body></html>""".encode()


def test_a_page_of_another_origin_on_the_same_site_cannot_upload_with_the_students_cookie(
    strict: Server, tmp_path: Path
) -> None:
    token = strict.token("victim")
    with strict.signed_in("victim") as http:
        leaked = _form_token(http.get("/submissions"))
    _Attacker.page = _attack_page(strict.url, leaked)
    attacker = ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    thread = threading.Thread(target=attacker.serve_forever, daemon=True)
    thread.start()
    try:
        with Chromium(tmp_path) as browser:
            browser.sign_in(strict.url, token)
            attack = browser.visit(f"http://127.0.0.1:{attacker.server_address[1]}/", "null")
            seen = attack.responses + browser.wait(3).responses
            landed, shown = browser.evaluate("location.href"), browser.evaluate("document.body.innerText")
    finally:
        attacker.shutdown()
        attacker.server_close()
        thread.join(timeout=10)
    posts = [status for url, status in seen if url == f"{strict.url}/submissions"]
    # Each of the three reached the server with the cookie (else: 303 to the sign-in page) and was refused.
    assert posts == [403, 403, 403], seen
    # The REST upload takes a token from the Authorization header only: the cookie changes nothing there.
    assert [status for url, status in seen if url == f"{strict.url}/v1/submissions"] == [401], seen
    assert landed == f"{strict.url}/submissions" and "Refused" in shown, (landed, shown)
    assert _own(strict, "victim") == []


def test_signing_in_from_another_site_is_refused(strict: Server) -> None:
    with httpx.Client(base_url=strict.url, timeout=30) as browser:
        refused = browser.post("/login", data={"token": strict.token("lured")},
                               headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert refused.status_code == 403 and "mutagrade_token" not in browser.cookies
        signed_in = browser.post("/login", data={"token": strict.token("lured")},
                                 headers={"Origin": strict.url, "Sec-Fetch-Site": "same-origin"})
        assert signed_in.status_code == 303 and "mutagrade_token" in browser.cookies


# -- regrading ------------------------------------------------------------------------------------

REGRADE = 'form[action$="/regrade"] button[type="submit"]'


def test_staff_regrade_from_the_submission_page_and_students_cannot(live: Server, tmp_path: Path) -> None:
    with live.client("regraded") as api:
        answer = api.post("/v1/submissions", files={"archive": ("a.tar.gz", SMALL, "application/gzip")})
        assert answer.status_code == 202, answer.text
        before = wait_done(api, answer.json()["id"])
    assert before["status"] == "done"
    path = f"/submissions/{before['id']}"

    # The student sees no button, and a post of their own is refused as staff only.
    with live.signed_in("regraded") as student:
        page = student.get(path)
        assert page.status_code == 200 and "/regrade" not in page.text
        refused = student.post(f"{path}/regrade", data={"csrf": _form_token(student.get("/submissions"))})
    assert refused.status_code == 403
    assert "Staff only" in refused.text and "regrading is for course staff only" in refused.text
    with live.client("regraded") as api:
        assert api.get(f"/v1/submissions/{before['id']}").json()["finished_at"] == before["finished_at"]

    # Staff click the button, land back on the page, and the submission is graded again.
    (tmp_path / "profile").mkdir()
    with Chromium(tmp_path / "profile") as browser:
        browser.sign_in(live.url, live.token("regrader", "staff"))
        button = browser.visit(f"{live.url}{path}", f"document.querySelector({json.dumps(REGRADE)})?.innerText")
        assert button.found == "Grade again"
        assert browser.click(REGRADE) == f"{live.url}{path}"
    with live.client("regraded") as api:
        after = wait_done(api, before["id"])
    assert after["status"] == "done"
    assert datetime.fromisoformat(after["finished_at"]) > datetime.fromisoformat(before["finished_at"])
