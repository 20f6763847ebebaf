"""importlib.metadata, named by pytest and pydantic at their start, imported only when used.

Each check runs in an interpreter of its own: the stand-in only works before anything has
imported the real module, and this test process has.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from grader.core.assignment import Assignment, Limits
from grader.flows.grading import grade_suite
from grader.core.models import TestStatus
from grader.core.paths import default_layout
from grader.sandbox.process import _WORKER_BOOTSTRAP, _worker_command

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = default_layout()
FAST = Assignment(name="test", threshold=0.70, limits=Limits(test_timeout_s=5.0, run_timeout_s=60.0))


def _python(code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT,
        env=env if env is not None else {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_naming_the_module_does_not_import_it_and_using_it_does():
    out = _python("""
        import sys
        from grader.core.lazymodule import defer, deferred
        defer("importlib.metadata")
        import importlib.metadata
        from importlib.metadata import version, entry_points
        print(deferred("importlib.metadata"), "email" in sys.modules)
        import pytest
        print(version("pytest") == pytest.__version__, deferred("importlib.metadata"))
        real = sys.modules["importlib.metadata"]
        print(type(real).__name__, importlib.metadata is real, version("pytest") == pytest.__version__)
        try:
            importlib.metadata.version("no-such-distribution-here")
        except importlib.metadata.PackageNotFoundError as exc:
            print("not found:", exc.name)
        print(len(entry_points(group="console_scripts")) >= 0)
        """)
    assert out.splitlines() == [
        "True False",  # named, even a function by name: nothing imported (no email package)
        "True False",  # the function imported it, and answered as the real one
        "module True True",  # from then on the real module is the one everyone reaches
        "not found: no-such-distribution-here",
        "True",
    ]


def test_any_other_attribute_imports_the_real_module():
    out = _python("""
        from grader.core.lazymodule import defer, deferred
        defer("importlib.metadata")
        import importlib.metadata
        stand_in = importlib.metadata
        print(deferred("importlib.metadata"), stand_in.Distribution.__name__, deferred("importlib.metadata"))
        print(stand_in.version is importlib.metadata.version)  # the stand-in forwards to it
        """)
    assert out.splitlines() == ["True Distribution False", "True"]


def test_threads_using_it_at_once_import_it_once():
    out = _python("""
        import sys, threading
        from grader.core.lazymodule import defer
        defer("importlib.metadata")
        import importlib.metadata
        from importlib.metadata import version
        answers, start = [], threading.Barrier(8)
        def use():
            start.wait()
            answers.append((version("pytest"), id(sys.modules["importlib.metadata"])))
        threads = [threading.Thread(target=use) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(len(answers), len(set(answers)))
        """)
    assert out == "8 1"


def test_the_command_grading_path_leaves_it_unimported():
    out = _python("""
        import sys
        from grader.cli import start_process
        start_process()
        import grader.flows.grading, grader.report, grader.run.launch, grader.core.journal
        from grader.core.lazymodule import deferred
        print(deferred("importlib.metadata"), "email" in sys.modules)
        """)
    assert out == "True False"


def test_a_worker_starts_with_it_unimported():
    command, env = _worker_command({"PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    bootstrap = _WORKER_BOOTSTRAP.replace("main()\n", "")
    assert bootstrap != _WORKER_BOOTSTRAP
    probe = bootstrap + textwrap.dedent("""
        from grader.worker.setup import import_common
        import_common()
        from grader.core.lazymodule import deferred
        print(deferred("importlib.metadata"), "email" in sys.modules)
        """)
    assert _python(probe, env) == "True False"
    assert command[-2:] == ["-c", _WORKER_BOOTSTRAP]


def test_a_submitted_test_using_it_sees_the_real_module(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_meta.py").write_text(textwrap.dedent("""
        import importlib.metadata
        from importlib.metadata import PackageNotFoundError, version
        import numpy as np
        import pytest
        from tinyllm.rnn.gru import gru_cell  # noqa: F401


        def test_the_installed_numpy_is_the_imported_one():
            assert version("numpy") == np.__version__
            assert importlib.metadata.distribution("numpy").metadata["Name"] == "numpy"


        def test_a_missing_distribution_raises():
            with pytest.raises(PackageNotFoundError):
                importlib.metadata.version("no-such-distribution-here")
        """))
    # Submitted tests may not name importlib under the policy; with it off (staff's own
    # suites), a test reaches the module as it is.
    report = grade_suite(tests, layout=LAYOUT, assignment=FAST, audience="staff", policy=False)
    statuses = {t.id.rsplit("::", 1)[-1]: t.status for t in report.tests}
    assert statuses == {
        "test_the_installed_numpy_is_the_imported_one": TestStatus.VALID,
        "test_a_missing_distribution_raises": TestStatus.VALID,
    }, [(t.id, t.status, t.reason) for t in report.tests]
