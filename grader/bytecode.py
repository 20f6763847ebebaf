"""Keeping the bytecode of what a worker imports from the checkout compiled.

A worker runs as a sandbox user who cannot write ``__pycache__`` in the checkout, and with
bytecode writing off: where a module of the grader or of the shipped reference package has no
compiled file, or a stale one (the checkout was updated since ``make`` last compiled it), every
worker of every grading compiles it from source again, and a grading costs about a sixth more.
So the command, which may write there, compiles what is missing or stale once a process, just
before it starts its first worker (:func:`ensure_worker_bytecode`): about a millisecond when
everything is fresh. Nothing is written where Python was told not to (``PYTHONDONTWRITEBYTECODE``,
``-B``), nor into a student's own package, nor for the reference's ``gru.py`` (no worker may read
it, compiled or not); a folder that cannot take the files is left as it is.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Collection, Iterable

from grader.paths import Layout

__all__ = ["compile_stale", "ensure_worker_bytecode", "stale_sources", "worker_sources"]

_checked: set[tuple[Path, ...]] = set()  # the folders this process has already seen to


def worker_sources(layout: Layout) -> tuple[list[Path], list[Path]]:
    """The folders whose modules a worker imports from this checkout (the grader's package,
    and the reference package when the suites run against it), and the files to leave alone."""
    folders = [Path(__file__).absolute().parent]
    if layout.implementation is None:
        folders.append(layout.reference / "tinyllm")
    return folders, [layout.gru_source]


def stale_sources(folders: Iterable[Path], *, skip: Collection[Path] = ()) -> list[Path]:
    """The ``.py`` files under ``folders`` whose compiled file is missing or does not match
    them (the check the import system makes: magic number, source time and size)."""
    skipped = {Path(p).absolute() for p in skip}
    stale = []
    for folder in folders:
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                source = Path(root, name)
                if name.endswith(".py") and source.absolute() not in skipped and not _fresh(source):
                    stale.append(source)
    return stale


def _fresh(source: Path) -> bool:
    try:
        stat = os.stat(source)
        with open(importlib.util.cache_from_source(str(source)), "rb") as handle:
            header = handle.read(16)
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little") != 0:
        return True  # checked against a hash of the source, by the import system itself
    return (int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF)


def compile_stale(folders: Iterable[Path], *, skip: Collection[Path] = ()) -> list[Path]:
    """Compile every stale source under ``folders`` (see :func:`stale_sources`), each file
    written whole or not at all. Returns the sources compiled; those that could not be (a
    read-only checkout, a folder that is not ours) are left to be compiled in memory."""
    if sys.dont_write_bytecode:
        return []
    stale = stale_sources(folders, skip=skip)
    if not stale:
        return []
    import py_compile  # only when something is to be compiled

    compiled = []
    for source in stale:
        try:
            py_compile.compile(str(source), doraise=True)
        except (OSError, py_compile.PyCompileError):
            continue
        compiled.append(source)
    return compiled


def ensure_worker_bytecode(layout: Layout) -> None:
    """Before a worker starts: what it imports from this checkout is compiled (once a process)."""
    folders, skip = worker_sources(layout)
    key = tuple(folders)
    if key in _checked:
        return
    _checked.add(key)
    compile_stale(folders, skip=skip)
