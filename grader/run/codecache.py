"""Variants compiled once per machine: the code objects the grader sends with each run's source.

A run's child used to compile its variant's source itself, a few milliseconds seventeen times a
grading. The grader now compiles each variant once, under its module's file name
(:attr:`~grader.core.protocol.Contract.filename`) and with asserts kept (as the child would), and keeps the marshalled code in the grading user's
cache folder (``$XDG_CACHE_HOME/mutagrade/variants``, else ``~/.cache/...``), closed to every
other user: sandbox users never read it. Each entry holds the SHA-256 of its code, so a damaged
entry is compiled again; entries are keyed by the interpreter's bytecode magic number and the
source, so another Python or another source never meets them. Where no cache folder can be
written the code is still compiled here, once per process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import marshal
import os
import tempfile
from pathlib import Path

__all__ = ["MAX_ENTRIES", "cache_dir", "variant_code"]

MAX_ENTRIES = 256  # past this, the oldest half of the entries is removed
_DIGEST = hashlib.sha256().digest_size


def cache_dir() -> Path:
    """The folder of compiled variants (not created here)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mutagrade" / "variants"


@functools.lru_cache(maxsize=64)
def variant_code(source: str, filename: str) -> bytes | None:
    """``source`` compiled as a variant under ``filename`` and marshalled, from the cache or
    compiled now (and kept); None if it does not compile (the run's child then reports the
    error itself)."""
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + filename.encode() + b"\0" + source.encode()).hexdigest()
    folder = cache_dir()
    entry = folder / f"{key}.code"
    try:
        stored = entry.read_bytes()
    except OSError:
        stored = b""
    if len(stored) > _DIGEST and hashlib.sha256(stored[_DIGEST:]).digest() == stored[:_DIGEST]:
        return stored[_DIGEST:]
    code = _compile(source, filename)
    if code is not None:
        _keep(folder, entry, hashlib.sha256(code).digest() + code)
    return code


def _compile(source: str, filename: str) -> bytes | None:
    try:
        # optimize=0: asserts and __debug__ as in the child, which runs without -O.
        return marshal.dumps(compile(source, filename, "exec", dont_inherit=True, optimize=0))
    except (SyntaxError, ValueError):
        return None


def _keep(folder: Path, entry: Path, data: bytes) -> None:
    """Write ``entry`` whole or not at all; a folder that cannot be written keeps nothing."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_mode & 0o077:
            folder.chmod(0o700)
        entries = list(folder.glob("*.code"))
        if len(entries) >= MAX_ENTRIES:
            for old in sorted(entries, key=_age)[: len(entries) // 2]:
                old.unlink(missing_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".part")  # mode 0600
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, entry)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        pass


def _age(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
