"""How many gradings run at once on one machine: as many as its cores keep busy, more while
they sit idle, never more than its memory (and its sandbox users) hold.

A grading whose runs sleep or block (a test waiting on a barrier until its time limit) holds a
slot and no CPU. A fixed count of slots would leave the cores idle behind it; :class:`Admission`
instead lets one grading per core in at any time, and one more each time the cores it was
given have been mostly idle for a moment, up to :attr:`Capacity.most`. A grading's own budgets
(wall clock, CPU) still bound it once it is in; time waiting here is not counted.

``grade-batch``, the service's local queue and each Celery worker process grade through an
:class:`Admission` whose count is the machine's (``slots``: one lock file per grading at once,
held while it runs), so that every process grading on one machine, of one user, counts the same
gradings.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

if TYPE_CHECKING:
    from grader.sandbox.base import SandboxMode

__all__ = ["GRADING_MEMORY_MB", "Admission", "Capacity", "capacity", "idle_cores", "machine_admission",
           "machine_capacity", "machine_slots"]

# What one grading holds at its peak, its two warm workers and their runs' processes together
# (measured: about 150 MiB; bench/README.md), with room to spare.
GRADING_MEMORY_MB = 400
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Capacity:
    """The machine as the admission sees it."""

    cores: int  # the cores this process may run on (its CPU affinity: ``taskset`` narrows it)
    most: int  # gradings at once at most: memory and sandbox users allowing

    @property
    def base(self) -> int:
        """Gradings let in whatever the load: one per core."""
        return min(self.cores, self.most)


def _available_mb() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def capacity(*, workers_free: int | None = None, cores: int | None = None,
             memory_mb: int | None = None, per_grading_mb: int = GRADING_MEMORY_MB) -> Capacity:
    """The capacity of this machine now.

    Args:
        workers_free: grading workers that can start at once (free sandbox users, when each
            worker needs one), None for no such bound; a grading needs two.
        cores: the cores to use (default: this process's CPU affinity).
        memory_mb: memory free for gradings (default: the kernel's MemAvailable).
        per_grading_mb: what one grading holds at most.
    """
    cores = cores if cores is not None else len(os.sched_getaffinity(0))
    memory_mb = memory_mb if memory_mb is not None else _available_mb()
    # Beyond this, even idle gradings are more bookkeeping than help, and each keeps two warm
    # workers (two sandbox users) for as long as its process grades.
    most = 2 * cores
    if memory_mb is not None:
        most = min(most, memory_mb // per_grading_mb)
    if workers_free is not None:
        most = min(most, workers_free // 2)
    return Capacity(cores=cores, most=max(1, most))


def machine_capacity(sandbox: SandboxMode | str, *, reserved_workers: int = 0) -> Capacity:
    """:func:`capacity` for gradings under sandbox mode ``sandbox``: where each worker runs as
    a sandbox user of its own, the users bound it (less ``reserved_workers``, kept for other
    workers: a batch's journal replays)."""
    from grader.sandbox.base import Layer, SandboxMode
    from grader.sandbox.status import sandbox_status
    from grader.sandbox.users import sandbox_users

    free = None
    if SandboxMode(sandbox) is not SandboxMode.NONE and sandbox_status().active(Layer.UID):
        free = max(2, len(sandbox_users()) - reserved_workers)
    return capacity(workers_free=free)


def machine_slots() -> Path:
    """Where this machine's gradings of this user hold their slots."""
    base = Path("/run") if os.geteuid() == 0 else Path(tempfile.gettempdir())
    return base / f"mutagrade-admission-{os.geteuid()}"


def machine_admission(sandbox: SandboxMode | str, *, reserved_workers: int = 0) -> Admission:
    """The admission every grading process of this machine shares (:func:`machine_capacity`,
    slots in :func:`machine_slots`)."""
    return Admission(machine_capacity(sandbox, reserved_workers=reserved_workers), slots=machine_slots())


def idle_cores(cpus: Sequence[int]) -> Callable[[], float | None]:
    """A probe of how many of ``cpus`` sat idle since it was last called (None at the first
    call), from /proc/stat (idle and I/O wait ticks)."""
    wanted = {f"cpu{n}" for n in cpus}
    last: list[tuple[float, int]] = []

    def ticks() -> int:
        total = 0
        with open("/proc/stat", encoding="ascii") as stat:
            for line in stat:
                fields = line.split()
                if fields and fields[0] in wanted:
                    total += int(fields[4]) + int(fields[5])
        return total

    def probe() -> float | None:
        now, idle = time.monotonic(), ticks()
        before = last[:] if last else None
        last[:] = [(now, idle)]
        if before is None or now <= before[0][0]:
            return None
        return (idle - before[0][1]) / _TICKS / (now - before[0][0])

    return probe


class Admission:
    """The gate every grading passes before it starts (see the module's docstring).

    Args:
        capacity: the cores and the most gradings at once.
        idle_share: how much of a core must have sat idle, over ``interval`` seconds, before one
            more grading than the cores is let in.
        interval: how long the cores are watched before each such decision.
        probe: how idle the cores were since the last call (default: :func:`idle_cores` over
            this process's CPU affinity).
        slots: a folder of lock files, one per grading at once, shared by every process that
            names it (None: this process's gradings alone are counted).
    """

    def __init__(self, capacity: Capacity, *, idle_share: float = 0.75, interval: float = 0.25,
                 probe: Callable[[], float | None] | None = None, slots: Path | None = None) -> None:
        self.capacity = capacity
        self.idle_share = idle_share
        self.interval = interval
        self.probe = probe or idle_cores(sorted(os.sched_getaffinity(0)))
        self.running = 0
        self.most_at_once = 0  # the most gradings that ran at once (a benchmark prints it)
        self._changed = threading.Condition()
        self._watched_since: float | None = None  # when the cores' idleness began to be watched
        self.slots = slots
        self._held = threading.local()  # the slot files a thread's gradings hold
        if slots is not None:
            slots.mkdir(mode=0o700, parents=True, exist_ok=True)

    def enter(self, stop: threading.Event | None = None) -> bool:
        """Wait until one more grading may start, and count it in; False if ``stop`` was set
        first (nothing is counted then)."""
        with self._changed:
            while not (stop is not None and stop.is_set()):
                allowed = self._may_enter()
                if allowed and self._take_slot(allowed):
                    self.running += 1
                    self.most_at_once = max(self.most_at_once, self.running)
                    return True
                self._changed.wait(timeout=self.interval / 2)
            return False

    def leave(self) -> None:
        """A grading is over."""
        with self._changed:
            self.running -= 1
            held = getattr(self._held, "fds", None)
            if held:
                os.close(held.pop())  # its lock goes with it
            self._changed.notify()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One grading, from when it is let in to its end."""
        self.enter()
        try:
            yield
        finally:
            self.leave()

    def _lock(self, number: int) -> int | None:
        """Slot ``number`` locked (its open file: closing it frees the slot), or None when
        another grading holds it."""
        assert self.slots is not None  # noqa: S101 - only called with shared slots
        fd = os.open(self.slots / f"{number}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _take_slot(self, allowed: int) -> bool:
        """Lock a free slot of the machine's among the first ``allowed`` (True without
        ``slots``); another process may have taken the last one first."""
        if self.slots is None:
            return True
        for number in range(allowed):
            fd = self._lock(number)
            if fd is not None:
                self._held.fds = [*getattr(self._held, "fds", []), fd]
                return True
        return False

    def _running(self) -> int:
        """Gradings running now: this process's, or the machine's where slots are shared."""
        if self.slots is None:
            return self.running
        busy = 0
        for number in range(self.capacity.most):
            fd = self._lock(number)
            if fd is None:
                busy += 1
            else:
                os.close(fd)
        return busy

    def _may_enter(self) -> int:
        """How many slots a grading may be let into now: ``base`` while fewer run, all of them
        once the cores were seen idle, 0 while it must wait."""
        running = self._running()
        if running < self.capacity.base:
            self._watched_since = None
            return self.capacity.base
        if running >= self.capacity.most:
            return 0
        now = time.monotonic()
        if self._watched_since is None:
            self._watched_since = now
            self.probe()  # from here
            return 0
        if now - self._watched_since < self.interval:
            return 0
        idle = self.probe()
        self._watched_since = now  # the next extra grading is weighed on a fresh look
        return self.capacity.most if idle is not None and idle >= self.idle_share else 0
