"""Opening a submission: the one way in for ``mutagrade grade``, ``grade-batch``, the service's
grading job and Gradescope's autograder (which runs ``mutagrade grade``), so that the same
submission gets the same answer from each.

A submission is a folder or an archive (``.zip``, ``.tar.gz``, ``.tgz``; or an upload's bytes),
an archive checked and unpacked by :mod:`grader.flows.archive` (the service's own check) into a
temporary folder that lives as long as the submission is open. Its tests are in one place:

1. ``python/tests/<assignment>/`` of a student repository (the assignment's ``student_tests``);
2. else the top, where test files lie (and the folders below it, as pytest collects them);

either after one wrapping folder is taken off (the only entry at the top, as ``zip -r sub.zip
mytests`` and GitHub's "Download ZIP" make; an archive's is taken off as it is unpacked). Test
files only in a folder further down (two wrapping folders) or in two folders at the top (which
are the tests?) are refused, naming those folders.

Its journal is ``.tdd/journal.jsonl`` at that same top, or the one the caller names, and is
verified here (replayed in the sandbox), under one rule: a journal that cannot be read (a line
that is not JSON, more entries than the assignment allows), or a link among a folder's
``.tdd/`` files, is a journal that does not verify, its problem naming the file, and the suite
is graded all the same. What such a journal costs is the assignment's to say
(``require_journal``), when the suite is scored.

Messages name files as the student named them: the archive by its name and its members by
their paths in it (less a wrapping folder), a folder as given; never the temporary folder.

Nothing but the standard library is imported here at first: the command line finds a folder's
tests (:func:`locate`) before it starts the grading's workers.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, Iterator

from grader.core.errors import GradingInputError

if TYPE_CHECKING:
    from grader.core.assignment import Assignment
    from grader.core.models import JournalSummary
    from grader.core.paths import Layout
    from grader.flows.archive import ArchiveLimits
    from grader.run.runner import RunLimits

__all__ = [
    "ARCHIVE_SUFFIXES",
    "JOURNAL",
    "Located",
    "OpenSubmission",
    "OpenTests",
    "Upload",
    "is_archive_name",
    "locate",
    "open_submission",
    "open_tests",
    "read_archive",
]

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".zip")
JOURNAL = Path(".tdd", "journal.jsonl")
_TEST_FILES = ("test_*.py", "*_test.py")  # pytest's, as grader.core.copies.TEST_FILE_PATTERNS (not imported: heavy)
_NOT_GRADED = frozenset({"__pycache__", ".git"})  # no intake grades them (Gradescope's packing leaves them out)


def _accepted(tests: PurePosixPath) -> str:
    return f"at the top, in one folder that holds everything, or in {tests}/ of a repository"


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def read_archive(path: Path, limit: int) -> bytes:
    """The archive's bytes, never more than one past ``limit`` (the check then refuses it).

    Raises:
        ArchiveError: the file is larger than ``limit`` (413).
    """
    from grader.flows.archive import ArchiveError

    size = path.stat().st_size
    if size > limit:
        raise ArchiveError(f"the archive is {size} bytes; at most {limit} are accepted", 413)
    with path.open("rb") as handle:
        return handle.read(limit + 1)


@dataclass(frozen=True)
class Upload:
    """An archive already read (the service's stored upload), and the name it was sent under."""

    name: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Located:
    """Where a submission keeps its parts: its top (less a wrapping folder) and its tests."""

    top: Path
    tests: Path

    @property
    def journal(self) -> Path:
        return self.top / JOURNAL


@dataclass(frozen=True)
class OpenSubmission:
    """A submission ready to grade."""

    tests: Path
    journal: JournalSummary | None  # its verification; None: none was found, and none is required
    name: str  # the submission as the student named it: the archive's name, or the folder as given
    relabel: Callable[[str], str] = str  # a message, naming files as the student does


@dataclass(frozen=True)
class OpenTests:
    """A submission opened for its tests alone: where its parts are, its journal unread."""

    where: Located
    name: str  # as in OpenSubmission
    relabel: Callable[[str], str] = str


def locate(folder: Path, tests: PurePosixPath, *, unwrap: bool = True) -> Located:
    """Where the submission in ``folder`` keeps its tests (reads the folder, checks nothing).

    Args:
        tests: where a repository keeps them (the assignment's ``student_tests``).
        unwrap: take off one wrapping folder (an archive's was taken off as it was unpacked).
    """
    top = folder
    if unwrap and not (folder / tests).is_dir():
        entries = [entry for entry in folder.iterdir() if entry.name not in _NOT_GRADED]
        if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
            top = entries[0]
    found = top / tests
    return Located(top, found if found.is_dir() else top)


@contextmanager
def open_submission(
    source: Path | Upload,
    *,
    layout: Layout,
    assignment: Assignment,
    limits: RunLimits,
    journal: Path | None = None,
    label: str | None = None,
    archive_limits: ArchiveLimits | None = None,
) -> Iterator[OpenSubmission]:
    """Open the submission at ``source`` for as long as the block, its journal verified.

    Args:
        source: a folder, an archive file, or an archive's bytes.
        layout: the checkout (the journal's replay runs the course's framework).
        assignment: whether a journal is required (a missing one is then reported so).
        limits: the replay's limits: the grading's own (sandbox, jobs, budgets).
        journal: the journal to verify instead of the submission's own ``.tdd/journal.jsonl``.
        label: what messages call the submission (default: the archive's name, the folder as given).
        archive_limits: an archive's limits (default: the service's).

    Raises:
        GradingInputError: ``source`` is missing, a file that is no archive, an archive that
            breaks a rule of uploads, or holds its tests where they cannot be told (naming the
            submission, and the member or folders).
        SandboxUnavailable: the journal's replay needs a sandbox layer this machine lacks.
    """
    with open_tests(source, tests=layout.student_tests, label=label, archive_limits=archive_limits) as opened:
        verified = _verified(opened.where, journal, opened.relabel, layout=layout, assignment=assignment,
                             limits=limits)
        yield OpenSubmission(tests=opened.where.tests, journal=verified, name=opened.name, relabel=opened.relabel)


@contextmanager
def open_tests(
    source: Path | Upload, *, tests: PurePosixPath, label: str | None = None,
    archive_limits: ArchiveLimits | None = None,
) -> Iterator[OpenTests]:
    """Open the submission at ``source`` for as long as the block, its tests found by the rules
    above and its journal left unread: what reads the tests alone (``mutagrade similarity``)
    needs no replay.

    Args:
        source: a folder, an archive file, or an archive's bytes.
        tests: where a repository keeps its tests (the assignment's ``student_tests``).
        label: what messages call the submission (default: the archive's name, the folder as given).
        archive_limits: an archive's limits (default: the service's).

    Raises:
        GradingInputError: as :func:`open_submission` does.
    """
    from grader.flows.archive import ArchiveLimits

    with ExitStack() as stack:
        if isinstance(source, Upload) or source.is_file():
            name = label or source.name
            dest = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mutagrade-intake-")))
            where, relabel = _unpacked(source, dest, name, tests, archive_limits or ArchiveLimits())
        else:
            name = label or str(source)
            where, relabel = _folder(Path(source), name, tests)
        try:
            _check_shape(where, tests)
        except GradingInputError as exc:
            raise GradingInputError(relabel(str(exc))) from None
        yield OpenTests(where=where, name=name, relabel=relabel)


def _relabeller(root: Path, name: str) -> Callable[[str], str]:
    prefix = str(root)
    return lambda text: text.replace(prefix, name)


def _unpacked(
    source: Path | Upload, dest: Path, name: str, tests: PurePosixPath, limits: ArchiveLimits,
) -> tuple[Located, Callable[[str], str]]:
    from grader.flows.archive import ArchiveError, unpack

    if not isinstance(source, Upload) and not is_archive_name(source.name):
        raise GradingInputError(
            f"{source}: expected a folder of test files or an archive of them "
            f"({', '.join(ARCHIVE_SUFFIXES)}), found a file of another kind"
        )
    try:
        data = source.data if isinstance(source, Upload) else read_archive(source, limits.max_bytes)
        unpack(data, dest, limits, tests=tests)
    except (ArchiveError, OSError) as exc:
        raise GradingInputError(f"{name}: {exc}") from None
    return locate(dest, tests, unwrap=False), _relabeller(dest, name)


def _folder(folder: Path, name: str, tests: PurePosixPath) -> tuple[Located, Callable[[str], str]]:
    if not folder.exists():
        raise GradingInputError(f"{name}: no such directory of tests")
    if not folder.is_dir():
        raise GradingInputError(f"{name}: expected a directory of test files, found a file")
    return locate(folder, tests), _relabeller(folder, name)


def _is_test_file(path: Path) -> bool:
    return any(fnmatch(path.name, pattern) for pattern in _TEST_FILES)


def _holds_tests(folder: Path) -> bool:
    """Whether a test file lies anywhere below ``folder`` (links not followed)."""
    for here, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in _NOT_GRADED]
        if any(_is_test_file(Path(here, name)) for name in files):
            return True
    return False


def _check_shape(where: Located, tests: PurePosixPath) -> None:
    """Refuse test files that lie only in folders below the top: one folder further down than
    a wrapping folder may be, or two folders of tests where one is graded."""
    if where.tests != where.top:
        return  # a repository's tests folder
    entries = sorted(where.top.iterdir())
    if any(_is_test_file(entry) and entry.is_file() for entry in entries):
        return
    folders = [entry for entry in entries if entry.is_dir() and not entry.is_symlink()
               and not entry.name.startswith(".") and entry.name not in _NOT_GRADED and _holds_tests(entry)]
    named = ", ".join(f"{entry.name}/" for entry in folders)
    if len(folders) == 1:
        raise GradingInputError(f"{where.top}: no test file at the top; the test files are further down, in "
                                f"{named}: put them {_accepted(tests)}")
    if folders:
        raise GradingInputError(f"{where.top}: no test file at the top, and test files in {len(folders)} folders: "
                                f"{named}; which are the tests cannot be told: submit one folder of them, its test "
                                f"files {_accepted(tests)}")
    # No test file anywhere: the grading says what the submission holds instead.


def _verified(
    where: Located, given: Path | None, relabel: Callable[[str], str], *, layout: Layout, assignment: Assignment,
    limits: RunLimits,
) -> JournalSummary | None:
    """The journal's verification: ``given``, else the submission's own."""
    from grader.core.journal import NO_JOURNAL, JournalFormatError
    from grader.core.models import JournalSummary
    from grader.flows.replay import verify_journal

    path = given
    if path is None:
        link = _link_in_journal(where.top)
        if link is not None:
            what = "the journal must be a file" if link == JOURNAL.as_posix() else "the journal's files must be files"
            problem = relabel(f"{where.top / link}: a link; {what} of the submission")
            return JournalSummary(checked=True, ok=False, problems=[problem])
        path = where.journal
        if not path.is_file():
            return JournalSummary(checked=True, ok=False, problems=[NO_JOURNAL]) if assignment.require_journal else None
    try:
        summary = verify_journal(path, where.tests, layout=layout, limits=limits)
    except JournalFormatError as exc:  # graded all the same: the journal just does not verify
        return JournalSummary(checked=True, ok=False, problems=[relabel(str(exc))])
    return summary.model_copy(update={"problems": [relabel(problem) for problem in summary.problems]})


def _link_in_journal(top: Path) -> str | None:
    """The first link among the journal's files (``.tdd/``), relative to ``top``: a folder
    handed in may hold one that points out of it; an archive never does."""
    tdd = top / ".tdd"
    if tdd.is_symlink():
        return ".tdd"
    for folder, dirs, files in os.walk(tdd):  # links to folders are listed, not followed
        for name in dirs + files:
            if (Path(folder) / name).is_symlink():
                return (Path(folder) / name).relative_to(top).as_posix()
    return None
