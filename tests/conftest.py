"""Test set-up for the project's own tests: one BLAS thread, the reference on the path, and
the rule that a skipped test fails a CI run (tests marked ``gpu`` excepted)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference"
if str(REFERENCE) not in sys.path:
    sys.path.insert(0, str(REFERENCE))

import pytest  # noqa: E402


class _SkipsFailCI:
    """In CI (``CI=true``) a skipped test is a failure: the run would otherwise hide it."""

    def __init__(self) -> None:
        self.skipped: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and "gpu" not in report.keywords:
            self.skipped.append(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if os.environ.get("CI") == "true" and self.skipped and exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(
                    f"CI: {len(self.skipped)} test(s) skipped, and a skip fails CI: "
                    + ", ".join(self.skipped),
                    red=True,
                )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_SkipsFailCI(), "mutagrade-skips-fail-ci")
