"""The installed ``mutagrade`` command: the grader's commands (:mod:`grader.cli`) and the service's.

The service's commands are ``serve`` (the API, its pages and in-process workers), ``worker`` (a
Celery worker), ``admin`` (tokens and regrades) and ``submit`` (upload a suite and wait for its
report). They are added to :mod:`grader.cli`'s parser, so that ``mutagrade --help`` lists every
command, and the library itself imports nothing of the service.

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

    settings = get_settings(root=args.root, workers=args.workers)
    app = create_app(settings)
    print(f"mutagrade serving on http://{args.host}:{args.port} (database {settings.database_url}, "
          f"{settings.queue} queue, {_threads(settings.workers)})", file=sys.stderr)
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

    settings = get_settings(root=args.root)
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

    settings = get_settings(root=args.root)
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


def _cmd_submit(args: argparse.Namespace, layout: Layout) -> int:
    from grader.flows.submit import ClientError, submit

    token = args.token or os.environ.get("MUTAGRADE_TOKEN")
    if not token:
        raise UsageError("a token is needed: --token TOKEN or MUTAGRADE_TOKEN")
    repo = Path(args.repo)
    if not repo.is_dir():
        raise UsageError(f"{repo}: expected your repository's root or a folder of tests")
    try:
        return submit(repo, server=args.server, token=token, fmt=args.format, timeout=args.timeout)
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

    admin = commands.add_parser("admin", help="staff: tokens and regrades (database from MUTAGRADE_DATABASE_URL)")
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
