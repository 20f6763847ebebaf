"""The ``mutagrade`` command line: a thin layer over the library functions.

The service's commands (``serve``, ``worker``, ``admin``, ``submit``) are :mod:`api.cli`'s: the
installed ``mutagrade`` command is that module's, which adds them to this parser; this module
imports nothing of the service.

Exit codes (:mod:`grader.core.exits`): 0 success, 1 a check ran and did not pass, 2 bad input (path,
archive, manifest, patch, a policy violation, more tests than the grader takes), 3 internal
error.
"""

from __future__ import annotations

import argparse
import gc
import os
import math
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

from grader import __version__
from grader.core.exits import EXIT_BAD_INPUT, EXIT_NOT_PASSED, EXIT_OK, exit_code_of
from grader.core.errors import GradingInputError
from grader.core.paths import Layout, default_layout, layout_for, rules_file
from grader.student_cli import UsageError, add_tdd_command, local_sandbox, run_tdd, student_repo

# The rest of the grader (pydantic, numpy, ...) is imported by the command that needs it:
# `grade` starts its workers first, so they warm up while those imports happen.

__all__ = ["FORMATS", "MoreCommands", "UsageError", "build_parser", "main", "run", "start_process"]

# The formats of a printed report: the keys of grader.report.RENDERERS, spelled out here so
# that the parser is built before the grader (pydantic) is imported.
FORMATS = ("text", "json", "junit", "gradescope", "github", "html")

# Adds more commands to the parser's list (api.cli adds the service's).
MoreCommands = Callable[[argparse._SubParsersAction], None]


# ---------------------------------------------------------------------- commands
def _cmd_variants_list(args: argparse.Namespace, layout: Layout) -> int:
    from grader.core.variants import build_variants

    variants = build_variants(layout)
    rows = [("id", "kind", "required", "hidden", "title")]
    rows += [
        (v.id, v.kind.value, "yes" if v.spec.required else "", "yes" if v.spec.hidden else "", v.spec.title)
        for v in variants
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(f"{cell:<{w}}" for cell, w in zip(row[:4], widths)) + "  " + row[4])
    return EXIT_OK


def _cmd_variants_show(args: argparse.Namespace, layout: Layout) -> int:
    from grader.core.variants import build_variants

    by_id = {v.id: v for v in build_variants(layout)}
    if args.id not in by_id:
        raise UsageError(f"variant {args.id!r}: no such variant; expected one of {', '.join(by_id)}")
    variant = by_id[args.id]
    print(f"{variant.id} ({variant.kind.value}): {variant.spec.title}")
    if variant.spec.pitfall:
        print(f"pitfall: {variant.spec.pitfall}")
    if variant.spec.caught_by:
        print(f"caught by: {', '.join(variant.spec.caught_by)}")
    print()
    print(variant.diff or "(the reference itself: no patch)", end="" if variant.diff else "\n")
    return EXIT_OK


def _cmd_variants_export(args: argparse.Namespace, layout: Layout) -> int:
    dest = Path(args.dir)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest}: expected a directory to export into, found a file")
    from grader.core.variants import build_variants, export_variant

    variants = build_variants(layout)
    for variant in variants:
        export_variant(layout, variant, dest / variant.id)
    print(f"exported {len(variants)} variants to {dest}/<id>/tinyllm")
    print(f"run the course tests on one: PYTHONPATH={dest}/s02 pytest {layout.course_tests}")
    return EXIT_OK


def _cmd_calibrate(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.calibration import calibrate, render_text

    report = calibrate(layout)
    if args.format == "json":
        print(report.model_dump_json(indent=2))
    else:
        print(render_text(report))
    status = EXIT_OK if report.ok else EXIT_NOT_PASSED
    if args.auto:
        from grader.flows.automutants import run_auto_mutants, write_pool

        pool = run_auto_mutants(layout)
        path = write_pool(layout, pool)
        print(
            f"\nmutmut {pool.mutmut_version}: {pool.total} automatic mutants, {len(pool.killed)} killed "
            f"by the course tests (the pool), {len(pool.survived)} survived; written to {path}"
        )
        for name in pool.survived:
            print(f"  survivor for review: {name}")
    return status


def _cmd_golden(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.golden import device_in_use, load_comparison, load_goldens, load_implementation, torch_available
    from grader.core.variants import VariantKind, build_variants

    goldens = load_goldens(layout.goldens)
    compare = load_comparison(layout.golden_code)
    live = torch_available() and not args.no_live
    device, dtype = device_in_use() if live else ("cpu", "float64")
    if args.device:
        device, dtype = args.device, ("float32" if args.device.startswith("cuda") else "float64")
    wrong = 0
    print(f"live torch: {'on ' + device + ' in ' + dtype if live else 'not installed or --no-live'}")
    print(f"{'variant':<10} {'kind':<9} {'stored goldens':<16} {'live torch':<16} verdict")
    reference_impl = None
    for variant in build_variants(layout):
        impl = load_implementation(variant.source, layout.reference, f"mutagrade_golden_{variant.id}")
        reference_impl = reference_impl or impl
        stored = max(c.deviation for c in compare.golden_deviations(impl, goldens))
        cases = compare.live_deviations(impl, seed=args.seed, cases=args.cases, device=device, dtype=dtype) if live else []
        fresh = max((c.deviation for c in cases), default=None)
        matches = stored <= 1e-10 and all(c.matches for c in cases)
        if variant.kind is VariantKind.MUTANT:
            wrong += matches and variant.spec.differs_on == "goldens"  # an equivalent mutant
        else:
            wrong += not matches  # a correct variant must match torch
        shown_fresh = "n/a" if fresh is None else _dev(fresh)
        print(f"{variant.id:<10} {variant.kind.value:<9} {_dev(stored):<16} {shown_fresh:<16} {'matches torch' if matches else 'differs'}")
    if live and args.throughput:
        speed = compare.golden_throughput(reference_impl, device=device, dtype=dtype, cases=args.throughput, batch=args.batch)
        print(f"throughput: {speed.cases_per_s:.1f} cases/s on {speed.device} ({speed.dtype}), "
              f"{speed.cases} cases in batches of {args.batch}, max deviation {speed.max_deviation:.3g}")
    return EXIT_OK if wrong == 0 else EXIT_NOT_PASSED


def _dev(value: float) -> str:
    return "raised/inf" if math.isinf(value) else f"max |d| {value:.2g}"


def _assignment(args: argparse.Namespace, layout: Layout):
    from grader.core.assignment import load_assignment

    return load_assignment(rules_file(layout, getattr(args, "assignment", None)))


def _launch_early(args: argparse.Namespace, layout: Layout):
    """Start the grading's workers now, before the heavy imports and the policy check, or
    None when that cannot be done here (the grading then says why, in its own words)."""
    from grader.flows.intake import locate
    from grader.run.launch import launch_grading
    from grader.sandbox.base import SandboxError

    folder = Path(args.tests_dir)
    if not folder.is_dir():
        return None
    try:  # the tests the grading will take from the folder (grader.flows.intake)
        return launch_grading(layout=layout, tests_dir=locate(folder, layout.student_tests).tests, mode=args.sandbox)
    except (SandboxError, OSError, ValueError):
        return None


def _launch_before_parsing(argv: list[str]):
    """For ``grade``: start the grading's workers from a parser of that command alone, before
    the whole command line's parser (every command's options) is built, so that the workers'
    start-up overlaps it. None for any other command line, or one that does not read as a
    grading: the whole parser then reads it, and says what is wrong."""
    if "grade" not in argv or {"-h", "--help", "--version"} & set(argv):
        return None
    parser, commands = _root_parser(_QuietParser)
    _add_grade(commands)
    try:
        args = parser.parse_args(argv)
    except UsageError:
        return None
    try:
        layout = _layout(args)
    except GradingInputError:
        return None  # the whole parser's run says what is wrong with --assignment
    return _launch_early(args, layout)


class _QuietParser(argparse.ArgumentParser):
    """A parser that raises :class:`UsageError` instead of printing and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _cmd_grade(args: argparse.Namespace, layout: Layout) -> int:
    # The workers were started from this same command line (:func:`_launch_before_parsing`),
    # or could not be (the grading then says why); main() closes them once the report is out.
    from grader.flows.grade_command import run_grade

    return run_grade(args, layout, args.launched)


def _cmd_grade_batch(args: argparse.Namespace, layout: Layout) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from grader.flows.batch import find_submissions, grade_batch, write_gradebook

    roster = _batch_roster(args)
    submissions = Path(args.submissions_dir)
    expected = "one folder or archive (.zip, .tar.gz) per student"
    if not submissions.is_dir():
        raise UsageError(f"{submissions}: expected a directory with {expected}")
    students, skipped = find_submissions(submissions)
    for name in skipped:
        print(f"mutagrade: {name}: skipped: neither a folder nor a .zip or .tar.gz archive", file=sys.stderr)
    if not students:
        raise UsageError(f"{submissions}: expected {expected}, found none")
    assignment = _assignment(args, layout)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("grading", total=len(students))

        def done(row) -> None:
            mark = "passed" if row.passed else "not passed"
            progress.update(task, advance=1, description=f"graded {row.student}: {mark}")

        rows = grade_batch(submissions, layout=layout, assignment=assignment, policy=args.policy == "on",
                           on_done=done, reports=Path(args.reports) if args.reports else None, ahead=args.ahead)
    lines = write_gradebook(rows, Path(args.output), fmt=args.gradebook_format, roster=roster, assignment=assignment)
    passed = sum(r.passed for r in rows)
    print(f"{len(rows)} submissions graded, {passed} passed; gradebook written to {args.output}")
    if roster is not None:
        missing = sum(line.status == "no submission" for line in lines)
        strays = [line.entry.login for line in lines[len(roster):]]
        named = ", ".join(strays[:10]) + (f" and {len(strays) - 10} more" if len(strays) > 10 else "")
        print(f"roster: {len(roster)} students, {missing} without a submission"
              + (f"; submissions on no roster (a row each, named as their folder): {named}" if strays else ""))
    return EXIT_OK


def _batch_roster(args: argparse.Namespace):
    """The students of ``--roster`` (None without it); a Canvas or Moodle gradebook needs them."""
    if args.roster is None:
        if args.gradebook_format != "csv":
            raise UsageError(
                f"--gradebook-format {args.gradebook_format} needs --roster FILE: the course's "
                f"{args.gradebook_format.capitalize()} CSV export of its students, whose logins name the submissions")
        return None
    from grader.core.roster import RosterError, read_roster

    try:
        return read_roster(Path(args.roster))
    except RosterError as exc:
        raise UsageError(str(exc)) from None


def _cmd_stats(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.stats import StatsInputError, run_stats

    try:
        return run_stats(Path(args.reports_dir), fmt=args.format, plots=Path(args.plots) if args.plots else None)
    except StatsInputError as exc:
        raise UsageError(str(exc)) from None


def _cmd_similarity(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.similarity import run_similarity

    return run_similarity(Path(args.submissions_dir), layout=layout, threshold=args.threshold, fmt=args.format,
                          html=Path(args.html) if args.html else None)


def _share(text: str) -> float:
    """A share from 0 to 1, for argparse."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 1, got {text!r}")
    return value


def _cmd_check(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.check import check_repo
    from grader.flows.grade_command import render_report

    assignment = _assignment(args, layout)
    report = check_repo(student_repo(args, layout), layout=layout, assignment=assignment, sandbox=local_sandbox())
    print(render_report(report, args.format, assignment))
    if report.input_refused:  # a policy violation, or more tests than the grader takes
        return EXIT_BAD_INPUT
    return EXIT_OK if report.passed else EXIT_NOT_PASSED


def _cmd_doctor(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.golden import device_in_use, torch_available
    from grader.sandbox.base import SandboxMode
    from grader.sandbox.status import sandbox_status

    status = sandbox_status(fresh=True, describe=True)
    print(status.render())
    device, dtype = device_in_use()
    print(f"torch: {'installed' if torch_available() else 'not installed'}; live comparisons on {device} in {dtype}")
    return EXIT_OK if not status.missing(SandboxMode.AUTO) else EXIT_NOT_PASSED


def _cmd_demo(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.demo import run_demo

    return run_demo(layout)


def _cmd_bundle(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.bundle import run_bundle_command

    return run_bundle_command(args, layout)


def _cmd_starter(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.starter import StarterError, write_starter

    dest = Path(args.dir)
    try:
        written = write_starter(layout, dest)
    except StarterError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote the starter repository to {dest}/ ({len(written)} files): the framework, the module as the "
          "contract stub, the given test, an empty journal and the CI templates; nothing of the answer key")
    return EXIT_OK


# ------------------------------------------------------------------------ parser
def _root_parser(kind: type[argparse.ArgumentParser] = argparse.ArgumentParser):
    parser = kind(prog="mutagrade", description="Mutation grading of test-first test suites, one course module at a time.")
    parser.add_argument("--version", action="version", version=f"mutagrade {__version__}")
    parser.add_argument("--root", type=Path, help="the mutagrade checkout to use (default: this one)")
    return parser, parser.add_subparsers(dest="command", required=True, metavar="COMMAND")


def build_parser(more: MoreCommands | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``more`` adds commands (the service's) after ``check``, where
    the list has always had them. Every command takes ``--assignment``."""
    parser, commands = _root_parser()
    _add_grade(commands)
    _add_grading_commands(commands)
    if more is not None:
        more(commands)
    _add_other_commands(commands)
    for command in commands.choices.values():
        _assignment_everywhere(command)
    return parser


def _assignment_everywhere(command: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """``--assignment`` on ``command`` and on each of its own commands (``variants list``); a
    nested one leaves the value given before it, if any, as it is."""
    if "--assignment" not in command._option_string_actions:
        _assignment_option(command, default=argparse.SUPPRESS if nested else None)
    for action in command._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _assignment_everywhere(child, nested=True)


def _assignment_option(command: argparse.ArgumentParser, default: object = None) -> None:
    command.add_argument(
        "--assignment", metavar="NAME|PATH", default=default,
        help="the assignment: a folder's name under assignments/, an assignment's folder, or an assignment.toml "
             "(a rules file elsewhere grades the default assignment by its rules; default: assignments/course.toml's)")


def _add_grade(commands: argparse._SubParsersAction) -> None:
    grade = commands.add_parser("grade", help="grade a student's test suite by the mutants it kills")
    grade.add_argument("tests_dir", help="the folder of the student's test files, or an archive of them (.zip, .tar.gz)")
    grade.add_argument("--format", choices=FORMATS, default="text")
    grade.add_argument("--output", help="write the report to this file instead of standard output")
    grade.add_argument("--journal", help="the red-then-green journal (.tdd/journal.jsonl) to verify")
    grade.add_argument("--policy", choices=("on", "off"), default="on", help="off: trusted suites only (staff)")
    grade.add_argument("--audience", choices=("student", "staff"), default="student",
                       help="staff reports name hidden mutants")
    _assignment_option(grade)
    grade.add_argument("--jobs", type=int, default=None, help="children at a time (default: one per core)")
    grade.add_argument("--sandbox", choices=("auto", "strict", "none"), default="auto",
                       help="none: no sandbox (your own tests on your own machine); auto refuses without one")
    grade.add_argument("--full-matrix", action="store_true",
                       help="run every valid test on every mutant (by default a mutant's run stops at its first kill)")
    grade.set_defaults(run=_cmd_grade)


def _add_grading_commands(commands: argparse._SubParsersAction) -> None:
    batch = commands.add_parser("grade-batch", help="grade every student's submission into a CSV gradebook")
    batch.add_argument("submissions_dir", help="one folder or archive (.zip, .tar.gz) per student")
    batch.add_argument("--output", required=True, help="the CSV gradebook to write")
    batch.add_argument("--reports", help="also write each student's JSON report (or error) into this directory")
    batch.add_argument("--ahead", type=int, default=2, choices=range(9), metavar="N",  # grader.flows.batch.MAX_AHEAD
                       help="submissions unpacked and journals replayed while one is graded, 0 to 8 "
                       "(default 2; 0: one after the other)")
    batch.add_argument("--policy", choices=("on", "off"), default="on")
    _assignment_option(batch)
    batch.add_argument("--gradebook-format", choices=("csv", "canvas", "moodle"), default="csv",
                       help="csv (default): the grading CSV, or with --roster one row per student in points; "
                            "canvas, moodle: that LMS's grade import (needs --roster)")
    batch.add_argument("--roster", metavar="FILE",
                       help="the course's Canvas or Moodle CSV export; each student's submission is the one "
                            "named after their login")
    batch.set_defaults(run=_cmd_grade_batch)

    stats = commands.add_parser("stats", help="staff: the class's statistics from grade-batch's --reports")
    stats.add_argument("reports_dir", help="the folder grade-batch --reports wrote (one JSON per student)")
    stats.add_argument("--format", choices=("text", "json"), default="text")  # grader.flows.stats.STATS_FORMATS
    stats.add_argument("--plots", metavar="DIR", help="also write kill_rates.svg, scores.svg and validity.svg here")
    stats.set_defaults(run=_cmd_stats)

    similar = commands.add_parser("similarity", help="staff: pairs of students whose test suites are alike (MOSS-style)")
    similar.add_argument("submissions_dir", help="one folder or archive (.zip, .tar.gz) per student")
    similar.add_argument("--threshold", type=_share, default=0.5,  # grader.flows.similarity.DEFAULT_THRESHOLD
                         help="the similarity from which a pair is listed, 0 to 1 (default 0.5)")
    similar.add_argument("--format", choices=("text", "json"), default="text")  # grader.flows.similarity.SIMILARITY_FORMATS
    similar.add_argument("--html", metavar="FILE", help="also write a page of each pair side by side, matches marked")
    similar.set_defaults(run=_cmd_similarity)

    add_tdd_command(commands, help="keep the red-then-green journal (students)", run=run_tdd)

    check = commands.add_parser("check", help="your implementation, your journal and your tests' grade, at once")
    check.add_argument("repo", nargs="?", default=".", help="your repository's root (default: here)")
    check.add_argument("--impl", default="python", help="the folder holding your tinyllm (default: python)")
    check.add_argument("--tests", help="your tests (default: where the assignment keeps them, python/tests/<name>)")
    check.add_argument("--format", choices=FORMATS, default="text")
    _assignment_option(check)
    check.set_defaults(run=_cmd_check)


def _add_other_commands(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser("doctor", help="which sandbox layers (and which torch device) this machine has")
    doctor.set_defaults(run=_cmd_doctor)

    demo = commands.add_parser("demo", help="the course tests on the reference, and the hand example")
    demo.set_defaults(run=_cmd_demo)

    bundle = commands.add_parser("bundle", help="staff: a ready-to-upload autograder (Gradescope)")
    bundle.add_argument("target", choices=("gradescope",))
    bundle.add_argument("--output", required=True, help="the zip to write, e.g. autograder.zip")
    bundle.add_argument("--repository", help="setup.sh clones this course repository instead of a copy in the zip")
    bundle.add_argument("--ref", help="the branch or tag of --repository to clone")
    _assignment_option(bundle)
    bundle.set_defaults(run=_cmd_bundle)

    starter = commands.add_parser("starter", help="staff: the repository students start from (no answer key)")
    starter.add_argument("dir", help="a new or empty folder to write it into")
    starter.set_defaults(run=_cmd_starter)

    variants = commands.add_parser("variants", help="list, show or export the variants")
    verbs = variants.add_subparsers(dest="verb", required=True, metavar="VERB")
    verbs.add_parser("list", help="a table of every variant").set_defaults(run=_cmd_variants_list)
    show = verbs.add_parser("show", help="one variant's patch")
    show.add_argument("id")
    show.set_defaults(run=_cmd_variants_show)
    export = verbs.add_parser("export", help="write DIR/<id>/tinyllm for every variant")
    export.add_argument("dir")
    export.set_defaults(run=_cmd_variants_export)

    calibrate = commands.add_parser("calibrate", help="prove every variant is what the manifest says")
    calibrate.add_argument("--format", choices=("text", "json"), default="text")
    calibrate.add_argument("--auto", action="store_true", help="also regenerate the mutmut pool (mutants/auto_pool.json)")
    calibrate.set_defaults(run=_cmd_calibrate)

    golden = commands.add_parser("golden", help="compare every variant with torch")
    golden.add_argument("--cases", type=int, default=4, help="live random cases per variant (default 4)")
    golden.add_argument("--seed", type=int, default=0)
    golden.add_argument("--no-live", action="store_true", help="stored goldens only, even where torch is installed")
    golden.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when present, else cpu)")
    golden.add_argument("--throughput", type=int, default=0, metavar="N", help="also time N batched cases")
    golden.add_argument("--batch", type=int, default=64, help="cases per batch for --throughput")
    golden.set_defaults(run=_cmd_golden)


def main(argv: Sequence[str] | None = None, *, more: MoreCommands | None = None) -> int:
    """Run the command line, with ``more`` commands (see :func:`build_parser`); returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    launched = _launch_before_parsing(argv)
    try:
        return _run(argv, launched, more)
    finally:
        if launched is not None:
            launched.close()  # once the report is out: the workers went down meanwhile


def _layout(args: argparse.Namespace) -> Layout:
    root = args.root.resolve() if args.root else default_layout().root
    return layout_for(root, getattr(args, "assignment", None))


def _run(argv: list[str], launched, more: MoreCommands | None) -> int:
    args = build_parser(more).parse_args(argv)
    args.launched = launched
    if args.run is not _cmd_grade:
        gc.enable()  # a long command (serve, worker, grade-batch) collects as usual
    return exit_code_of(lambda: args.run(args, _layout(args)), _input_errors)


def _input_errors() -> tuple[type[Exception], ...]:
    """The errors that mean bad input (exit 2), imported only when something went wrong."""
    from grader.core.assignment import AssignmentError
    from grader.flows.grading import GradingInputError
    from grader.core.journal import JournalFormatError
    from grader.sandbox.base import SandboxError
    from grader.core.variants import ManifestError

    return (UsageError, ManifestError, GradingInputError, AssignmentError, JournalFormatError, SandboxError)


def start_process() -> None:
    """What the ``mutagrade`` command sets up before :func:`main` (a benchmark that measures
    the command in a process of its own does the same)."""
    # No pydantic plugin is used here: scanning every installed package's entry points for
    # them costs each command a few milliseconds.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # ... and pydantic's only use of importlib.metadata is that scan: the module is imported
    # if something uses it, not because pydantic names it (see grader.core.lazymodule).
    from grader.core.lazymodule import defer

    defer("importlib.metadata")
    # Importing the grader (pydantic's models among it) sets off dozens of collections that
    # free almost nothing (about 10 ms): the collector stays off until the imports are done.
    gc.disable()


def run(more: MoreCommands | None = None) -> NoReturn:
    """The command: :func:`main` (with ``more`` commands), then the process ends as soon as its output is
    out. Tearing the interpreter down (pydantic, numpy, every module's objects) costs tens of
    milliseconds a user would wait for; nothing is left to clean up by then (temporary
    folders and workers are closed by the commands themselves)."""
    start_process()
    code = main(more=more)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away: nothing more can be said
        pass
    if "logging" in sys.modules:  # handlers flushed, as at a normal exit
        sys.modules["logging"].shutdown()
    os._exit(code)


if __name__ == "__main__":
    run()
