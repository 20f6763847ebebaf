"""Database operations, each a keyword-only function over a session."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta, timezone

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from api.db import Submission, User, utcnow

__all__ = [
    "as_utc",
    "claim",
    "claim_next",
    "create_submission",
    "create_user",
    "finish_submission",
    "gradebook_rows",
    "hash_token",
    "list_submissions",
    "list_users",
    "regrade",
    "requeue_running",
    "user_by_token",
]

ROLES = ("student", "staff")


def hash_token(token: str) -> str:
    """Tokens are 256 random bits, so one SHA-256 is enough to keep them unusable at rest."""
    return hashlib.sha256(token.encode()).hexdigest()


def create_user(session: Session, *, name: str, role: str) -> tuple[User, str]:
    """A user with a fresh token (returned once, never stored in clear); an existing user of
    that name gets a new token, replacing the old one.

    Raises:
        ValueError: if ``role`` is not student or staff, or ``name`` is empty.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not name.strip():
        raise ValueError("user name must not be empty")
    token = "mg_" + secrets.token_urlsafe(32)
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        user = User(name=name, role=role, token_hash=hash_token(token))
        session.add(user)
    else:
        user.role, user.token_hash = role, hash_token(token)
    session.commit()
    return user, token


def user_by_token(session: Session, *, token: str) -> User | None:
    return session.scalar(select(User).where(User.token_hash == hash_token(token)))


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


def create_submission(session: Session, *, user: User, archive: bytes, name: str) -> Submission:
    submission = Submission(user_id=user.id, archive=archive, archive_name=name[:255], status="queued")
    session.add(submission)
    session.commit()
    return submission


def list_submissions(
    session: Session,
    *,
    user: User | None = None,
    student: str | None = None,
    status: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[Submission]:
    """Newest first; ``user`` restricts to one user's own, ``student`` filters by name."""
    query = select(Submission).join(User).order_by(Submission.id.desc()).limit(limit).offset(offset)
    if user is not None:
        query = query.where(Submission.user_id == user.id)
    if student is not None:
        query = query.where(User.name == student)
    if status is not None:
        query = query.where(Submission.status == status)
    return list(session.scalars(query))


def claim_next(session: Session, *, worker: str, ids: list[int] | None = None) -> Submission | None:
    """Atomically move the oldest queued submission to running, for ``worker``.

    The conditional UPDATE makes the claim safe between threads, processes and machines:
    only one claimer sees its row count be 1.
    """
    while True:
        query = select(Submission.id).where(Submission.status == "queued").order_by(Submission.id).limit(1)
        if ids is not None:
            query = query.where(Submission.id.in_(ids))
        candidate = session.scalar(query)
        if candidate is None:
            return None
        claimed = session.execute(
            update(Submission)
            .where(Submission.id == candidate, Submission.status == "queued")
            .values(status="running", claimed_by=worker, started_at=utcnow(), attempts=Submission.attempts + 1)
        )
        session.commit()
        if claimed.rowcount == 1:
            return session.get(Submission, candidate, populate_existing=True)


def claim(session: Session, *, submission_id: int, worker: str, stale_after_s: float) -> Submission | None:
    """Claim one submission for ``worker``: if it is queued, or running under a claim older
    than ``stale_after_s`` (its worker died: the broker gave the job to another). None when it
    is done, or fresh in another worker's hands."""
    stale = utcnow() - timedelta(seconds=stale_after_s)
    claimed = session.execute(
        update(Submission)
        .where(
            Submission.id == submission_id,
            or_(Submission.status == "queued", and_(Submission.status == "running", Submission.started_at < stale)),
        )
        .values(status="running", claimed_by=worker, started_at=utcnow(), attempts=Submission.attempts + 1)
    )
    session.commit()
    return session.get(Submission, submission_id, populate_existing=True) if claimed.rowcount == 1 else None


def finish_submission(
    session: Session,
    submission_id: int,
    *,
    worker: str | None,
    report_json: str | None = None,
    passed: bool | None = None,
    kill_rate: float | None = None,
    error: str | None = None,
) -> bool:
    """Store the outcome of a grading run, if ``worker`` still holds the claim (a regrade or a
    requeue in between makes a late result harmless); returns whether it was stored."""
    conditions = [Submission.id == submission_id, Submission.status == "running"]
    if worker is not None:
        conditions.append(Submission.claimed_by == worker)
    stored = session.execute(
        update(Submission)
        .where(*conditions)
        .values(
            status="error" if error else "done",
            finished_at=utcnow(),
            report_json=report_json,
            passed=passed,
            kill_rate=kill_rate,
            error=error,
        )
    )
    session.commit()
    return stored.rowcount == 1


# A running submission as it was before its claim (queued again).
_UNCLAIMED = {"status": "queued", "claimed_by": None, "started_at": None}


def _held_by(submission_id: int, worker: str) -> tuple:
    """The rows of a submission ``worker`` holds: running, under its claim."""
    return Submission.id == submission_id, Submission.status == "running", Submission.claimed_by == worker


def wait_for_sandbox(session: Session, submission_id: int, *, worker: str, release: bool) -> int | None:
    """Count one more wait for the grading sandbox on a submission ``worker`` holds and, with
    ``release``, put it back in the queue as it was before the claim (it could not be graded
    now, through no fault of its own). Returns the waits counted so far, or None if ``worker``
    no longer holds it (regraded or requeued meanwhile)."""
    values: dict[str, object] = {"sandbox_waits": Submission.sandbox_waits + 1, **(_UNCLAIMED if release else {})}
    waits = session.execute(
        update(Submission).where(*_held_by(submission_id, worker)).values(**values).returning(Submission.sandbox_waits)
    ).scalar_one_or_none()
    session.commit()
    return waits


def release(session: Session, submission_id: int, *, worker: str) -> bool:
    """Put a submission ``worker`` holds back in the queue, as it was before the claim;
    returns whether ``worker`` still held it."""
    released = session.execute(update(Submission).where(*_held_by(submission_id, worker)).values(**_UNCLAIMED))
    session.commit()
    return released.rowcount == 1


def requeue_running(session: Session, *, worker_prefix: str | None = None) -> int:
    """Queue again the jobs a stopped server left running (all of them, or one worker's)."""
    query = update(Submission).where(Submission.status == "running")
    if worker_prefix is not None:
        query = query.where(Submission.claimed_by.startswith(worker_prefix))
    result = session.execute(query.values(status="queued", claimed_by=None, started_at=None))
    session.commit()
    return result.rowcount


def regrade(session: Session, *, submission: Submission) -> Submission:
    """Queue ``submission`` again, to be graded with the full kill matrix."""
    submission.status = "queued"
    submission.full_matrix = True
    submission.sandbox_waits = 0
    submission.claimed_by = None
    submission.report_json = None
    submission.passed = None
    submission.kill_rate = None
    submission.error = None
    submission.finished_at = None
    session.commit()
    return submission


def gradebook_rows(session: Session) -> list[dict[str, object]]:
    """Per student: submission count, the latest graded submission and the best one."""
    rows = []
    students = session.scalars(select(User).where(User.role == "student").order_by(User.name))
    for student in students:
        graded = list(
            session.scalars(
                select(Submission)
                .where(Submission.user_id == student.id, Submission.status == "done")
                .order_by(Submission.id.desc())
            )
        )
        total = session.scalar(select(func.count()).select_from(Submission).where(Submission.user_id == student.id))
        latest = graded[0] if graded else None
        best = max(graded, key=lambda s: (bool(s.passed), s.kill_rate or 0.0, -s.id), default=None)
        rows.append({"student": student.name, "submissions": total, "latest": latest, "best": best})
    return rows


def as_utc(moment: datetime | None) -> str:
    """ISO 8601 in UTC (SQLite hands datetimes back without their zone)."""
    if moment is None:
        return ""
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).isoformat()
