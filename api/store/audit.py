"""The course's audit trail: what staff did to its record, by whom and when (``AuditEvent``)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.store.db import AuditEvent

__all__ = ["events", "record"]


def record(session: Session, *, actor: str, action: str, subject: str = "", detail: str = "") -> AuditEvent:
    """Add one event to the session (the caller commits it with the change it records)."""
    event = AuditEvent(actor=actor, action=action, subject=subject[:200], detail=detail)
    session.add(event)
    return event


def events(session: Session, *, subject: str | None = None, limit: int = 500) -> list[AuditEvent]:
    """The newest events first, of one subject (e.g. ``submission 12``, ``student ada``) or all."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if subject is not None:
        query = query.where(AuditEvent.subject == subject)
    return list(session.scalars(query))
