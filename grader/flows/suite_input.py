"""What ``mutagrade grade`` is given: a folder of tests, or an archive of them.

An archive (``.zip``, ``.tar.gz``, ``.tgz``) is taken as the service takes an upload: checked
and unpacked by :mod:`grader.flows.archive` (which needs nothing of the service) under the service's
default limits, into a temporary folder removed after the grading. It holds the test files at
its root (possibly wrapped in one folder), or a student repository with the tests under
``python/tests/l3-3-gru/`` and, optionally, its journal ``.tdd/journal.jsonl``, verified as
the service verifies it. Messages name the archive's members as in the archive, never the
temporary folder.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from grader.flows.archive import ArchiveError, ArchiveLimits, unpack
from grader.flows.grading import GradingInputError

__all__ = ["ARCHIVE_SUFFIXES", "SuiteInput", "is_archive_name", "open_suite", "read_archive"]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def read_archive(path: Path, limit: int) -> bytes:
    """The archive's bytes, never more than one past ``limit`` (the check then refuses it).

    Raises:
        ArchiveError: the file is larger than ``limit`` (413).
    """
    size = path.stat().st_size
    if size > limit:
        raise ArchiveError(f"the archive is {size} bytes; at most {limit} are accepted", 413)
    with path.open("rb") as handle:
        return handle.read(limit + 1)


@dataclass(frozen=True)
class SuiteInput:
    """The tests to grade, and what came with them."""

    tests: Path
    journal: Path | None = None  # the archive's own journal, if it holds one
    name: str | None = None  # what the report calls the submission (None: the folder's path)
    relabel: Callable[[str], str] = field(default=str)  # a message, naming files as the student does


@contextmanager
def open_suite(path: Path, limits: ArchiveLimits = ArchiveLimits()) -> Iterator[SuiteInput]:
    """The suite at ``path``: a folder as it is, an archive unpacked for as long as the block.

    Raises:
        GradingInputError: ``path`` is a file that is no archive, or an archive that breaks a rule
            of uploads (naming the archive, the member and the rule).
    """
    if path.is_dir() or not path.exists():
        yield SuiteInput(tests=path)  # a folder, or none: the grading says what is wrong
        return
    if not is_archive_name(path.name):
        raise GradingInputError(
            f"{path}: expected a folder of test files or an archive of them "
            f"({', '.join(ARCHIVE_SUFFIXES)}), found a file of another kind"
        )
    with tempfile.TemporaryDirectory(prefix="mutagrade-grade-") as tmp:
        root = Path(tmp)
        try:
            files = unpack(read_archive(path, limits.max_bytes), root, limits)
        except (ArchiveError, OSError) as exc:
            raise GradingInputError(f"{path}: {exc}") from None
        prefix = str(root)

        def relabel(text: str) -> str:
            return text.replace(prefix, path.name)

        yield SuiteInput(tests=files.tests, journal=files.journal, name=path.name, relabel=relabel)
