"""What the staff's class pages compute from many submissions (figures, plots, similarity),
kept in the app's state under a key that names what it was computed from, so that a second
visit is instant and a change (a new grade of record, a regrade) is a new key.

A value is computed once however many requests ask for it at the same moment: the first
computes, the others wait for it. The routes that ask are sync, so the waiting and the
computing happen in the thread pool, never on the event loop. Only the latest few values are
kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, TypeVar

from fastapi import FastAPI

__all__ = ["KEEP", "Computed", "ComputedCache", "computed_cache"]

T = TypeVar("T")
KEEP = 24  # values kept; the least recently used goes first


@dataclass(frozen=True)
class Computed(Generic[T]):
    """A value and when it was computed (UTC)."""

    value: T
    at: datetime


class ComputedCache:
    """Values by key, each computed once; the latest :data:`KEEP` kept."""

    def __init__(self, *, keep: int = KEEP) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, Computed[Any]] = OrderedDict()
        self._computing: dict[Hashable, threading.Lock] = {}
        # matplotlib's settings are the process's own: one plot is drawn at a time.
        self.drawing = threading.Lock()

    def _kept(self, key: Hashable) -> Computed[Any] | None:
        with self._lock:
            found = self._values.get(key)
            if found is not None:
                self._values.move_to_end(key)
            return found

    def get(self, key: Hashable, compute: Callable[[], T]) -> Computed[T]:
        """The value of ``key``, computed by ``compute`` unless it is kept (an exception it
        raises reaches the caller, and nothing is kept)."""
        found = self._kept(key)
        if found is not None:
            return found
        with self._lock:
            turn = self._computing.setdefault(key, threading.Lock())
        with turn:
            found = self._kept(key)
            if found is not None:
                return found
            try:
                value = Computed(value=compute(), at=datetime.now(timezone.utc))
                with self._lock:
                    self._values[key] = value
                    while len(self._values) > self._keep:
                        self._values.popitem(last=False)
            finally:
                with self._lock:
                    self._computing.pop(key, None)
        return value


def computed_cache(app: FastAPI) -> ComputedCache:
    """The app's cache, made on first use (two first requests at the same moment may each make
    one; one is kept, and the other's value is computed again once)."""
    cache = getattr(app.state, "course_cache", None)
    if cache is None:
        cache = app.state.course_cache = ComputedCache()
    return cache
