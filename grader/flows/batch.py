"""Batch grading for staff: every student's submission in a folder, into one CSV gradebook.

The gradebook is the grading CSV (:func:`write_csv`), or, with the course's roster, one row per
student in points (:func:`write_gradebook`: Canvas's or Moodle's import, or a plain CSV), each
student matched to the submission named after their login.

One entry per student, named after the student: a folder, or an archive (``alice.zip``,
``alice.tar.gz``: an LMS download), each opened as every intake opens a submission
(:func:`grader.flows.intake.open_submission`: an archive checked and unpacked as the service
checks an upload, the tests found and the journal verified by the same rules as ``mutagrade
grade``). One submission that cannot be graded (a bad archive, or one that breaks the grader)
is a row with its problem; it never stops the batch.

Several submissions are graded at once, each grading on a warm
:class:`~grader.run.pool.WorkerPool` of its own (no two students' tests ever share a
worker), as many as :class:`~grader.run.admission.Admission` lets in: one per core, more while
the cores sit idle (a suite that sleeps holds no core), within the machine's memory. The next
submissions are prepared in threads beside them (unpacked, journal replayed in workers of
their own), so the gradings wait for a replay only when replays are slower than gradings.
"""

from __future__ import annotations

import stat
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, Field

from grader.flows.archive import ArchiveLimits
from grader.core.assignment import Assignment
from grader.core.caps import cap_text
from grader.core.points import points_of
from grader.core.roster import RosterEntry
from grader.flows.grading import GradingInputError, grade_suite
from grader.flows.intake import ARCHIVE_SUFFIXES, open_submission
from grader.run.admission import Admission, machine_admission
from grader.run.pool import WorkerPool
from grader.core.models import Audience, JournalSummary, Report
from grader.core.paths import Layout
from grader.run.runner import RunLimits
from grader.sandbox.base import SandboxMode
from grader.sandbox.status import check_mode
from grader.report.gradebook import GradebookFormat, GradeRow, render_gradebook
from grader.report.spreadsheet import write_rows

__all__ = [
    "MAX_AHEAD",
    "BatchRow",
    "StudentSubmission",
    "find_submissions",
    "grade_batch",
    "gradebook_rows",
    "write_csv",
    "write_gradebook",
    "write_report",
]

CSV_FIELDS = ("student", "passed", "kill_rate", "killed", "total", "missing_required", "journal", "problems")
NOT_GRADED_SCHEMA = "mutagrade.not-graded/1"
MAX_AHEAD = 8  # each submission prepared ahead replays in a worker (and a sandbox user) of its own


class BatchRow(BaseModel):
    """One student's line of the gradebook."""

    student: str
    passed: bool
    kill_rate: float
    killed: int
    total: int
    missing_required: list[str]
    problems: list[str]
    report: Report | None = None
    journal: JournalSummary | None = None  # None: no journal, and none required

    @property
    def journal_cell(self) -> str:
        """``verified``, ``not verified: <first problem> (and N more)`` or ``none``."""
        journal = self.journal
        if journal is None or not journal.checked:
            return "none"
        if journal.ok:
            return "verified"
        more = max(0, len(journal.problems) - 1) + journal.problems_omitted
        first = journal.problems[0] if journal.problems else "it does not verify"
        return cap_text(f"not verified: {first}" + (f" (and {more} more)" if more else ""))


class NotGraded(BaseModel):
    """The JSON report of a submission that could not be graded."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    schema_: str = Field(default=NOT_GRADED_SCHEMA, alias="schema")
    student: str
    passed: bool = False
    error: str
    journal: JournalSummary | None = None


@dataclass(frozen=True)
class StudentSubmission:
    """A student's entry in the submissions folder: normally one folder or archive; more than
    one (``alice/`` and ``alice.zip``) is refused when graded."""

    student: str
    paths: tuple[Path, ...]


def _archive_student(name: str) -> str | None:
    return next((name[: -len(s)] for s in ARCHIVE_SUFFIXES if name.lower().endswith(s)), None)


def find_submissions(submissions: Path) -> tuple[list[StudentSubmission], list[str]]:
    """The students in ``submissions``, by name, and the entries that are none (named).

    A folder is a student, and so is a regular file ending in ``.zip``, ``.tar.gz`` or ``.tgz``
    (the student is the name without it); a link is a student too, refused when graded.
    Hidden entries (``.DS_Store``) are left out without a word.
    """
    found: dict[str, list[Path]] = {}
    skipped: list[str] = []
    for path in sorted(submissions.iterdir()):
        if path.name.startswith("."):
            continue
        mode = path.lstat().st_mode
        student = path.name if stat.S_ISDIR(mode) or stat.S_ISLNK(mode) else None
        if stat.S_ISREG(mode):
            student = _archive_student(path.name)
        if not student or student.startswith("."):
            skipped.append(path.name)
            continue
        found.setdefault(student, []).append(path)
    return [StudentSubmission(s, tuple(p)) for s, p in sorted(found.items())], skipped


# ------------------------------------------------------------------- preparing
class _Refused(Exception):
    """The submission cannot be graded; the message says why."""


@dataclass
class _Prepared:
    """A submission ready to grade: its tests, its journal's verification, or why not."""

    student: str
    tests: Path | None = None
    journal: JournalSummary | None = None
    error: str | None = None
    label: Callable[[str], str] = str
    _open: ExitStack = field(default_factory=ExitStack, repr=False)  # the submission, unpacked while open

    def close(self) -> None:
        self._open.close()


def _the_one(entry: StudentSubmission) -> Path:
    """The student's one folder or archive."""
    if len(entry.paths) > 1:
        names = ", ".join(p.name for p in entry.paths)
        raise _Refused(f"two submissions for {entry.student}: {names}; keep one of them")
    [path] = entry.paths
    if path.is_symlink():
        raise _Refused(f"{path.name} is a link; a student's submission must be a folder or an archive of its own")
    return path


def _prepare(entry: StudentSubmission, *, layout: Layout, assignment: Assignment, limits: RunLimits,
             archive_limits: ArchiveLimits) -> _Prepared:
    """Open the student's submission (:func:`grader.flows.intake.open_submission`): unpacked,
    journal verified, until the row is graded."""
    prepared = _Prepared(entry.student)
    try:
        path = _the_one(entry)
        opened = prepared._open.enter_context(open_submission(
            path, layout=layout, assignment=assignment, limits=limits, label=path.name, archive_limits=archive_limits))
        prepared.tests, prepared.journal, prepared.label = opened.tests, opened.journal, opened.relabel
    except (_Refused, GradingInputError, OSError) as exc:
        prepared.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - one submission never stops the batch
        prepared.error = f"{exc}"
    return prepared


# --------------------------------------------------------------------- grading
def _row(student: str, report: Report) -> BatchRow:
    problems = [str(line) for line in [*report.reasons, *report.problems]]
    return BatchRow(
        student=student,
        passed=report.passed,
        kill_rate=report.score.kill_rate,
        killed=report.score.killed,
        total=report.score.total,
        missing_required=report.score.required_missing,
        problems=problems,
        report=report,
        journal=report.journal,
    )


def _not_graded(student: str, error: str, journal: JournalSummary | None) -> BatchRow:
    return BatchRow(student=student, passed=False, kill_rate=0.0, killed=0, total=0, missing_required=[],
                    problems=[cap_text(f"could not be graded: {error}")], journal=journal)


def grade_batch(
    submissions: Path,
    *,
    layout: Layout,
    assignment: Assignment,
    policy: bool = True,
    audience: Audience = Audience.STAFF,
    on_done: Callable[[BatchRow], None] | None = None,
    sandbox: SandboxMode | str = SandboxMode.AUTO,
    reports: Path | None = None,
    ahead: int = 2,
    archive_limits: ArchiveLimits = ArchiveLimits(),
    admission: Admission | None = None,
) -> list[BatchRow]:
    """Grade every student of ``submissions`` (see :func:`find_submissions`).

    Args:
        submissions: one folder or archive per student, named after the student.
        layout: the checkout (reference, mutants).
        assignment: threshold, validity rules, journal, limits.
        policy: run the static policy check.
        audience: whose view the reports take (staff by default).
        on_done: called with each row as soon as it is graded (a progress bar), from one
            thread at a time.
        sandbox: the sandbox mode of every grading and replay (see :func:`grader.flows.grading.grade_suite`).
        reports: write each student's JSON report here (``<student>.json``), a submission that
            could not be graded included (its error).
        ahead: submissions prepared (unpacked, journal replayed) beyond those being graded; 0
            one after the other.
        archive_limits: the archives' limits (by default the service's).
        admission: how many gradings run at once (default: this machine's cores, memory and
            sandbox users, see :mod:`grader.run.admission`).

    Returns:
        One row per student, in name order.

    Raises:
        SandboxUnavailable: if ``sandbox`` needs a layer this machine lacks (checked once,
            before any student, rather than failing every row the same way).
    """
    if not 0 <= ahead <= MAX_AHEAD:
        raise ValueError(f"ahead: expected 0 to {MAX_AHEAD} submissions prepared ahead, got {ahead}")
    check_mode(sandbox)
    students, _ = find_submissions(submissions)
    limits = RunLimits.of(assignment, sandbox=sandbox)
    if reports is not None:
        reports.mkdir(parents=True, exist_ok=True)
    admission = admission or machine_admission(sandbox, reserved_workers=ahead)
    queue = _prepared(students, ahead, layout=layout, assignment=assignment, limits=limits,
                      archive_limits=archive_limits)
    batch = _Batch(queue, admission, on_done=on_done, reports=reports,
                   grade=lambda prepared, pool: _grade_one(prepared, pool, layout=layout, assignment=assignment,
                                                           policy=policy, audience=audience, sandbox=sandbox),
                   pool=lambda: WorkerPool(layout=layout, limits=limits))
    with closing(queue):
        rows = batch.run(min(len(students), admission.capacity.most))
    return sorted(rows, key=lambda row: row.student)


class _Batch:
    """The gradings of a batch, in threads: each thread keeps a warm pool of its own and grades
    one prepared submission after another, each once the admission lets it in."""

    def __init__(self, queue: Iterator[_Prepared], admission: Admission, *,
                 grade: Callable[[_Prepared, WorkerPool], BatchRow], pool: Callable[[], WorkerPool],
                 on_done: Callable[[BatchRow], None] | None, reports: Path | None) -> None:
        self.queue = queue
        self.admission = admission
        self.grade = grade
        self.pool = pool
        self.on_done = on_done
        self.reports = reports
        self.rows: list[BatchRow] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.failure: BaseException | None = None

    def run(self, threads: int) -> list[BatchRow]:
        workers = [threading.Thread(target=self._work, name=f"mutagrade-batch-{n}", daemon=True)
                   for n in range(max(1, threads))]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if self.failure is not None:
            raise self.failure
        return self.rows

    def _next(self) -> _Prepared | None:
        with self.lock:
            return None if self.stop.is_set() else next(self.queue, None)

    def _work(self) -> None:
        try:
            with self.pool() as pool:
                while self.admission.enter(self.stop):
                    try:
                        prepared = self._next()
                        if prepared is None:
                            return
                        try:
                            row = self.grade(prepared, pool)
                        finally:
                            prepared.close()
                    finally:
                        self.admission.leave()
                    self._done(row)
        except BaseException as exc:  # noqa: BLE001 - the first failure stops the batch, raised by run()
            with self.lock:
                self.failure = self.failure or exc
            self.stop.set()

    def _done(self, row: BatchRow) -> None:
        with self.lock:
            if self.reports is not None:
                write_report(row, self.reports)
            self.rows.append(row)
            if self.on_done is not None:
                self.on_done(row)


def _prepared(students: list[StudentSubmission], ahead: int, **how) -> Iterator[_Prepared]:
    """Each student prepared, in order, ``ahead`` of them at a time in threads of their own
    while the caller grades the one before (at most ``ahead + 1`` unpacked at once)."""
    pending: deque[Future[_Prepared]] = deque()
    queue = iter(students)
    executor = ThreadPoolExecutor(max_workers=max(1, ahead), thread_name_prefix="mutagrade-prepare")

    def fill(size: int) -> None:
        while len(pending) < size and (student := next(queue, None)) is not None:
            pending.append(executor.submit(_prepare, student, **how))

    try:
        fill(max(1, ahead))
        while pending:
            prepared = pending.popleft().result()
            fill(ahead)  # the next ones start before this one is graded
            yield prepared
            fill(max(1, ahead))
    finally:
        for future in pending:  # the batch stopped early: nothing unpacked is left behind
            if not future.cancel():
                future.result().close()
        executor.shutdown(wait=True)


def _grade_one(prepared: _Prepared, pool: WorkerPool, *, layout: Layout, assignment: Assignment, policy: bool,
               audience: Audience, sandbox: SandboxMode | str) -> BatchRow:
    if prepared.error is not None or prepared.tests is None:
        return _not_graded(prepared.student, prepared.error or "nothing to grade", prepared.journal)
    try:
        report = grade_suite(
            prepared.tests,
            layout=layout,
            assignment=assignment,
            policy=policy,
            journal=prepared.journal,
            audience=audience,
            submission=prepared.student,
            sandbox=sandbox,
            pool=pool,
        )
    except Exception as exc:  # noqa: BLE001 - one submission never stops the batch
        return _not_graded(prepared.student, prepared.label(str(exc)), prepared.journal)
    return _row(prepared.student, report)


def write_report(row: BatchRow, folder: Path) -> Path:
    """Write ``<student>.json`` into ``folder``: the report, or the error of a submission that
    could not be graded (``mutagrade.not-graded/1``)."""
    path = folder / f"{row.student}.json"
    if row.report is not None:
        text = row.report.model_dump_json(indent=2)
    else:
        text = NotGraded(student=row.student, error=row.problems[0] if row.problems else "",
                         journal=row.journal).model_dump_json(indent=2)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def write_csv(rows: Iterable[BatchRow], path: Path) -> None:
    """Write the gradebook: one line per student, problems joined by " | "; a cell a spreadsheet
    would compute (a student named ``=HYPERLINK(...)``) is written as text."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        write_rows(handle, CSV_FIELDS, (
            [
                row.student,
                "yes" if row.passed else "no",
                f"{row.kill_rate:.4f}",
                row.killed,
                row.total,
                " ".join(row.missing_required),
                row.journal_cell,
                " | ".join(row.problems),
            ]
            for row in rows
        ))


# ------------------------------------------------------------------- gradebooks
def _grade_row(entry: RosterEntry, row: BatchRow | None, assignment: Assignment) -> GradeRow:
    """The student's gradebook line: no late penalty here (a folder carries no submission time)."""
    if row is None:
        return GradeRow(entry=entry, points=None, final_points=None, status="no submission")
    if row.report is None or row.total < 1:
        status = row.problems[0] if row.problems else "could not be graded"
        return GradeRow(entry=entry, points=None, final_points=None, submission=row.student, status=status)
    points = points_of(passed=row.passed, killed=row.killed, mutants=row.total, assignment=assignment)
    return GradeRow(entry=entry, points=points, final_points=points, submission=row.student,
                    status="passed" if row.passed else "not passed")


def gradebook_rows(rows: Iterable[BatchRow], *, roster: Sequence[RosterEntry],
                   assignment: Assignment) -> list[GradeRow]:
    """The gradebook's lines: one per roster student, in the roster's order, with the
    submission named after their login (the same name, else the one name equal to it whatever
    its case), or "no submission"; then one per submission on no roster, by name, its name as
    the login. Points by :func:`grader.core.points.points_of`; None where nothing was graded.
    """
    remaining = {row.student: row for row in rows}
    lines = []
    for entry in roster:
        row = remaining.pop(entry.login, None)
        if row is None:
            folded = [name for name in remaining if name.casefold() == entry.login.casefold()]
            row = remaining.pop(folded[0]) if len(folded) == 1 else None
        lines.append(_grade_row(entry, row, assignment))
    for name in sorted(remaining):
        entry = RosterEntry(login=name, name="", email=None, sis_id=None, lms_id=None, section=None)
        lines.append(_grade_row(entry, remaining[name], assignment))
    return lines


def write_gradebook(rows: Sequence[BatchRow], path: Path, *, fmt: GradebookFormat,
                    roster: Sequence[RosterEntry] | None, assignment: Assignment) -> list[GradeRow]:
    """Write the gradebook: without a roster, the grading CSV (:func:`write_csv`); with one,
    :func:`gradebook_rows` in ``fmt`` (:func:`grader.report.gradebook.render_gradebook`), the
    grade column named after the assignment and out of its ``points``.

    Returns:
        The lines written in points (none for the grading CSV).

    Raises:
        ValueError: a Canvas or Moodle gradebook is asked for without a roster.
    """
    if roster is None:
        if fmt != "csv":
            raise ValueError(f"fmt: a {fmt} gradebook needs the course's roster, got none")
        write_csv(rows, path)
        return []
    lines = gradebook_rows(rows, roster=roster, assignment=assignment)
    text = render_gradebook(lines, fmt=fmt, assignment_title=assignment.name, points_possible=assignment.points)
    path.write_text(text, encoding="utf-8", newline="")
    return lines
