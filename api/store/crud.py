"""Database operations, each a function over a session: every query of the service is here."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta, timezone

from sqlalchemy import and_, case, func, or_, select, text, update
from sqlalchemy.orm import Session

from api.store.db import Extension, GoldenRun, Submission, User, utcnow
from grader.core.states import IN_FLIGHT, JobStatus, Role, SubmissionKind, Timeliness
from grader.core.deadlines import Timeliness as Judged
from grader.core.caps import MAX_STORED_REPORT_BYTES, cap_text, report_json_within
from grader.core.models import Report

__all__ = [
    "InFlightLimit",
    "UserExists",
    "adopt_unnamed",
    "as_utc",
    "claim_golden_run",
    "claim_next",
    "create_golden_run",
    "create_submission",
    "create_user",
    "database_now",
    "finish_golden_run",
    "finish_submission",
    "get_golden_run",
    "get_submission",
    "golden_runs_to_resend",
    "hash_token",
    "in_flight",
    "lapsed_claims",
    "list_submissions",
    "list_users",
    "ping",
    "queued_since",
    "regrade",
    "release",
    "renew_claim",
    "requeue_running",
    "revoke_token",
    "user_by_name",
    "user_by_token",
    "wait_for_sandbox",
]


class InFlightLimit(Exception):
    """The user already has ``in_flight`` submissions queued or being graded, and ``limit`` is
    the most allowed at once."""

    def __init__(self, in_flight: int, limit: int) -> None:
        super().__init__(f"{in_flight} submission(s) in flight, at most {limit}")
        self.in_flight = in_flight
        self.limit = limit


def hash_token(token: str) -> str:
    """Tokens are 256 random bits, so one SHA-256 is enough to keep them unusable at rest."""
    return hashlib.sha256(token.encode()).hexdigest()


class UserExists(ValueError):
    """A user's token or role would be replaced without being asked to."""


def create_user(session: Session, *, name: str, role: str, replace: bool = False) -> tuple[User, str]:
    """A user with a fresh token (returned once, never stored in clear). An existing user of
    that name (a revoked one too) gets a new token and ``role`` only with ``replace``; the old
    token stops working.

    Raises:
        UserExists: the user exists and ``replace`` is false (nothing is changed).
        ValueError: if ``role`` is not student or staff, or ``name`` is empty.
    """
    if role not in tuple(Role):
        raise ValueError(f"role must be one of {', '.join(Role)}, got {role!r}")
    if not name.strip():
        raise ValueError("user name must not be empty")
    user = user_by_name(session, name=name)
    if user is not None and not replace:
        has = "has a token" if user.token_hash is not None else "exists, its token revoked"
        raise UserExists(
            f"user {name!r} already {has} (role {user.role}); nothing changed. Pass --replace to give them "
            "a new token and this role (the old token stops working)"
        )
    token = "mg_" + secrets.token_urlsafe(32)
    if user is None:
        user = User(name=name, role=role, token_hash=hash_token(token))
        session.add(user)
    else:
        user.role, user.token_hash = role, hash_token(token)
    session.commit()
    return user, token


def revoke_token(session: Session, *, name: str) -> bool:
    """End the token of user ``name`` at once (the user and their submissions stay); whether
    there was one to end.

    Raises:
        LookupError: no user of that name.
    """
    user = user_by_name(session, name=name)
    if user is None:
        raise LookupError(f"user {name!r}: no such user")
    had = user.token_hash is not None
    user.token_hash = None
    session.commit()
    return had


def user_by_name(session: Session, *, name: str) -> User | None:
    return session.scalar(select(User).where(User.name == name))


def user_by_token(session: Session, *, token: str) -> User | None:
    return session.scalar(select(User).where(User.token_hash == hash_token(token)))


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


def in_flight(session: Session, *, user_id: int) -> int:
    """How many of the user's submissions are queued or being graded."""
    return session.scalar(
        select(func.count()).select_from(Submission).where(Submission.user_id == user_id,
                                                            Submission.status.in_(IN_FLIGHT))
    )


def get_submission(session: Session, submission_id: int) -> Submission | None:
    return session.get(Submission, submission_id)


def create_submission(
    session: Session, *, user: User, assignment: str, archive: bytes, name: str, max_in_flight: int | None = None,
    kind: SubmissionKind = SubmissionKind.SUBMISSION, at: datetime | None = None, judged: Judged | None = None,
) -> Submission:
    """Store a submission (or a preview, by ``kind``) for the hosted ``assignment`` (its name), queued, made ``at`` (default: now) and
    stamped with ``judged``, its time against the student's due date (none: no due date). A
    judgement of refused is stored as late, with all of the points lost: only a preview gets
    that far (a submission is refused before it is stored).

    Raises:
        InFlightLimit: ``max_in_flight`` is given and the user already has that many queued
            or being graded (nothing is stored).
    """
    if max_in_flight is not None:
        # Count and insert under a lock on the user's row (PostgreSQL; SQLite locks the whole
        # database for the write), held to the commit: two posts at once cannot both find room
        # for one more. The row is written unchanged; only the lock is wanted.
        session.execute(update(User).where(User.id == user.id).values(name=User.name))
        count = in_flight(session, user_id=user.id)
        if count >= max_in_flight:
            session.rollback()
            raise InFlightLimit(count, max_in_flight)
    stamp = {} if judged is None or judged.due is None else {
        "timeliness": Timeliness.ON_TIME if judged.status == "on_time" else Timeliness.LATE,
        # In UTC: SQLite keeps a time without its zone, and hands it back as UTC.
        "due_at": judged.due.astimezone(timezone.utc), "days_late": judged.days_late, "penalty": judged.penalty,
    }
    submission = Submission(user_id=user.id, assignment=assignment, archive=archive, archive_name=name[:255],
                            status=JobStatus.QUEUED, kind=kind, created_at=(at or utcnow()).astimezone(timezone.utc), **stamp)
    session.add(submission)
    session.commit()
    return submission


def list_submissions(
    session: Session,
    *,
    user: User | None = None,
    student: str | None = None,
    status: str | None = None,
    assignment: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[Submission]:
    """Newest first; ``user`` restricts to one user's own, ``student`` filters by name,
    ``assignment`` by the assignment they were made for."""
    query = select(Submission).join(User).order_by(Submission.id.desc()).limit(limit).offset(offset)
    if assignment is not None:
        query = query.where(Submission.assignment == assignment)
    if user is not None:
        query = query.where(Submission.user_id == user.id)
    if student is not None:
        query = query.where(User.name == student)
    if status is not None:
        query = query.where(Submission.status == status)
    return list(session.scalars(query))


def database_now(session: Session) -> datetime:
    """Now, by the database's clock where it has one: PostgreSQL's, shared by every machine
    that grades, so their own clocks' differences cannot shorten a lease; SQLite's database
    is on one machine, whose clock this is. ``clock_timestamp()``, not ``now()``: ``now()`` is
    when the session's transaction began, which for a form read slowly after a first query
    would stamp an upload with the moment its headers arrived."""
    if session.get_bind().dialect.name == "postgresql":
        return session.scalar(select(func.clock_timestamp()))
    return utcnow()


def _renewed():
    """When a running submission's claim was last renewed (a claim never renewed: when it was taken)."""
    return func.coalesce(Submission.heartbeat_at, Submission.started_at)


def _lapsed(now: datetime, lease_s: float):
    """Running under a claim not renewed for ``lease_s``."""
    return and_(Submission.status == JobStatus.RUNNING, _renewed() < now - timedelta(seconds=lease_s))


def _fairest_queued(ids: list[int] | None):
    """The next queued submission in turn: of the students with a submission queued, the one
    with the fewest being graded now, then the one served least recently (whose latest grading
    ended first; never served first: a long grading counts as service until it ends, so a
    student of slow suites waits for those of quick ones); that student's oldest queued
    submission."""
    waiting = select(Submission.user_id).where(Submission.status == JobStatus.QUEUED)
    students = (
        select(
            Submission.user_id,
            func.sum(case((Submission.status == JobStatus.RUNNING, 1), else_=0)).label("running"),
            func.max(Submission.finished_at).label("served"),
        )
        .where(Submission.user_id.in_(waiting))
        .group_by(Submission.user_id)
        .subquery()
    )
    query = (
        select(Submission.id)
        .join(students, students.c.user_id == Submission.user_id)
        .where(Submission.status == JobStatus.QUEUED)
        .order_by(students.c.running, students.c.served.asc().nulls_first(), Submission.id)
        .limit(1)
    )
    return query if ids is None else query.where(Submission.id.in_(ids))


def claim_next(
    session: Session, *, worker: str, lease_s: float | None = None, ids: list[int] | None = None
) -> Submission | None:
    """Atomically move the next submission to running, for ``worker``: with ``lease_s``, one
    whose claim has lapsed (its worker died; the oldest lapse first), else the next queued one
    in turn over students (see :func:`_fairest_queued`), so one student's many or slow
    submissions cannot keep the others waiting.

    The conditional UPDATE makes the claim safe between threads, processes and machines:
    only one claimer sees its row count be 1.
    """
    while True:
        now = database_now(session)
        candidate = None
        if lease_s is not None:
            lapsed = _lapsed(now, lease_s)
            candidate = session.scalar(select(Submission.id).where(lapsed).order_by(_renewed(), Submission.id).limit(1))
        if candidate is None:
            candidate = session.scalar(_fairest_queued(ids))
            if candidate is None:
                session.commit()
                return None
            takeable = Submission.status == JobStatus.QUEUED
        else:
            takeable = lapsed
        claimed = session.execute(
            update(Submission)
            .where(Submission.id == candidate, takeable)
            .values(status=JobStatus.RUNNING, claimed_by=worker, started_at=now, heartbeat_at=now,
                    attempts=Submission.attempts + 1)
        )
        session.commit()
        if claimed.rowcount == 1:
            return session.get(Submission, candidate, populate_existing=True)


def renew_claim(session: Session, submission_id: int, *, worker: str) -> bool:
    """Renew ``worker``'s claim on a submission it is grading; False if it holds it no more
    (regraded, put back, or taken by another worker after its claim lapsed)."""
    renewed = session.execute(
        update(Submission).where(*_held_by(submission_id, worker)).values(heartbeat_at=database_now(session))
    )
    session.commit()
    return renewed.rowcount == 1


def queued_since(session: Session, *, cutoff: datetime) -> list[int]:
    """The submissions still queued that were stored at ``cutoff`` or before."""
    return list(session.scalars(
        select(Submission.id).where(Submission.status == JobStatus.QUEUED, Submission.created_at <= cutoff)
    ))


def lapsed_claims(session: Session, *, lease_s: float) -> list[int]:
    """The submissions running under a claim not renewed for ``lease_s``: their workers died."""
    return list(session.scalars(
        select(Submission.id).where(_lapsed(database_now(session), lease_s)).order_by(Submission.id)
    ))


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
    requeue in between makes a late result harmless); returns whether it was stored.

    What is stored is bounded: a report over ``MAX_STORED_REPORT_BYTES`` is shortened whole
    (:func:`grader.core.caps.fit_report`: whole items left out and counted, never its JSON cut), an
    error cut to ``MAX_TEXT_CHARS``.
    """
    if report_json is not None and len(report_json) * 4 > MAX_STORED_REPORT_BYTES:  # UTF-8: 4 bytes a character at most
        if len(report_json.encode()) > MAX_STORED_REPORT_BYTES:
            report_json = report_json_within(Report.model_validate_json(report_json))
    error = cap_text(error) if error else error
    conditions = [Submission.id == submission_id, Submission.status == JobStatus.RUNNING]
    if worker is not None:
        conditions.append(Submission.claimed_by == worker)
    stored = session.execute(
        update(Submission)
        .where(*conditions)
        .values(
            status=JobStatus.ERROR if error else JobStatus.DONE,
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
_UNCLAIMED = {"status": JobStatus.QUEUED, "claimed_by": None, "started_at": None, "heartbeat_at": None}


def _held_by(submission_id: int, worker: str) -> tuple:
    """The rows of a submission ``worker`` holds: running, under its claim."""
    return Submission.id == submission_id, Submission.status == JobStatus.RUNNING, Submission.claimed_by == worker


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
    query = update(Submission).where(Submission.status == JobStatus.RUNNING)
    if worker_prefix is not None:
        query = query.where(Submission.claimed_by.startswith(worker_prefix))
    result = session.execute(query.values(**_UNCLAIMED))
    session.commit()
    return result.rowcount


def regrade(session: Session, *, submission: Submission) -> Submission:
    """Queue ``submission`` again, to be graded with the full kill matrix."""
    submission.status = JobStatus.QUEUED
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


def adopt_unnamed(session: Session, *, assignment: str) -> None:
    """Give the rows stored before a service hosted several assignments (submissions,
    extensions, golden runs naming none) to ``assignment``, the service's default: the one
    assignment that service graded."""
    for table in (Submission, Extension, GoldenRun):
        session.execute(update(table).where(table.assignment.is_(None)).values(assignment=assignment))
    session.commit()


def ping(session: Session) -> None:
    """A round trip to the database (raises when it does not answer)."""
    session.execute(text("SELECT 1"))


# ---------------------------------------------------------------- golden runs
def create_golden_run(session: Session, *, assignment: str, submission_id: int | None, cases: int) -> GoldenRun:
    """Store a golden run of the hosted ``assignment``'s variants, queued."""
    run = GoldenRun(status=JobStatus.QUEUED, assignment=assignment, submission_id=submission_id, cases=cases)
    session.add(run)
    session.commit()
    return run


def get_golden_run(session: Session, run_id: int) -> GoldenRun | None:
    """The run as the database holds it now (a worker may have moved it on)."""
    run = session.get(GoldenRun, run_id)
    if run is not None:
        session.refresh(run)
    return run


def claim_golden_run(session: Session, run_id: int, *, worker: str, stale_after_s: float) -> GoldenRun | None:
    """Take a queued run for ``worker``, or one whose claim is older than ``stale_after_s`` (its
    worker died and the broker handed the job on); None otherwise. The conditional UPDATE lets
    one claimer only see its row count be 1."""
    stale = utcnow() - timedelta(seconds=stale_after_s)
    claimed = session.execute(
        update(GoldenRun)
        .where(
            GoldenRun.id == run_id,
            or_(GoldenRun.status == JobStatus.QUEUED,
                and_(GoldenRun.status == JobStatus.RUNNING, GoldenRun.started_at < stale)),
        )
        .values(status=JobStatus.RUNNING, claimed_by=worker, started_at=utcnow())
    )
    session.commit()
    return session.get(GoldenRun, run_id) if claimed.rowcount == 1 else None


def finish_golden_run(
    session: Session, run_id: int, *, worker: str, result_json: str | None = None, error: str | None = None
) -> JobStatus:
    """Store a run's result, or its error, if ``worker`` still holds it; returns its new status."""
    values = {"status": JobStatus.ERROR, "error": error} if error is not None else {
        "status": JobStatus.DONE, "result_json": result_json}
    session.execute(
        update(GoldenRun).where(GoldenRun.id == run_id, GoldenRun.claimed_by == worker)
        .values(finished_at=utcnow(), **values)
    )
    session.commit()
    return values["status"]


def golden_runs_to_resend(session: Session, *, cutoff: datetime, lapsed: datetime) -> tuple[list[int], list[int]]:
    """The runs still queued that were stored at ``cutoff`` or before, and those running under a
    claim taken before ``lapsed`` (their workers died)."""
    return tuple(
        list(session.scalars(select(GoldenRun.id).where(*where)))
        for where in (
            (GoldenRun.status == JobStatus.QUEUED, GoldenRun.created_at <= cutoff),
            (GoldenRun.status == JobStatus.RUNNING, GoldenRun.started_at < lapsed),
        )
    )


def as_utc(moment: datetime | None) -> str:
    """ISO 8601 in UTC (SQLite hands datetimes back without their zone)."""
    if moment is None:
        return ""
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).isoformat()
