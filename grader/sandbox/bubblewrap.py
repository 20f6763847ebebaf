"""The bubblewrap layer: new pid, net, ipc, uts and mount namespaces around the worker, the
system read-only, only what the worker needs in sight, a private ``/tmp``.

:func:`bwrap_options` builds bubblewrap's arguments for one worker (:mod:`grader.sandbox.process`
runs it); :func:`probe_bubblewrap` tries it once on this machine, as a worker uses it, for
:mod:`grader.sandbox.status`. For a grader that is not root, bubblewrap also makes the worker's
user namespace (:mod:`grader.sandbox.userns`).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from grader.sandbox import userns
from grader.sandbox.base import grader_dir

# These serve the other modules of grader.sandbox; nothing outside it uses them.
__all__ = [
    "begin_bubblewrap_probe",
    "bwrap_options",
    "probe_bubblewrap",
    "provisional_bubblewrap",
    "setpriv_args",
    "system_tool",
    "visible_folders",
]

_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
_NAMESPACES = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
_SYSTEM_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# The few files of /etc a Python process reads; the rest of /etc (the grader's configuration
# among it) stays out of sight.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "passwd", "group", "nsswitch.conf", "localtime")


def system_tool(name: str) -> str | None:
    """The program ``name`` from the system's own folders (never the caller's ``PATH``), or None."""
    return shutil.which(name, path=_SYSTEM_PATH)


# The uid the probe drops to: nobody's, never a sandbox user's. Starting a worker kills every
# process of the sandbox user it claims (whatever a dead grader left there), so a probe running
# as one could be killed by another grading's start, and "bubblewrap fails here" would be kept
# as this process's answer.
_PROBE_UID = 65534


def _bubblewrap_probe() -> tuple[list[str] | None, str]:
    """The command that tries bubblewrap as a worker uses it (namespaces, mounts, then setpriv
    to an unprivileged uid; for a grader that is not root, in a user namespace of its own), or
    None and why it cannot."""
    bwrap, setpriv = system_tool("bwrap"), system_tool("setpriv")
    if bwrap is None:
        return None, "bwrap not found; install the Debian package bubblewrap"
    if os.geteuid() != 0:
        return [bwrap, *userns.BWRAP_ARGS, *_bwrap_base(privileged=False), "--", "/bin/true"], ""
    if setpriv is None:
        return None, "setpriv not found; install the Debian package util-linux"
    return [bwrap, *_bwrap_base(), "--", *setpriv_args(setpriv, _PROBE_UID, _PROBE_UID), "/bin/true"], ""


# The bubblewrap probe, started by begin_bubblewrap_probe() and answered by the next
# probe_bubblewrap().
_PROBING: dict[tuple[str, ...], subprocess.Popen[bytes]] = {}


def begin_bubblewrap_probe() -> None:
    """Start the probe's bubblewrap run without waiting for it (see
    :func:`grader.sandbox.status.begin_probe`); the next :func:`probe_bubblewrap` collects it."""
    command, _ = _bubblewrap_probe()
    if command is None or tuple(command) in _PROBING:
        return
    try:
        _PROBING[tuple(command)] = _start_probe(command)
    except OSError:
        pass  # the probe itself runs it again, and says why it cannot


def provisional_bubblewrap() -> tuple[bool, str]:
    """What the probe should answer, guessed without running it: whether bubblewrap can be
    tried here, and why not (or that it is being probed)."""
    command, why_not = _bubblewrap_probe()
    return command is not None, why_not or "being probed"


def _start_probe(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={"PATH": _SYSTEM_PATH})


def probe_bubblewrap(describe: bool = True) -> tuple[bool, str, bool]:
    """Whether bubblewrap works here, how it is set up or why not, and whether it was run at
    all (a run that failed is tried again later: see
    :data:`grader.sandbox.status.RETRY_FAILED_PROBE_S`)."""
    command, why_not = _bubblewrap_probe()
    if command is None:
        return False, why_not, False
    bwrap = command[0]
    try:
        running = _PROBING.pop(tuple(command), None) or _start_probe(command)
        try:
            _, stderr = running.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            running.kill()
            running.wait()
            raise
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{bwrap} could not be run: {exc}", True
    if running.returncode != 0:
        why = stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {running.returncode}"]
        return False, f"{bwrap} fails here: {why[0]}", True
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip() if describe else ""
    user = "" if os.geteuid() == 0 else "user, "
    return True, (
        f"{version or bwrap}: new {user}pid, net, ipc, uts and mount namespaces; system read-only; only the "
        "interpreter, the worker's code, the package under test and the submission's copy visible; private /tmp"
    ), True


def setpriv_args(setpriv: str, uid: int, gid: int) -> list[str]:
    """The command prefix with which setpriv, run by root inside the namespaces, becomes the
    sandbox user (``uid``, ``gid``) for good."""
    return [
        setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--",
    ]


def _bwrap_base(*, privileged: bool = True) -> list[str]:
    """The namespaces and the system's mounts; ``privileged`` (root's bubblewrap) keeps the two
    capabilities setpriv needs to switch to the sandbox user (it drops them with the uid)."""
    args = [*_NAMESPACES, "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if privileged:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    args += ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    return args


def bwrap_options(
    *,
    readonly: Sequence[tuple[Path, Path]],
    tmp_bytes: int,
    chdir: Path,
    hidden: Sequence[Path] = (),
    privileged: bool = True,
) -> list[str]:
    """bubblewrap's arguments: the system, a private /tmp, then each (source, destination)
    bound read-only, the folders above each destination made first, searchable by all; each
    ``hidden`` file is replaced by an empty one."""
    args = [*_bwrap_base(privileged=privileged), "--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    made: set[Path] = {Path("/"), Path("/tmp"), Path("/etc"), Path("/usr")}
    bound: list[Path] = [Path("/usr")]
    for source, dest in sorted(readonly, key=lambda pair: len(pair[1].parts)):
        if source == dest and any(dest.is_relative_to(b) for b in bound):
            continue  # already in sight (a system Python under /usr)
        for folder in reversed(dest.parents):
            if folder in made or any(folder.is_relative_to(b) for b in bound):
                continue
            args += ["--perms", "0755", "--dir", str(folder)]
            made.add(folder)
        args += ["--ro-bind", str(source), str(dest)]
        bound.append(dest)
        made.add(dest)
    for path in _with_bytecode(hidden):
        args += ["--ro-bind", "/dev/null", str(path)]
    args += ["--chdir", str(chdir)]
    return args


def _with_bytecode(hidden: Sequence[Path]) -> list[Path]:
    """Each hidden source file and its compiled forms beside it (``__pycache__/NAME.*.pyc``):
    bytecode gives the source away as well."""
    files: list[Path] = []
    for path in hidden:
        files.append(path)
        files += sorted(path.parent.joinpath("__pycache__").glob(f"{path.stem}.*.pyc"))
    return files

def visible_folders(readonly: Sequence[Path]) -> list[Path]:
    """The folders the worker needs to see, outermost only: the interpreter and its packages,
    the worker's code, and ``readonly``. Each appears at the path the worker knows it by."""
    wanted = [Path(sys.prefix), Path(sys.base_prefix), grader_dir(), *map(Path, site.getsitepackages()), *readonly]
    absolute = {Path(os.path.abspath(path)) for path in wanted if os.path.exists(path)}
    kept: list[Path] = []
    for path in sorted(absolute, key=lambda p: len(p.parts)):
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return kept

