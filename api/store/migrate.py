"""Bringing a database's schema up to date with the Alembic migrations in ``api/store/migrations``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

__all__ = ["upgrade"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def upgrade(database_url: str) -> None:
    """Apply every migration not yet applied to ``database_url``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    command.upgrade(config, "head")
