"""Warm workers kept for one grading after another: same reports as fresh workers, and nothing
of one submission (its temporary files, its staged tests) reaches the next; for every module
(the service keeps a pool per module, api/work/jobs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.core.assignment import load_assignment
from grader.flows.grading import grade_suite
from grader.core.models import Outcome, TestStatus
from grader.core.paths import default_layout, layout_for
from grader.run.runner import RunLimits
from grader.run.pool import WorkerPool

LAYOUT = default_layout()
ASSIGNMENT = load_assignment(LAYOUT.assignment)
EXAMPLE = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
# Each module: its layout, and its example repository's tests.
MODULES = {
    "l3-3-gru": (LAYOUT, EXAMPLE),
    "l3-2-lstm": (layout_for(LAYOUT.root, "l3-2-lstm"), LAYOUT.examples / "lstm-student" / "python" / "tests" / "l3-2-lstm"),
}

LEAVES = '''
import os
import tempfile


def test_leaves_traces():
    # Its own temporary folder, and /tmp where it may write there (a run's /tmp is read-only
    # where it has namespaces of its own).
    for root in {tempfile.gettempdir(), "/tmp"}:
        try:
            with open(os.path.join(root, "left-by-the-last-student.txt"), "w") as f:
                f.write("a secret")
            os.makedirs(os.path.join(root, "closed", "inner"), exist_ok=True)
            os.chmod(os.path.join(root, "closed", "inner"), 0)
            os.chmod(os.path.join(root, "closed"), 0)
        except OSError:
            assert root == "/tmp"
'''
LOOKS = '''
import os


def test_finds_nothing_left():
    import tempfile

    for root in {tempfile.gettempdir(), "/tmp"}:
        assert not os.path.lexists(os.path.join(root, "left-by-the-last-student.txt"))
        assert not os.path.lexists(os.path.join(root, "closed"))
    here = os.path.dirname(os.path.abspath(__file__))
    assert sorted(os.listdir(os.path.dirname(here))) == [os.path.basename(here)]
'''


def _suite(folder: Path, body: str) -> Path:
    folder.mkdir()
    (folder / "test_suite.py").write_text(body)
    return folder


def _grade(tests: Path, pool: WorkerPool | None, layout=LAYOUT, **kwargs):
    return grade_suite(tests, layout=layout, assignment=load_assignment(layout.assignment), audience="staff",
                       pool=pool, **kwargs)


@pytest.fixture(scope="module", params=sorted(MODULES))
def module(request):
    """A module of the course: its layout, its example's tests, and their report by fresh workers."""
    layout, example = MODULES[request.param]
    return layout, example, _grade(example, None, layout)


@pytest.fixture(scope="module")
def fresh_report():
    return _grade(EXAMPLE, None)


def _same(report, fresh) -> None:
    assert report.passed and report.score == fresh.score
    assert [(t.id, t.status, t.kills) for t in report.tests] == [(t.id, t.status, t.kills) for t in fresh.tests]


def test_a_pool_grades_one_submission_after_another_as_fresh_workers_do(tmp_path, module):
    layout, example, fresh_report = module
    with WorkerPool(layout=layout, limits=RunLimits.of(load_assignment(layout.assignment))) as pool:
        first = _grade(example, pool, layout)
        workers = pool._pair
        leaving = _grade(_suite(tmp_path / "a", LEAVES), pool, layout, policy=False)
        looking = _grade(_suite(tmp_path / "b", LOOKS), pool, layout, policy=False)
        again = _grade(example, pool, layout)
        assert pool._pair is workers  # the same two processes did all four
    _same(first, fresh_report)
    _same(again, fresh_report)
    [left] = leaving.tests
    assert left.outcomes["reference"] is Outcome.PASSED
    [look] = looking.tests
    assert look.status is TestStatus.VALID, look.reason  # no file, folder or staged tests of "a"


def test_a_pool_replaces_its_workers_after_a_grading_that_went_wrong(tmp_path, fresh_report):
    tight = ASSIGNMENT.model_copy(update={"limits": ASSIGNMENT.limits.model_copy(update={"budget_cpu_s": 2.0})})
    burn = _suite(tmp_path / "burn", "def test_burns():\n    n = 0\n    for _ in range(10**9):\n        n += 1\n")
    with WorkerPool(layout=LAYOUT, limits=RunLimits.of(tight)) as pool:
        stopped = grade_suite(burn, layout=LAYOUT, assignment=tight, pool=pool)
        assert str(stopped.reasons[0]).startswith("grading budget of 2 CPU s exceeded"), stopped.reasons
        assert pool._pair is None or any(w.closed for w in pool._pair)
        after = grade_suite(EXAMPLE, layout=LAYOUT, assignment=tight, audience="staff", pool=pool)
    _same(after, fresh_report)


def test_a_worker_that_died_with_a_message_unsent_closes_without_an_error():
    """A worker killed while a frame sat in its input's buffer (written, not yet flushed): closing
    it must not fail on flushing that frame into a pipe nobody reads. In the service such a close
    once ended a student's grading as "internal error: BrokenPipeError"."""
    from grader.run.launch import launch_worker

    worker = launch_worker(layout=LAYOUT, tests_dir=None, hash_seed=1, mode=RunLimits.of(ASSIGNMENT).sandbox)
    worker.process.kill()
    worker.process.wait()
    assert worker.process.stdin is not None
    worker.process.stdin.write(b"a frame the worker will never read")  # held in the buffer: no error yet
    worker.close()
    assert worker.process.stdin.closed and worker.process.stdout.closed


HELPED = '''
import helpers_of_a


def test_uses_its_own_helper():
    assert helpers_of_a.VALUE == "a"
'''
LOOKS_FOR_HELPERS = '''
import importlib.util
import sys


def test_finds_no_helper_of_the_last_student():
    assert importlib.util.find_spec("helpers_of_a") is None
    assert "helpers_of_a" not in sys.modules
    assert not any("helpers_of_a" in repr(finder) for finder in sys.meta_path)
'''


def test_the_helpers_of_one_submission_are_gone_for_the_next(tmp_path):
    """Each job's pytest session (and its helpers' finder) is made in that job's zygote: the
    next submission's runs can neither import nor find what the last one's folder held."""
    with WorkerPool(layout=LAYOUT, limits=RunLimits.of(ASSIGNMENT)) as pool:
        helped = _suite(tmp_path / "a", HELPED)
        (helped / "helpers_of_a.py").write_text('VALUE = "a"\n')
        first = _grade(helped, pool, policy=False)
        looking = _grade(_suite(tmp_path / "b", LOOKS_FOR_HELPERS), pool, policy=False)
    [used] = first.tests
    assert used.outcomes["reference"] is Outcome.PASSED, used.reason
    [look] = looking.tests
    assert look.status is TestStatus.VALID, look.reason


def test_a_file_named_as_the_last_students_runs_as_its_own_code(tmp_path):
    """Two submissions in a row with a test file of the same name: the second's runs collect its
    own file (its asserts rewritten afresh in its own zygote), never the first's."""
    with WorkerPool(layout=LAYOUT, limits=RunLimits.of(ASSIGNMENT)) as pool:
        first = _grade(_suite(tmp_path / "a", "def test_only_in_a():\n    assert 1 == 2\n"), pool, policy=False)
        second = _grade(_suite(tmp_path / "b", "def test_only_in_b():\n    assert [1] == [1]\n"), pool, policy=False)
    assert [(t.id, t.outcomes["reference"]) for t in first.tests] == [("test_suite.py::test_only_in_a", Outcome.FAILED)]
    assert [(t.id, t.outcomes["reference"]) for t in second.tests] == [("test_suite.py::test_only_in_b", Outcome.PASSED)]
