"""The students' client, ``mutagrade submit``: pack, upload, wait, print the report."""

from __future__ import annotations

import io
import sys
import tarfile
import time
from pathlib import Path

import httpx

from grader.models import Report
from grader.report import render
from grader.report.github import append_job_summary

__all__ = ["ClientError", "pack", "submit"]

STUDENT_TESTS = Path("python") / "tests" / "l3-3-gru"


class ClientError(Exception):
    """The submission could not be made or followed; ``code`` is the exit code to use."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def pack(repo: Path) -> bytes:
    """A .tar.gz of what the server grades: the tests (and the journal, if there is one).

    A repository with ``python/tests/l3-3-gru/`` is packed as such, with ``.tdd/``; any other
    folder is taken to be the tests themselves.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        def add(path: Path, arcname: str) -> None:
            tar.add(path, arcname=arcname, filter=lambda info: None if "__pycache__" in info.name else info)

        if (repo / STUDENT_TESTS).is_dir():
            add(repo / STUDENT_TESTS, STUDENT_TESTS.as_posix())
            if (repo / ".tdd").is_dir():
                add(repo / ".tdd", ".tdd")
        else:
            files = sorted(p for p in repo.iterdir() if p.suffix == ".py" and p.is_file())
            if not files:
                raise ClientError(f"{repo}: expected {STUDENT_TESTS}/ or test files (*.py), found neither", 2)
            for path in files:
                add(path, path.name)
    return buffer.getvalue()


def submit(repo: Path, *, server: str, token: str, fmt: str = "text", timeout: float = 600.0) -> int:
    """Upload ``repo``'s tests, wait for the grade, print the report; returns the exit code
    of ``mutagrade grade`` (0 passed, 1 not passed, 2 refused, 3 the service failed)."""
    archive = pack(repo)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=30.0) as http:
            answer = http.post("/v1/submissions", files={"archive": ("submission.tar.gz", archive, "application/gzip")})
            if answer.status_code == 429:
                raise ClientError(f"{_detail(answer)} (Retry-After: {answer.headers.get('Retry-After')} s)", 2)
            if answer.status_code >= 400:
                raise ClientError(f"the server refused the submission ({answer.status_code}): {_detail(answer)}",
                                  2 if answer.status_code < 500 else 3)
            created = answer.json()
            started = time.monotonic()
            while True:
                state = http.get(f"/v1/submissions/{created['id']}")
                if state.status_code >= 400:
                    raise ClientError(f"could not follow submission {created['id']}: {_detail(state)}", 3)
                body = state.json()
                elapsed = time.monotonic() - started
                print(f"\rsubmission {created['id']}: {body['status']:<8} {elapsed:5.0f} s", end="", file=sys.stderr, flush=True)
                if body["status"] in ("done", "error"):
                    print(file=sys.stderr)
                    break
                if elapsed > timeout:
                    print(file=sys.stderr)
                    raise ClientError(f"submission {created['id']} was not graded within {timeout:g} s", 3)
                time.sleep(0.5)
    except httpx.HTTPError as exc:
        raise ClientError(f"cannot reach {server}: {exc}", 3) from None
    if body["status"] == "error":
        raise ClientError(f"submission {created['id']}: {body['error']}", 2 if "could not be graded" in (body["error"] or "") else 3)
    report = Report.model_validate(body["report"])
    print(render(report, fmt))
    append_job_summary(report)  # on GitHub Actions the job summary gets the Markdown report too
    print(f"report page: {server.rstrip('/')}{body['links']['report_html']}", file=sys.stderr)
    if report.input_refused:
        return 2
    return 0 if report.passed else 1


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:500]
