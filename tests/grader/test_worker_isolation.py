"""The worker runs the package under test and nothing else: the ``tinyllm`` installed with the
project (``pip install -e .``) never supplies a module a student's package lacks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.core.models import Outcome, WorkerRun
from grader.core.paths import default_layout
from grader.run.runner import run_suites
from tests.limits import unbudgeted
from grader.sandbox.base import SandboxMode

LAYOUT = default_layout()
TEST = "from tinyllm.rnn.gru import GRU\n\n\ndef test_builds():\n    assert GRU(2, 3).num_layers == 1\n"


def _student_package(root: Path, *, namespace: bool) -> Path:
    """A copy of the reference package without ``tinyllm/nn/`` (and, for a namespace
    package, without ``tinyllm/__init__.py``)."""
    impl = root / "python"
    shutil.copytree(LAYOUT.reference / "tinyllm", impl / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.rmtree(impl / "tinyllm" / "nn")
    if namespace:
        (impl / "tinyllm" / "__init__.py").unlink()
    return impl


def _run(tmp_path: Path, impl: Path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_gru.py").write_text(TEST)
    [run] = run_suites(
        layout=LAYOUT.with_implementation(impl),
        tests_dir=tests,
        runs=[WorkerRun(variant="student", source=LAYOUT.module_source.read_text())],
        hash_seed=1,
        limits=unbudgeted(sandbox=SandboxMode.NONE),
    )
    return run


@pytest.mark.parametrize("namespace", [False, True], ids=["regular", "namespace"])
def test_a_module_missing_from_the_students_package_is_not_taken_from_the_installed_one(tmp_path, namespace):
    run = _run(tmp_path, _student_package(tmp_path, namespace=namespace))
    assert not any(r.outcome is Outcome.PASSED for r in run.results), run
    errors = " ".join(run.collection_errors)
    assert "No module named 'tinyllm.nn'" in errors, run


def test_a_complete_students_package_runs(tmp_path):
    impl = tmp_path / "python"
    shutil.copytree(LAYOUT.reference / "tinyllm", impl / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    run = _run(tmp_path, impl)
    assert [r.outcome for r in run.results] == [Outcome.PASSED], run


SEES = '''
import gc
import importlib.util
import sys


def test_sees_only_what_it_is_given():
    # The grader's other packages (the service, its configuration) are not importable from a
    # test, and no import hook of the project's installation is in place.
    assert importlib.util.find_spec("api") is None
    assert not any("editable" in repr(finder).lower() for finder in sys.meta_path), sys.meta_path
    assert sys.flags.no_site == 1  # no .pth file of the environment ran in this process
    # The worker imports with the garbage collector off; the tests run with it on, as anywhere.
    assert gc.isenabled()
'''


@pytest.mark.parametrize("mode", [SandboxMode.NONE, SandboxMode.AUTO])
def test_a_test_cannot_import_the_rest_of_the_grader(tmp_path, mode):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_sees.py").write_text(SEES)
    [run] = run_suites(
        layout=LAYOUT, tests_dir=tests,
        runs=[WorkerRun(variant="reference", source=LAYOUT.module_source.read_text())],
        hash_seed=1, limits=unbudgeted(sandbox=mode),
    )
    assert [(r.outcome, r.message) for r in run.results] == [(Outcome.PASSED, "")], run


@pytest.mark.parametrize("names_it", [True, False], ids=["names-numpy-testing", "does-not"])
def test_the_worker_imports_numpy_testing_ahead_only_for_tests_that_name_it(tmp_path, names_it):
    """numpy.testing costs every worker about 12 ms to import: it is imported ahead (once, not
    in every run) where a test file names it, and otherwise left to a test that reaches it."""
    tests = tmp_path / "tests"
    tests.mkdir()
    use = "np.testing.assert_allclose(np.ones(2), np.ones(2))" if names_it else "assert np.allclose(np.ones(2), 1)"
    (tests / "test_ahead.py").write_text(
        # The module's name split in two: the file itself must not name it.
        "import sys\nimport numpy as np\n\nAHEAD = 'numpy.te' 'sting' in sys.modules\n\n\n"
        f"def test_ahead():\n    assert AHEAD is {names_it}\n    {use}\n"
    )
    [run] = run_suites(
        layout=LAYOUT, tests_dir=tests,
        runs=[WorkerRun(variant="reference", source=LAYOUT.module_source.read_text())],
        hash_seed=1, limits=unbudgeted(sandbox=SandboxMode.AUTO),
    )
    assert [(r.outcome, r.message) for r in run.results] == [(Outcome.PASSED, "")], run
