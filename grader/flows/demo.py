"""``mutagrade demo``: the course tests on the reference, the chapter's hand example (the
assignment's ``hand_example`` in ``goldens/compare.py``), and the bundled student suite graded
by mutation (the assignment's ``example`` repository)."""

from __future__ import annotations

from grader.core.assignment import load_assignment
from grader.flows.golden import load_comparison, load_implementation
from grader.flows.grading import grade_suite
from grader.flows.replay import verify_journal
from grader.core.models import Outcome, WorkerRun
from grader.core.paths import Layout
from grader.report import render
from grader.run.runner import RunLimits, run_suites
from grader.sandbox.base import SETUP_SCRIPT, SandboxMode, SandboxStatus
from grader.sandbox.status import sandbox_status

__all__ = ["demo_sandbox", "run_demo"]


def demo_sandbox(status: SandboxStatus) -> tuple[SandboxMode, str | None]:
    """The sandbox the demo runs in, and the line that says why when it is none.

    The demo runs only trusted code (the reference, the course tests, the bundled example), so
    on a machine whose sandbox is not set up it runs with none rather than refusing; grading
    untrusted code still refuses there. A user without root has the sandbox where the kernel
    allows unprivileged user namespaces (the userns layer stands in for the sandbox users).
    """
    missing = status.missing(SandboxMode.AUTO)
    if not missing:
        return SandboxMode.AUTO, None
    names = ", ".join(s.layer.value for s in missing)
    return SandboxMode.NONE, (
        f"sandbox: not set up here (missing {names}): the demo runs its bundled, trusted example "
        f"with --sandbox none; grading untrusted code refuses until root runs {SETUP_SCRIPT} "
        "(or, for a user without root, until the kernel allows unprivileged user namespaces)"
    )


def run_demo(layout: Layout) -> int:
    """The course tests on the reference, the hand example, then the bundled student's suite
    graded by mutation; 0 if the course tests pass and the example is graded as passing."""
    mode, why = demo_sandbox(sandbox_status())
    if why is not None:
        print(why)
        print()
    assignment = load_assignment(layout.assignment)
    source = layout.module_source.read_text()
    [run] = run_suites(
        layout=layout,
        tests_dir=layout.course_tests,
        runs=[WorkerRun(variant="reference", source=source)],
        hash_seed=1,
        # The course's own tests: their conftest is trusted.
        limits=RunLimits.of(assignment, sandbox=mode, conftests=True),
    )
    print(f"Course tests ({layout.course_tests}) on the reference {layout.module_under_test}:")
    for result in run.results:
        mark = "PASS" if result.outcome is Outcome.PASSED else result.outcome.value.upper()
        print(f"  {mark:<7} {result.test_id}")
    passed = sum(r.outcome is Outcome.PASSED for r in run.results)
    problems = [run.crashed, *run.collection_errors]
    for problem in filter(None, problems):
        print(f"  problem: {problem}")
    print(f"{passed} passed, {len(run.results) - passed} failed")

    compare = load_comparison(layout.golden_code)
    if hasattr(compare, "hand_example"):
        impl = load_implementation(source, layout.reference, f"mutagrade_demo_{layout.assignment_name}")
        print()
        print("\n".join(compare.hand_example(impl)))
    ok = passed == len(run.results) > 0 and not any(problems)

    student = layout.example_student
    if student is None:
        print(f"\n{layout.assignment}: names no example repository (example = ...): nothing to grade")
        return 0 if ok else 1
    tests = student / layout.student_tests
    journal_path = student / ".tdd" / "journal.jsonl"
    print()
    print(
        f"Grading the bundled student suite {tests.relative_to(layout.root)} by mutation, "
        f"with its journal {journal_path.relative_to(layout.root)}:"
    )
    print()
    limits = RunLimits.of(assignment, sandbox=mode)
    journal = verify_journal(journal_path, tests, layout=layout, limits=limits)
    report = grade_suite(tests, layout=layout, assignment=assignment, journal=journal, sandbox=mode)
    print(render(report, "text"))
    return 0 if ok and report.passed else 1
