"""The Celery path takes jobs in turn over students too: Redis hands messages out first come,
first served, but each grading task takes the next job in turn from the database, so a student
who posted first and slowly does not keep the next student waiting behind all of it.

One cpu worker of the compose deployment (tests/deploy/conftest.py), real Redis and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, text

from tests.api.burst import sleeper_archive, small_archive
from tests.api.conftest import wait_done
from tests.deploy.conftest import deployment
from tests.services import PostgresServer


def test_one_worker_serves_the_students_in_turn(tmp_path: Path, postgres: PostgresServer) -> None:
    with deployment(tmp_path, postgres, workers=("cpu-a",)) as live:
        with live.server.client("sleeper") as sleeper, live.server.client("olive") as olive:
            slow = sleeper_archive(block_s=2.0)  # its test waits 2 s in a fixture
            answers = [sleeper.post("/v1/submissions", files={"archive": (f"slow{n}.tar.gz", slow)})
                       for n in range(3)]
            assert [a.status_code for a in answers] == [202, 202, 429], [a.text for a in answers]
            first, second = (a.json()["id"] for a in answers[:2])
            posted = olive.post("/v1/submissions", files={"archive": ("ordinary.tar.gz", small_archive())})
            assert posted.status_code == 202, posted.text
            ordinary = posted.json()["id"]
            for client, submission_id in ((sleeper, first), (olive, ordinary), (sleeper, second)):
                assert wait_done(client, submission_id, timeout=120)["status"] == "done"

        engine = create_engine(live.database_url)
        try:
            with engine.connect() as connection:
                started = dict(connection.execute(text("SELECT id, started_at FROM submissions")).all())
        finally:
            engine.dispose()
        # Redis delivered the messages in the order posted (first, second, ordinary); the
        # worker graded the sleeper's first, Olive's, then the sleeper's second.
        assert sorted(started, key=started.get) == [first, ordinary, second]
