"""One student's slow submissions cannot hold up the others': a limit on how many each student
has in flight (queued or being graded), and jobs taken round-robin over students.

The order of claims is checked on real SQLite and PostgreSQL databases (the one claim function
serves the in-process queue and the Celery task alike); the limit and the order through a real
``mutagrade serve`` over HTTP, with a suite whose tests block in a fixture.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.store.db import User
from tests.api.burst import sleeper_archive, small_archive
from tests.api.conftest import Server, make_server, wait_done


def _post(make_session: sessionmaker, *names: str) -> dict[str, int]:
    """One submission per name ("a1": student a's first), stored in this order; name -> id."""
    ids = {}
    with make_session() as session:
        for name in names:
            user = session.query(User).filter_by(name=name[0]).one_or_none()
            if user is None:
                user, _ = crud.create_user(session, name=name[0], role="student")
            ids[name] = crud.create_submission(session, user=user, assignment="l3-3-gru", archive=b"x", name=name).id
    return ids


def _claim(make_session: sessionmaker, worker: str = "w") -> int | None:
    with make_session() as session:
        submission = crud.claim_next(session, worker=worker)
    return None if submission is None else submission.id


def _finish(make_session: sessionmaker, submission_id: int, worker: str = "w") -> None:
    with make_session() as session:
        assert crud.finish_submission(session, submission_id, worker=worker, error="not graded here")


def test_one_grader_serves_the_students_in_turn(make_session: sessionmaker) -> None:
    # Alice posts three at once, then Bob two, then Carol one. First come, first served would
    # grade all of Alice's before anyone else's; in turn, each student's oldest goes first.
    ids = _post(make_session, "a1", "a2", "a3", "b1", "b2", "c1")
    order = []
    while (taken := _claim(make_session)) is not None:
        order.append(taken)
        _finish(make_session, taken)
    names = {v: k for k, v in ids.items()}
    assert [names[i] for i in order] == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_a_student_with_a_grading_running_waits_behind_those_without(make_session: sessionmaker) -> None:
    # Two graders. Alice's first is running (a slow suite); Bob was served after her and his
    # grading is over. Served longer ago, Alice would be next in turn: but she holds a grader
    # already, so Bob's goes first, and the second grader is not given to her slow suites too.
    ids = _post(make_session, "a1")
    assert _claim(make_session, "slow") == ids["a1"]
    ids |= _post(make_session, "b1")
    assert _claim(make_session) == ids["b1"]
    _finish(make_session, ids["b1"])
    ids |= _post(make_session, "a2", "b2")
    assert _claim(make_session) == ids["b2"]
    # Nobody else waits: then her second does go to a free grader.
    _finish(make_session, ids["b2"])
    assert _claim(make_session) == ids["a2"]


def test_a_long_grading_counts_as_service_until_it_ends(make_session: sessionmaker) -> None:
    # The sleeper's grading started first and ended last: Bob was served less recently, so his
    # next goes first (counted from the starts, the sleeper's would).
    ids = _post(make_session, "s1")
    assert _claim(make_session, "slow") == ids["s1"]
    ids |= _post(make_session, "b1")
    assert _claim(make_session) == ids["b1"]
    _finish(make_session, ids["b1"])
    _finish(make_session, ids["s1"], "slow")
    ids |= _post(make_session, "s2", "b2")
    assert _claim(make_session) == ids["b2"]


def test_a_new_student_goes_before_those_already_served(make_session: sessionmaker) -> None:
    ids = _post(make_session, "a1", "a2")
    _finish(make_session, _claim(make_session))
    ids |= _post(make_session, "b1")
    assert _claim(make_session) == ids["b1"]


def test_claims_from_many_threads_take_each_job_once(make_session: sessionmaker) -> None:
    names = [f"{student}{n}" for n in range(4) for student in "abcde"]
    ids = _post(make_session, *names)

    def drain(worker: str) -> list[int]:
        taken = []
        while (claimed := _claim(make_session, worker)) is not None:
            taken.append(claimed)
            _finish(make_session, claimed, worker)
        return taken

    with ThreadPoolExecutor(max_workers=4) as pool:
        taken = [i for part in pool.map(drain, [f"w{n}" for n in range(4)]) for i in part]
    assert sorted(taken) == sorted(ids.values())


# --------------------------------------------------------------------------- over HTTP
def _submit(client: httpx.Client, archive: bytes, name: str = "sub.tar.gz") -> httpx.Response:
    return client.post("/v1/submissions", files={"archive": (name, archive, "application/gzip")})


@pytest.fixture
def idle_server(tmp_path: Path) -> Iterator[Server]:
    """A server that grades nothing (no grading thread): whatever is posted stays in flight."""
    srv = make_server(tmp_path, workers="0")
    srv.start()
    yield srv
    srv.stop()


def test_a_student_at_the_limit_gets_429_saying_how_many_and_when(idle_server: Server) -> None:
    with idle_server.client("alice") as alice, idle_server.client("bob") as bob:
        assert [_submit(alice, small_archive()).status_code for _ in range(2)] == [202, 202]
        refused = _submit(alice, small_archive())
        assert refused.status_code == 429, refused.text
        assert refused.json()["detail"] == (
            "you have 2 submissions in flight (queued or being graded) and at most 2 may be; "
            "submit again once one of them is graded"
        )
        assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert len(alice.get("/v1/submissions").json()) == 2  # the refused one was not stored
        assert _submit(bob, small_archive()).status_code == 202  # per student
        assert alice.get("/v1/submissions").status_code == 200  # and she is served as before


def test_posts_at_once_cannot_pass_the_limit(tmp_path: Path, database_url: str) -> None:
    """Eight posts sent together by one student: exactly two get in, on either database."""
    srv = make_server(tmp_path, database_url=database_url, workers="0")
    srv.start()
    try:
        token = srv.token("mallory")

        def post(number: int) -> int:
            with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                return _submit(http, small_archive(), f"m{number}.tar.gz").status_code

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = sorted(pool.map(post, range(8)))
        assert answers == [202, 202] + [429] * 6
        with srv.client("mallory") as mallory:
            assert len(mallory.get("/v1/submissions").json()) == 2
        assert "Traceback" not in srv.log.read_text()
    finally:
        srv.stop()


def _when(body: dict, field: str) -> datetime:
    return datetime.fromisoformat(body[field])


def test_a_sleeper_holds_up_another_student_by_one_grading_at_most(tmp_path: Path) -> None:
    # One grading thread. The sleeper posts as fast as the service lets it, then Olive posts
    # an ordinary suite: she is graded right after the sleeper's first, before its second.
    srv = make_server(tmp_path, workers="1")
    srv.start()
    try:
        with srv.client("sleeper") as sleeper, srv.client("olive") as olive:
            slow = sleeper_archive(block_s=2.0)
            answers = [_submit(sleeper, slow, f"slow{n}.tar.gz") for n in range(3)]
            assert [a.status_code for a in answers] == [202, 202, 429]
            first, second = (a.json()["id"] for a in answers[:2])
            ordinary = _submit(olive, small_archive())
            assert ordinary.status_code == 202, ordinary.text
            done = wait_done(olive, ordinary.json()["id"], timeout=120)
            assert done["status"] == "done", done
            slow_first, slow_second = (wait_done(sleeper, i, timeout=120) for i in (first, second))
            assert slow_first["status"] == slow_second["status"] == "done"
            # The sleeper's grading held the only grading thread for seconds, not in CPU.
            assert (_when(slow_first, "finished_at") - _when(slow_first, "started_at")).total_seconds() >= 2
            # In turn: the sleeper's first, Olive's, the sleeper's second.
            assert _when(slow_first, "finished_at") <= _when(done, "started_at") <= _when(slow_second, "started_at")
            # The sleeper's limit is free again once one is graded.
            assert _submit(sleeper, slow).status_code == 202
    finally:
        srv.stop()


def test_the_limit_is_a_setting(tmp_path: Path) -> None:
    srv = make_server(tmp_path, workers="0", max_in_flight="1")
    srv.start()
    try:
        with srv.client("alice") as alice:
            assert _submit(alice, small_archive()).status_code == 202
            refused = _submit(alice, small_archive())
            assert refused.status_code == 429
            assert refused.json()["detail"].startswith("you have 1 submission in flight (queued or being graded) "
                                                       "and at most 1 may be")
        bad = make_server(tmp_path / "bad", workers="0", max_in_flight="0")
        (tmp_path / "bad").mkdir()
        with pytest.raises(RuntimeError, match="max_in_flight"):
            bad.start()
    finally:
        srv.stop()

