"""Uploaded archives: checked before they are stored, unpacked safely before they are graded.

An archive is a ``.tar.gz`` or a ``.zip`` holding either test files at its root, or a student
repository with the tests under ``python/tests/l3-3-gru/`` (optionally ``.tdd/`` and
``python/tinyllm/``), either of them possibly wrapped in one folder (``zip -r sub.zip mytests``);
the ``.`` entry and ``./`` prefixes that ``tar -C dir .`` writes are the archive's root. Every
member is checked: no absolute path, no ``..``, no link or device, no duplicate name, at most
``max_files`` members and ``max_unpacked`` bytes in all; sizes are enforced while unpacking
too, so a lying header cannot slip a bomb through.
"""

from __future__ import annotations

import io
import posixpath
import stat
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ArchiveError", "ArchiveLimits", "Member", "SubmissionFiles", "check_archive", "unpack"]

STUDENT_TESTS = "python/tests/l3-3-gru"
JOURNAL = ".tdd/journal.jsonl"


class ArchiveError(ValueError):
    """The archive is refused; the message says which member and why."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ArchiveLimits:
    max_bytes: int = 2 * 1024 * 1024
    max_files: int = 200
    max_unpacked: int = 20 * 1024 * 1024


@dataclass(frozen=True)
class Member:
    name: str
    size: int


@dataclass(frozen=True)
class SubmissionFiles:
    """Where an unpacked submission keeps its parts."""

    root: Path
    tests: Path
    journal: Path | None
    implementation: Path | None


def _kind(data: bytes) -> str:
    if data[:2] == b"\x1f\x8b":
        return "tar.gz"
    if data[:4] == b"PK\x03\x04":
        return "zip"
    raise ArchiveError("the archive must be a .tar.gz or a .zip, found neither (unknown file signature)", 415)


def _check_name(raw: str, *, is_dir: bool = False) -> str:
    """The member's path, normalised (``./a//b`` is ``a/b``); ``""`` for the root folder."""
    name = raw.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"member {raw!r}: absolute paths are not allowed")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"member {raw!r}: '..' is not allowed in a path")
    if not parts:
        if is_dir:
            return ""  # "." or "./": the root itself, which `tar -C dir .` lists first
        raise ArchiveError(f"member {raw!r}: an empty path")
    if any(ord(c) < 32 for c in name):
        raise ArchiveError(f"member {raw!r}: control characters are not allowed in a path")
    return posixpath.join(*parts)


def _members_tar(data: bytes) -> list[tuple[Member, bool]]:
    out = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for info in tar:
                if info.issym() or info.islnk():
                    raise ArchiveError(f"member {info.name!r}: links are not allowed")
                if not (info.isfile() or info.isdir()):
                    raise ArchiveError(f"member {info.name!r}: devices, fifos and other special files are not allowed")
                out.append((Member(_check_name(info.name, is_dir=info.isdir()), info.size), info.isdir()))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"the .tar.gz archive cannot be read: {exc}") from None
    return out


def _members_zip(data: bytes) -> list[tuple[Member, bool]]:
    out = []
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                kind = stat.S_IFMT(info.external_attr >> 16)  # 0: made elsewhere, no file type
                if kind == stat.S_IFLNK:
                    raise ArchiveError(f"member {info.filename!r}: links are not allowed")
                if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                    raise ArchiveError(f"member {info.filename!r}: devices, fifos and other special files are not allowed")
                out.append((Member(_check_name(info.filename, is_dir=info.is_dir()), info.file_size), info.is_dir()))
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArchiveError(f"the .zip archive cannot be read: {exc}") from None
    return out


def _wrapper(members: list[tuple[Member, bool]]) -> str:
    """The one folder every member lies in (``"mytests/"``), or ``""``: none, or the archive is
    a student repository already (its own ``python/`` is not a wrapper)."""
    tops = {m.name.split("/", 1)[0] for m, _ in members}
    if len(tops) != 1:
        return ""
    [top] = tops
    if any(m.name == top and not is_dir for m, is_dir in members):
        return ""  # a single file, not a folder
    if any(m.name.startswith(STUDENT_TESTS + "/") for m, _ in members):
        return ""
    return top + "/"


def _checked(data: bytes, limits: ArchiveLimits) -> tuple[list[Member], str]:
    """The file members (names as in the archive, normalised) and the wrapping folder."""
    if len(data) > limits.max_bytes:
        raise ArchiveError(f"the archive is {len(data)} bytes; at most {limits.max_bytes} are accepted", 413)
    kind = _kind(data)
    members = [(m, is_dir) for m, is_dir in (_members_tar(data) if kind == "tar.gz" else _members_zip(data)) if m.name]
    files = [m for m, is_dir in members if not is_dir]
    if len(members) > limits.max_files:
        raise ArchiveError(f"the archive holds {len(members)} members; at most {limits.max_files} are accepted", 413)
    seen: set[str] = set()
    for member in files:
        if member.name in seen:
            raise ArchiveError(f"member {member.name!r}: appears twice in the archive")
        seen.add(member.name)
    total = sum(m.size for m in files)
    if total > limits.max_unpacked:
        raise ArchiveError(
            f"the archive unpacks to {total} bytes; at most {limits.max_unpacked} are accepted", 413
        )
    if not any(m.name.endswith(".py") for m in files):
        raise ArchiveError("the archive holds no Python file: expected test files, or python/tests/l3-3-gru/")
    return files, _wrapper(members)


def check_archive(data: bytes, limits: ArchiveLimits) -> list[Member]:
    """Every file member of the archive, named as it will be unpacked (without a wrapping
    folder), if it keeps every rule.

    Raises:
        ArchiveError: naming the member and the rule (413 when too large, 415 when not an archive).
    """
    files, wrapper = _checked(data, limits)
    return [Member(m.name.removeprefix(wrapper), m.size) for m in files]


def _write(dest: Path, name: str, source: io.BufferedIOBase, budget: list[int]) -> None:
    target = dest / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as out:
        while chunk := source.read(65536):
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise ArchiveError("the archive unpacks to more bytes than it declares (a bomb?)", 413)
            out.write(chunk)


def unpack(data: bytes, dest: Path, limits: ArchiveLimits) -> SubmissionFiles:
    """Check and unpack an archive into ``dest`` (empty), without its wrapping folder, and
    say where its parts are."""
    files, wrapper = _checked(data, limits)
    members = {m.name for m in files}
    budget = [limits.max_unpacked]
    if _kind(data) == "tar.gz":
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for info in tar:
                if info.isfile() and (name := _check_name(info.name)) in members:
                    _write(dest, name.removeprefix(wrapper), tar.extractfile(info), budget)
    else:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if not info.is_dir() and (name := _check_name(info.filename)) in members:
                    with archive.open(info) as source:
                        _write(dest, name.removeprefix(wrapper), source, budget)
    tests = dest / STUDENT_TESTS
    journal = dest / JOURNAL
    impl = dest / "python"
    return SubmissionFiles(
        root=dest,
        tests=tests if tests.is_dir() else dest,
        journal=journal if journal.is_file() else None,
        implementation=impl if (impl / "tinyllm").is_dir() else None,
    )
