"""Service settings, from ``MUTAGRADE_*`` environment variables (pydantic-settings).

Built by :func:`get_settings` when the app is created, never at import time.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from grader.flows.archive import ArchiveLimits
from grader.core.errors import GradingInputError
from grader.core.paths import Layout, default_layout, layout_for
from grader.flows.serving import RETRY_FAILED_PROBE_S

__all__ = ["Settings", "UnknownAssignment", "archive_limits", "get_settings", "layout_of", "layouts_of"]


class Settings(BaseSettings):
    """Every setting of the service; each is ``MUTAGRADE_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="MUTAGRADE_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./mutagrade.db",
        description="SQLAlchemy URL: sqlite:///path or postgresql+psycopg://user@host/db",
    )
    queue: str = Field(default="local", pattern="^(local|celery)$", description="local: in-process workers")
    broker_url: str = Field(default="redis://127.0.0.1:6379/0", description="Celery broker (queue=celery)")
    workers: int | None = Field(
        default=None, ge=0,
        description="in-process grading threads (0: accept, grade elsewhere; unset: as many as the machine's "
        "admission may let in at once, grader/run/admission.py)",
    )
    max_upload_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    max_files: int = Field(default=200, ge=1)
    max_unpacked_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    rate_limit: int = Field(default=10, ge=1, description="submissions a student may post per window")
    rate_window_s: float = Field(default=60.0, gt=0)
    preview_rate_limit: int = Field(
        default=20, ge=1, description="previews (`mutagrade check` with a server) a student may post per window",
    )
    preview_rate_window_s: float = Field(default=3600.0, gt=0)
    max_in_flight: int = Field(
        default=2, ge=1,
        description="submissions a student may have in flight (queued or being graded) at once; 429 above",
    )
    heartbeat_s: float = Field(
        default=5.0, gt=0, description="a worker grading a submission renews its claim on it this often",
    )
    lease_s: float = Field(
        default=30.0, gt=0,
        description="a claim not renewed for this long has lapsed (its worker died): another worker takes the job",
    )
    visibility_timeout_s: float = Field(
        default=3600.0, gt=0,
        description="Celery/Redis: a job whose worker vanished is handed to another after this long",
    )
    task_time_limit_s: float = Field(default=900.0, gt=0, description="Celery: a grading job is killed after this long")
    resend_after_s: float = Field(
        default=30.0, gt=0,
        description="Celery: a job still queued (or running on a lapsed claim) after this long is sent again",
    )
    root: Path | None = Field(default=None, description="the mutagrade checkout (default: this one)")
    assignment: str | None = Field(
        default=None,
        description="the default assignment: what an upload naming none is for, and what the pages show first; a "
                    "folder's name under assignments/, or an assignment's folder (default: the course's, "
                    "assignments/course.toml)",
    )
    assignments: str | None = Field(
        default=None,
        description="the assignments this service hosts, comma-separated names or folders (default: every folder "
                    "under assignments/); the default assignment is always hosted",
    )
    grade_jobs: int | None = Field(default=None, ge=1, description="children per grading run (default: cores)")
    sandbox_attempts: int = Field(
        default=5, ge=1,
        description="claims of a submission while this machine's sandbox is unavailable before it is stored as an error",
    )
    sandbox_retry_s: float = Field(
        default=RETRY_FAILED_PROBE_S, gt=0,
        description="seconds before a submission put back for the sandbox is tried again (when the sandbox is checked again)",
    )

    @property
    def claim_lease_s(self) -> float:
        """How long a worker's claim on a golden run holds (Celery; a grading's claim is renewed
        instead, see ``lease_s``): the visibility timeout less a margin (a tenth, at most a
        minute). Redis redelivers a job only once the visibility timeout has passed since it
        handed it out, and the claim was taken after that, so the margin makes sure a
        redelivered job always finds its old claim lapsed (clocks of different machines may
        differ a little too)."""
        return self.visibility_timeout_s - min(60.0, self.visibility_timeout_s / 10)

    @model_validator(mode="after")
    def _heartbeat_fits_the_lease(self) -> "Settings":
        # Two beats may be late (a busy database, a pause) before a live worker's job lapses.
        if self.heartbeat_s * 3 > self.lease_s:
            raise ValueError(
                f"heartbeat_s ({self.heartbeat_s:g}) must be at most a third of lease_s ({self.lease_s:g}): "
                "a live worker's claim would lapse after one or two late renewals, and its job go to another"
            )
        return self

    @model_validator(mode="after")
    def _lease_outlasts_jobs(self) -> "Settings":
        # Redis hands an unacknowledged job to another worker once the visibility timeout has
        # passed, whether or not its worker is still alive, and a golden run's claim lapses even
        # sooner: a run allowed to last longer than that would be run twice, over and over.
        # (A grading renews its claim, so a redelivered message finds it held.)
        if self.task_time_limit_s >= self.claim_lease_s:
            raise ValueError(
                f"task_time_limit_s ({self.task_time_limit_s:g}) must be less than the claim lease "
                f"({self.claim_lease_s:g} s: visibility_timeout_s {self.visibility_timeout_s:g} less a "
                "tenth, at most 60 s): a job still running when its claim lapses is given to a second worker"
            )
        return self


def get_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (tests, the CLI) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


class UnknownAssignment(LookupError):
    """An assignment this service does not host; the message names those it does."""

    def __init__(self, name: str, hosted: Iterable[str]) -> None:
        super().__init__(f"assignment: expected one of the assignments this service hosts "
                         f"({', '.join(sorted(hosted))}), got {name!r}")


def layouts_of(settings: Settings) -> dict[str, Layout]:
    """Every assignment the service hosts, by name (its folder's), the default first.

    Raises:
        GradingInputError: an assignment that does not exist, or two of one name.
    """
    root = settings.root.resolve() if settings.root else default_layout().root
    default = layout_for(root, settings.assignment)
    named = [part.strip() for part in settings.assignments.split(",")] if settings.assignments else None
    others = [_hosted(root, name) for name in named if name] if named is not None else [
        layout_for(root, name) for name in default.available()]
    hosted = {default.assignment_name: default}
    for layout in others:
        same = hosted.setdefault(layout.assignment_name, layout)
        if same.assignment_dir.resolve() != layout.assignment_dir.resolve():
            raise GradingInputError(
                f"MUTAGRADE_ASSIGNMENTS: two assignments are named {layout.assignment_name!r} "
                f"({same.assignment_dir} and {layout.assignment_dir}); a service tells them apart by name")
    return hosted


def _hosted(root: Path, name: str) -> Layout:
    try:
        return layout_for(root, name)
    except GradingInputError as exc:
        raise GradingInputError(f"MUTAGRADE_ASSIGNMENTS names {name!r}: "
                                + str(exc).split(": ", 1)[-1]) from None


def layout_of(settings: Settings, assignment: str | None = None) -> Layout:
    """The checkout the service grades with (``settings.root``, or this one), for the hosted
    assignment named ``assignment`` (None: the default one, ``settings.assignment`` or the
    course's).

    Raises:
        UnknownAssignment: the service hosts no assignment of that name.
    """
    hosted = layouts_of(settings)
    if assignment is None:
        return next(iter(hosted.values()))
    if assignment not in hosted:
        raise UnknownAssignment(assignment, hosted)
    return hosted[assignment]


def archive_limits(settings: Settings) -> ArchiveLimits:
    """What an uploaded archive may hold, by the settings."""
    return ArchiveLimits(
        max_bytes=settings.max_upload_bytes, max_files=settings.max_files, max_unpacked=settings.max_unpacked_bytes
    )
