"""Batch grading for staff: every student's submission in a folder, into one CSV gradebook.

One sub-folder per student, holding either the test files at its root or a student repository
with the tests under ``python/tests/l3-3-gru/``. One submission that cannot be graded (or that
breaks the grader) is a row with its problem; it never stops the batch.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from pydantic import BaseModel

from grader.assignment import Assignment
from grader.grading import grade_suite
from grader.matrix import WorkerPool
from grader.models import Report
from grader.paths import Layout
from grader.sandbox import SandboxMode, check_mode
from grader.spreadsheet import write_rows

__all__ = ["BatchRow", "STUDENT_TESTS", "find_tests", "grade_batch", "write_csv"]

STUDENT_TESTS = Path("python") / "tests" / "l3-3-gru"
CSV_FIELDS = ("student", "passed", "kill_rate", "killed", "total", "missing_required", "problems")


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


def find_tests(submission: Path) -> Path:
    """The folder of a submission's tests: ``python/tests/l3-3-gru`` if present, else itself."""
    nested = submission / STUDENT_TESTS
    return nested if nested.is_dir() else submission


def _row(student: str, report: Report) -> BatchRow:
    problems = list(report.reasons) + list(report.problems)
    return BatchRow(
        student=student,
        passed=report.passed,
        kill_rate=report.score.kill_rate,
        killed=report.score.killed,
        total=report.score.total,
        missing_required=report.score.required_missing,
        problems=problems,
        report=report,
    )


def grade_batch(
    submissions: Path,
    *,
    layout: Layout,
    assignment: Assignment,
    policy: bool = True,
    audience: str = "staff",
    on_done: Callable[[BatchRow], None] | None = None,
    sandbox: SandboxMode | str = SandboxMode.AUTO,
) -> list[BatchRow]:
    """Grade every sub-folder of ``submissions``, in name order.

    Args:
        submissions: one sub-folder per student, named after the student.
        layout: the checkout (reference, mutants).
        assignment: threshold, validity rules, limits.
        policy: run the static policy check.
        audience: whose view the reports take (staff by default).
        on_done: called with each row as soon as it is graded (a progress bar).
        sandbox: the sandbox mode of every grading (see :func:`grader.grading.grade_suite`).

    Returns:
        One row per student.

    Raises:
        SandboxUnavailable: if ``sandbox`` needs a layer this machine lacks (checked once,
            before any student, rather than failing every row the same way).
    """
    check_mode(sandbox)
    folders = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    rows = []
    # Two workers kept warm for the whole batch: each submission pays its own runs, not the
    # workers' start-up.
    with WorkerPool(layout=layout, limits=replace(assignment.run_limits(), sandbox=SandboxMode(sandbox))) as pool:
        for folder in folders:
            row = _grade_one(folder, pool, layout=layout, assignment=assignment, policy=policy,
                             audience=audience, sandbox=sandbox)
            rows.append(row)
            if on_done is not None:
                on_done(row)
    return rows


def _grade_one(
    folder: Path, pool: WorkerPool, *, layout: Layout, assignment: Assignment, policy: bool,
    audience: str, sandbox: SandboxMode | str,
) -> BatchRow:
    try:
        report = grade_suite(
            find_tests(folder),
            layout=layout,
            assignment=assignment,
            policy=policy,
            audience=audience,
            submission=folder.name,
            sandbox=sandbox,
            pool=pool,
        )
        return _row(folder.name, report)
    except Exception as exc:  # noqa: BLE001 - one submission never stops the batch
        return BatchRow(
            student=folder.name, passed=False, kill_rate=0.0, killed=0, total=0,
            missing_required=[], problems=[f"could not be graded: {exc}"],
        )


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
                " | ".join(row.problems),
            ]
            for row in rows
        ))
