"""Uploaded archives: checked before they are stored, unpacked safely before they are graded.

An archive is a ``.tar.gz`` or a ``.zip`` holding either test files at its root, or a student
repository with the tests under ``python/tests/<assignment>/`` (optionally ``.tdd/`` and
``python/tinyllm/``), either of them possibly wrapped in one folder (``zip -r sub.zip mytests``);
the ``.`` entry and ``./`` prefixes that ``tar -C dir .`` writes are the archive's root.

Every member is checked: no absolute path, no ``..``, no link or device, no duplicate name, no
name that is both a file and a folder, UTF-8 names of at most ``max_name_bytes`` per folder or
file name and ``max_path_bytes`` in all, at most ``max_files`` members and ``max_unpacked``
bytes in all. Then every file member is read to its end, at most one byte past the size the
archive declares for it, and must hold exactly that many bytes (and, in a zip, match its
CRC-32). :func:`check_archive` and :func:`unpack` are the same pass, one discarding what it
reads and the other writing it: what is unpacked for grading is exactly what was checked.
"""

from __future__ import annotations

import io
import lzma
import posixpath
import stat
import struct
import tarfile
import zipfile
import zlib
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Callable, Iterator

__all__ = ["ArchiveError", "ArchiveLimits", "Member", "SubmissionFiles", "check_archive", "unpack"]

STUDENT_ROOT = "python/tests/"  # where a repository keeps its tests (python/tests/<assignment>/)
JOURNAL = ".tdd/journal.jsonl"
_CHUNK = 64 * 1024
_SHOWN = 400  # characters of a member's name a message quotes
# What the archive libraries raise on a damaged or unsupported archive (ValueError also covers
# a name that is not text; NotImplementedError an unknown compression; RuntimeError encryption).
_UNREADABLE = (
    tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, zlib.error, lzma.LZMAError,
    struct.error, NotImplementedError, RuntimeError, ValueError,
)


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
    max_name_bytes: int = 255  # a folder or file name (NAME_MAX)
    max_path_bytes: int = 1024  # a member's whole path, well under PATH_MAX wherever it is unpacked


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


@dataclass(frozen=True)
class _Entry:
    """One member as listed: its name as written and normalised, its declared size, and how to
    read its data."""

    raw: str
    name: str  # "" for the root folder
    is_dir: bool
    size: int
    open: Callable[[], IO[bytes]]


def _kind(data: bytes) -> str:
    if data[:2] == b"\x1f\x8b":
        return "tar.gz"
    if data[:4] == b"PK\x03\x04":
        return "zip"
    raise ArchiveError("the archive must be a .tar.gz or a .zip, found neither (unknown file signature)", 415)


def _label(raw: str) -> str:
    """A member's name for a message: quoted, control characters escaped, a long one cut short."""
    if len(raw) <= _SHOWN:
        return repr(raw)
    return f"{raw[:_SHOWN]!r}... ({len(raw)} characters)"


def _check_name(raw: str, limits: ArchiveLimits, *, is_dir: bool = False) -> str:
    """The member's path, normalised (``./a//b`` is ``a/b``); ``""`` for the root folder."""
    name = raw.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(f"member {_label(raw)}: absolute paths are not allowed")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(f"member {_label(raw)}: '..' is not allowed in a path")
    if not parts:
        if is_dir:
            return ""  # "." or "./": the root itself, which `tar -C dir .` lists first
        raise ArchiveError(f"member {_label(raw)}: an empty path")
    if any(ord(c) < 32 for c in name):
        raise ArchiveError(f"member {_label(raw)}: control characters are not allowed in a path")
    try:
        sizes = [len(p.encode("utf-8")) for p in parts]
    except UnicodeEncodeError:
        raise ArchiveError(f"member {_label(raw)}: the name is not valid UTF-8") from None
    for part, size in zip(parts, sizes):
        if size > limits.max_name_bytes:
            raise ArchiveError(
                f"member {_label(raw)}: a folder or file name may be at most {limits.max_name_bytes} bytes; "
                f"{_label(part)} is {size}"
            )
    path = posixpath.join(*parts)
    if (size := sum(sizes) + len(parts) - 1) > limits.max_path_bytes:
        raise ArchiveError(f"member {_label(raw)}: a path may be at most {limits.max_path_bytes} bytes; this one is {size}")
    return path


def _counted(entries: list[_Entry], entry: _Entry, limits: ArchiveLimits) -> None:
    """Add ``entry``, refusing as soon as there are too many (before the rest is listed)."""
    if entry.name:
        entries.append(entry)
    if len(entries) > limits.max_files:
        raise ArchiveError(f"the archive holds more than {limits.max_files} members; at most {limits.max_files} are accepted", 413)


def _tar_entries(tar: tarfile.TarFile, limits: ArchiveLimits, entries: list[_Entry]) -> None:
    for info in tar:
        if info.issym() or info.islnk():
            raise ArchiveError(f"member {_label(info.name)}: links are not allowed")
        if not (info.isfile() or info.isdir()):
            raise ArchiveError(f"member {_label(info.name)}: devices, fifos and other special files are not allowed")
        name = _check_name(info.name, limits, is_dir=info.isdir())
        _counted(entries, _Entry(info.name, name, info.isdir(), info.size, lambda info=info: tar.extractfile(info)), limits)


def _zip_entries(archive: zipfile.ZipFile, limits: ArchiveLimits, entries: list[_Entry]) -> None:
    for info in archive.infolist():
        kind = stat.S_IFMT(info.external_attr >> 16)  # 0: made elsewhere, no file type
        if kind == stat.S_IFLNK:
            raise ArchiveError(f"member {_label(info.filename)}: links are not allowed")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise ArchiveError(f"member {_label(info.filename)}: devices, fifos and other special files are not allowed")
        name = _check_name(info.filename, limits, is_dir=info.is_dir())
        entry = _Entry(info.filename, name, info.is_dir(), info.file_size, lambda info=info: archive.open(info))
        _counted(entries, entry, limits)


@contextmanager
def _listed(data: bytes, limits: ArchiveLimits) -> Iterator[list[_Entry]]:
    """Every member but the root folder, each name checked, with the archive open to read them."""
    kind = _kind(data)
    entries: list[_Entry] = []
    with ExitStack() as stack:
        try:
            if kind == "tar.gz":
                _tar_entries(stack.enter_context(tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")), limits, entries)
            else:
                _zip_entries(stack.enter_context(zipfile.ZipFile(io.BytesIO(data))), limits, entries)
        except ArchiveError:
            raise
        except _UNREADABLE as exc:
            # A tar is read member after member: what broke is the data of the last one listed.
            where = f" at member {_label(entries[-1].raw)}" if entries and kind == "tar.gz" else ""
            raise ArchiveError(f"the .{kind} archive cannot be read{where}: {exc}") from None
        yield entries


def _check_layout(entries: list[_Entry]) -> None:
    """No name twice, and no name both a file and a folder (``a`` and ``a/b.py``)."""
    folders: dict[str, str] = {}  # a folder -> the first member that makes it one
    for entry in entries:
        parts = entry.name.split("/")
        for end in range(1, len(parts) + entry.is_dir):
            folders.setdefault("/".join(parts[:end]), entry.name)
    seen: set[str] = set()
    for entry in entries:
        if entry.is_dir:
            continue
        if entry.name in seen:
            raise ArchiveError(f"member {_label(entry.name)}: appears twice in the archive")
        seen.add(entry.name)
        if entry.name in folders:
            raise ArchiveError(
                f"member {_label(entry.name)}: the archive holds a file and a folder of this name (the folder of "
                f"{_label(folders[entry.name])}); a path can be only one of them"
            )


def _wrapper(entries: list[_Entry]) -> str:
    """The one folder every member lies in (``"mytests/"``), or ``""``: none, or the archive is
    a student repository already (its own ``python/`` is not a wrapper)."""
    tops = {e.name.split("/", 1)[0] for e in entries}
    if len(tops) != 1:
        return ""
    [top] = tops
    if any(e.name == top and not e.is_dir for e in entries):
        return ""  # a single file, not a folder
    if any(e.name.startswith(STUDENT_ROOT) for e in entries):
        return ""
    return top + "/"


def _read(entry: _Entry) -> Iterator[bytes]:
    """The member's data in chunks: exactly the size the archive declares, never more than one
    byte past it read, and (in a zip) matching its CRC-32."""
    got = 0
    try:
        with entry.open() as source:
            while chunk := source.read(min(_CHUNK, entry.size + 1 - got)):
                got += len(chunk)
                if got > entry.size:
                    raise ArchiveError(
                        f"member {_label(entry.raw)}: its data holds more than the {entry.size} bytes the archive declares"
                    )
                yield chunk
    except ArchiveError:
        raise
    except zipfile.BadZipFile as exc:
        raise ArchiveError(
            f"member {_label(entry.raw)}: cannot be read: {exc} (the size or CRC-32 the archive declares does not "
            "match its data)"
        ) from None
    except _UNREADABLE as exc:
        raise ArchiveError(f"member {_label(entry.raw)}: cannot be read: {exc}") from None
    if got != entry.size:
        raise ArchiveError(f"member {_label(entry.raw)}: the archive declares {entry.size} bytes, its data holds {got}")


Sink = Callable[[str, Iterator[bytes]], None]


def _discard(_name: str, chunks: Iterator[bytes]) -> None:
    for _ in chunks:
        pass


def _scan(data: bytes, limits: ArchiveLimits, sink: Sink, tests: PurePosixPath | None = None) -> list[Member]:
    """Check the archive and hand each file member's data, as it is read and checked, to
    ``sink`` under its name without the wrapping folder; the file members, so named. ``tests``:
    where a repository keeps its tests (the assignment's), for the message that names it."""
    if len(data) > limits.max_bytes:
        raise ArchiveError(f"the archive is {len(data)} bytes; at most {limits.max_bytes} are accepted", 413)
    with _listed(data, limits) as entries:
        _check_layout(entries)
        files = [e for e in entries if not e.is_dir]
        total = sum(e.size for e in files)
        if total > limits.max_unpacked:
            raise ArchiveError(f"the archive unpacks to {total} bytes; at most {limits.max_unpacked} are accepted", 413)
        if not any(e.name.endswith(".py") for e in files):
            where = f"{tests}/" if tests is not None else f"{STUDENT_ROOT}<assignment>/"
            raise ArchiveError(f"the archive holds no Python file: expected test files, or {where}")
        wrapper = _wrapper(entries)
        for entry in files:
            sink(entry.name.removeprefix(wrapper), _read(entry))
    return [Member(e.name.removeprefix(wrapper), e.size) for e in files]


def check_archive(data: bytes, limits: ArchiveLimits, *, tests: PurePosixPath | None = None) -> list[Member]:
    """Every file member of the archive, named as it will be unpacked (without a wrapping
    folder), if it keeps every rule; every member is read to its end to know. ``tests``: where
    the assignment's repositories keep their tests, for the messages.

    Raises:
        ArchiveError: naming the member and the rule (413 when too large, 415 when not an archive).
    """
    return _scan(data, limits, _discard, tests)


def unpack(data: bytes, dest: Path, limits: ArchiveLimits, *, tests: PurePosixPath) -> SubmissionFiles:
    """Check and unpack an archive into ``dest`` (empty), without its wrapping folder, and
    say where its parts are: its tests at ``tests`` (the assignment's ``student_tests``), if
    it has them there.

    Raises:
        ArchiveError: as :func:`check_archive` (``dest`` may then hold part of the archive).
    """

    def write(name: str, chunks: Iterator[bytes]) -> None:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("xb") as out:  # never over a file already written
            for chunk in chunks:
                out.write(chunk)

    _scan(data, limits, write, tests)
    found = dest / tests
    journal = dest / JOURNAL
    impl = dest / "python"
    return SubmissionFiles(
        root=dest,
        tests=found if found.is_dir() else dest,
        journal=journal if journal.is_file() else None,
        implementation=impl if (impl / "tinyllm").is_dir() else None,
    )
