"""``mutagrade similarity``: how alike students' suites are, pair by pair, as MOSS measures it.

Each suite is read as code tokens (pygments' Python lexer, by :mod:`copydetect`: names become
``V``, ``F`` or ``O``, strings ``S``, whitespace and comments drop out), cut into k-grams of
:data:`NOISE` tokens, hashed and winnowed (Schleicher, Wilkerson and Aiken, 2003: any match of
:data:`GUARANTEE` tokens or more is found; here with a window of one, every k-gram kept, so
that the figures are the same from run to run). A pair's similarity on each side is the share
of that side's fingerprinted tokens that the other side holds too; the pair's similarity is
the larger share, so that a small suite copied whole into a larger one is found.

**One text per student.** A student's test files are joined into one text in name order,
each after a ``# file: name`` line (:func:`grader.core.similarity.join_suite`; a comment, so
no code to match), and fingerprinted once. copydetect compares one fingerprint with another
(:func:`copydetect.compare_files`), so a whole suite per fingerprint is what it supports best:
a pair is one comparison (19,900 for 200 students), its shares are copydetect's own figures
with no rule of ours to weigh files of unequal size, and a copy whose tests were moved into
other files, renamed or merged is found as well as one kept file for file. Only the k-grams
that span two files are lost or made up, a handful per file.

**The course's code is boilerplate.** Every student holds some of the course tests (the given
test, the imports of the starter's file; some hand in a course test as their own, which the
grading marks as a copy): the k-grams of ``reference/tests`` and of the starter's tests are
passed to copydetect as boilerplate, and never count as matched between students. (With
boilerplate, copydetect 0.5.0 drops some of the places of a fragment a suite repeats, as its
check takes a suite's hashes to be unique: the bundled suite's coverage comes out 2 % lower.)

**What is read.** Each submission is opened as every intake opens one
(:func:`grader.flows.intake.open_tests`: an archive checked and unpacked as the service checks an
upload, the tests found by the same rules; the journal is not read). The suite is its test files
(``test_*.py``, ``*_test.py``) and the other ``.py`` files beside them (helpers), never a file
over the policy check's size or a link, at most :data:`MAX_SUITE_BYTES` in all, in name order.
A student whose submission cannot be opened, or holds no test file, is skipped with the reason.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterable, Sequence
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

from grader.core.caps import MAX_TEST_FILE_BYTES
from grader.core.copies import MAX_SUITE_BYTES, TEST_FILE_PATTERNS
from grader.core.errors import GradingInputError
from grader.core.paths import Layout
from grader.core.similarity import (
    MatchedRegion,
    SimilarPair,
    SimilarityResult,
    SkippedStudent,
    SuiteText,
    join_suite,
    line_starts,
)
from grader.flows.archive import ArchiveLimits
from grader.flows.batch import StudentSubmission, find_submissions
from grader.flows.intake import open_tests

__all__ = [
    "DEFAULT_THRESHOLD",
    "GUARANTEE",
    "NOISE",
    "SIMILARITY_FORMATS",
    "compare_suites",
    "course_boilerplate",
    "read_suite",
    "read_suites",
    "run_similarity",
]

# In filtered characters (one per name, operator or digit; `assertV.V(V.V,V)` is 16). Below 25,
# the idioms every suite shares (`assert np.allclose(x.data, y)`) match between honest suites.
# GUARANTEE = NOISE (a window of one, copydetect's default) keeps every k-gram: a wider window
# picks the smallest hash of each, and Python salts its string hashes per process, so the
# figures would change from one run to the next; a suite's few thousand k-grams cost little.
NOISE = 25
GUARANTEE = 25
DEFAULT_THRESHOLD = 0.5
SIMILARITY_FORMATS = ("text", "json")
_NOT_READ = frozenset({"__pycache__", ".git"})


# --------------------------------------------------------------------------------- reading
def _is_test_file(name: str) -> bool:
    return any(fnmatch(name, pattern) for pattern in TEST_FILE_PATTERNS)


def _suite_files(folder: Path) -> list[tuple[str, Path]]:
    """The suite's files under ``folder`` by name: test files, and the ``.py`` files beside
    them; no link followed, no hidden folder."""
    found: list[tuple[str, Path]] = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _NOT_READ and not d.startswith(".")
                         and not Path(top, d).is_symlink())
        if not any(_is_test_file(name) for name in files):
            continue
        for name in files:
            path = Path(top, name)
            if name.endswith(".py") and stat.S_ISREG(path.lstat().st_mode):
                found.append((path.relative_to(folder).as_posix(), path))
    return sorted(found)


def read_suite(tests: Path, *, student: str) -> SuiteText:
    """The suite in ``tests`` as one text (see the module's docstring for which files).

    A file over :data:`~grader.core.caps.MAX_TEST_FILE_BYTES` is left out, and so are the
    files past :data:`~grader.core.copies.MAX_SUITE_BYTES` in all; bytes that are not UTF-8
    read as U+FFFD.
    """
    files: list[tuple[str, str]] = []
    spent = 0
    for name, path in _suite_files(tests):
        with path.open("rb") as handle:
            data = handle.read(MAX_TEST_FILE_BYTES + 1)
        if len(data) > MAX_TEST_FILE_BYTES:
            continue
        spent += len(data)
        if spent > MAX_SUITE_BYTES:
            break
        files.append((name, data.decode("utf-8-sig", errors="replace")))
    return join_suite(student, files)


def _read_one(entry: StudentSubmission, tests: PurePosixPath, archive_limits: ArchiveLimits) -> SuiteText | SkippedStudent:
    if len(entry.paths) > 1:
        names = ", ".join(p.name for p in entry.paths)
        return SkippedStudent(student=entry.student, reason=f"two submissions: {names}; keep one of them")
    [path] = entry.paths
    if path.is_symlink():
        return SkippedStudent(student=entry.student,
                              reason=f"{path.name} is a link; a submission must be a folder or an archive of its own")
    try:
        with open_tests(path, tests=tests, label=path.name, archive_limits=archive_limits) as opened:
            suite = read_suite(opened.where.tests, student=entry.student)
    except (GradingInputError, OSError) as exc:
        return SkippedStudent(student=entry.student, reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - one submission never stops the comparison
        return SkippedStudent(student=entry.student, reason=f"{path.name}: cannot be read: {exc}")
    if not suite.files:
        patterns = ", ".join(TEST_FILE_PATTERNS)
        return SkippedStudent(student=entry.student, reason=f"{path.name}: no test file ({patterns}) to compare")
    return suite


def read_suites(
    submissions: Path, *, tests: PurePosixPath, archive_limits: ArchiveLimits = ArchiveLimits(),
) -> tuple[list[SuiteText], list[SkippedStudent]]:
    """Every student's suite in ``submissions`` (one folder or archive per student, as
    ``grade-batch`` takes them: :func:`grader.flows.batch.find_submissions`), a repository's
    tests at ``tests`` (the assignment's ``student_tests``).

    Returns:
        The suites, by student name, and the students (or entries) skipped, with why.
    """
    entries, strays = find_submissions(submissions)
    skipped = [SkippedStudent(student=name, reason="neither a folder nor a .zip or .tar.gz archive")
               for name in strays]
    suites: list[SuiteText] = []
    for entry in entries:
        read = _read_one(entry, tests, archive_limits)
        (suites if isinstance(read, SuiteText) else skipped).append(read)
    return suites, skipped


def course_boilerplate(layout: Layout) -> list[str]:
    """The code every student is handed: the course tests (``reference/tests/*.py``) and the
    starter's tests (the given test, its imports), by name."""
    folders = [layout.course_tests, layout.starter]
    paths = sorted(p for folder in folders if folder.is_dir() for p in folder.rglob("*.py")
                   if "__pycache__" not in p.parts)
    return [p.read_text(encoding="utf-8") for p in paths]


# ------------------------------------------------------------------------------ comparing
def _fingerprint(text: str, boilerplate, *, window: int):
    from copydetect import CodeFingerprint

    return CodeFingerprint("suite.py", NOISE, window, boilerplate=boilerplate, filter=True, language="python",
                           fp=io.StringIO(text))


def _boilerplate_hashes(texts: Iterable[str]):
    """Every k-gram hash of ``texts`` (no winnowing), as copydetect takes boilerplate."""
    import numpy as np

    hashes = [h for text in texts for h in _fingerprint(text, None, window=1).hashes]
    return np.unique(np.array(hashes, dtype=np.int64))


def _regions(suite: SuiteText, slices, starts: list[int]) -> list[MatchedRegion]:
    """copydetect's slices (character offsets, a row of starts and one of ends) as regions,
    clipped to the text, overlaps merged, whitespace at either end left out."""
    text = suite.text
    spans: list[list[int]] = []
    for start, end in sorted(zip((int(s) for s in slices[0]), (int(e) for e in slices[1]))):
        start, end = max(0, start), min(len(text), end)
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start >= end:
            continue
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return [MatchedRegion.within(suite, start=s, end=e, starts=starts) for s, e in spans]


def compare_suites(
    suites: Sequence[SuiteText],
    *,
    boilerplate: Sequence[str] = (),
    threshold: float = DEFAULT_THRESHOLD,
    skipped: Sequence[SkippedStudent] = (),
) -> SimilarityResult:
    """Compare every pair of ``suites`` (each fingerprinted once).

    Args:
        suites: one per student (:func:`read_suites`, or texts the caller joined with
            :func:`grader.core.similarity.join_suite`).
        boilerplate: code that never counts as matched (:func:`course_boilerplate`).
        threshold: the similarity (the larger share) from which a pair is reported, 0 to 1.
        skipped: students left out before, carried into the result.

    Returns:
        The pairs at or above ``threshold``, most similar first, each with its matched regions.

    Raises:
        ValueError: ``threshold`` is not within 0 and 1, or two suites name the same student.
    """
    from copydetect import compare_files

    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold: expected a share from 0 to 1, got {threshold}")
    names = [s.student for s in suites]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"suites: each student once, got {', '.join(twice)} more than once")
    hashes = _boilerplate_hashes(boilerplate)
    prints = [_fingerprint(s.text, hashes, window=GUARANTEE - NOISE + 1) for s in suites]
    order = sorted(range(len(suites)), key=lambda i: suites[i].student)
    starts: dict[int, list[int]] = {}
    pairs: list[SimilarPair] = []
    for at, i in enumerate(order):
        for j in order[at + 1:]:
            if prints[i].hashes.isdisjoint(prints[j].hashes):
                continue
            overlap, (share_a, share_b), (slices_a, slices_b) = compare_files(prints[i], prints[j])
            share_a, share_b = min(1.0, float(share_a)), min(1.0, float(share_b))
            if max(share_a, share_b) < threshold:
                continue
            a, b = suites[i], suites[j]
            regions_a = _regions(a, slices_a, starts.setdefault(i, line_starts(a.text)))
            regions_b = _regions(b, slices_b, starts.setdefault(j, line_starts(b.text)))
            pairs.append(SimilarPair(a=a.student, b=b.student, similarity_a=round(share_a, 4),
                                     similarity_b=round(share_b, 4), similarity=round(max(share_a, share_b), 4),
                                     overlap=int(overlap), regions_a=regions_a, regions_b=regions_b))
    pairs.sort(key=lambda p: (-p.similarity, -p.overlap, p.a, p.b))
    return SimilarityResult(threshold=threshold, students=sorted(names), pairs=pairs, skipped=list(skipped))


# -------------------------------------------------------------------------------- command
def run_similarity(submissions: Path, *, layout: Layout, threshold: float = DEFAULT_THRESHOLD, fmt: str = "text",
                   html: Path | None = None) -> int:
    """``mutagrade similarity``: compare every student's suite in ``submissions``, print the
    pairs (``fmt``: ``text`` or ``json``, the :class:`~grader.core.similarity.SimilarityResult`)
    and write ``html``, a page of each pair side by side.

    Returns:
        The exit code: 0 (a listed pair is for staff to judge, not a failure).

    Raises:
        GradingInputError: ``submissions`` is not a folder, or holds no student; copydetect
            (the ``service`` extra) is not installed.
        ValueError: ``fmt`` is neither ``text`` nor ``json``, or ``threshold`` is not within 0 and 1.
    """
    from grader.core.exits import EXIT_OK
    from grader.report.similarity_html import render_similarity_html
    from grader.report.similarity_text import render_similarity_text

    if fmt not in SIMILARITY_FORMATS:
        raise ValueError(f"fmt: expected one of {', '.join(SIMILARITY_FORMATS)}, got {fmt!r}")
    try:
        import copydetect  # noqa: F401 - the service extra's; said here, before any suite is read
    except ModuleNotFoundError as exc:
        raise GradingInputError(f"mutagrade similarity: expected copydetect installed (pip install "
                                f"'mutagrade[service]'), found no module {exc.name!r}") from None
    expected = "one folder or archive (.zip, .tar.gz) per student"
    if not submissions.is_dir():
        raise GradingInputError(f"{submissions}: expected a directory with {expected}")
    suites, skipped = read_suites(submissions, tests=layout.student_tests)
    if not suites and not skipped:
        raise GradingInputError(f"{submissions}: expected {expected}, found none")
    result = compare_suites(suites, boilerplate=course_boilerplate(layout), threshold=threshold, skipped=skipped)
    if html is not None:
        html.write_text(render_similarity_html(result, suites), encoding="utf-8")
    print(result.model_dump_json(indent=2) if fmt == "json" else render_similarity_text(result).rstrip("\n"))
    return EXIT_OK
