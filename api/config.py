"""Service settings, from ``MUTAGRADE_*`` environment variables (pydantic-settings).

Built by :func:`get_settings` when the app is created, never at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    """Every setting of the service; each is ``MUTAGRADE_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="MUTAGRADE_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./mutagrade.db",
        description="SQLAlchemy URL: sqlite:///path or postgresql+psycopg://user@host/db",
    )
    queue: str = Field(default="local", pattern="^(local|celery)$", description="local: in-process workers")
    broker_url: str = Field(default="redis://127.0.0.1:6379/0", description="Celery broker (queue=celery)")
    workers: int = Field(default=1, ge=0, description="in-process grading threads (0: accept, grade elsewhere)")
    max_upload_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    max_files: int = Field(default=200, ge=1)
    max_unpacked_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    rate_limit: int = Field(default=10, ge=1, description="submissions a student may post per window")
    rate_window_s: float = Field(default=60.0, gt=0)
    visibility_timeout_s: float = Field(
        default=3600.0, gt=0,
        description="Celery/Redis: a job whose worker vanished is handed to another after this long",
    )
    task_time_limit_s: float = Field(default=900.0, gt=0, description="Celery: a grading job is killed after this long")
    root: Path | None = Field(default=None, description="the mutagrade checkout (default: this one)")
    grade_jobs: int | None = Field(default=None, ge=1, description="children per grading run (default: cores)")


def get_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (tests, the CLI) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})
