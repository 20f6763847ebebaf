"""The students' client, ``mutagrade submit``: pack, upload, wait, print the report; and
``mutagrade check``'s way to the mutation grade, the same upload as a preview (never the grade
of record)."""

from __future__ import annotations

import io
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import httpx

from grader.core.states import JobStatus
from grader.core.exits import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_NOT_PASSED, EXIT_OK, EXIT_UNREACHABLE
from grader.core.models import Report
from grader.report import render
from grader.report.github import append_job_summary

__all__ = ["ClientError", "pack", "submit"]

class ClientError(Exception):
    """The submission could not be made or followed; ``code`` is the exit code to use."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def pack(repo: Path, tests: PurePosixPath) -> bytes:
    """A .tar.gz of what the server grades: the tests (and the journal, if there is one).

    A repository with its tests at ``tests`` (the assignment's ``student_tests``) is packed as
    such, with ``.tdd/``; any other folder is taken to be the tests themselves.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        def add(path: Path, arcname: str) -> None:
            tar.add(path, arcname=arcname, filter=lambda info: None if "__pycache__" in info.name else info)

        if (repo / tests).is_dir():
            add(repo / tests, tests.as_posix())
            if (repo / ".tdd").is_dir():
                add(repo / ".tdd", ".tdd")
        else:
            files = sorted(p for p in repo.iterdir() if p.suffix == ".py" and p.is_file())
            if not files:
                raise ClientError(f"{repo}: expected {tests}/ or test files (*.py), found neither", EXIT_BAD_INPUT)
            for path in files:
                add(path, path.name)
    return buffer.getvalue()


def _check_server(server: str) -> str:
    """The server's base address, if it reads as one (``http://host:port``)."""
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ClientError(f"--server {server!r}: expected an http:// or https:// address, e.g. http://127.0.0.1:8000",
                          EXIT_BAD_INPUT)
    return server.rstrip("/")


def _unreachable(server: str, exc: httpx.TransportError) -> ClientError:
    """One line: which server, what went wrong on the way, what to check."""
    what = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ClientError(f"the server {server} could not be reached ({what}); check the address and that "
                           "the service is running", EXIT_UNREACHABLE)
    return ClientError(f"the server {server} could not be reached: it stopped answering ({type(exc).__name__}: "
                       f"{what})", EXIT_UNREACHABLE)


def submit(repo: Path, *, tests: PurePosixPath, server: str, token: str, fmt: str = "text",
           timeout: float = 600.0, preview: bool = False, assignment: str | None = None) -> int:
    """Upload ``repo``'s tests for ``assignment`` (its name; None: the service's default),
    wait for the grade, print the report; returns the exit code
    of ``mutagrade grade`` (0 passed, 1 not passed, 2 refused, 3 the service failed), or 4
    when the server could not be reached (:mod:`grader.core.exits`). With ``preview``, the
    upload is a preview (``POST /v1/previews``): graded the same way, never the grade of record,
    accepted after the due date, under a rate limit of its own."""
    server = _check_server(server)
    archive = pack(repo, tests)
    headers = {"Authorization": f"Bearer {token}"}
    what, path = ("preview", "/v1/previews") if preview else ("submission", "/v1/submissions")
    try:
        with httpx.Client(base_url=server, headers=headers, timeout=30.0) as http:
            answer = http.post(path, files={"archive": ("submission.tar.gz", archive, "application/gzip")},
                               data={"assignment": assignment} if assignment else None)
            if answer.status_code == 429:
                raise ClientError(f"{_detail(answer)} (Retry-After: {answer.headers.get('Retry-After')} s)", EXIT_BAD_INPUT)
            if answer.status_code >= 400:
                raise ClientError(f"the server refused the {what} ({answer.status_code}): {_detail(answer)}",
                                  EXIT_BAD_INPUT if answer.status_code < 500 else EXIT_INTERNAL)
            created = answer.json()
            started = time.monotonic()
            while True:
                state = http.get(f"/v1/submissions/{created['id']}")
                if state.status_code >= 400:
                    raise ClientError(f"could not follow submission {created['id']}: {_detail(state)}", EXIT_INTERNAL)
                body = state.json()
                elapsed = time.monotonic() - started
                print(f"\r{what} {created['id']}: {body['status']:<8} {elapsed:5.0f} s", end="", file=sys.stderr, flush=True)
                if body["status"] in (JobStatus.DONE, JobStatus.ERROR):
                    print(file=sys.stderr)
                    break
                if elapsed > timeout:
                    print(file=sys.stderr)
                    raise ClientError(f"submission {created['id']} was not graded within {timeout:g} s", EXIT_INTERNAL)
                time.sleep(0.5)
    except httpx.TransportError as exc:
        raise _unreachable(server, exc) from None
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:  # an answer that is no mutagrade service's
        raise ClientError(f"the server {server} did not answer as a mutagrade service does "
                          f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})", EXIT_UNREACHABLE) from None
    if body["status"] == JobStatus.ERROR:
        refused = "could not be graded" in (body["error"] or "")
        raise ClientError(f"submission {created['id']}: {body['error']}", EXIT_BAD_INPUT if refused else EXIT_INTERNAL)
    report = Report.model_validate(body["report"])
    print(render(report, fmt))
    append_job_summary(report)  # on GitHub Actions the job summary gets the Markdown report too
    print(f"report page: {server}{body['links']['report_html']}", file=sys.stderr)
    if preview:
        print(f"preview {created['id']}: not your grade of record; `mutagrade submit` makes a submission",
              file=sys.stderr)
    elif body.get("timeliness") == "late":
        print(f"submission {created['id']}: late, {body['days_late']} day(s): it loses "
              f"{round(body['penalty'] * 100, 1):g} % of its points", file=sys.stderr)
    if report.input_refused:
        return EXIT_BAD_INPUT
    return EXIT_OK if report.passed else EXIT_NOT_PASSED


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:500]
