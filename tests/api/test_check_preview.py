"""``mutagrade check`` with a server asks for a preview, ``mutagrade submit`` makes a submission:
the student command run as a student runs it, against a live ``mutagrade serve``, and what the
server stored read back (the preview graded the same way, and never in the gradebook)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.api.conftest import STUDENT, Server


def _student(*args: str, server: Server, token: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MUTAGRADE_SERVER": server.url, "MUTAGRADE_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "grader.student_cli", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_check_sends_a_preview_and_submit_a_submission(server: Server, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(STUDENT, repo, ignore=shutil.ignore_patterns("__pycache__"))
    token = server.token("sam")

    checked = _student("check", str(repo), server=server, token=token)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert (f"Mutation grade: submitting your tests and journal to {server.url} as a preview"
            in checked.stdout), checked.stdout
    assert "VERDICT: PASSED" in checked.stdout, checked.stdout[-3000:]
    assert "preview 1:" in checked.stderr and "not your grade of record" in checked.stderr, checked.stderr

    with server.client("sam") as sam, server.client("prof", "staff") as prof:
        [preview] = sam.get("/v1/submissions").json()
        assert (preview["kind"], preview["status"], preview["passed"]) == ("preview", "done", True)
        gradebook = {row["student"]: row for row in csv.DictReader(io.StringIO(prof.get("/v1/gradebook.csv").text))}
        assert (gradebook["sam"]["submissions"], gradebook["sam"]["record_id"]) == ("0", "")

        submitted = _student("submit", str(repo), server=server, token=token)
        assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-2000:]
        assert "submission 2:" in submitted.stderr, submitted.stderr
        latest = sam.get("/v1/submissions").json()[0]
        assert (latest["id"], latest["kind"], latest["status"]) == (2, "submission", "done")
        gradebook = {row["student"]: row for row in csv.DictReader(io.StringIO(prof.get("/v1/gradebook.csv").text))}
    assert (gradebook["sam"]["submissions"], gradebook["sam"]["record_id"]) == ("1", "2")
    assert gradebook["sam"]["final_points"] == "100"
