"""Property-based fuzzing of the live API from its own OpenAPI document: schemathesis generates
requests for every operation (valid and invalid parameters, bodies, ids) and the server must
never answer with a 5xx.

It runs the ``st`` command (the dev extra installs it) against a real ``mutagrade serve`` with a
staff token, so every operation is reachable, and reads the run's JSON report. The run is
bounded in time, with a fixed seed so a failure can be replayed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.api.conftest import Server, make_server

MAX_TIME_S = 45
SEED = 20261202


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "server").mkdir()
    srv = make_server(tmp_path / "server")
    srv.start()
    yield srv
    srv.stop()


def test_no_operation_answers_with_a_server_error(live: Server, tmp_path: Path) -> None:
    report = tmp_path / "schemathesis.json"
    st = Path(sys.executable).with_name("st")
    assert st.is_file(), "schemathesis is not installed: pip install -e '.[dev]' (make test does)"
    done = subprocess.run(
        [
            str(st), "run", f"{live.url}/openapi.json",
            "--checks", "not_a_server_error",
            "--header", f"Authorization: Bearer {live.token('fuzz-staff', 'staff')}",
            "--max-examples", "25",
            "--max-time", str(MAX_TIME_S),
            "--seed", str(SEED),
            "--generation-database", ":memory:",
            # One worker: with two threads, hypothesis parses lambdas' source in both at once, and
            # CPython 3.11's AST builder keeps one recursion count per interpreter, so a run could end
            # in "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905), an
            # error of the fuzzer, not of the server.
            "--workers", "1",
            "--request-timeout", "20",
            "--report", "json", "--report-json-path", str(report),
            "--warnings", "off",
            "--no-color",
        ],
        # Its cache of past failures (.schemathesis/) goes to the temporary folder, not the checkout.
        cwd=tmp_path, capture_output=True, text=True, timeout=MAX_TIME_S + 120,
    )
    output = done.stdout[-12000:] + done.stderr[-3000:]
    assert report.is_file(), output
    run = json.loads(report.read_text())

    assert run["failures"] == [], output
    assert run["errors"] == [], output
    assert done.returncode == 0, output
    # It really ran: every operation of the document, and many generated requests.
    assert run["operations"]["total"] >= 12
    assert run["operations"]["tested"] == run["operations"]["selected"] == run["operations"]["total"], output
    assert run["test_cases"]["generated"] >= 200, run["test_cases"]
    assert run["test_cases"]["with_failures"] == 0

    log = live.log.read_text()
    assert "Traceback" not in log, log[-5000:]
