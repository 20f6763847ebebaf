"""``mutagrade check``: the student's one command before submitting.

The course tests against the student's own implementation (the assignment's goldens, and live
torch on the CPU where torch is installed: the ``live_deviations`` of its ``goldens/compare.py``),
the red-then-green journal, and the mutation grade of the student's tests: one report, one verdict.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from grader.core.errors import GradingInputError
from grader.flows.golden import torch_available
from grader.flows.replay import run_snapshot, verify_journal
from grader.core.models import CourseTestResult, ImplementationCheck, JournalSummary, Outcome, Report, WorkerRun
from grader.core.paths import Layout
from grader.run.runner import RunLimits
from grader.sandbox.base import SandboxMode
from grader.flows.tdd import StudentRepo

if TYPE_CHECKING:
    from grader.core.assignment import Assignment

__all__ = ["LIVE_TORCH_TEST", "check_implementation", "check_journal", "check_repo"]

# Run in the sandboxed worker with the student's package installed: live torch, fresh cases.
# Filled in with the module under test and the assignment's comparison (goldens/compare.py).
LIVE_TORCH_TEST = '''"""Your {module} against live torch on fresh random cases (float64, CPU)."""

import importlib
from pathlib import Path

from grader.flows.golden import load_comparison

implementation = importlib.import_module({module!r})


def test_matches_live_torch():
    compare = load_comparison(Path({code!r}))
    cases = compare.live_deviations(implementation, seed=20261202, cases=6)
    off = [f"{{c.case}}: {{c.worst}} off by {{c.deviation:.3g}}" for c in cases if not c.matches]
    assert not off, "differs from torch: " + "; ".join(off)
'''
TORCH_MEMORY = 6 * 1024**3  # torch reserves far more address space than it uses


def check_implementation(
    impl_dir: Path, *, layout: Layout, limits: RunLimits, live: bool | None = None
) -> ImplementationCheck:
    """Run the course tests (and, where torch is installed, a live torch comparison) against
    the ``tinyllm`` package in ``impl_dir``.

    Raises:
        GradingInputError: if ``impl_dir`` holds no module under test (``layout.module_file``).
    """
    module = impl_dir / layout.module_file
    if not module.is_file():
        raise GradingInputError(f"{module}: no implementation; expected your tinyllm package in {impl_dir}")
    live = torch_available() and layout.golden_code.is_file() if live is None else live
    run = WorkerRun(variant="yours", source=module.read_text(encoding="utf-8"))
    # The course's own tests: their conftest (the goldens fixture) is trusted.
    runs = run_snapshot(layout, layout.course_tests, impl_dir, replace(limits, conftests=True), [run])
    if live:
        with tempfile.TemporaryDirectory(prefix="mutagrade-live-") as tmp:
            test = LIVE_TORCH_TEST.format(module=layout.module_under_test, code=str(layout.golden_code.resolve()))
            (Path(tmp) / "test_live_torch.py").write_text(test)
            # Importing torch is not the student's time: the comparison gets a minute at least.
            bound = limits.limits
            torch_limits = replace(limits, jobs=1, limits=bound.model_copy(update={
                "test_timeout_s": max(bound.test_timeout_s, 60.0),
                "memory_mb": max(bound.memory_mb, TORCH_MEMORY // 2**20),
            }))
            runs += run_snapshot(layout, Path(tmp), impl_dir, torch_limits, [run])
    tests = [CourseTestResult(id=r.test_id, outcome=r.outcome, message=r.message) for s in runs for r in s.results]
    problems = [p for s in runs for p in ([s.crashed] if s.crashed else []) + list(s.collection_errors)]
    ok = bool(tests) and not problems and all(t.outcome is Outcome.PASSED for t in tests)
    return ImplementationCheck(
        checked=True, ok=ok, implementation=str(impl_dir), live_torch=live, tests=tests, problems=problems
    )


def check_journal(repo: StudentRepo, *, layout: Layout, limits: RunLimits) -> JournalSummary:
    """The repository's red-then-green journal, verified against its tests; when there is none,
    a journal that does not verify and says how to start one.

    Raises:
        JournalFormatError: if the journal cannot be read at all.
    """
    if not repo.journal_path.exists():
        return JournalSummary(
            checked=True, ok=False,
            problems=[f"no journal at {repo.journal_path}: record each test with `mutagrade tdd red` and `tdd green`"],
        )
    return verify_journal(repo.journal_path, repo.tests_dir, layout=layout, limits=limits)


def check_repo(
    repo: StudentRepo, *, layout: Layout, assignment: Assignment, sandbox: SandboxMode = SandboxMode.AUTO
) -> Report:
    """The whole check of a student repository: implementation, journal, mutation grade.

    Raises:
        GradingInputError: if the implementation or the tests are missing.
    """
    # The mutation grade needs the mutants, which only a staff checkout holds: the student
    # package ships this module (check_implementation) without the grading engine.
    from grader.flows.grading import grade_suite

    limits = RunLimits.of(assignment, sandbox=sandbox)
    implementation = check_implementation(repo.impl_dir, layout=layout, limits=limits)
    journal = check_journal(repo, layout=layout, limits=limits)
    report = grade_suite(
        repo.tests_dir, layout=layout, assignment=assignment, journal=journal, submission=str(repo.root),
        sandbox=sandbox,
    )
    reasons = list(report.reasons)
    if not implementation.ok:
        reasons.insert(0, "your implementation does not pass the course tests")
    if not journal.ok and "the red-then-green journal does not verify" not in reasons:
        reasons.append("the red-then-green journal does not verify")
    return report.model_copy(update={"implementation": implementation, "reasons": reasons, "passed": not reasons})
