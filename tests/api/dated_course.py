"""A course with a due date, for the service's tests of deadlines, previews and the gradebook: a
course root whose default assignment's ``assignment.toml`` (copied from this checkout's) has a
``[deadline]``, a server on it that accepts and stores but grades nothing (``workers = 0``), and
what the rest of the course does to its database (an extension granted, a submission graded by a
worker).

Each step is the real one: the server stamps and refuses uploads itself; a "grading" here is
``crud.claim_next`` and ``crud.finish_submission``, as a worker stores its report, with a report
written as the grader writes one.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.store import crud
from api.store.db import Extension, User, make_engine, make_sessionmaker
from grader.core.models import MutantVerdict, Report, Score, Timing
from grader.core.paths import ASSIGNMENTS, COURSE_FILE, default_layout
from tests.api.conftest import Server, make_server

LAYOUT = default_layout()
BERLIN = ZoneInfo("Europe/Berlin")
MUTANTS = 12


def minute(moment: datetime) -> datetime:
    """``moment`` to the minute, as a ``[deadline]`` written to the minute reads back."""
    return moment.replace(second=0, microsecond=0)


def course_root(tmp: Path, *, due: datetime, late: str = "penalty", penalty_per_day: float = 0.1,
                penalty_cap: float = 0.5, top: str = "") -> Path:
    """A course root: this checkout's material, with a copy of its default assignment's folder
    (``assignments/<name>/``, and ``assignments/course.toml``) whose ``assignment.toml`` has a
    ``[deadline]`` due at ``due`` (written as Berlin's local time, to the minute) and the lines
    ``top`` among its top-level keys."""
    root = tmp / "course"
    shutil.copytree(LAYOUT.assignment_dir, root / ASSIGNMENTS / LAYOUT.assignment_name,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(LAYOUT.root / ASSIGNMENTS / COURSE_FILE, root / ASSIGNMENTS / COURSE_FILE)
    for part in ("reference", "examples"):
        (root / part).symlink_to(LAYOUT.root / part)
    local = due.astimezone(BERLIN).strftime("%Y-%m-%dT%H:%M")
    deadline = (f'[deadline]\ndue = "{local}"\ntimezone = "Europe/Berlin"\nlate = "{late}"\n'
                + (f"penalty_per_day = {penalty_per_day}\npenalty_cap = {penalty_cap}\n" if late == "penalty" else ""))
    assignment = root / ASSIGNMENTS / LAYOUT.assignment_name / "assignment.toml"
    head, limits = assignment.read_text(encoding="utf-8").split("[limits]", 1)
    assignment.write_text(head + top + "\n" + deadline + "\n[limits]" + limits, encoding="utf-8")
    return root


def dated_server(tmp: Path, root: Path, **settings: str) -> Server:
    """A server on ``root`` that stores uploads and grades none of them."""
    return make_server(tmp, root=str(root), workers="0", max_in_flight="50", **settings)


@contextmanager
def database(server: Server) -> Iterator[Session]:
    """A session on the server's database."""
    engine = make_engine(server.database_url)
    try:
        with make_sessionmaker(engine)() as session:
            yield session
    finally:
        engine.dispose()


def user_of(session: Session, name: str) -> User:
    return session.scalars(select(User).where(User.name == name)).one()


def grant_extension(server: Server, login: str, due: datetime) -> None:
    """Give ``login`` their own due date (or move it), as staff would."""
    with database(server) as session:
        user = user_of(session, login)
        extension = session.scalars(select(Extension).where(
            Extension.user_id == user.id, Extension.assignment == LAYOUT.assignment_name)).one_or_none()
        if extension is None:
            session.add(Extension(user_id=user.id, assignment=LAYOUT.assignment_name, due=due, reason="illness",
                                  granted_by="prof"))
        else:
            extension.due = due
        session.commit()


def report(*, killed: int, passed: bool, total: int = MUTANTS) -> Report:
    """A staff report of a suite that killed the first ``killed`` of ``total`` mutants."""
    mutants = [
        MutantVerdict(id=f"s{n:02d}", title=f"Mutant {n}", required=False, hidden=False, killed=n <= killed,
                      killed_by=["test_gru.py::test_all"] if n <= killed else [], hint="")
        for n in range(1, total + 1)
    ]
    return Report(
        submission="submission", passed=passed, reasons=[] if passed else ["too few mutants killed"],
        score=Score(kill_rate=killed / total, killed=killed, total=total, threshold=0.7, required=[],
                    required_missing=[]),
        tests=[], mutants=mutants, variants=["reference", *(m.id for m in mutants)], timing=Timing(total_s=1.0),
    )


def grade(server: Server, submission_id: int, graded: Report | None = None, *, error: str | None = None) -> None:
    """Store ``graded`` (or ``error``) as a worker does: claim the submission, finish it."""
    with database(server) as session:
        claimed = crud.claim_next(session, worker="test-grader", ids=[submission_id])
        assert claimed is not None and claimed.id == submission_id
        stored = crud.finish_submission(
            session, submission_id, worker="test-grader",
            report_json=graded.model_dump_json() if graded else None,
            passed=graded.passed if graded else None, kill_rate=graded.score.kill_rate if graded else None,
            error=error,
        )
        assert stored


def now() -> datetime:
    return datetime.now(timezone.utc)


def days(n: float) -> timedelta:
    return timedelta(days=n)
