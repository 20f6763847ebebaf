"""Grading student suites end to end: validity, kills, the gates of a pass, hostile tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.assignment import Assignment, Limits, load_assignment
from grader.flows.grading import GradingInputError, grade_suite
from grader.core.models import Outcome, TestStatus
from grader.core.paths import default_layout

LAYOUT = default_layout()
EXAMPLE = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
FAST = Assignment(name="test", threshold=0.70, limits=Limits(test_timeout_s=2.0, run_timeout_s=60.0))

HEADER = '''
import math
import numpy as np
import pytest
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, GRUCell, gru_cell

def hand(h=0.5):
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    return gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[h]], dtype=np.float64), *w)
'''

HAND = '''
def test_hand():
    assert np.allclose(hand().data, [[0.25 * np.tanh(0.75) + 0.375]])
'''


def suite(tmp_path: Path, body: str, name: str = "test_suite.py") -> Path:
    folder = tmp_path / "tests"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(HEADER + body)
    return folder


@pytest.fixture(scope="module")
def example_report():
    return grade_suite(EXAMPLE, layout=LAYOUT, assignment=load_assignment(LAYOUT.assignment), audience="staff")


def test_the_bundled_example_kills_every_mutant_and_passes(example_report):
    report = example_report
    assert report.passed, report.reasons
    assert report.score.killed == report.score.total == 12
    assert report.score.kill_rate == 1.0 and report.score.required_missing == []
    assert all(t.valid for t in report.tests)
    assert report.problems == []
    assert report.timing.runs >= 18  # reference twice, wheats, mutants, confirmations


def test_a_suite_missing_s02_and_s04_does_not_pass(tmp_path):
    # b_hn = 0 and H = 1: torch's reset placement and Cho's give the same numbers.
    body = '''
def test_gates_without_recurrent_bias():
    w = [Tensor(np.array(a, dtype=np.float64)) for a in ([[0.5], [-1.0], [0.8]], [[0.3], [0.6], [0.9]], [0.2, 1.0, -0.3], [0.1, -0.4, 0.0])]
    x, h = np.array([[1.0]]), np.array([[0.5]])
    a = x @ w[0].data.T + w[2].data
    u = h @ w[1].data.T + w[3].data
    r = 1 / (1 + np.exp(-(a[:, 0] + u[:, 0])))
    z = 1 / (1 + np.exp(-(a[:, 1] + u[:, 1])))
    n = np.tanh(a[:, 2] + r * u[:, 2])
    assert np.allclose(gru_cell(Tensor(x), Tensor(h), *w).data[:, 0], (1 - z) * n + z * h[:, 0])

def test_gradient_reaches_h():
    h = Tensor([[0.5]], dtype=np.float64, requires_grad=True)
    w = [Tensor(np.array(a, dtype=np.float64)) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, 1.0986, 0], [0, 0, 0.0])]
    gru_cell(Tensor([[1.0]]), h, *w).sum().backward()
    assert h.grad is not None and h.grad[0, 0] > 0.7

def test_orthogonal_blocks():
    w = GRU(4, 5).state_dict()["weight_hh_l0"].astype(float)
    assert all(np.allclose(w[i*5:(i+1)*5] @ w[i*5:(i+1)*5].T, np.eye(5), atol=1e-5) for i in range(3))

def test_padding():
    gru = GRU(2, 3)
    x = np.random.default_rng(0).normal(size=(3, 2, 2))
    out, h_n = gru(Tensor(x), lengths=[3, 1])
    _, alone = gru(Tensor(x[:1, 1:2]))
    assert np.all(out.data[1:, 1] == 0) and np.allclose(h_n.data[0, 1], alone.data[0, 0])

def test_dropout():
    one = GRU(2, 3, dropout=0.5)
    x = Tensor(np.ones((2, 1, 2)))
    assert np.array_equal(one.train()(x)[0].data, one.eval()(x)[0].data)
    two = GRU(2, 3, num_layers=2, dropout=0.5).eval()
    assert np.array_equal(two(x)[0].data, two(x)[0].data)

def test_layers_start_from_their_own_state():
    gru = GRU(2, 3, num_layers=2)
    x = Tensor(np.ones((1, 1, 2)))
    h0 = np.zeros((2, 1, 3))
    h0[1] = 0.9
    _, h_n = gru(x, Tensor(h0))
    _, h_other = gru(x, Tensor(np.zeros((2, 1, 3))))
    assert not np.allclose(h_n.data[1], h_other.data[1])
'''
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=FAST, audience="staff")
    killed = {m.id for m in report.mutants if m.killed}
    assert "s02" not in killed and "s04" not in killed
    assert report.score.kill_rate >= 0.70
    assert report.score.required_missing == ["s02"]
    assert not report.passed
    assert any("required mutant(s) not killed: s02" in str(r) for r in report.reasons)
    s02 = next(m for m in report.mutants if m.id == "s02")
    assert "Cho" in s02.hint


def test_a_suite_below_the_threshold_does_not_pass(tmp_path):
    report = grade_suite(suite(tmp_path, HAND), layout=LAYOUT, assignment=FAST)
    assert report.score.killed < 0.70 * report.score.total
    assert report.score.required_missing == []
    assert not report.passed
    assert any("below the threshold 70%" in r for r in report.reasons)
    survivors = [m for m in report.mutants if not m.killed]
    assert survivors and all(m.hint for m in survivors)
    # s04 and s12 are hidden: a student sees neither their ids nor their titles.
    assert "hidden mutant 1" in report.variants and "s04" not in report.variants
    assert not any("b_hn" in m.title for m in report.mutants if m.hidden)


def test_a_test_failing_on_the_reference_is_wrong_and_never_counts(tmp_path):
    body = HAND + '''
def test_wrong():
    assert np.allclose(hand().data, [[0.6]])  # the swapped interpolation's value
'''
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=FAST)
    wrong = next(t for t in report.tests if t.id.endswith("test_wrong"))
    assert wrong.status is TestStatus.WRONG and not wrong.valid and wrong.kills == []
    assert "fails on the reference" in wrong.reason
    assert not report.passed
    assert any("not valid" in r for r in report.reasons)


def test_a_test_failing_only_on_a_wheat_is_brittle(tmp_path):
    body = HAND + '''
def test_error_wording():
    with pytest.raises(ValueError, match="must be a positive int"):
        GRU(3, 0)
'''
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=FAST)
    brittle = next(t for t in report.tests if t.id.endswith("test_error_wording"))
    assert brittle.status is TestStatus.BRITTLE and brittle.kills == []
    assert "w03" in brittle.reason
    assert not report.passed


def test_a_mutant_stopped_by_a_brittle_test_carries_on_to_its_valid_kills(tmp_path):
    """Wheats and mutants run together, counting what passed the reference: a mutant's run stops
    at a test that then turns out to be brittle, and carries on with the valid ones."""
    brittle_first = '''
def test_a_wording_and_the_hand_example():
    with pytest.raises(ValueError, match="must be a positive int"):
        GRU(3, 0)
    assert np.allclose(hand().data, [[0.25 * np.tanh(0.75) + 0.375]])
''' + HAND
    report = grade_suite(suite(tmp_path, brittle_first), layout=LAYOUT, assignment=FAST, audience="staff")
    (tmp_path / "alone").mkdir()
    alone = grade_suite(suite(tmp_path / "alone", HAND), layout=LAYOUT, assignment=FAST, audience="staff")
    brittle = next(t for t in report.tests if t.id.endswith("test_a_wording_and_the_hand_example"))
    valid = next(t for t in report.tests if t.id.endswith("test_hand"))
    assert brittle.status is TestStatus.BRITTLE and brittle.kills == []
    assert valid.status is TestStatus.VALID
    assert sorted(valid.kills) == sorted(alone.tests[0].kills) and valid.kills
    assert report.score.killed == alone.score.killed


def _string_whose_hash_parity_differs() -> str:
    """A string whose hash is even under PYTHONHASHSEED=1 and odd under 2."""
    words = [f"k{i}" for i in range(200)]
    parities = []
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", f"print(' '.join(str(hash(w) % 2) for w in {words!r}))"],
            env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True, check=True,
        ).stdout.split()
        parities.append(out)
    return next(w for w, a, b in zip(words, *parities) if (a, b) == ("0", "1"))


def test_a_test_depending_on_the_hash_seed_is_flaky(tmp_path):
    word = _string_whose_hash_parity_differs()
    body = HAND + f'''
def test_flaky():
    assert hash({word!r}) % 2 == 0
'''
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=FAST)
    flaky = next(t for t in report.tests if t.id.endswith("test_flaky"))
    assert flaky.status is TestStatus.FLAKY and flaky.kills == []
    assert "depends on chance" in flaky.reason
    # It passed under the first hash seed: still, no mutant is run with it.
    assert flaky.outcomes["reference"] is Outcome.PASSED
    mutants = {v: o for v, o in flaky.outcomes.items() if v != "reference" and not v.startswith("w")}
    assert mutants and set(mutants.values()) == {Outcome.NOT_RUN}
    # Nor does any wheat's cell tell of it, whichever reference run came in first and whichever
    # worker ran the wheat: the same suite reads the same at every grading.
    wheats = {v: o for v, o in flaky.outcomes.items() if v.startswith("w")}
    assert wheats and set(wheats.values()) == {Outcome.NOT_RUN}


def test_a_test_hanging_on_mutants_is_a_kill_by_timeout_and_grading_finishes(tmp_path):
    body = '''
def test_hangs_unless_right():
    if not np.allclose(hand().data, [[0.25 * np.tanh(0.75) + 0.375]]):
        while True:
            pass
'''
    quick = FAST.model_copy(update={"limits": Limits(test_timeout_s=0.5, run_timeout_s=60.0)})
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=quick)
    test = report.tests[0]
    assert test.valid
    assert test.outcomes["s01"] is Outcome.TIMEOUT
    assert "s01" in test.kills and "s05" in test.kills
    assert report.timing.total_s < 60


def test_a_child_that_exits_mid_run_is_an_error_not_a_pass(tmp_path):
    body = HAND + '''
import os

def test_exit_when_wrong():
    if not np.allclose(hand().data, [[0.25 * np.tanh(0.75) + 0.375]]):
        os._exit(0)

def test_after():
    assert True
'''
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=FAST, policy=False, full_matrix=True)
    exiting = next(t for t in report.tests if t.id.endswith("test_exit_when_wrong"))
    after = next(t for t in report.tests if t.id.endswith("test_after"))
    assert exiting.valid and exiting.outcomes["s03"] is Outcome.ERROR
    assert after.outcomes["s03"] is Outcome.ERROR  # it never ran: not a pass
    assert "s03" in exiting.kills
    assert any("exited with status 0 before it finished" in str(p) for p in report.problems)


def test_a_policy_violation_runs_nothing(tmp_path):
    report = grade_suite(suite(tmp_path, HAND + "import os\n"), layout=LAYOUT, assignment=FAST)
    assert not report.policy.ok and not report.passed
    assert report.tests == [] and report.timing.runs == 0
    assert any(":" in v and "os" in v for v in report.policy.violations)


def test_a_missing_directory_cannot_be_graded(tmp_path):
    with pytest.raises(GradingInputError, match="no such directory"):
        grade_suite(tmp_path / "nope", layout=LAYOUT, assignment=FAST)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GradingInputError, match="found no Python file"):
        grade_suite(tmp_path / "empty", layout=LAYOUT, assignment=FAST)


def test_a_module_that_fails_to_import_is_reported(tmp_path):
    body = HAND + "\nfrom tinyllm.rnn.gru import no_such_name\n"
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=FAST)
    assert not report.passed
    assert any("no_such_name" in str(p) for p in report.problems)
    assert any("no test was collected" in r for r in report.reasons)


def test_the_example_can_be_copied_anywhere(tmp_path):
    """Grading does not depend on where the suite lives or on files beside it."""
    shutil.copytree(EXAMPLE, tmp_path / "copy")
    report = grade_suite(tmp_path / "copy", layout=LAYOUT, assignment=FAST)
    assert report.passed


def test_the_student_view_of_a_staff_report_equals_a_student_report(tmp_path):
    from grader.core.scoring import student_view
    from grader.core.variants import build_variants

    tests = suite(tmp_path, HAND)
    staff = grade_suite(tests, layout=LAYOUT, assignment=FAST, audience="staff")
    student = grade_suite(tests, layout=LAYOUT, assignment=FAST, audience="student")
    derived = student_view(staff, build_variants(LAYOUT))
    keep = {"passed", "reasons", "score", "mutants", "variants", "audience"}
    assert derived.model_dump(include=keep) == student.model_dump(include=keep)
    assert [t.kills for t in derived.tests] == [t.kills for t in student.tests]


def test_ordinary_code_passes_the_policy_and_its_tests_are_valid(tmp_path):
    """A local variable named input, a helper class with its own ``self._w``, and the contract's
    generator type: the policy lets them through, and the tests count."""
    body = HAND + '''
from tinyllm.random import PCG32


class Inputs:
    def __init__(self, seed):
        self._w = PCG32(seed).substream("inputs")

    def batch(self):
        return Tensor(np.ones((2, 3)), dtype=np.float64)


def test_a_layer_made_with_its_own_generator_gives_the_hidden_size():
    input = Inputs(7).batch()
    cell = GRUCell(3, 4, rng=PCG32(0))
    assert cell(input, Tensor(np.zeros((2, 4)), dtype=np.float64)).data.shape == (2, 4)
'''
    report = grade_suite(suite(tmp_path, body), layout=LAYOUT, assignment=FAST, audience="staff")
    assert report.policy.ok, report.policy.violations
    assert [t.valid for t in report.tests] == [True, True], [(t.id, t.reason) for t in report.tests]


def test_the_bundled_examples_tests_are_compared_and_none_is_a_copy(example_report):
    assert [t.status for t in example_report.tests] == [TestStatus.VALID] * len(example_report.tests)
    assert all(t.similarity is not None and t.similarity < 0.7 for t in example_report.tests)
    assert all(t.similar_to.startswith("assignments/l3-3-gru/tests/test_gru_") for t in example_report.tests)


def test_the_course_tests_handed_in_as_ones_own_do_not_pass(tmp_path):
    course = LAYOUT.course_tests / "test_gru_properties.py"
    (tmp_path / "tests").mkdir()
    shutil.copy(course, tmp_path / "tests" / "test_gru_properties.py")
    report = grade_suite(tmp_path / "tests", layout=LAYOUT, assignment=load_assignment(LAYOUT.assignment),
                         audience="staff")
    assert not report.passed
    by_name = {t.id.rsplit("::", 1)[-1]: t for t in report.tests}
    assert len(by_name) == 7
    hand = by_name.pop("test_hand_example_gru_cell")  # given: the course hands it out
    assert hand.valid and hand.kills
    for name, test in by_name.items():
        assert test.status is TestStatus.COPIED and not test.valid and test.kills == []
        assert test.reason == (f"copied from the course tests: assignments/l3-3-gru/tests/test_gru_properties.py::{name} "
                               "(similarity 1.00)")
        assert test.similarity == 1.0
        # Run on the reference only: a copy stops no mutant's run before the suite's own tests.
        assert test.outcomes["reference"] is Outcome.PASSED and test.outcomes["s01"] is Outcome.NOT_RUN
    assert any("6 test(s) are not valid" in str(r) and "copied" in str(r) for r in report.reasons)
    assert all(m.killed_by in ([], [hand.id]) for m in report.mutants)


def test_the_course_tests_renamed_and_reformatted_do_not_pass_either(tmp_path):
    from tests.grader.test_copies import disguise

    (tmp_path / "tests").mkdir()
    source = (LAYOUT.course_tests / "test_gru_properties.py").read_text()
    (tmp_path / "tests" / "test_mine.py").write_text(disguise(source))
    done = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(tmp_path / "tests")],
                          capture_output=True, text=True, timeout=600, cwd=LAYOUT.root,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "VERDICT: NOT PASSED" in done.stdout
    for name in ("test_gradcheck_gru_cell", "test_lengths_keep_padding_out", "test_default_state_and_bad_arguments"):
        assert f"copied from the course tests: assignments/l3-3-gru/tests/test_gru_properties.py::{name} (similarity 1.00)" \
            in done.stdout
    assert "test_mine.py::test_mine_" in done.stdout and "COPIED" in done.stdout


@pytest.mark.parametrize("disguised", [False, True])
def test_the_lstm_course_tests_handed_in_as_ones_own_do_not_pass(tmp_path, disguised):
    """The same for the LSTM's course tests, as they are and renamed, reformatted and reordered."""
    from grader.core.paths import layout_for
    from tests.disguise import disguise

    layout = layout_for(LAYOUT.root, "l3-2-lstm")
    source = (layout.course_tests / "test_lstm_properties.py").read_text()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mine.py").write_text(disguise(source) if disguised else source)
    report = grade_suite(tmp_path / "tests", layout=layout, assignment=load_assignment(layout.assignment),
                         audience="staff")
    assert not report.passed
    copied = [t for t in report.tests if t.status is TestStatus.COPIED]
    others = [t for t in report.tests if t.status is not TestStatus.COPIED]
    assert len(copied) == 6 and len(others) == 1, [(t.id, t.status) for t in report.tests]
    assert all(t.reason.startswith("copied from the course tests: assignments/l3-2-lstm/tests/test_lstm_properties.py::")
               and not t.valid and t.kills == [] for t in copied)
    assert all(m.killed_by in ([], [others[0].id]) for m in report.mutants)  # the given hand example alone
