"""The database: SQLAlchemy 2 models of users and submissions, and the engine factory."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    false,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship, sessionmaker

from grader.core.states import JobStatus, RegradeState, SubmissionKind

__all__ = [
    "AuditEvent", "Base", "Extension", "GoldenRun", "RegradeRequest", "Submission", "User", "make_engine",
    "make_sessionmaker", "utcnow",
]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class User(Base):
    """A student or a member of staff, known by a bearer token (stored hashed; none once revoked)."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True, index=True)
    role: Mapped[str] = mapped_column(String(10))  # a Role
    token_hash: Mapped[str | None] = mapped_column(String(64), unique=True, index=True, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # From the course's roster (an LMS export, grader/core/roster.py): how the LMS knows them.
    display_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    email: Mapped[str | None] = mapped_column(String(254), nullable=True)
    sis_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    lms_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    section: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # Set when staff removed them from the roster (their token is revoked then too).
    removed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    submissions: Mapped[list["Submission"]] = relationship(back_populates="user")


class Submission(Base):
    """One uploaded archive and, once graded, its report. The status is the job's state:
    queued -> running -> done | error; a job left running when a server stopped is queued again."""

    __tablename__ = "submissions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    # The assignment it was made for (its folder's name, as the service hosts it). None only on
    # a row stored before a service hosted several; the service's default adopts it at start.
    assignment: Mapped[str | None] = mapped_column(String(100), nullable=True, index=True)
    status: Mapped[str] = mapped_column(String(10), index=True, default=JobStatus.QUEUED)
    archive: Mapped[bytes] = mapped_column(LargeBinary)
    archive_name: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Renewed every few seconds by the worker grading it: a claim not renewed for the lease has lapsed.
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claimed_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    passed: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    kill_rate: Mapped[float | None] = mapped_column(Float, nullable=True)
    report_json: Mapped[str | None] = mapped_column(Text, nullable=True)  # staff view of the report
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Run every valid test on every mutant (a staff regrade), not only up to each mutant's first kill.
    full_matrix: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Times it was put back because the grading sandbox was unavailable (a regrade starts again).
    sandbox_waits: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # A submission, or a preview that never becomes the grade of record (a SubmissionKind).
    kind: Mapped[str] = mapped_column(String(10), default=SubmissionKind.SUBMISSION,
                                      server_default=SubmissionKind.SUBMISSION, index=True)
    # Stamped when it was stored, against the student's due date (a Timeliness; None: no due date).
    timeliness: Mapped[str | None] = mapped_column(String(10), nullable=True)
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    days_late: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    penalty: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")  # share of the points
    # Staff's override of the grade, with the reason (recorded, with who and when, as an AuditEvent too).
    override_points: Mapped[float | None] = mapped_column(Float, nullable=True)
    override_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    override_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    override_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    user: Mapped[User] = relationship(back_populates="submissions")


class Extension(Base):
    """A student's own due date for one assignment, granted by staff; it replaces the
    assignment's for them."""

    __tablename__ = "extensions"
    __table_args__ = (UniqueConstraint("user_id", "assignment", name="uq_extensions_user_assignment"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    # As Submission.assignment (None only on a row stored before; adopted at start).
    assignment: Mapped[str | None] = mapped_column(String(100), nullable=True)
    due: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str] = mapped_column(Text, default="")
    granted_by: Mapped[str] = mapped_column(String(100))
    granted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RegradeRequest(Base):
    """A student's request that a submission be looked at again, and staff's answer."""

    __tablename__ = "regrade_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    message: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    state: Mapped[str] = mapped_column(String(10), default=RegradeState.OPEN, index=True)
    answer: Mapped[str | None] = mapped_column(Text, nullable=True)
    answered_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    answered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class AuditEvent(Base):
    """What staff did to the course's record (a roster import, an extension, an override, an
    answer to a regrade request, a regrade), by whom and when: kept, never edited."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(40))
    subject: Mapped[str] = mapped_column(String(200), default="")
    detail: Mapped[str] = mapped_column(Text, default="")


class GoldenRun(Base):
    """A live torch comparison of every variant (and optionally a submission's implementation),
    run on a worker's device (queue ``gpu`` under Celery)."""

    __tablename__ = "golden_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(10), index=True, default=JobStatus.QUEUED)
    submission_id: Mapped[int | None] = mapped_column(ForeignKey("submissions.id"), nullable=True)
    # Whose variants it compares (as Submission.assignment).
    assignment: Mapped[str | None] = mapped_column(String(100), nullable=True)
    cases: Mapped[int] = mapped_column(Integer, default=4)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    claimed_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    result_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL and a busy timeout so threads can share it."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record) -> None:  # pragma: no cover - set-up
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def make_sessionmaker(engine: Engine) -> sessionmaker:
    return sessionmaker(bind=engine, expire_on_commit=False)
