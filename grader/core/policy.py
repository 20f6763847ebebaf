"""The policy step: a static check of a student's test suite, before any of it runs.

Student tests may import only the module under test and the ``tinyllm`` modules its contract
stub imports (the types it names: ``Tensor``, ``Module`` and ``Parameter``, ``PCG32``), numpy,
math, pytest and a few harmless standard modules (SPEC §3; :func:`policy_for`), and may not use names or attributes that reach behind that interface (SPEC §5
step 1). Nothing is imported or run.

It is a courtesy, not a wall: it tells a student early, at the exact line and in plain words,
what grading would refuse or what could not work, before any test runs. What contains hostile
code is the sandbox and the process separation (the tests run in a process apart from the
implementation under test, so nothing secret is reachable from them), never this check: a
static check of a dynamic language always misses a door.

This module walks the suite and holds the rules about its files: no links, special files,
``conftest.py``, compiled or extension modules (files Python could import other than the ``.py``
files the check reads), and every ``.py`` file UTF-8 text Python can parse. A ``__pycache__``
folder (Python writes one wherever a student runs the tests) is passed over: it is never copied
into a run. What each file's code may name, import or reach is :mod:`grader.core.policy_code`.

Its own cost is bounded too (:mod:`grader.core.caps`): a test file over ``MAX_TEST_FILE_BYTES`` is
refused unread (parsing one costs hundreds of bytes of memory for each byte of source), and
:func:`find_violations` keeps only the first violations it finds, counting the rest, however
many a suite holds.
"""

from __future__ import annotations

import codecs
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from pydantic import BaseModel, ConfigDict, field_validator

from grader.core.caps import MAX_ID_CHARS, MAX_LISTED, MAX_TEST_FILE_BYTES, cap_text
from grader.core.policy_code import check_tree
from grader.core.parsing import parse

if TYPE_CHECKING:
    from grader.core.paths import Layout

__all__ = [
    "STANDARD_IMPORTS",
    "PolicyConfig",
    "PolicyFindings",
    "Violation",
    "check_source",
    "check_suite",
    "find_violations",
    "policy_for",
]

# What a suite of any assignment may import besides its module and its contract's types.
STANDARD_IMPORTS: tuple[str, ...] = (
    "numpy",
    # Imports name exact modules; these three submodules are the harmless parts of numpy
    # that tests import directly (`from numpy.testing import assert_allclose`).
    "numpy.random",
    "numpy.linalg",
    "numpy.testing",
    "math",
    "pytest",
    "itertools",
    "functools",
    "dataclasses",
    "typing",
    "collections",
    "collections.abc",
    "fractions",
    "decimal",
    "statistics",
    "operator",
    "enum",
    "string",
    "cmath",
    "random",
    "copy",
)

# ------------------------------------------------------------------ the reasons (files)
_WHY_CONFTEST = (
    "a conftest.py configures pytest for the whole directory; a submission holds test "
    "files only"
)
_WHY_LINK = "a submission may not hold links; put the file itself in the suite"
_WHY_SPECIAL = "a submission may hold only regular files and directories"
_WHY_COMPILED = (
    "compiled code is refused: a submission holds source files only; delete it and submit "
    "the .py file"
)
_WHY_SYNTAX = "Python cannot parse this file, so pytest could not collect it"
_WHY_NOT_UTF8 = "test files must be saved as UTF-8 text"
_WHY_ENCODING = (
    "test files must be UTF-8; Python would read this file differently from this check"
)
_WHY_TOO_DEEP = "Python cannot compile expressions nested this deeply; simplify them"
_WHY_TOO_LARGE = (
    f"a test file may be at most {MAX_TEST_FILE_BYTES // 1024} KiB ({MAX_TEST_FILE_BYTES} bytes); "
    "split it into smaller files"
)

# Files Python would import or load besides source, by lower-case suffix (a case-insensitive
# file system imports `X.PYC` too), and what a violation calls them.
_COMPILED_SUFFIXES = {
    ".pyc": "compiled Python file",
    ".pyo": "compiled Python file",
    ".so": "extension module",
    ".pyd": "extension module",
    ".dll": "extension module",
    ".dylib": "extension module",
}
_PYCACHE = "__pycache__"

_DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# The line breaks Python's tokenizer knows; str.splitlines also splits on \f, \v, \x1c, ...
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_UTF8 = frozenset({"utf-8", "utf-8-sig"})


# ---------------------------------------------------------------------------- the models
class Violation(BaseModel):
    """One broken rule: where it is (a path relative to the suite, 1-based line, 0-based
    column), what was found and why it is not allowed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    line: int
    col: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.what}, {self.why}"


class PolicyConfig(BaseModel):
    """What a suite may import: exact module names (``numpy`` does not allow ``numpy.lib``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_imports: tuple[str, ...] = STANDARD_IMPORTS

    @field_validator("allowed_imports")
    @classmethod
    def _dotted_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [name for name in value if not _DOTTED_NAME.match(name)]
        if bad:
            raise ValueError(f"allowed_imports must hold dotted module names, got {bad}")
        return value


def policy_for(layout: Layout) -> PolicyConfig:
    """What a suite for ``layout``'s assignment may import: its module under test, the modules
    its contract stub imports (the types the contract names), and :data:`STANDARD_IMPORTS`.

    Raises:
        ContractError: if the stub cannot be read.
    """
    from grader.core.contract import stub_imports

    types = [name for name in stub_imports(layout.contract_stub) if name not in STANDARD_IMPORTS]
    named = (layout.module_under_test, *types, *STANDARD_IMPORTS)
    return PolicyConfig(allowed_imports=tuple(dict.fromkeys(named)))


@dataclass(frozen=True)
class PolicyFindings:
    """What :func:`find_violations` found: the first violations, and how many more there were."""

    violations: list[Violation]
    omitted: int = 0
    syntax_errors: int = 0  # files Python cannot parse, listed or not (one violation each)

    @property
    def total(self) -> int:
        return len(self.violations) + self.omitted


class _Found:
    """Violations as they are found, as plain tuples: the first ``limit`` in order (path, line,
    column, what) are kept and the rest counted, so that a file of 200,000 refused lines costs
    no more memory than one of 50. ``limit`` None keeps every one."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.items: list[tuple[str, int, int, str, str]] = []
        self.dropped = 0
        self.syntax_errors = 0  # counted as they are added, kept or dropped

    def add(self, path: str, line: int, col: int, what: str, why: str) -> None:
        self.items.append((path, line, col, cap_text(what, MAX_ID_CHARS), why))
        self.syntax_errors += why == _WHY_SYNTAX
        if self.limit is not None and len(self.items) >= 2 * self.limit + 64:
            self._trim()

    def merge(self, other: _Found) -> None:
        for item in other.items:
            self.add(*item)
        self.dropped += other.dropped

    def _trim(self) -> None:
        self.items.sort(key=lambda item: item[:4])
        if self.limit is not None and len(self.items) > self.limit:
            self.dropped += len(self.items) - self.limit
            del self.items[self.limit:]

    def findings(self) -> PolicyFindings:
        self._trim()
        violations = [Violation(path=p, line=line, col=col, what=what, why=why) for p, line, col, what, why in self.items]
        return PolicyFindings(violations=violations, omitted=self.dropped,
                              syntax_errors=self.syntax_errors)


# ---------------------------------------------------------------------------- public API
def find_violations(
    tests_dir: Path, config: PolicyConfig = PolicyConfig(), *, limit: int | None = MAX_LISTED
) -> PolicyFindings:
    """Check every file under ``tests_dir`` as :func:`check_suite` does, keeping the first
    ``limit`` violations (None: all) and counting the rest.

    Args:
        tests_dir: the submitted suite.
        config: what the suite may import.
        limit: how many violations to list.

    Returns:
        The first violations, sorted by path, line and column, and how many more there were.

    Raises:
        ValueError: if ``tests_dir`` is not a directory.
    """
    tests_dir = Path(tests_dir)
    if not tests_dir.is_dir():
        raise ValueError(f"tests_dir must be a directory, got {str(tests_dir)!r}")
    found = _Found(limit)
    for entry in _walk(tests_dir):
        _check_entry(entry, entry.relative_to(tests_dir).as_posix(), config, found)
    return found.findings()


def check_suite(tests_dir: Path, config: PolicyConfig = PolicyConfig()) -> list[Violation]:
    """Check every file under ``tests_dir``, recursively, without following links.

    ``.py`` files are parsed and checked; a ``conftest.py``, a link, a special file (fifo,
    device, socket), a compiled or extension module (``.pyc``, ``.pyo``, ``.so``, ``.pyd``,
    ``.dll``, ``.dylib``) or a ``.py`` file over ``MAX_TEST_FILE_BYTES`` (not read) anywhere is
    a violation; ``__pycache__`` folders (never copied into a run) and other files (data such as
    ``.npz``, ``.json`` or ``.txt``) are passed over.

    Args:
        tests_dir: the submitted suite.
        config: what the suite may import.

    Returns:
        The violations, sorted by path, line and column; empty when the suite is clean. All of
        them: :func:`find_violations` keeps the first few of a suite that may hold thousands.

    Raises:
        ValueError: if ``tests_dir`` is not a directory.
    """
    return find_violations(tests_dir, config, limit=None).violations


def check_source(
    source: str, path: str, config: PolicyConfig = PolicyConfig()
) -> list[Violation]:
    """Check the text of one test file (the file's name is not checked: see ``check_suite``).

    Args:
        source: the file's text.
        path: the name violations carry, relative to the suite.
        config: what the file may import.

    Returns:
        The violations, sorted by line and column; empty when the file is clean.
    """
    found = _Found(None)
    _check_text(source, path, config, found)
    return found.findings().violations


def _check_text(source: str, path: str, config: PolicyConfig, found: _Found) -> None:
    source = source.removeprefix("\ufeff")  # a byte-order mark, as Python drops it
    if "\x00" in source:  # the parser rejects these without saying where
        line, col = _char_position(source, source.index("\x00"))
        found.add(path, line, col, "null byte", _WHY_SYNTAX)
        return
    encoding = _declared_encoding(source)
    if encoding not in _UTF8:
        found.add(path, 1, 0, f"encoding declaration {encoding!r}", _WHY_ENCODING)
        return
    # The file's own findings, apart: a file too deeply nested for the checker is one violation.
    mine = _Found(found.limit)
    try:
        tree = parse(source, filename=str(path))
        check_tree(
            tree,
            lines=_LINE_BREAK.split(source),
            allowed_imports=config.allowed_imports,
            add=lambda line, col, what, why: mine.add(path, line, col, what, why),
        )
    except SyntaxError as error:
        mine = _Found(found.limit)
        mine.add(*_syntax_violation(path, error))
    except RecursionError:
        mine = _Found(found.limit)
        mine.add(path, 1, 0, "expressions nested too deeply", _WHY_TOO_DEEP)
    found.merge(mine)


# ---------------------------------------------------------------------------- files
def _walk(directory: Path) -> Iterator[Path]:
    """Every entry below ``directory``; links are listed, never followed, and a
    ``__pycache__`` folder is passed over (it is never copied into a run)."""
    # A stack, not recursion: an uploaded tree may nest deeper than Python's recursion limit.
    pending = [directory]
    while pending:
        for entry in pending.pop().iterdir():
            if _is_pycache(entry) and not entry.is_symlink() and entry.is_dir():
                continue
            yield entry
            if not entry.is_symlink() and entry.is_dir():
                pending.append(entry)


def _is_pycache(entry: Path) -> bool:
    return entry.name.lower() == _PYCACHE


def _check_entry(entry: Path, rel: str, config: PolicyConfig, found: _Found) -> None:
    # Order matters: is_dir and is_file follow links, so the link test comes first.
    if entry.is_symlink():
        found.add(rel, 1, 0, "symbolic link", _WHY_LINK)
        return
    if entry.is_dir():
        return
    if not entry.is_file():
        found.add(rel, 1, 0, "special file", _WHY_SPECIAL)
        return
    compiled = _COMPILED_SUFFIXES.get(entry.suffix.lower())
    if compiled is not None:
        found.add(rel, 1, 0, compiled, _WHY_COMPILED)
        return
    if entry.suffix != ".py":
        return
    if entry.name == "conftest.py":
        found.add(rel, 1, 0, "conftest.py", _WHY_CONFTEST)
    # Never more than the limit is read, even of a file that grows while it is read.
    with entry.open("rb") as handle:
        data = handle.read(MAX_TEST_FILE_BYTES + 1)
        size = max(len(data), entry.stat().st_size)
    if size > MAX_TEST_FILE_BYTES:
        found.add(rel, 1, 0, f"file of {size} bytes", _WHY_TOO_LARGE)
        return
    try:
        # utf-8-sig: Python accepts a byte-order mark at the start of a source file.
        source = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        # Everything before the first bad byte decodes, so its end is the bad byte's place.
        valid = data[: error.start].decode("utf-8-sig")
        line, col = _char_position(valid, len(valid))
        found.add(rel, line, col, "file is not UTF-8", _WHY_NOT_UTF8)
        return
    del data
    _check_text(source, rel, config, found)


def _char_position(source: str, index: int) -> tuple[int, int]:
    """Line and column of character ``index``."""
    before = _LINE_BREAK.split(source[:index])
    return len(before), len(before[-1])


def _declared_encoding(source: str) -> str:
    """The encoding a PEP 263 comment declares (utf-8 without one), as Python names it.

    Python reads a file's bytes in the declared encoding, so a file that is valid UTF-8 but
    declares, say, utf-7 runs code this check never saw.
    """
    head = "\n".join(_LINE_BREAK.split(source, maxsplit=2)[:2]) + "\n"
    try:
        declared, _ = tokenize.detect_encoding(io.BytesIO(head.encode("utf-8")).readline)
    except SyntaxError:  # an unknown encoding, or one that contradicts a byte-order mark
        return "unknown"
    return codecs.lookup(declared).name


def _syntax_violation(path: str, error: SyntaxError) -> tuple[str, int, int, str, str]:
    # SyntaxError's offset counts characters from 1; ast's columns count from 0.
    return path, error.lineno or 1, max((error.offset or 1) - 1, 0), f"syntax error: {error.msg}", _WHY_SYNTAX
