"""A suite whose structure depends on the variant cannot loop the scheduler: a module that
imports on the reference but raises at import on a mutant, or a test that is there on the
reference and gone on a mutant, is judged once per run, as pytest sees it (the module's tests
error), and a grading's runs are capped whatever the suite."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from grader.core.assignment import Assignment, Limits
from grader.core.caps import MAX_LISTED
from grader.core.models import Outcome
from grader.core.paths import default_layout
from grader.flows.grading import grade_suite
from grader.run.scheduler import max_runs
from grader.core.variants import build_variants

LAYOUT = default_layout()
FAST = Assignment(name="test", threshold=0.70, limits=Limits(test_timeout_s=5.0, run_timeout_s=120.0))

# Raises at import unless gru_cell computes the hand example as the contract says.
PROBE = textwrap.dedent('''
    import math

    import numpy as np

    from tinyllm.autograd.tensor import Tensor
    from tinyllm.rnn.gru import GRU, GRUCell, gru_cell

    _W = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    _H = gru_cell(Tensor([[1.0]], dtype=np.float64), np.array([[0.5]]), *_W)
    CONTRACT = bool(np.allclose(_H.data, [[0.25 * np.tanh(0.75) + 0.375]]))
''')

RAISES = PROBE + textwrap.dedent('''
    if not CONTRACT:
        raise RuntimeError("not the contract's gru_cell")


    def test_layer_keys():
        assert "bias_hh_l0" in GRU(2, 3).state_dict()


    def test_cell_keys():
        assert "bias_hh" in GRUCell(2, 3).state_dict()
''')

VANISHES = PROBE + textwrap.dedent('''
    if CONTRACT:
        def test_only_on_the_contract():
            assert "bias_hh_l0" in GRU(2, 3).state_dict()
''')

UNRELATED = textwrap.dedent('''
    from tinyllm.rnn.gru import GRU


    def test_layers_differ():
        gru = GRU(2, 3, num_layers=2)
        assert gru.state_dict()["weight_ih_l1"].shape == (9, 3)
''')


def _kills(report) -> dict[str, bool]:
    return {m.id: m.killed for m in report.mutants}


def test_a_module_that_raises_on_a_mutant_errors_its_tests_once_per_run(tmp_path: Path) -> None:
    (tmp_path / "test_raises.py").write_text(RAISES)
    (tmp_path / "test_unrelated.py").write_text(UNRELATED)
    started = time.monotonic()
    report = grade_suite(tmp_path, layout=LAYOUT, assignment=FAST, sandbox="none")
    took = time.monotonic() - started
    variants = build_variants(LAYOUT)
    mutants = [v for v in variants if v.kind.value == "mutant"]
    # Every mutant whose hand example differs is killed by the module's tests, as pytest sees
    # them (errors), and the other module's test still ran on each of them.
    killed = [m for m in report.mutants if m.killed]
    assert killed, report.mutants
    for verdict in report.tests:
        if verdict.id.startswith("test_raises.py::"):
            assert verdict.valid, verdict
    # Judged once: a first run and a confirming run per killed mutant, no continuations.
    assert report.timing.runs <= 2 + 4 + 2 * len(mutants) + len(mutants), report.timing
    assert took < 25, took
    [layer] = [t for t in report.tests if t.id == "test_raises.py::test_layer_keys"]
    assert Outcome.ERROR in layer.outcomes.values(), layer.outcomes
    [other] = [t for t in report.tests if t.id == "test_unrelated.py::test_layers_differ"]
    assert other.valid and other.outcomes["w01"] is Outcome.PASSED, other.outcomes


def test_a_test_that_vanishes_on_a_mutant_is_missing_there(tmp_path: Path) -> None:
    (tmp_path / "test_vanishes.py").write_text(VANISHES)
    report = grade_suite(tmp_path, layout=LAYOUT, assignment=FAST, sandbox="none")
    [verdict] = [t for t in report.tests if t.id.endswith("test_only_on_the_contract")]
    assert verdict.valid
    assert Outcome.MISSING in verdict.outcomes.values(), verdict.outcomes
    assert any(m.killed for m in report.mutants)
    assert report.timing.runs <= max_runs(len(build_variants(LAYOUT)))


def test_many_raising_modules_end_quickly_with_a_bounded_report(tmp_path: Path) -> None:
    for n in range(150):
        (tmp_path / f"test_raises_{n:03d}.py").write_text(RAISES)
    started = time.monotonic()
    report = grade_suite(tmp_path, layout=LAYOUT, assignment=FAST, sandbox="none")
    took = time.monotonic() - started
    assert took < 25, took
    assert report.refused == ""
    assert len(report.problems) <= MAX_LISTED
    assert report.score.killed >= 1


def test_the_runs_of_a_grading_are_capped() -> None:
    variants = build_variants(LAYOUT)
    cap = max_runs(len(variants))
    # Room for the honest case (two reference runs, every variant once, every kill confirmed,
    # rechecks among them) and not much more.
    assert 2 + 2 * len(variants) <= cap <= 8 * len(variants)


def test_a_grading_past_its_run_cap_stops_and_says_so(monkeypatch, tmp_path: Path) -> None:
    # An honest suite never meets the cap; lowered to one run a variant, the bundled suite does.
    from grader.run import scheduler

    monkeypatch.setattr(scheduler, "MAX_RUNS_PER_VARIANT", 1)
    suite = LAYOUT.root / "examples" / "student" / "python" / "tests" / "l3-3-gru"
    report = grade_suite(suite, layout=LAYOUT, assignment=FAST, sandbox="none")
    cap = 2 + len(build_variants(LAYOUT))
    assert report.timing.runs <= cap
    assert not report.passed
    assert any(f"grading's cap of {cap} suite runs reached" in str(r) for r in report.reasons), report.reasons
