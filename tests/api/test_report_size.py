"""The service stores and serves bounded reports: a suite of a quarter-million refused lines
gives a small one, and a report over the stored cap is shortened whole, never cut in its JSON.

Over real HTTP (``mutagrade serve``), and on real SQLite and PostgreSQL databases.
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.store.db import Submission, make_engine, make_sessionmaker
from api.store.migrate import upgrade
from grader.core.caps import MAX_LISTED, MAX_STORED_REPORT_BYTES, MAX_TEST_FILE_BYTES, MAX_TESTS, MAX_TEXT_CHARS
from grader.core.models import Outcome, PolicySummary, Report, Score, TestStatus, TestVerdict
from tests.api.conftest import tar_gz, wait_done
from tests.services import PostgresServer, postgres_server

SERVED_BYTES = 1024**2  # what the report of the huge suite below must stay under


def test_a_quarter_million_refused_lines_give_a_small_stored_and_served_report(server):
    lines = MAX_TEST_FILE_BYTES // 3
    alice = server.client("alice")
    archive = tar_gz({"test_big.py": "os\n" * lines})
    answer = alice.post("/v1/submissions", files={"archive": ("big.tar.gz", archive, "application/gzip")})
    assert answer.status_code == 202, answer.text
    submission = answer.json()["id"]
    body = wait_done(alice, submission)
    assert body["status"] == "done" and body["passed"] is False, body["error"]
    served = alice.get(f"/v1/submissions/{submission}/report.json")
    assert served.status_code == 200 and len(served.content) <= SERVED_BYTES
    policy = served.json()["policy"]
    assert len(policy["violations"]) == MAX_LISTED and policy["violations_omitted"] == lines - MAX_LISTED
    page = alice.get(f"/v1/submissions/{submission}/report.html")
    assert page.status_code == 200 and f"... and {lines - MAX_LISTED} more" in page.text
    database = server.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(database) as connection:
        [(stored,)] = connection.execute("SELECT length(report_json) FROM submissions WHERE id = ?", (submission,))
    assert stored <= SERVED_BYTES


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def make_session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'mutagrade.db'}"
    else:
        url = request.getfixturevalue("postgres").create_database(f"size_{uuid.uuid4().hex[:10]}")
    upgrade(url)
    engine = make_engine(url)
    yield make_sessionmaker(engine)
    engine.dispose()


def _claimed(make_session: sessionmaker) -> int:
    with make_session() as session:
        user, _ = crud.create_user(session, name="alice", role="student")
        submission = crud.create_submission(session, user=user, assignment="l3-3-gru", archive=b"x", name="a.tar.gz")
        assert crud.claim_next(session, worker="w1").id == submission.id
        return submission.id


def _oversized() -> Report:
    """A report no grading makes (the caps prevent it), far over the stored cap."""
    tests = [
        TestVerdict(id=f"test_x.py::test_{n}", valid=False, status=TestStatus.WRONG, kills=[],
                    reason="r" * 40_000, outcomes={"reference": Outcome.FAILED})
        for n in range(MAX_TESTS)
    ]
    return Report(
        submission="huge", passed=False, reasons=["every test fails on the reference"],
        score=Score(kill_rate=0.0, killed=0, total=12, threshold=0.7, required=["s02"], required_missing=["s02"]),
        tests=tests, mutants=[], variants=["reference"],
        policy=PolicySummary(ok=True), problems=["p" * 100_000] * 100,
    )


def test_a_report_over_the_stored_cap_is_stored_shortened_and_whole(make_session):
    job = _claimed(make_session)
    report = _oversized()
    document = report.model_dump_json()
    assert len(document.encode()) > MAX_STORED_REPORT_BYTES
    with make_session() as session:
        assert crud.finish_submission(session, job, worker="w1", report_json=document, passed=False, kill_rate=0.0)
    with make_session() as session:
        row = session.get(Submission, job)
        assert row.status == "done" and len(row.report_json.encode()) <= MAX_STORED_REPORT_BYTES
        stored = Report.model_validate_json(row.report_json)  # whole JSON, not cut in the middle
    assert stored.reasons == report.reasons and stored.score == report.score
    assert 0 < len(stored.tests) and len(stored.tests) + stored.tests_omitted == MAX_TESTS
    assert stored.problems[-1].startswith("this report was shortened to fit the stored size limit")


def test_a_huge_error_is_stored_cut(make_session):
    job = _claimed(make_session)
    with make_session() as session:
        assert crud.finish_submission(session, job, worker="w1", error="internal error: " + "e" * 1_000_000)
    with make_session() as session:
        error = session.get(Submission, job).error
    assert error.startswith("internal error: eee") and len(error) <= MAX_TEXT_CHARS and error.endswith("...")
