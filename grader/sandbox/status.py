"""Which layers of the sandbox this machine offers: each layer's probe asked, the answer kept
for the process, a mode checked against it, and ``mutagrade doctor``'s text.

A grading calls :func:`check_mode` before its workers are given anything to run;
:func:`begin_probe` and :func:`provisional_status` let it start them while bubblewrap is still
being probed. Each layer probes itself in its own module; :func:`sandbox_status` gathers the
answers.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

from grader.sandbox import userns
from grader.sandbox.base import (
    SETUP_SCRIPT,
    Layer,
    LayerStatus,
    SandboxLimits,
    SandboxMode,
    SandboxStatus,
    SandboxUnavailable,
    mib,
)
from grader.sandbox.bubblewrap import (
    begin_bubblewrap_probe,
    probe_bubblewrap,
    provisional_bubblewrap,
)
from grader.sandbox.seccomp import probe_seccomp
from grader.sandbox.users import SandboxUser, probe_users, sandbox_users

__all__ = [
    "RETRY_FAILED_PROBE_S",
    "begin_probe",
    "check_mode",
    "doctor_lines",
    "provisional_status",
    "sandbox_status",
]


def sandbox_status(*, fresh: bool = False, describe: bool = False) -> SandboxStatus:
    """Which layers this machine offers. Probing runs bubblewrap once; the answer is kept for
    the life of the process unless ``fresh`` (an answer whose bubblewrap run failed, or that
    refuses mode auto, only for :data:`RETRY_FAILED_PROBE_S`). ``describe`` (the doctor's) also
    says how each layer is set up, at a cost every grading would pay: bubblewrap's version, and
    whether the children's allow-list installs here (a throwaway child tries it). Threads asking at once (the
    service's grading threads) wait for one probe's answer."""
    return _ANSWERS.get(describe, fresh=fresh)


def doctor_lines() -> list[str]:
    """The sandbox's part of ``mutagrade doctor``: every layer, on or off and why, and whether
    modes ``auto`` and ``strict`` can run here."""
    return sandbox_status(fresh=True, describe=True).lines()


def check_mode(mode: SandboxMode | str) -> SandboxStatus:
    """Check that ``mode`` can be honoured here, before anything is run.

    Raises:
        SandboxUnavailable: naming each missing layer and why it is missing.
        ValueError: if ``mode`` is not one of auto, strict, none.
    """
    mode = SandboxMode(mode)
    status = sandbox_status()
    gone = status.missing(mode)
    if gone:
        why = "; ".join(f"{s.layer.value}: {s.detail}" for s in gone)
        raise SandboxUnavailable(
            f"sandbox mode {mode.value} needs layer(s) {', '.join(s.layer.value for s in gone)}, "
            f"unavailable here ({why}). Run {SETUP_SCRIPT} as root to set the sandbox up (a user without "
            "root needs a kernel that allows unprivileged user namespaces), or pass --sandbox none to run "
            "the code with no sandbox (trusted code only)"
        )
    return status


# A bubblewrap run that failed, or an answer that refuses mode auto (no sandbox user yet), is
# kept for this long (seconds), then asked again: in a long-running process (the service) a
# passing failure, or a setup script run while it serves, must not wait for a restart.
RETRY_FAILED_PROBE_S = 60.0


class _Answers:
    """This process's answers to "which layers are there", one for each ``describe``, with
    when the answer's bubblewrap run failed or the answer refused mode auto (None: neither)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # held for a whole probe: threads asking at once wait for it
        self._kept: dict[bool, tuple[SandboxStatus, float | None]] = {}

    def get(self, describe: bool, *, fresh: bool = False) -> SandboxStatus:
        with self._lock:
            kept = None if fresh else self._current(describe)
            if kept is None:
                kept = self._kept[describe] = _detect(describe)
            return kept[0]

    def known(self) -> SandboxStatus | None:
        """An answer still kept, if any: never probes, never waits for a probe."""
        for describe in (False, True):
            kept = self._current(describe)
            if kept is not None:
                return kept[0]
        return None

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    def _current(self, describe: bool) -> tuple[SandboxStatus, float | None] | None:
        kept = self._kept.get(describe)
        if kept is not None and kept[1] is not None and time.monotonic() - kept[1] >= RETRY_FAILED_PROBE_S:
            return None  # it failed a while ago: ask again
        return kept


_ANSWERS = _Answers()


def _detect(describe: bool) -> tuple[SandboxStatus, float | None]:
    users = sandbox_users()
    seccomp = probe_seccomp(describe)
    works, detail, ran = probe_bubblewrap(describe)
    status = _status(users, seccomp, (works, detail))
    failed = (ran and not works) or bool(status.missing(SandboxMode.AUTO))
    return status, time.monotonic() if failed else None


def provisional_status() -> SandboxStatus:
    """What :func:`sandbox_status` will say if bubblewrap works as its probe (see
    :func:`begin_probe`) tries it; the answer itself is not waited for. Once this process has
    the answer (a service grading again), the answer itself."""
    known = _ANSWERS.known()
    if known is not None:
        return known
    bubblewrap = provisional_bubblewrap()
    return _status(sandbox_users(), probe_seccomp(False), bubblewrap)


def begin_probe() -> None:
    """Start probing bubblewrap now, without waiting for it: the next :func:`check_mode` only
    collects the answer. A grading starts its workers meanwhile (they run nothing until the
    check has passed)."""
    if _ANSWERS.known() is None:
        begin_bubblewrap_probe()


def _status(users: list[SandboxUser], seccomp: tuple[bool, str], bubblewrap: tuple[bool, str]) -> SandboxStatus:
    seccomp_ok, seccomp_detail = seccomp
    bwrap_ok, bwrap_detail = bubblewrap
    uid_ok, uid_detail = probe_users(users, bwrap_ok)
    userns_ok, userns_detail = userns.layer_detail(root=os.geteuid() == 0, uid=os.geteuid(), bubblewrap=bubblewrap)
    if userns_ok:
        uid_detail += "; the userns layer stands in for it"
    limits = SandboxLimits()
    layers = (
        LayerStatus(layer=Layer.UID, active=uid_ok, detail=uid_detail),
        LayerStatus(layer=Layer.USERNS, active=userns_ok, detail=userns_detail),
        LayerStatus(
            layer=Layer.RLIMITS, active=True,
            detail=f"address space and CPU time per run, files up to {mib(limits.file_bytes)}, "
            f"{limits.open_files} open files, {limits.processes} processes, no core files",
        ),
        LayerStatus(
            layer=Layer.SESSION, active=True,
            detail="each worker in a new session; its process group and every process of its uid "
            "(or of its namespaces) killed at the end",
        ),
        LayerStatus(layer=Layer.WORKDIR, active=uid_ok or userns_ok, detail=_workdir_detail(uid_ok, userns_ok)),
        LayerStatus(
            layer=Layer.ENVIRONMENT, active=True,
            detail="a minimal explicit environment, one BLAS thread, a fixed hash seed",
        ),
        LayerStatus(
            layer=Layer.OUTPUT, active=True,
            detail=f"each run's result read up to {mib(limits.output_bytes)}, a wall-clock limit per worker, "
            f"each child's output capped at {mib(limits.file_bytes)}",
        ),
        LayerStatus(layer=Layer.SECCOMP, active=seccomp_ok, detail=seccomp_detail),
        LayerStatus(layer=Layer.BUBBLEWRAP, active=bwrap_ok, detail=bwrap_detail),
    )
    return SandboxStatus(layers=layers)


def _workdir_detail(uid: bool, namespaces: bool) -> str:
    if uid:
        return f"a private copy of the submission under {tempfile.gettempdir()}, readable by the worker's uid only"
    if namespaces:
        return (
            f"a private copy of the submission under {tempfile.gettempdir()}, readable by uid {os.geteuid()} "
            "only, read-only in the worker's namespaces"
        )
    return "needs the uid or the userns layer (the copy is made readable by the sandbox user only)"

