"""The ``mutagrade`` command of the student package: ``tdd``, ``check`` and ``submit``, nothing else.

The student package (``make student-package``, ``packaging/student/``) ships this entry point
instead of :mod:`grader.cli`, and none of the staff commands, the reference modules, the mutants or
the grading engine. ``check`` therefore checks what needs no answer key here and gets the
mutation grade from the course's server (:mod:`grader.flows.student_check`).

Exit codes, as the staff command's (:mod:`grader.core.exits`): 0 success, 1 a check ran and did
not pass, 2 bad input, 3 internal error (or the server failed), 4 the server could not be reached.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, NoReturn, Sequence

from grader import __version__
from grader.core.exits import EXIT_BAD_INPUT, EXIT_NOT_PASSED, EXIT_OK, exit_code_of
from grader.core.paths import Layout, default_layout, layout_for

if TYPE_CHECKING:
    from grader.run.runner import RunLimits

__all__ = [
    "UsageError", "add_tdd_command", "build_parser", "course_layout", "local_sandbox", "main", "run", "run_tdd",
    "student_repo",
]

COURSE = Path(__file__).resolve().parent / "course"  # the course tests and goldens, as installed


class UsageError(Exception):
    """Bad input on the command line: printed as ``mutagrade: error: ...``, exit 2."""


def course_layout(assignment: str | None = None, repo: Path | None = None) -> Layout:
    """Where the course material of ``assignment`` (by name) is: its course tests, goldens and
    rules (for its limits), in the installed student package, or in the checkout this module
    runs from. With no name, the assignment whose tests folder ``repo`` holds (a repository
    made from a module's starter has its own), else the course's default."""
    root = COURSE if (COURSE / "assignments").is_dir() else default_layout().root
    if assignment is None and repo is not None:
        assignment = _assignment_of(root, repo)
    return layout_for(root, assignment)


def _assignment_of(root: Path, repo: Path) -> str | None:
    """The one assignment whose ``student_tests`` folder ``repo`` holds, if exactly one."""
    named = [name for name in layout_for(root, None).available()
             if (repo / layout_for(root, name).student_tests).is_dir()]
    return named[0] if len(named) == 1 else None


def local_sandbox():
    """For a student's own code on their own machine: every layer there is, or none at all
    (a laptop has no sandbox users; the grading server always has them)."""
    from grader.sandbox.base import SandboxMode
    from grader.sandbox.status import sandbox_status

    return SandboxMode.NONE if sandbox_status().missing(SandboxMode.AUTO) else SandboxMode.AUTO


def _course_limits(layout: Layout) -> RunLimits:
    """The course assignment's limits (the same the journal's replay at grading runs under), in
    the sandbox this machine has."""
    from grader.core.assignment import load_assignment
    from grader.run.runner import RunLimits

    return RunLimits.of(load_assignment(layout.assignment), sandbox=local_sandbox())


def find_root_here() -> Path:
    """The repository the current folder is in (:func:`grader.flows.tdd.find_root`)."""
    from grader.flows.tdd import find_root

    return find_root(Path.cwd())


def student_repo(args: argparse.Namespace, layout: Layout):
    """The student's repository named by ``--repo``/``repo``, ``--impl`` and ``--tests`` (by
    default where ``layout``'s assignment keeps them); with no ``--repo``, the one the current
    folder is in (:func:`grader.flows.tdd.find_root`)."""
    from grader.flows.tdd import StudentRepo, find_root

    root = Path(args.repo) if args.repo is not None else find_root(Path.cwd())
    if not root.is_dir():
        raise UsageError(f"{root}: expected the root folder of your repository")
    tests = Path(args.tests) if args.tests else Path(layout.student_tests)
    return StudentRepo(root=root, impl=Path(args.impl), tests=tests)


# ---------------------------------------------------------------------- commands
def run_tdd(args: argparse.Namespace, layout: Layout) -> int:
    """``tdd red|green|status|undo`` against the course tests of ``layout`` (the staff command's
    ``--root``, or the course this package installed). A refused red or undo is bad input (exit
    2: nothing was recorded); a refused green is a check that did not pass (exit 1), unless
    the tests break the policy (exit 2, as to every command)."""
    from grader.core.journal import Phase
    from grader.flows.tdd import Refused, SuiteRefused, explained, record, status, undo

    repo = student_repo(args, layout)
    if args.phase == "status":
        print(status(repo))
        return EXIT_OK
    try:
        if args.phase == "undo":
            print(undo(repo))
            return EXIT_OK
        recorded = record(repo, Phase(args.phase), layout=layout, limits=_course_limits(layout))
    except Refused as exc:
        print(f"mutagrade tdd {args.phase}: refused: {exc}", file=sys.stderr)
        if isinstance(exc, SuiteRefused):  # a policy violation: bad input to every command
            return EXIT_BAD_INPUT
        return EXIT_NOT_PASSED if args.phase == Phase.GREEN else EXIT_BAD_INPUT
    entry = recorded.entry
    if entry.phase is Phase.RED:
        print(f"red recorded (entry {entry.seq}): new failing test(s): {', '.join(entry.introduced)}"
              + explained(recorded.failures))
        print("Next: make them pass by changing the implementation, then run `mutagrade tdd green`.")
    else:
        print(f"green recorded (entry {entry.seq}): all {len(entry.outcomes)} tests pass.")
        print("Next: write ONE new test, then run `mutagrade tdd red`.")
    return EXIT_OK


def _cmd_tdd(args: argparse.Namespace) -> int:
    root = Path(args.repo) if args.repo is not None else find_root_here()
    return run_tdd(args, course_layout(args.assignment, root))


def _cmd_check(args: argparse.Namespace) -> int:
    from grader.flows.student_check import local_check, mutation_source, render_local_check, tests_to_submit

    layout = course_layout(args.assignment, Path(args.repo))
    repo = student_repo(args, layout)
    source = mutation_source(args.server, args.token)
    found = local_check(repo, layout=layout, limits=_course_limits(layout))
    print(render_local_check(found), flush=True)
    if not found.policy.ok:  # the server would refuse the suite as it is
        fix = (f"{found.policy.refusal}; fix what Policy lists above first" if found.policy.syntax_errors
               else "fix the policy violations above first")
        print(f"Mutation grade: not submitted: {fix}")
        return EXIT_BAD_INPUT
    if source.missing:
        print(source.missing)
        code = EXIT_OK
    else:
        print(f"Mutation grade: submitting your tests and journal to {source.server} as a preview "
              "(not your grade of record: `mutagrade submit` makes a submission)", flush=True)
        code = _submit(tests_to_submit(repo, layout), source.server, source.token, fmt="text",
                       timeout=args.timeout, preview=True, tests=layout.student_tests,
                       assignment=layout.assignment_name)
    reasons = found.reasons
    print(f"Local checks: {'NOT PASSED: ' + '; '.join(reasons) if reasons else 'passed'}")
    return EXIT_NOT_PASSED if reasons and code == EXIT_OK else code


def _cmd_submit(args: argparse.Namespace) -> int:
    from grader.flows.student_check import SERVER_VARIABLE, TOKEN_VARIABLE

    server = args.server or os.environ.get(SERVER_VARIABLE)
    token = args.token or os.environ.get(TOKEN_VARIABLE)
    if not server:
        raise UsageError(f"a server is needed: --server URL or {SERVER_VARIABLE}")
    if not token:
        raise UsageError(f"a token is needed: --token TOKEN or {TOKEN_VARIABLE}")
    repo = Path(args.repo)
    if not repo.is_dir():
        raise UsageError(f"{repo}: expected your repository's root or a folder of tests")
    layout = course_layout(args.assignment, repo)
    return _submit(repo, server, token, fmt=args.format, timeout=args.timeout, tests=layout.student_tests,
                   assignment=layout.assignment_name)


def _submit(repo: Path, server: str, token: str, *, fmt: str, timeout: float, tests: PurePosixPath,
            assignment: str, preview: bool = False) -> int:
    from grader.flows.submit import ClientError, submit

    try:
        return submit(repo, tests=tests, server=server, token=token, fmt=fmt, timeout=timeout, preview=preview,
                      assignment=assignment)
    except ClientError as exc:
        print(f"mutagrade submit: {exc}", file=sys.stderr)
        return exc.code


# ------------------------------------------------------------------------ parser
def _repo_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--impl", default="python", help="the folder holding your tinyllm (default: python)")
    command.add_argument("--tests", help="your tests (default: where the assignment keeps them, e.g. python/tests/<name>)")
    _assignment_option(command)


def _assignment_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--assignment", help="the course module, by the name of its folder under assignments/ "
                         "(default: the one whose tests folder your repository has, else the course's first)")


def add_tdd_command(commands: argparse._SubParsersAction, *, help: str, run: Callable[..., int]) -> None:
    """The ``tdd`` command, as this package's command and the staff command both have it."""
    tdd = commands.add_parser("tdd", help=help)
    tdd.add_argument("phase", choices=("red", "green", "status", "undo"),
                     help="red, green: record a step; status: where the cycle stands; undo: remove the newest entry")
    tdd.add_argument("--repo", help="your repository's root (default: the nearest folder from here up that "
                     "holds .tdd/, or else .git)")
    _repo_options(tdd)
    tdd.set_defaults(run=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mutagrade", description="Test first, then check and submit (students).")
    parser.add_argument("--version", action="version", version=f"mutagrade {__version__} (student)")
    commands = parser.add_subparsers(dest="command", required=True)

    def server_options(command: argparse.ArgumentParser) -> None:
        command.add_argument("--server", help="the course's server, e.g. https://grader.example.edu "
                             "(default: MUTAGRADE_SERVER)")
        command.add_argument("--token", help="your token (default: MUTAGRADE_TOKEN)")
        command.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the grade")

    add_tdd_command(commands, help="keep the red-then-green journal", run=_cmd_tdd)

    check = commands.add_parser(
        "check", help="the course tests on your implementation and your journal; with a server, the mutation grade")
    check.add_argument("repo", nargs="?", default=".", help="your repository's root (default: here)")
    _repo_options(check)
    server_options(check)
    check.set_defaults(run=_cmd_check)

    submit = commands.add_parser("submit", help="upload your tests and journal, wait, print the report")
    submit.add_argument("repo", nargs="?", default=".", help="your repository's root (default: here)")
    submit.add_argument("--format", choices=("text", "json", "junit", "gradescope", "github"), default="text")
    _assignment_option(submit)
    server_options(submit)
    submit.set_defaults(run=_cmd_submit)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return exit_code_of(lambda: args.run(args), _input_errors)


def _input_errors() -> tuple[type[Exception], ...]:
    from grader.core.errors import GradingInputError
    from grader.core.journal import JournalFormatError
    from grader.sandbox.base import SandboxError

    return (UsageError, GradingInputError, JournalFormatError, SandboxError)


def run() -> NoReturn:
    """The ``mutagrade`` command of the student package."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    sys.exit(main())


if __name__ == "__main__":
    run()
