"""A service for the LSTM (``MUTAGRADE_ASSIGNMENT=l3-2-lstm``): the same service, told which
folder it grades, takes an LSTM repository from the student's own ``mutagrade submit`` and
grades it with its journal; it says which assignment it is to anyone who asks."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx

from tests.api.conftest import make_server
from grader.core.paths import default_layout

EXAMPLE = default_layout().examples / "lstm-student"


def test_a_service_for_the_lstm_grades_an_lstm_repository_submitted_by_the_student_command(tmp_path):
    server = make_server(tmp_path, assignment="l3-2-lstm")
    server.start()
    try:
        public = httpx.get(f"{server.url}/v1/assignment").json()
        assert public["name"].startswith("L3.2 LSTM") and sorted(public["required"]) == ["s01", "s05"]
        assert len(public["mutants"]) == 15
        # The student's command finds the assignment by the repository's tests folder.
        done = subprocess.run(
            [sys.executable, "-c", "from grader.student_cli import run; run()", "submit", str(EXAMPLE),
             "--server", server.url, "--token", server.token("ada"), "--format", "json"],
            capture_output=True, text=True, timeout=300, env=server.env,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        report = json.loads(done.stdout)
        assert report["passed"] is True and report["score"]["killed"] == report["score"]["total"] == 15
        assert report["journal"]["ok"] is True and report["journal"]["entries"] == 20
    finally:
        server.stop()
