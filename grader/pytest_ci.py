"""A pytest plugin for the project's own runs: in CI (``CI=true``) a skipped test is a failure.

A skip hides a test that did not run; in CI that must not pass silently. Only tests marked
``gpu`` may be skipped (CI machines have no GPU). Enabled with ``-p grader.pytest_ci``.
"""

from __future__ import annotations

import os

import pytest

__all__ = ["SkipsFailCI"]


class SkipsFailCI:
    """Collects skipped tests and turns a green CI run with any into a failed one."""

    def __init__(self) -> None:
        self.skipped: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and "gpu" not in report.keywords:
            self.skipped.append(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if os.environ.get("CI") == "true" and self.skipped and exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: object) -> None:
        if os.environ.get("CI") == "true" and self.skipped:
            terminalreporter.write_line(  # type: ignore[attr-defined]
                f"CI: {len(self.skipped)} test(s) skipped, and a skip fails CI: "
                + ", ".join(self.skipped),
                red=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipsFailCI(), "mutagrade-skips-fail-ci")
