"""The installed ``mutagrade`` command: the grader's commands (:mod:`grader.cli`) and the service's.

The service's commands are ``serve`` (the API, its pages and in-process workers), ``worker`` (a
Celery worker), ``admin`` (tokens, regrades, the roster and extensions) and ``submit`` (upload a
suite and wait for its report). They are added to :mod:`grader.cli`'s parser, so that
``mutagrade --help`` lists every command, and the library itself imports nothing of the service.

Each command imports what it needs when it runs: this module imports no fastapi, sqlalchemy,
celery or httpx, so the command works in an install without the ``service`` extra (``make
demo``). Exit codes as :mod:`grader.cli`'s, and 4 (``submit``) the server could not be reached.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from grader.core.states import JobStatus, Role
from grader import cli
from grader.core.exits import EXIT_NOT_PASSED, EXIT_OK
from grader.core.paths import Layout
from grader.student_cli import UsageError

__all__ = ["add_service_commands", "build_parser", "main", "run"]

_LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


# ---------------------------------------------------------------------- commands
def _cmd_serve(args: argparse.Namespace, layout: Layout) -> int:
    import uvicorn

    from api.config import get_settings
    from api.main import create_app

    settings = get_settings(root=args.root, workers=args.workers, assignment=args.assignment)
    app = create_app(settings)
    hosted = app.state.hosting.names
    print(f"mutagrade serving on http://{args.host}:{args.port} (database {settings.database_url}, "
          f"{settings.queue} queue, {_threads(settings.workers)}; assignments {hosted[0]} (the default)"
          f"{''.join(', ' + name for name in hosted[1:])})", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return EXIT_OK


def _threads(workers: int | None) -> str:
    if workers is None:
        return "gradings at once: one per core, more while the cores sit idle"
    return f"{workers} grading thread(s)"


def _cmd_worker(args: argparse.Namespace, layout: Layout) -> int:
    from api.work.celery_app import make_celery
    from api.config import get_settings
    from grader.flows.golden import device_in_use

    settings = get_settings(root=args.root, assignment=args.assignment)
    name = args.hostname or f"{args.queues}@%h"
    if args.ping:
        return _ping_worker(make_celery(settings), name)
    device, dtype = device_in_use()
    print(f"mutagrade worker: queues {args.queues}, device {device} ({dtype} comparisons), "
          f"broker {settings.broker_url}, database {settings.database_url}", file=sys.stderr, flush=True)
    app = make_celery(settings)
    concurrency = args.concurrency
    if concurrency is None:
        from grader.flows.serving import machine_capacity

        # Each process grades one job at a time, through the machine's admission
        # (api.work.tasks): a grading that sleeps holds a process, not a core.
        concurrency = machine_capacity("auto").most if "cpu" in args.queues else 1
    app.worker_main([
        "worker", "--queues", args.queues, "--concurrency", str(concurrency),
        "--loglevel", args.log_level, "--hostname", name, "--without-gossip",
        "--without-mingle",
    ])
    return EXIT_OK


def _ping_worker(app, name: str) -> int:
    """Exit 0 when the worker called ``name`` answers a ping through the broker within 5 s:
    the health check of a worker (it is alive and still connected), in docker-compose.yml."""
    from celery.utils.nodenames import host_format

    node = host_format(name)  # %h -> this host's name, as the worker expanded it
    try:
        replies = app.control.ping(destination=[node], timeout=5.0)
    except Exception as exc:  # noqa: BLE001 - the broker is away: not healthy, and say why
        print(f"mutagrade worker: {node}: no answer ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        return EXIT_NOT_PASSED
    if not any(node in reply for reply in replies):
        print(f"mutagrade worker: {node}: no answer within 5 s", file=sys.stderr)
        return EXIT_NOT_PASSED
    print(f"{node}: ok")
    return EXIT_OK


def _admin_session(args: argparse.Namespace):
    from api.config import get_settings
    from api.store.db import make_engine, make_sessionmaker
    from api.store.migrate import upgrade

    settings = get_settings(root=args.root, assignment=args.assignment)
    upgrade(settings.database_url)
    return make_sessionmaker(make_engine(settings.database_url))()


def _cmd_admin(args: argparse.Namespace, layout: Layout) -> int:
    from api.store import crud

    with _admin_session(args) as session:
        if args.verb == "token-create":
            existed = crud.user_by_name(session, name=args.user) is not None
            try:
                user, token = crud.create_user(session, name=args.user, role=args.role, replace=args.replace)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            print(token)
            replaced = "; it replaced the old one, which no longer works" if existed else ""
            print(f"token for {user.name} ({user.role}){replaced}; it is shown only once", file=sys.stderr)
        elif args.verb == "token-revoke":
            try:
                had = crud.revoke_token(session, name=args.user)
            except LookupError as exc:
                raise UsageError(str(exc)) from None
            print(f"revoked the token of {args.user}" if had else f"the token of {args.user} was revoked already")
        elif args.verb == "token-list":
            for user in crud.list_users(session):
                revoked = "\trevoked" if user.token_hash is None else ""
                print(f"{user.name}\t{user.role}\t{crud.as_utc(user.created_at)}{revoked}")
        elif args.verb == "regrade":
            ids = args.ids
            if args.failed:
                ids += [s.id for s in crud.list_submissions(session, status=JobStatus.ERROR, limit=100000)]
            if not ids:
                raise UsageError("regrade: expected submission ids or --failed")
            for submission_id in ids:
                submission = crud.get_submission(session, submission_id)
                if submission is None:
                    raise UsageError(f"submission {submission_id}: no such submission")
                crud.regrade(session, submission=submission)
            print(f"queued {len(ids)} submission(s) for regrading; a running server picks them up")
    return EXIT_OK


def _actor() -> str:
    """Who runs an admin command, for the audit trail."""
    import getpass

    try:
        return f"{getpass.getuser()} (command line)"
    except (KeyError, OSError):  # no name for this uid (a bare container)
        return "command line"


def _cmd_roster(args: argparse.Namespace, layout: Layout) -> int:
    from grader.core.roster import RosterError, read_roster

    if args.verb == "roster-import":
        out = Path(args.out) if args.out else None
        if out is not None and out.exists():  # checked first: its tokens are shown only once
            raise UsageError(f"--out {out}: exists; choose a new file (the tokens it holds are shown only once)")
        try:
            entries = read_roster(Path(args.file))
        except RosterError as exc:
            raise UsageError(str(exc)) from None
    with _admin_session(args) as session:
        if args.verb == "roster-import":
            return _roster_import(session, entries, out)
        from api.store.roster import RosterConflict, list_roster, remove_student

        if args.verb == "roster-remove":
            try:
                removed = remove_student(session, login=args.login, actor=_actor())
            except (LookupError, RosterConflict) as exc:
                raise UsageError(str(exc)) from None
            print(f"removed {args.login}: their token no longer works; their submissions stay" if removed
                  else f"{args.login} was removed already")
        else:
            print("login\tname\temail\tsection\ttoken\textension")
            for s in list_roster(session, assignment=layout.assignment_name):  # its extension for this one
                state = "removed" if s.removed_at else ("active" if s.has_token else "revoked")
                extension = s.extension.isoformat() if s.extension else ""
                print(f"{s.login}\t{s.name or ''}\t{s.email or ''}\t{s.section or ''}\t{state}\t{extension}")
    return EXIT_OK


def _roster_import(session, entries, out: Path | None) -> int:
    """Import, then write the mail-merge file to ``out`` (for its owner's eyes only) or stdout."""
    from api.store.roster import MAIL_MERGE_HEADER, RosterConflict, import_roster, mail_merge_rows
    from grader.report.spreadsheet import write_rows

    try:
        result = import_roster(session, entries, actor=_actor())
    except RosterConflict as exc:
        raise UsageError(str(exc)) from None
    if out is None:
        write_rows(sys.stdout, MAIL_MERGE_HEADER, mail_merge_rows(result))
        where = "the tokens are above"
    else:
        with os.fdopen(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", newline="",
                       encoding="utf-8") as handle:
            write_rows(handle, MAIL_MERGE_HEADER, mail_merge_rows(result))
        where = f"the tokens are in {out}"
    print(f"roster: {result.summary()}; {where} (shown only once: keep them safe)", file=sys.stderr)
    return EXIT_OK


def _cmd_extension(args: argparse.Namespace, layout: Layout) -> int:
    with _admin_session(args) as session:
        from api.store.extensions import grant_extension, list_extensions, parse_due, revoke_extension

        try:
            if args.verb == "extension-grant":
                due = parse_due(args.due, timezone=args.timezone or _course_zone(layout))
                grant = grant_extension(session, login=args.login, assignment=layout.assignment_name, due=due,
                                        reason=args.reason, actor=_actor())
                print(f"{grant.login} is due {grant.due.isoformat()} for {grant.assignment} "
                      f"({due.isoformat()} as given)")
            elif args.verb == "extension-revoke":
                had = revoke_extension(session, login=args.login, assignment=layout.assignment_name, actor=_actor())
                whose = f"the extension of {args.login} for {layout.assignment_name}"
                print(f"ended {whose}" if had else f"{args.login} had no extension for {layout.assignment_name}")
            else:
                print("login\tassignment\tdue\treason\tgranted_by\tgranted_at")
                for grant in list_extensions(session, assignment=_named_assignment(args, layout)):
                    reason = " ".join(grant.reason.split())
                    print(f"{grant.login}\t{grant.assignment}\t{grant.due.isoformat()}\t{reason}\t"
                          f"{grant.granted_by}\t{grant.granted_at.isoformat()}")
        except (LookupError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    return EXIT_OK


def _named_assignment(args: argparse.Namespace, layout: Layout) -> str | None:
    """The assignment ``--assignment`` named, or None where it named none (every one)."""
    return layout.assignment_name if getattr(args, "assignment", None) else None


def _course_zone(layout: Layout) -> str | None:
    """The time zone of the assignment's due date, if it names one: a due date's default zone."""
    from grader.core.assignment import load_assignment

    deadline = load_assignment(layout.assignment).deadline
    return deadline.timezone if deadline is not None else None


def _cmd_submit(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.submit import ClientError, submit

    token = args.token or os.environ.get("MUTAGRADE_TOKEN")
    if not token:
        raise UsageError("a token is needed: --token TOKEN or MUTAGRADE_TOKEN")
    repo = Path(args.repo)
    if not repo.is_dir():
        raise UsageError(f"{repo}: expected your repository's root or a folder of tests")
    try:
        return submit(repo, tests=layout.student_tests, server=args.server, token=token, fmt=args.format,
                      timeout=args.timeout, assignment=layout.assignment_name)
    except ClientError as exc:
        print(f"mutagrade submit: {exc}", file=sys.stderr)
        return exc.code


# ------------------------------------------------------------------------ parser
def add_service_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``serve``, ``admin``, ``submit`` and ``worker`` to the command line's commands."""
    serve = commands.add_parser("serve", help="run the grading service (API, pages, in-process workers)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=None, help="grading threads (default: MUTAGRADE_WORKERS, or as many as the machine's cores and idle time allow)")
    serve.add_argument("--log-level", default="info", choices=_LOG_LEVELS)
    serve.set_defaults(run=_cmd_serve)

    admin = commands.add_parser("admin", help="staff: tokens, regrades, the roster and extensions "
                                "(database from MUTAGRADE_DATABASE_URL)")
    admin_verbs = admin.add_subparsers(dest="admin_verb", required=True, metavar="VERB")
    token = admin_verbs.add_parser("token", help="create, revoke or list tokens").add_subparsers(
        dest="token_verb", required=True)
    create = token.add_parser("create", help="create a user's token (printed once)")
    create.add_argument("--user", required=True)
    create.add_argument("--role", required=True, choices=[role.value for role in Role])
    create.add_argument("--replace", action="store_true", help="an existing user: a new token and role (the old token ends)")
    create.set_defaults(run=_cmd_admin, verb="token-create")
    revoke = token.add_parser("revoke", help="end a user's token at once")
    revoke.add_argument("user")
    revoke.set_defaults(run=_cmd_admin, verb="token-revoke")
    token.add_parser("list", help="every user and role").set_defaults(run=_cmd_admin, verb="token-list")
    regrade = admin_verbs.add_parser("regrade", help="queue submissions for grading again")
    regrade.add_argument("ids", nargs="*", type=int)
    regrade.add_argument("--failed", action="store_true", help="every submission that ended in error")
    regrade.set_defaults(run=_cmd_admin, verb="regrade")
    _add_roster_commands(admin_verbs)

    submit = commands.add_parser("submit", help="students: upload your tests and journal, wait, print the report")
    submit.add_argument("repo", nargs="?", default=".", help="your repository's root (default: here)")
    submit.add_argument("--server", required=True, help="e.g. http://127.0.0.1:8000")
    submit.add_argument("--token", help="your token (default: MUTAGRADE_TOKEN)")
    submit.add_argument("--format", choices=cli.FORMATS, default="text")
    submit.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the grade")
    submit.set_defaults(run=_cmd_submit)

    worker = commands.add_parser("worker", help="a Celery worker: grading (cpu) or torch comparisons (gpu)")
    worker.add_argument("--queues", required=True, choices=("cpu", "gpu", "cpu,gpu"))
    worker.add_argument("--concurrency", type=int, default=None,
                        help="worker processes (default: for the cpu queue, as many gradings as the machine's "
                        "admission may let in at once, one per core and more while they sit idle; 1 for gpu)")
    worker.add_argument("--hostname", help="the worker's node name (default: QUEUES@host)")
    worker.add_argument("--log-level", default="info", choices=_LOG_LEVELS)
    worker.add_argument("--ping", action="store_true",
                        help="do not start one: exit 0 if the worker of this name answers (a health check)")
    worker.set_defaults(run=_cmd_worker)


def _add_roster_commands(admin_verbs: argparse._SubParsersAction) -> None:
    """``admin roster import|list|remove`` and ``admin extension grant|list|revoke``."""
    roster = admin_verbs.add_parser("roster", help="import the LMS's roster, list it, remove a student").add_subparsers(
        dest="roster_verb", required=True)
    load = roster.add_parser("import", help="add and update students from a Canvas or Moodle CSV export "
                             "(idempotent: students there keep their tokens)")
    load.add_argument("file", help="the LMS's CSV export")
    load.add_argument("--out", help="write the mail-merge CSV (login, name, email, token, note) here, readable by "
                      "you alone (default: stdout); it must not exist yet")
    load.set_defaults(run=_cmd_roster, verb="roster-import")
    roster.add_parser("list", help="every student, their token's state and extension (for --assignment)").set_defaults(
        run=_cmd_roster, verb="roster-list")
    remove = roster.add_parser("remove", help="take a student off the roster: their token ends, submissions stay")
    remove.add_argument("login")
    remove.set_defaults(run=_cmd_roster, verb="roster-remove")

    extension = admin_verbs.add_parser(
        "extension", help="a student's own due date for an assignment (--assignment NAME; default: the course's)",
    ).add_subparsers(
        dest="extension_verb", required=True)
    grant = extension.add_parser("grant", help="give a student a due date of their own (replaces an earlier one)")
    grant.add_argument("login")
    grant.add_argument("--due", required=True, help="e.g. 2026-12-12T23:59 (with --timezone) or 2026-12-12T23:59+01:00")
    grant.add_argument("--timezone", help="the zone of a --due without an offset, e.g. Europe/Berlin "
                       "(default: the assignment's [deadline] timezone)")
    grant.add_argument("--reason", default="", help="why (kept in the audit trail)")
    grant.set_defaults(run=_cmd_extension, verb="extension-grant")
    extension.add_parser("list", help="every extension (of --assignment NAME only, if given)").set_defaults(run=_cmd_extension, verb="extension-list")
    revoke = extension.add_parser("revoke", help="end a student's extension")
    revoke.add_argument("login")
    revoke.set_defaults(run=_cmd_extension, verb="extension-revoke")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every command of the grader and of the service."""
    return cli.build_parser(add_service_commands)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    return cli.main(argv, more=add_service_commands)


def run() -> NoReturn:
    """The ``mutagrade`` command (see :func:`grader.cli.run`)."""
    cli.run(more=add_service_commands)


if __name__ == "__main__":
    run()
