"""The service over real HTTP: submissions, roles, upload rules, rate limit, restarts, the client."""

from __future__ import annotations

import io
import signal
import tarfile
import zipfile

import httpx
import pytest

from tests.api.conftest import STUDENT, example_archive, make_server, mutagrade, tar_gz, wait_done

WEAK = {
    "test_weak.py": "from tinyllm.rnn.gru import GRU\n\ndef test_keys():\n    assert 'bias_hh_l0' in GRU(2, 3).state_dict()\n"
}


def post(client: httpx.Client, data: bytes, name: str = "sub.tar.gz") -> httpx.Response:
    return client.post("/v1/submissions", files={"archive": (name, data)})


def test_a_submission_is_graded_with_the_right_score_and_every_report(server):
    alice = server.client("alice")
    answer = post(alice, example_archive())
    assert answer.status_code == 202, answer.text
    created = answer.json()
    assert created["status"] == "queued" and answer.headers["location"] == f"/v1/submissions/{created['id']}"
    body = wait_done(alice, created["id"])
    assert body["status"] == "done", body
    report = body["report"]
    assert body["passed"] is True and body["kill_rate"] == 1.0
    assert report["score"]["killed"] == 12 and report["journal"]["ok"] and report["journal"]["entries"] == 20
    assert report["audience"] == "student" and "hidden mutant 1" in report["variants"] and "s04" not in report["variants"]
    assert alice.get(f"/v1/submissions/{created['id']}/report.json").json()["schema"] == "mutagrade.report/2"
    junit = alice.get(f"/v1/submissions/{created['id']}/report.junit.xml")
    assert junit.status_code == 200 and junit.text.startswith("<?xml")
    gradescope = alice.get(f"/v1/submissions/{created['id']}/report.gradescope.json").json()
    assert gradescope["score"] == 12.0 and gradescope["max_score"] == 12.0
    html = alice.get(f"/v1/submissions/{created['id']}/report.html")
    assert html.status_code == 200 and "PASSED" in html.text
    listing = alice.get("/v1/submissions").json()
    assert [s["id"] for s in listing] == [created["id"]]
    staff_view = server.client("prof", "staff").get(f"/v1/submissions/{created['id']}").json()
    assert "s04" in staff_view["report"]["variants"]


def test_a_staff_regrade_runs_the_full_kill_matrix(server):
    alice, prof = server.client("alice"), server.client("prof", "staff")
    created = post(alice, example_archive()).json()
    first = wait_done(prof, created["id"])
    assert first["status"] == "done" and first["report"]["timing"]["not_run"] > 0  # each mutant stops at its first kill
    assert prof.post(f"/v1/submissions/{created['id']}/regrade").status_code == 202
    again = wait_done(prof, created["id"])
    assert again["status"] == "done" and again["report"]["timing"]["not_run"] == 0
    assert again["report"]["score"] == first["report"]["score"]


def test_a_weak_suite_is_graded_as_not_passed(server):
    alice = server.client("alice")
    body = wait_done(alice, post(alice, tar_gz(WEAK)).json()["id"])
    assert body["status"] == "done" and body["passed"] is False
    assert body["report"]["score"]["required_missing"] == ["s02"]


def test_the_role_rules(server):
    alice, bob, prof = server.client("alice"), server.client("bob"), server.client("prof", "staff")
    anonymous = httpx.Client(base_url=server.url)
    created = post(alice, tar_gz(WEAK)).json()
    assert anonymous.get("/v1/submissions").status_code == 401
    assert httpx.get(f"{server.url}/v1/submissions", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert bob.get(f"/v1/submissions/{created['id']}").status_code == 404  # as if it did not exist
    assert bob.get(f"/v1/submissions/{created['id']}/report.json").status_code == 404
    assert bob.get("/v1/submissions").json() == []
    assert prof.get(f"/v1/submissions/{created['id']}").status_code == 200
    assert [s["student"] for s in prof.get("/v1/submissions", params={"student": "alice"}).json()] == ["alice"]
    for method, path in (("GET", "/v1/gradebook.csv"), ("POST", f"/v1/submissions/{created['id']}/regrade")):
        answer = alice.request(method, path)
        assert answer.status_code == 403 and "staff" in answer.json()["detail"]
    wait_done(prof, created["id"])
    assert prof.post(f"/v1/submissions/{created['id']}/regrade").status_code == 202
    assert wait_done(prof, created["id"])["status"] == "done"
    gradebook = prof.get("/v1/gradebook.csv")
    assert gradebook.headers["content-type"].startswith("text/csv")
    assert gradebook.text.splitlines()[0].startswith("student,submissions,latest_id")
    assert any(line.startswith("alice,1,") for line in gradebook.text.splitlines())


def _zip(entries: dict[str, bytes], symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (0o120777 << 16)
            archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _tar_with(kind: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = WEAK["test_weak.py"].encode()
        info = tarfile.TarInfo("test_weak.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        extra = tarfile.TarInfo("evil")
        extra.type = kind
        extra.linkname = "/etc/passwd"
        tar.addfile(extra)
    return buffer.getvalue()


def _bomb() -> bytes:
    """A zip whose one member declares a small size but inflates to 30 MB."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("test_weak.py", WEAK["test_weak.py"])
        archive.writestr("big.txt", b"0" * (30 * 1024 * 1024))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("archive", "status", "words"),
    [
        (b"x" * (3 * 1024 * 1024), 413, "larger than 2097152 bytes"),
        (tar_gz({f"t{i}.py": "" for i in range(201)}), 413, "at most 200 are accepted"),
        (tar_gz({"../escape.py": "x = 1\n"}), 422, "'..' is not allowed"),
        (tar_gz({"/etc/cron.d/x.py": "x = 1\n"}), 422, "absolute paths are not allowed"),
        (_tar_with(tarfile.SYMTYPE), 422, "links are not allowed"),
        (_tar_with(tarfile.LNKTYPE), 422, "links are not allowed"),
        (_tar_with(tarfile.CHRTYPE), 422, "devices, fifos and other special files"),
        (_zip({"test_a.py": b"x = 1\n"}, symlink="link.py"), 422, "links are not allowed"),
        (_bomb(), 413, "unpacks to"),
        (b"not an archive at all", 415, "must be a .tar.gz or a .zip"),
        (tar_gz({"README.md": "hello"}), 422, "holds no Python file"),
    ],
    ids=["oversize", "too-many-files", "dotdot", "absolute", "symlink", "hardlink", "device", "zip-symlink",
         "bomb", "not-an-archive", "no-python"],
)
def test_upload_rules_answer_4xx_with_a_message_and_the_next_request_is_served(server, archive, status, words):
    alice = server.client("alice")
    answer = post(alice, archive)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["detail"] and "archive 'sub.tar.gz'" in answer.json()["detail"]
    assert alice.get("/v1/submissions").json() == []  # nothing was stored
    assert post(alice, tar_gz(WEAK)).status_code == 202


def test_a_duplicate_member_is_refused():
    from grader.flows.archive import ArchiveError, ArchiveLimits, check_archive

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("test_a.py", "x = 1\n")
        archive.writestr("./test_a.py", "x = 2\n")
    with pytest.raises(ArchiveError, match="appears twice"):
        check_archive(buffer.getvalue(), ArchiveLimits())


def test_a_missing_field_is_a_clear_422(server):
    answer = server.client("alice").post("/v1/submissions", files={"wrong": ("a", b"x")})
    assert answer.status_code == 422 and "archive" in answer.json()["detail"]


def test_the_rate_limit_answers_429_with_retry_after(tmp_path):
    srv = make_server(tmp_path, rate_limit="2", rate_window_s="30", workers="0")
    srv.start()
    try:
        alice, bob = srv.client("alice"), srv.client("bob")
        assert [post(alice, tar_gz(WEAK)).status_code for _ in range(2)] == [202, 202]
        limited = post(alice, tar_gz(WEAK))
        assert limited.status_code == 429
        assert 1 <= int(limited.headers["retry-after"]) <= 30
        assert "at most 2 submissions per 30 s" in limited.json()["detail"]
        assert post(bob, tar_gz(WEAK)).status_code == 202  # per student
    finally:
        srv.stop()


def test_a_restart_mid_queue_loses_nothing(tmp_path):
    srv = make_server(tmp_path, workers="1", max_in_flight="4")  # four of one student's in flight at once
    srv.start()
    alice = srv.client("alice")
    ids = [post(alice, tar_gz(WEAK)).json()["id"] for _ in range(4)]
    srv.stop(signal.SIGKILL)  # no goodbye: jobs stay queued or running in the database
    srv.start()
    try:
        states = {i: wait_done(srv.client("alice"), i)["status"] for i in ids}
        assert states == {i: "done" for i in ids}
    finally:
        srv.stop()


def test_health_and_readiness(server):
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok", "database": None, "queue": None}
    ready = httpx.get(f"{server.url}/readyz").json()
    assert ready == {"status": "ok", "database": "ok", "queue": "ok"}
    assignment = httpx.get(f"{server.url}/v1/assignment").json()
    assert assignment["threshold"] == 0.7 and assignment["required"] == ["s02"]
    titles = [m["title"] for m in assignment["mutants"]]
    assert "hidden mutant 1" in titles and not any("but not to b_hn" in t for t in titles)
    assert all(m["title"] == m["id"] for m in assignment["mutants"] if m["hidden"])
    assert httpx.get(f"{server.url}/openapi.json").json()["info"]["title"] == "mutagrade"


def test_the_submit_client_uploads_waits_and_exits_like_grade(server, tmp_path):
    env = {**server.env, "MUTAGRADE_TOKEN": server.token("carol")}
    done = mutagrade("submit", str(STUDENT), "--server", server.url, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "VERDICT: PASSED" in done.stdout and "done" in done.stderr
    weak = tmp_path / "weak"
    weak.mkdir()
    (weak / "test_weak.py").write_text(WEAK["test_weak.py"])
    done = mutagrade("submit", str(weak), "--server", server.url, "--format", "json", env=env, timeout=300)
    assert done.returncode == 1
    bad = mutagrade("submit", str(weak), "--server", server.url, "--token", "nope", env=server.env)
    assert bad.returncode == 2 and "unknown or revoked token" in bad.stderr
    gone = mutagrade("submit", str(weak), "--server", "http://127.0.0.1:9", env=env)
    assert gone.returncode == 4 and "the server http://127.0.0.1:9 could not be reached" in gone.stderr


def test_admin_regrade_requeues_what_failed(server):
    prof = server.client("prof", "staff")
    created = post(prof, tar_gz({"test_x.py": "from tinyllm.rnn.gru import nothing\n\ndef test_x():\n    pass\n"})).json()
    first = wait_done(prof, created["id"])
    assert first["status"] == "done" and first["passed"] is False
    done = mutagrade("admin", "regrade", str(created["id"]), env=server.env)
    assert done.returncode == 0 and "queued 1 submission" in done.stdout
    assert wait_done(prof, created["id"])["status"] == "done"
    missing = mutagrade("admin", "regrade", "99999", env=server.env)
    assert missing.returncode == 2 and "submission 99999: no such submission" in missing.stderr
    listed = mutagrade("admin", "token", "list", env=server.env)
    assert "prof\tstaff" in listed.stdout


def test_a_golden_run_compares_every_variant_with_live_torch(server):
    prof = server.client("prof", "staff")
    assert server.client("alice").post("/v1/golden", json={"cases": 1}).status_code == 403
    assert prof.post("/v1/golden", json={"cases": 1, "submission_id": 999}).status_code == 404
    started = prof.post("/v1/golden", json={"cases": 2})
    assert started.status_code == 202
    run_id = started.json()["id"]
    import time

    deadline = time.monotonic() + 120
    body = started.json()
    while body["status"] not in ("done", "error") and time.monotonic() < deadline:
        time.sleep(0.5)
        body = prof.get(f"/v1/golden/{run_id}").json()
    assert body["status"] == "done", body
    rows = {v["id"]: v for v in body["result"]["variants"]}
    assert rows["reference"]["matches"] and rows["w02"]["matches"]
    assert not rows["s02"]["matches"] and rows["s06"]["matches"]  # init mutants are invisible to torch
    # The device the server's torch uses: the GPU where there is one, else the CPU.
    from grader.flows.golden import device_in_use

    assert body["result"]["device"] == device_in_use()[0] and body["result"]["cases_per_s"] > 0
    assert prof.get("/v1/golden/12345").status_code == 404
