"""The service on a real PostgreSQL server: schema migrated by Alembic at start-up, the bundled
example graded end to end, and storage shared by two server processes on one database.

The server is a throwaway cluster (``initdb`` into a temporary folder, listening only on
127.0.0.1 at a free port, its unix socket in that folder), started once for the session by
``tests/services.py`` (shared with the deployment tests).
``scripts/setup-services.sh`` (run by ``make test``) installs PostgreSQL 15.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from api.store.migrate import MIGRATIONS

from tests.api.conftest import Server, example_archive, make_server, wait_done
from tests.services import postgres_server


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server of our own for the session, with an empty ``mutagrade`` database
    (started and removed by :func:`tests.services.postgres_server`)."""
    with postgres_server() as server:
        yield server.url


@pytest.fixture(scope="module")
def pg_server(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = make_server(tmp_path_factory.mktemp("pg-server"), database_url=postgres_url)
    srv.start()
    yield srv
    srv.stop()


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _psycopg_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def test_start_up_migrates_the_schema_with_alembic(pg_server: Server, postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            assert connection.dialect.name == "postgresql"
            head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
            assert head is not None
            assert connection.scalar(text("SELECT version_num FROM alembic_version")) == head
        inspector = inspect(engine)
        assert {"users", "submissions", "alembic_version"} <= set(inspector.get_table_names())
        columns = {c["name"] for c in inspector.get_columns("submissions")}
        assert {"id", "user_id", "status", "archive", "report_json", "claimed_by", "attempts"} <= columns
        indexes = {i["name"] for i in inspector.get_indexes("users")}
        assert {"ix_users_name", "ix_users_token_hash"} <= indexes
    finally:
        engine.dispose()


def test_input_postgresql_would_refuse_is_a_client_error(pg_server: Server) -> None:
    """Numbers past PostgreSQL's 32-bit integer and NUL characters in text are refused by the
    database driver; they must be answered 4xx before a query is made, never 500."""
    too_big = 2**31  # fits SQLite's 64-bit integers, so only this backend shows the difference
    with pg_server.client("pg-edge-staff", "staff") as staff:
        for path in (f"/v1/submissions/{too_big}", f"/v1/submissions/{too_big}/report.json",
                     f"/v1/golden/{too_big}", f"/submissions/{too_big}"):
            assert staff.get(path).status_code == 422, path
        assert staff.post(f"/v1/submissions/{too_big}/regrade").status_code == 422
        assert staff.get("/v1/submissions", params={"offset": too_big}).status_code == 422
        assert staff.get("/v1/submissions", params={"student": "a\x00b"}).status_code == 422
        # The largest id that fits is an ordinary id: there is no such submission.
        assert staff.get(f"/v1/submissions/{too_big - 1}").status_code == 404
        assert staff.get("/v1/submissions", params={"student": "nobody"}).json() == []
    assert "Traceback" not in pg_server.log.read_text()


def test_example_is_graded_listed_and_in_the_gradebook(pg_server: Server, postgres_url: str) -> None:
    with pg_server.client("pg-alice") as alice, pg_server.client("pg-staff", "staff") as staff:
        answer = alice.post(
            "/v1/submissions", files={"archive": ("student.tar.gz", example_archive(), "application/gzip")}
        )
        assert answer.status_code == 202, answer.text
        submission_id = answer.json()["id"]
        body = wait_done(alice, submission_id)
        assert body["status"] == "done", body.get("error")
        assert body["passed"] is True
        assert body["kill_rate"] == 1.0
        assert body["report"]["journal"]["ok"] is True

        listed = alice.get("/v1/submissions").json()
        assert [s["id"] for s in listed] == [submission_id]
        assert staff.get("/v1/submissions", params={"student": "pg-alice"}).json()[0]["status"] == "done"

        gradebook = staff.get("/v1/gradebook.csv")
        assert gradebook.status_code == 200
        rows = {row["student"]: row for row in csv.DictReader(io.StringIO(gradebook.text))}
        assert rows["pg-alice"]["latest_id"] == str(submission_id)
        assert rows["pg-alice"]["latest_passed"] == "yes"
        assert rows["pg-alice"]["latest_kill_rate"] == "1.0000"

    # The row is in PostgreSQL itself, not in some other store the server fell back to.
    with psycopg.connect(_psycopg_url(postgres_url)) as connection:
        status, passed, attempts = connection.execute(
            "SELECT status, passed, attempts FROM submissions WHERE id = %s", (submission_id,)
        ).fetchone()
    assert (status, passed, attempts) == ("done", True, 1)


def test_a_second_server_on_the_same_database_shares_storage(
    pg_server: Server, postgres_url: str, tmp_path: Path
) -> None:
    with pg_server.client("pg-bob") as bob:
        answer = bob.post("/v1/submissions", files={"archive": ("bob.tar.gz", example_archive(), "application/gzip")})
        assert answer.status_code == 202, answer.text
        submission_id = answer.json()["id"]
        wait_done(bob, submission_id)

    # No grading threads of its own: whatever it shows was written by the other process.
    second = make_server(tmp_path, database_url=postgres_url, workers="0")
    second.start()
    try:
        headers = {"Authorization": f"Bearer {pg_server.token('pg-bob')}"}  # a token made through the first
        with second.client() as anonymous:
            anonymous.headers.update(headers)
            seen = anonymous.get(f"/v1/submissions/{submission_id}")
            assert seen.status_code == 200, seen.text
            assert seen.json()["student"] == "pg-bob"
            assert seen.json()["status"] == "done"
            assert seen.json()["kill_rate"] == 1.0
            assert submission_id in [s["id"] for s in anonymous.get("/v1/submissions").json()]

            # And the other way: what the second server stores, the first one sees.
            posted = anonymous.post(
                "/v1/submissions", files={"archive": ("again.tar.gz", example_archive(), "application/gzip")}
            )
            assert posted.status_code == 202, posted.text
        with pg_server.client("pg-bob") as bob:
            # Graded by the first server's worker, since the second has none.
            again = wait_done(bob, posted.json()["id"])
            assert again["status"] == "done" and again["passed"] is True
    finally:
        second.stop()


def test_the_database_clock_is_read_when_asked_not_when_the_transaction_began(postgres_url: str) -> None:
    """An upload is stamped by ``crud.database_now`` after its body has been read, in a session
    whose transaction a first query (the user's sign-in) may have begun long before: the stamp
    is the moment of the call (an attack held a form's body back past the due date)."""
    import time

    from sqlalchemy import func, select

    from api.store.crud import database_now
    from api.store.db import make_engine, make_sessionmaker

    engine = make_engine(postgres_url)
    try:
        with make_sessionmaker(engine)() as session:
            began = session.scalar(select(func.now()))  # the transaction begins here
            time.sleep(0.3)
            assert (database_now(session) - began).total_seconds() >= 0.25
    finally:
        engine.dispose()
