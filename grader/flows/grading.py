"""Grading one student test suite, end to end: policy, runs, scoring, report.

The phases (see ARCHITECTURE.md): check that the sandbox asked for is there; verify the
journal when one is given; check the files statically (the policy, and copies of the course
tests); build the variants; run the suite against all of them in the sandboxed worker
(reference twice, failures on mutants confirmed); score; return one
:class:`~grader.core.models.Report`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path, PurePath

from grader.core.assignment import Assignment
from grader.core.caps import cap_text
from grader.core.copies import TEST_FILE_PATTERNS, find_copies
from grader.core.errors import GradingInputError
from grader.run.launch import Launched
from grader.core.models import Audience, Budget, JournalSummary, Outcome, PolicySummary, Report, Timing
from grader.core.paths import Layout
from grader.core.policy import find_violations, policy_for
from grader.run.runner import GradingBudget, RunLimits
from grader.run.pool import WorkerPool
from grader.run.scheduler import run_matrix
from grader.sandbox.base import SandboxMode
from grader.sandbox.status import check_mode
from grader.core.scoring import not_graded, score_suite, too_many_tests
from grader.core.variants import build_variants
from grader.flows.replay import verify_journal

__all__ = ["GradingInputError", "grade_suite"]


_NAMED = 3  # Python files a message names when none of them is a test file


def _check_dir(tests_dir: Path) -> Path:
    if not tests_dir.exists():
        raise GradingInputError(f"{tests_dir}: no such directory of tests")
    if not tests_dir.is_dir():
        raise GradingInputError(f"{tests_dir}: expected a directory of test files, found a file")
    missing = f"no {' or '.join(TEST_FILE_PATTERNS)} file was found (the files pytest collects tests from)"
    found = sorted(p.relative_to(tests_dir).as_posix() for p in tests_dir.rglob("*.py") if p.is_file())
    if not found:
        raise GradingInputError(f"{tests_dir}: {missing}; found no Python file")
    if not any(fnmatch(PurePath(name).name, pattern) for name in found for pattern in TEST_FILE_PATTERNS):
        shown = [name if name.isprintable() else repr(name) for name in found[:_NAMED]]  # no line breaks
        named = ", ".join(shown) + (f" and {len(found) - _NAMED} more" if len(found) > _NAMED else "")
        raise GradingInputError(f"{tests_dir}: {missing}; found only {named}")
    return tests_dir.resolve()


def grade_suite(
    tests_dir: Path,
    *,
    layout: Layout,
    assignment: Assignment,
    policy: bool = True,
    journal: JournalSummary | None = None,
    journal_file: Path | None = None,
    audience: Audience = Audience.STUDENT,
    jobs: int | None = None,
    submission: str | None = None,
    sandbox: SandboxMode | str = SandboxMode.AUTO,
    full_matrix: bool = False,
    launched: Launched | None = None,
    pool: WorkerPool | None = None,
) -> Report:
    """Grade the test suite in ``tests_dir``.

    Args:
        tests_dir: the student's test files.
        layout: the checkout (reference, mutants).
        assignment: threshold, validity rules and limits.
        policy: run the static policy check first (turn off only for trusted suites).
        journal: the journal's verification, when one was checked (its replay's time and CPU
            seconds count against this grading's budgets, as if it had run here).
        journal_file: a journal (``.tdd/journal.jsonl``) to verify here first, under this
            grading's own limits and budgets: its verification takes ``journal``'s place.
        audience: a student's report hides hidden mutants; staff's shows them.
        jobs: children at a time (default: one per core).
        submission: the name the report gives the submission (default: the path).
        sandbox: ``auto`` (every layer this machine offers, refusing without the always-on
            ones), ``strict`` (every layer or refuse) or ``none`` (no sandbox: only for
            trusted code, or a student's suite on the student's own machine).
        full_matrix: run every valid test on every mutant (staff regrades) instead of
            stopping each mutant's run at its first kill.
        launched: the grading's two workers, started ahead for ``tests_dir`` under ``sandbox``
            (:func:`grader.run.launch.launch_grading`): killed once the runs are done; the caller
            closes them (after writing the report: they go down meanwhile).
        pool: warm workers to grade with (a batch: :class:`grader.run.pool.WorkerPool`), instead
            of starting two for this grading.

    Returns:
        The report. A policy violation gives a report with ``policy.ok`` false and nothing run;
        a suite of more tests than ``grader.core.caps.MAX_TESTS`` a report with ``refused`` saying
        so, once the reference's runs have collected them and nothing else was run; a journal
        whose replay spent a whole budget, a report saying so, with no variant run.

    Raises:
        GradingInputError: if ``tests_dir`` is not a directory holding Python files.
        JournalFormatError: if ``journal_file`` cannot be read at all, or holds more entries
            than the assignment allows.
        ManifestError: if the variants cannot be built.
        CourseTestsError: if the assignment's ``given_tests`` names a test the course tests lack.
        SandboxUnavailable: if ``sandbox`` needs a layer this machine lacks (checked first,
            before anything is read or run).
    """
    started = time.monotonic()
    return _grade(tests_dir, layout=layout, assignment=assignment, policy=policy, journal=journal,
                  journal_file=journal_file, audience=audience, jobs=jobs, submission=submission, sandbox=sandbox,
                  full_matrix=full_matrix, launched=launched, pool=pool, started=started)


def _grade(
    tests_dir: Path, *, layout: Layout, assignment: Assignment, policy: bool, journal: JournalSummary | None,
    journal_file: Path | None, audience: Audience, jobs: int | None, submission: str | None, sandbox: SandboxMode | str, full_matrix: bool,
    launched: Launched | None, pool: WorkerPool | None, started: float,
) -> Report:
    mode = SandboxMode(sandbox)
    check_mode(mode)
    tests_dir = _check_dir(Path(tests_dir))
    if launched is not None and (launched.tests_dir != tests_dir or launched.mode is not mode):
        raise ValueError(f"the workers were started for {launched.tests_dir} ({launched.mode.value}), "
                         f"not for {tests_dir} ({mode.value})")
    limits = RunLimits.of(assignment, jobs=jobs, sandbox=mode)
    # The journal's replay is part of this grading: it spends the budgets first, and the
    # variants' runs get what is left.
    budget = GradingBudget(assignment.limits)
    earlier = 0.0  # seconds of this grading spent before it was called (a journal replayed ahead)
    if journal_file is not None:
        journal = verify_journal(journal_file, tests_dir, layout=layout, limits=limits, budget=budget)
    elif journal is not None and journal.replay_s:
        earlier = journal.replay_s
        budget.spent_before(wall_s=journal.replay_s, cpu_s=journal.replay_cpu_s)
    journal_s = journal.replay_s if journal is not None else 0.0
    name = cap_text(submission or str(tests_dir))
    variants = build_variants(layout)
    if policy:
        findings = find_violations(tests_dir, policy_for(layout))
        summary = PolicySummary(ok=not findings.total, checked=True, violations=[cap_text(str(v)) for v in findings.violations],
                                violations_omitted=findings.omitted, syntax_errors=findings.syntax_errors)
    else:
        summary = PolicySummary(ok=True, checked=False)
    if not summary.ok:
        return not_graded(f"{summary.refusal}: nothing was run", name=name,
                           variants=variants, assignment=assignment, audience=audience, policy=summary,
                           journal=journal, timing=Timing(total_s=round(time.monotonic() - started + earlier, 3),
                                                          journal_s=journal_s))
    # Copies of the course tests count for nothing: found statically, like the policy's findings,
    # while the reference runs (the first time a copy matters is when the wheats and mutants are
    # sent: only then does the schedule wait for it).
    finding = ThreadPoolExecutor(max_workers=1, thread_name_prefix="copies")
    copied = finding.submit(find_copies, tests_dir, course_tests=layout.course_tests,
                            label=layout.course_tests.relative_to(layout.root).as_posix(),
                            threshold=assignment.copy_similarity, given=assignment.given_tests)
    finding.shutdown(wait=False)
    spent = budget.exhausted()
    if spent is not None:
        # Graded, and not passed: the journal did not verify (its problems say where the
        # replay stopped); nothing of the suite is wrong as input.
        why = f"{budget.describe(spent)} ran out while the journal was replayed: no variant was run"
        return not_graded(why, name=name, variants=variants, assignment=assignment, audience=audience,
                          policy=summary, journal=journal,
                          timing=Timing(total_s=round(time.monotonic() - started + earlier, 3), journal_s=journal_s,
                                        cpu_s=round(budget.spent, 3)),
                          ).model_copy(update={"refused": ""})
    matrix = run_matrix(layout=layout, tests_dir=tests_dir, variants=variants,
                        limits=replace(limits, limits=budget.remaining(limits.limits)),
                        full_matrix=full_matrix, launched=launched, pool=pool,
                        not_counted=lambda test_id: copied.result().not_run(test_id))
    copies = copied.result()
    if matrix.budget_stop is not None:
        # The report names the grading's budget as the assignment sets it, not what the
        # journal's replay had left of it.
        stop = matrix.budget_stop
        whole = {Budget.WALL: budget.wall, Budget.CPU: budget.cpu}.get(stop.kind)
        matrix = replace(matrix, budget_stop=replace(stop, budget=whole or stop.budget))
    runs = [*matrix.first.values(), *matrix.second.values()]
    timing = Timing(
        total_s=round(time.monotonic() - started + earlier, 3),
        journal_s=journal_s,
        runs=matrix.runs,
        tests_s=round(sum(r.duration for run in runs for r in run.results), 3),
        cpu_s=round(matrix.cpu_s + (journal.replay_cpu_s if journal is not None else 0.0), 3),
        not_run=sum(r.outcome is Outcome.NOT_RUN for run in matrix.first.values() for r in run.results),
    )
    refused = too_many_tests(matrix, limits.max_tests)
    if refused:
        return not_graded(refused, name=name, variants=variants, assignment=assignment, audience=audience,
                           policy=summary, journal=journal, timing=timing)
    return score_suite(
        submission=name,
        matrix=matrix,
        variants=variants,
        assignment=assignment,
        audience=audience,
        policy=summary,
        journal=journal,
        timing=timing,
        copies=copies,
    )
