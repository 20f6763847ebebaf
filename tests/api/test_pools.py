"""A grading thread's warm workers, a pool per module (api/work/jobs.py ``Pools``): a module's
pool serves only its own module's gradings, and its workers go once the thread has graded only
other modules for a while, so a course of many modules keeps warm only the workers it uses."""

from __future__ import annotations

from api.config import get_settings, layout_of
from api.work.jobs import Pools
from grader.core.assignment import load_assignment
from grader.flows.grading import grade_suite
from tests.api.conftest import LAYOUT

GRU_TESTS = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
LSTM_TESTS = LAYOUT.examples / "lstm-student" / "python" / "tests" / "l3-2-lstm"


def _graded(layout, tests, pools: Pools):
    pool = pools.of(layout)
    report = grade_suite(tests, layout=layout, assignment=load_assignment(layout.assignment), pool=pool)
    return pool, report


def test_each_module_has_its_pool_and_an_unused_one_lets_its_workers_go() -> None:
    settings = get_settings()
    gru, lstm = layout_of(settings), layout_of(settings, "l3-2-lstm")
    pools = Pools(settings, idle_s=0.0)
    try:
        gru_pool, gru_report = _graded(gru, GRU_TESTS, pools)
        assert gru_report.passed and gru_report.score.total == 12
        assert gru_pool._pair is not None  # warm
        assert pools.of(gru) is gru_pool  # the same module: the same pool, still warm
        assert gru_pool._pair is not None
        lstm_pool, lstm_report = _graded(lstm, LSTM_TESTS, pools)
        assert lstm_pool is not gru_pool and lstm_pool.layout.assignment_name == "l3-2-lstm"
        assert lstm_report.passed and lstm_report.score.total == 15
        assert gru_pool._pair is None  # unused past idle_s while the thread took another module's job
        assert lstm_pool._pair is not None
    finally:
        pools.close()
    assert lstm_pool._pair is None
