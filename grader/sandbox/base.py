"""The sandbox's shared vocabulary: its modes, errors, layers and limits, and what a status of
its layers says (which layers are on, what each mode needs).

Every other module of :mod:`grader.sandbox` builds on these. Standard library only: the worker
loads this module inside its sandbox (for :class:`SandboxError`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = [
    "Layer",
    "LayerStatus",
    "SANDBOX_USER_PREFIX",
    "SETUP_SCRIPT",
    "SandboxError",
    "SandboxLimits",
    "SandboxMode",
    "SandboxStatus",
    "SandboxUnavailable",
    "WORKDIR_PREFIX",
    "grader_dir",
    "mib",
]

SANDBOX_USER_PREFIX = "mutagrade-sandbox-"
SETUP_SCRIPT = "scripts/setup-sandbox.sh"
# The name of every worker's private folder begins so (a stale one is found by it).
WORKDIR_PREFIX = "mutagrade-box-"


# ------------------------------------------------------------------------ modes, errors
class SandboxMode(StrEnum):
    """How much sandbox a run needs."""

    AUTO = "auto"  # every layer this machine offers; refuse if an always-on layer is missing
    STRICT = "strict"  # every layer, seccomp and bubblewrap included, or refuse
    NONE = "none"  # no sandbox: trusted code, or a student's suite on the student's own machine


class SandboxError(RuntimeError):
    """The sandbox could not be set up for this run (the message says what and why)."""


class SandboxUnavailable(SandboxError):
    """The mode asked for needs a layer this machine does not offer; the message names it."""


class Layer(StrEnum):
    """One layer of the sandbox, as ``mutagrade doctor`` names it."""

    UID = "uid"
    USERNS = "userns"  # in place of the uid layer, for a grader that is not root
    RLIMITS = "rlimits"
    SESSION = "session"
    WORKDIR = "workdir"
    ENVIRONMENT = "environment"
    OUTPUT = "output"
    SECCOMP = "seccomp"
    BUBBLEWRAP = "bubblewrap"

    @property
    def always(self) -> bool:
        """Whether mode ``auto`` needs this layer (the rest are used where available); of the
        uid and userns layers, either one is enough (:meth:`SandboxStatus.missing`)."""
        return self not in (Layer.SECCOMP, Layer.BUBBLEWRAP, Layer.USERNS)

    @property
    def kind(self) -> str:
        """When the layer is needed, as ``mutagrade doctor`` says it."""
        if self is Layer.UID:
            return "always, or userns"
        if self is Layer.USERNS:
            return "in place of uid"
        return "always" if self.always else "where available"


@dataclass(frozen=True)
class SandboxLimits:
    """The sandbox's own limits (time and memory are the run's, in ``RunLimits``)."""

    file_bytes: int = 10 * 1024**2  # largest file a sandboxed process may write
    open_files: int = 256
    processes: int = 64  # processes and threads of the sandbox uid
    tmp_bytes: int = 256 * 1024**2  # the private /tmp (bubblewrap)
    submission_bytes: int = 64 * 1024**2  # the copy of the submission
    submission_files: int = 5000
    output_bytes: int = 64 * 1024**2  # the most one run's result may take as the worker writes it
    claim_timeout: float = 120.0  # how long to wait for a free sandbox user


# ------------------------------------------------------------------ the layers' status
@dataclass(frozen=True)
class LayerStatus:
    """Whether one layer is active on this machine, and how (or why not)."""

    layer: Layer
    active: bool
    detail: str

    @property
    def always(self) -> bool:
        return self.layer.always


@dataclass(frozen=True)
class SandboxStatus:
    """Every layer of the sandbox on this machine; :meth:`lines` is ``mutagrade doctor``'s text."""

    layers: tuple[LayerStatus, ...]

    def get(self, layer: Layer) -> LayerStatus:
        return next(status for status in self.layers if status.layer is layer)

    def active(self, layer: Layer) -> bool:
        return self.get(layer).active

    def missing(self, mode: SandboxMode) -> list[LayerStatus]:
        """The inactive layers ``mode`` needs (none for mode ``none``). Of the uid and userns
        layers either one is enough; with neither, both are named."""
        if mode is SandboxMode.NONE:
            return []
        stand_in = {Layer.UID: Layer.USERNS, Layer.USERNS: Layer.UID}
        gone = []
        for status in self.layers:
            if status.active:
                continue
            other = stand_in.get(status.layer)
            needed = not self.active(other) if other is not None else status.always or mode is SandboxMode.STRICT
            if needed:
                gone.append(status)
        return gone

    def lines(self) -> list[str]:
        """One line per layer, then what each mode would do here."""
        lines = ["sandbox layers on this machine:"]
        for status in self.layers:
            mark = "on " if status.active else "OFF"
            lines.append(f"  [{mark}] {status.layer.value:<12} ({status.layer.kind}) {status.detail}")
        for mode in (SandboxMode.AUTO, SandboxMode.STRICT):
            gone = self.missing(mode)
            verdict = "ready" if not gone else "refuses to run: missing " + ", ".join(s.layer.value for s in gone)
            lines.append(f"  mode {mode.value}: {verdict}")
        lines.append("  mode none: runs submitted code with no sandbox (trusted code, or a student's own machine)")
        return lines

    def render(self) -> str:
        return "\n".join(self.lines())


def mib(n: int) -> str:
    """``n`` bytes in MiB, as the sandbox's messages write a size (``"64 MiB"``)."""
    return f"{n / 1024**2:g} MiB"


def grader_dir() -> Path:
    """The ``grader`` package's folder (this module is in ``grader/sandbox/``)."""
    return Path(__file__).absolute().parents[1]
