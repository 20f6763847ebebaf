"""One service hosting every module of the course: a student names the module when submitting
(the student command names it for them), each submission is graded for its own module, and
staff see a gradebook, statistics and extensions per module. Rows stored by a service that
hosted one module belong to its default when it starts again."""

from __future__ import annotations

import csv
import io
import subprocess
import time
import sys

import httpx
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from api.store.db import make_engine
from api.store.migrate import MIGRATIONS
from grader.flows.submit import pack
from tests.api.conftest import LAYOUT, example_archive, make_server, wait_done

GRU, LSTM = "l3-3-gru", "l3-2-lstm"
LSTM_STUDENT = LAYOUT.examples / "lstm-student"


def lstm_archive() -> bytes:
    from grader.core.paths import layout_for

    return pack(LSTM_STUDENT, layout_for(LAYOUT.root, LSTM).student_tests)


def post(client: httpx.Client, data: bytes, assignment: str | None = None, path: str = "/v1/submissions"):
    return client.post(path, files={"archive": ("sub.tar.gz", data)},
                       data={"assignment": assignment} if assignment is not None else None)


def gradebook(client: httpx.Client, assignment: str | None = None) -> dict[str, dict]:
    answer = client.get("/v1/gradebook.csv", params={"assignment": assignment} if assignment else None)
    assert answer.status_code == 200, answer.text
    return {row["student"]: row for row in csv.DictReader(io.StringIO(answer.text))}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> httpx.Client:
    server = make_server(tmp_path_factory.mktemp("course"))
    server.start()
    yield server
    server.stop()


def test_the_service_lists_every_module_it_hosts_and_refuses_one_it_does_not(course):
    listed = httpx.get(f"{course.url}/v1/assignments").json()
    assert [(a["assignment"], a["default"]) for a in listed] == [(GRU, True), (LSTM, False)]
    lstm = httpx.get(f"{course.url}/v1/assignment", params={"assignment": LSTM}).json()
    assert lstm["name"].startswith("L3.2 LSTM") and len(lstm["mutants"]) == 15 and lstm["default"] is False
    assert httpx.get(f"{course.url}/v1/assignment").json()["assignment"] == GRU
    unknown = httpx.get(f"{course.url}/v1/assignment", params={"assignment": "l9-9-transformer"})
    assert unknown.status_code == 422
    assert GRU in unknown.json()["detail"] and LSTM in unknown.json()["detail"] and "l9-9-transformer" in unknown.text
    # A name that is no folder's name is refused before it is looked up; so is an upload naming one.
    assert httpx.get(f"{course.url}/v1/assignment", params={"assignment": "../l3-3-gru"}).status_code == 422
    answer = post(course.client("ida"), example_archive(), "l9-9-transformer")
    assert answer.status_code == 422 and "l9-9-transformer" in answer.json()["detail"]
    assert course.client("ida").get("/v1/submissions").json() == []  # nothing stored


def test_each_submission_is_graded_for_its_own_module_and_counted_in_its_gradebook(course):
    ada, prof = course.client("ada"), course.client("prof", "staff")
    # The student command names the module by the repository's tests folder.
    done = subprocess.run(
        [sys.executable, "-c", "from grader.student_cli import run; run()", "submit", str(LSTM_STUDENT),
         "--server", course.url, "--token", course.token("ada"), "--format", "json"],
        capture_output=True, text=True, timeout=300, env=course.env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    gru = wait_done(ada, post(ada, example_archive()).json()["id"], timeout=300)  # no field: the default
    assert gru["status"] == "done" and gru["assignment"] == GRU
    assert gru["report"]["score"]["killed"] == gru["report"]["score"]["total"] == 12
    [lstm] = ada.get("/v1/submissions", params={"assignment": LSTM}).json()
    assert lstm["assignment"] == LSTM and lstm["passed"] is True
    shown = ada.get(f"/v1/submissions/{lstm['id']}").json()["report"]
    assert shown["score"]["total"] == 15
    # The student reads it with the LSTM's hidden mutants hidden (not the default module's).
    assert {"hidden mutant 1", "hidden mutant 3"} <= set(shown["variants"])
    assert not {"s08", "s13", "s14"} & set(shown["variants"]) and "s04" in shown["variants"]
    # Each module's gradebook holds only the submissions made for it.
    assert gradebook(prof, LSTM)["ada"]["record_id"] == str(lstm["id"])
    assert gradebook(prof)["ada"]["record_id"] == str(gru["id"]) == gradebook(prof, GRU)["ada"]["record_id"]
    stats = prof.get("/v1/stats.json", params={"assignment": LSTM}).json()
    assert stats["submissions"] == [lstm["id"]] and len(stats["stats"]["mutants"]) == 15
    # A regrade grades it for its own module again.
    assert prof.post(f"/v1/submissions/{lstm['id']}/regrade").status_code == 202
    again = wait_done(prof, lstm["id"], timeout=300)
    assert again["assignment"] == LSTM and again["report"]["score"]["total"] == 15


def test_an_archive_for_one_module_sent_as_another_is_refused_with_where_its_tests_belong(course):
    ben = course.client("ben")
    answer = post(ben, lstm_archive(), GRU)
    assert answer.status_code == 422, answer.text
    assert "python/tests/l3-3-gru" in answer.json()["detail"]
    preview = post(ben, lstm_archive(), LSTM, path="/v1/previews")
    assert preview.status_code == 202
    assert ben.get(f"/v1/submissions/{preview.json()['id']}").json()["assignment"] == LSTM


def test_the_pages_show_one_module_at_a_time_and_switch_between_them(course):
    prof = course.signed_in("prof", "staff")
    book = prof.get("/gradebook", params={"assignment": LSTM})
    assert book.status_code == 200
    assert f'href="/gradebook?assignment={GRU}"' in book.text and 'aria-current="page">l3-2-lstm' in book.text
    assert f"/v1/gradebook.csv?assignment={LSTM}" in book.text
    upload = course.signed_in("cleo").get("/submissions", params={"assignment": LSTM})
    assert f'<option value="{LSTM}" selected>' in upload.text and f'<option value="{GRU}">' in upload.text
    missing = prof.get("/staff/stats", params={"assignment": "l9-9-transformer"})
    assert missing.status_code == 422 and "text/html" in missing.headers["content-type"]
    assert "l9-9-transformer" in missing.text and LSTM in missing.text


def test_an_extension_is_for_one_module(course):
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "admin", "extension", "grant", "ada", "--due", "2026-12-24T23:59+01:00",
         "--reason", "ill", "--assignment", LSTM],
        capture_output=True, text=True, env=course.env, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([sys.executable, "-m", "api.cli", "admin", "extension", "list"],
                            capture_output=True, text=True, env=course.env, timeout=60).stdout.splitlines()
    assert [line.split("\t")[:2] for line in listed[1:]] == [["ada", LSTM]]
    prof = course.signed_in("prof", "staff")
    assert "2026-12-24" in prof.get("/staff/roster", params={"assignment": LSTM}).text
    assert "2026-12-24" not in prof.get("/staff/roster").text


def test_rows_from_a_service_of_one_module_belong_to_its_default_when_it_starts_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "0007")  # the schema of a service that hosted one module
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO users (id, name, role, created_at) VALUES (1, 'old', 'student', "
                                "'2026-12-01 10:00:00')"))
        connection.execute(text(
            "INSERT INTO submissions (id, user_id, status, archive, archive_name, created_at, attempts, full_matrix, "
            "sandbox_waits, kind, days_late, penalty) VALUES (1, 1, 'error', x'00', 'old.tar.gz', "
            "'2026-12-01 10:00:00', 1, 0, 0, 'submission', 0, 0)"))
        connection.execute(text("INSERT INTO extensions (id, user_id, due, reason, granted_by, granted_at) VALUES "
                                "(1, 1, '2026-12-20 10:00:00', 'ill', 'prof', '2026-12-01 10:00:00')"))
    engine.dispose()
    server = make_server(tmp_path, url, assignment=LSTM)
    server.start()
    try:
        [row] = server.client("prof", "staff").get("/v1/submissions").json()
        assert row["assignment"] == LSTM
        assert "2026-12-20" in server.signed_in("prof", "staff").get("/staff/roster").text
    finally:
        server.stop()


def test_a_golden_run_compares_the_variants_of_the_module_it_names(course):
    prof = course.client("prof", "staff")
    assert prof.post("/v1/golden", json={"cases": 1, "assignment": "l9-9-transformer"}).status_code == 422
    started = prof.post("/v1/golden", json={"cases": 1, "assignment": LSTM})
    assert started.status_code == 202, started.text
    body = started.json()
    deadline = time.monotonic() + 180
    while body["status"] not in ("done", "error") and time.monotonic() < deadline:
        time.sleep(0.5)
        body = prof.get(f"/v1/golden/{body['id']}").json()
    assert body["status"] == "done" and body["assignment"] == LSTM, body
    rows = {v["id"]: v for v in body["result"]["variants"]}
    assert len(rows) == 20 and rows["reference"]["matches"] and rows["w01"]["matches"]
    assert not rows["s01"]["matches"]  # the gate order, against torch
    # A variant with no gradient where torch has one deviates infinitely: stored, and read
    # back, as "Infinity" (JSON has no such number), not matching.
    unnumbered = {v["id"]: v for v in rows.values() if isinstance(v["max_deviation"], str)}
    assert sorted(unnumbered) == ["s13", "s14"]
    assert all(v["max_deviation"] == "Infinity" and not v["matches"] for v in unnumbered.values())


def test_a_service_told_to_host_a_module_the_course_lacks_does_not_start_and_says_which(tmp_path):
    server = make_server(tmp_path, assignments="l3-2-lstm, l9-9-transformer")
    done = subprocess.run([sys.executable, "-m", "api.cli", "serve", "--port", str(server.port)],
                          capture_output=True, text=True, env=server.env, timeout=60)
    assert done.returncode == 2
    assert "MUTAGRADE_ASSIGNMENTS" in done.stderr and "'l9-9-transformer'" in done.stderr
    assert "l3-2-lstm, l3-3-gru" in done.stderr  # those there are
