"""A per-user sliding-window rate limit on submissions (in this process's memory)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque

__all__ = ["RateLimiter"]


class RateLimiter:
    """At most ``limit`` events per ``window`` seconds per key."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._events: dict[object, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def hit(self, key: object) -> float:
        """Record an event; returns 0 if allowed, else the seconds until one is allowed."""
        now = time.monotonic()
        with self._lock:
            events = self._events[key]
            while events and events[0] <= now - self.window:
                events.popleft()
            if len(events) >= self.limit:
                return max(0.001, events[0] + self.window - now)
            events.append(now)
            return 0.0
