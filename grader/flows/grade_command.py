"""``mutagrade grade``: grade a folder of tests, or an archive of them, and write the report in
the format asked for (the command line's parser is in :mod:`grader.cli`).

Imported by the command once its workers are starting: everything imported here (pydantic's
models among it) loads while they warm up.
"""

from __future__ import annotations

import argparse
import gc
from pathlib import Path

from grader.core.exits import EXIT_BAD_INPUT, EXIT_NOT_PASSED, EXIT_OK
from grader.flows.grading import GradingInputError, grade_suite
from grader.flows.intake import open_submission
from grader.run.launch import Launched
from grader.run.runner import RunLimits
from grader.core.models import Audience, Report
from grader.core.paths import Layout
from grader.report import render
from grader.report.github import append_job_summary

__all__ = ["render_report", "run_grade"]


def run_grade(args: argparse.Namespace, layout: Layout, launched: Launched | None) -> int:
    """Grade ``args.tests_dir`` (a folder or an archive) as ``args`` say; returns the exit code."""
    from grader.core.assignment import load_assignment
    from grader.core.paths import rules_file

    if not gc.isenabled():
        # The command's own process: the collector was off while the grader was imported (see
        # grader.cli.run()). What the imports made lives as long as the command: frozen, the
        # collections to come never walk it (the first one after the imports otherwise goes
        # through every object they made, about 5 ms). A caller with the collector on is left
        # as it is.
        gc.freeze()
        gc.enable()
    assignment = load_assignment(rules_file(layout, args.assignment))
    limits = RunLimits.of(assignment, jobs=args.jobs, sandbox=args.sandbox)
    journal = Path(args.journal) if args.journal else None
    with open_submission(Path(args.tests_dir), layout=layout, assignment=assignment, limits=limits,
                         journal=journal) as suite:
        # Gradescope may reveal the hidden mutants after the due date (the assignment says): that
        # takes the staff report; all the rest shows its student view.
        audience = Audience(args.audience)
        reveal = (args.format == "gradescope" and audience is Audience.STUDENT
                  and assignment.gradescope_hidden_hints != "never")
        try:
            report = grade_suite(
                suite.tests,
                layout=layout,
                assignment=assignment,
                policy=args.policy == "on",
                journal=suite.journal,
                audience=Audience.STAFF if reveal else audience,
                jobs=args.jobs,
                submission=suite.name,
                sandbox=args.sandbox,
                full_matrix=args.full_matrix,
                launched=launched,
            )
        except GradingInputError as exc:  # it names the archive's members, not where they were unpacked
            raise GradingInputError(suite.relabel(str(exc))) from None
    staff = None
    if reveal:
        from grader.core.scoring import student_view
        from grader.core.variants import build_variants

        staff, report = report, student_view(report, build_variants(layout))
    text = render_report(report, args.format, assignment, revealed=staff)
    if args.output:
        Path(args.output).write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    else:
        print(text)
    append_job_summary(report)  # on GitHub Actions the job summary gets the Markdown report too
    if report.input_refused:  # a policy violation, or more tests than the grader takes
        return EXIT_BAD_INPUT
    return EXIT_OK if report.passed else EXIT_NOT_PASSED


def render_report(report: Report, fmt: str, assignment, revealed: Report | None = None) -> str:
    """The report in ``fmt``; Gradescope's scored as the assignment says."""
    if fmt != "gradescope":
        return render(report, fmt)
    from grader.report.gradescope import gradescope_options, render_gradescope

    return render_gradescope(report, gradescope_options(assignment), revealed=revealed)
