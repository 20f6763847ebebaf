"""The workdir layer: each worker's private folder, holding its own copy of the submission's
test files (the worker reads the copy, never the original) and, for a sandbox user, its
``/tmp``; readable by the worker's user only.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

from grader.sandbox.base import WORKDIR_PREFIX, SandboxError, SandboxLimits, mib
from grader.sandbox.users import SandboxUser

# These serve the other modules of grader.sandbox; nothing outside it uses them.
__all__ = ["copy_submission", "make_workdir"]


def copy_submission(tests_dir: Path, dest: Path, limits: SandboxLimits) -> None:
    """Copy the regular files and folders of ``tests_dir`` (never a link, a device or a
    ``__pycache__``) into ``dest``: the worker reads the copy, never the original.

    Raises:
        SandboxError: if the submission holds more than the limits allow.
    """
    total, count = 0, 0
    for folder, dirs, files in os.walk(tests_dir, followlinks=False):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(folder, d))]
        target = dest / os.path.relpath(folder, tests_dir)
        target.mkdir(mode=0o755, exist_ok=True)
        for name in files:
            count += 1
            if count > limits.submission_files:
                raise SandboxError(
                    f"{tests_dir}: expected at most {limits.submission_files} files, found more"
                )
            copied = _copy_file(Path(folder) / name, target / name, limits.submission_bytes - total)
            if copied is None:
                raise SandboxError(
                    f"{tests_dir}: expected at most {mib(limits.submission_bytes)} of files, found more"
                )
            total += copied


def _copy_file(source: Path, dest: Path, budget: int) -> int | None:
    """Copy one regular file; its size, 0 if it is not a regular file, None if it is larger
    than ``budget`` bytes (checked before anything is copied)."""
    # O_NOFOLLOW and a check of what was opened: a file swapped for a link to a root-only file
    # during the copy is refused, not read by root into the sandbox.
    try:
        handle = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0  # a link or something unreadable: not part of the copy
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return 0
        if info.st_size > budget:
            return None
        with os.fdopen(os.dup(handle), "rb") as reader, open(dest, "wb") as writer:
            shutil.copyfileobj(reader, writer)
        os.chmod(dest, 0o644)
        return info.st_size
    finally:
        os.close(handle)


def make_workdir(tests_dir: Path | None, user: SandboxUser | None, limits: SandboxLimits) -> Path:
    """A fresh folder: ``tests`` (the copy, root's, read-only to the user; empty for a worker
    that grades submissions one after another) and ``tmp`` (the user's); the folder itself
    root's and the user's group's, closed to everyone else. With no ``user`` (a grader that is
    not root) only ``tests``, in a folder only the grader's own user may enter (the worker sees
    the copy read-only, in its namespaces)."""
    workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))  # mode 0700
    try:
        if tests_dir is not None:
            copy_submission(tests_dir, workdir / "tests", limits)
        else:
            (workdir / "tests").mkdir()
        (workdir / "tests").chmod(0o755)
        if user is None:
            return workdir
        tmp = workdir / "tmp"
        tmp.mkdir(mode=0o700)
        os.chown(tmp, user.uid, user.gid)
        os.chown(workdir, 0, user.gid)
        workdir.chmod(0o750)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return workdir
