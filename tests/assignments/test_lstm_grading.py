"""The LSTM (assignments/l3-2-lstm) graded as students would write its tests: a good suite, one
that misses the required fault, a brittle test, a wrong test and hostile ones. The grader is the
GRU's, unchanged: the assignment is a folder, and every guarantee holds for it too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.core.assignment import load_assignment
from grader.core.models import Audience, TestStatus
from grader.core.paths import default_layout, layout_for
from grader.flows.golden import load_implementation
from grader.flows.grading import grade_suite

ROOT = default_layout().root
LSTM = layout_for(ROOT, "l3-2-lstm")
ASSIGNMENT = load_assignment(LSTM.assignment)

HEADER = '''import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.random import PCG32
from tinyllm.rnn.lstm import LSTM, LSTMCell, lstm_cell


def sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def my_step(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """My LSTM step in numpy, torch's order i, f, g, o."""
    pre = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    size = h.shape[1]
    i, f = sig(pre[:, :size]), sig(pre[:, size:2 * size])
    g, o = np.tanh(pre[:, 2 * size:3 * size]), sig(pre[:, 3 * size:])
    c_new = f * c + i * g
    return o * np.tanh(c_new), c_new


def weights(rng, d_in, size):
    return [rng.uniform(-0.7, 0.7, size=s) for s in ((4 * size, d_in), (4 * size, size), (4 * size,), (4 * size,))]
'''

FORMULA = '''
def test_one_step_agrees_with_my_numpy_lstm():
    rng = np.random.default_rng(11)
    x, h, c = rng.normal(size=(3, 2)), rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    w = weights(rng, 2, 4)
    h_new, c_new = lstm_cell(x, h, c, *w)
    want_h, want_c = my_step(x, h, c, *w)
    np.testing.assert_allclose(c_new.data, want_c, atol=1e-10)
    np.testing.assert_allclose(h_new.data, want_h, atol=1e-10)
'''

GRADIENT = '''
def test_the_gradient_reaches_the_old_cell():
    rng = np.random.default_rng(12)
    x, h, c0 = rng.normal(size=(2, 3)), rng.normal(size=(2, 2)), rng.normal(size=(2, 2))
    w = weights(rng, 3, 2)
    c = Tensor(c0, requires_grad=True)
    h_new, c_new = lstm_cell(x, h, c, *w)
    (h_new.sum() + c_new.sum()).backward()
    step = 1e-6
    for k in range(c0.size):
        up, down = c0.copy(), c0.copy()
        up.flat[k] += step
        down.flat[k] -= step
        plus, minus = (sum(a.sum() for a in my_step(x, h, v, *w)) for v in (up, down))
        assert c.grad.flat[k] == pytest.approx((plus - minus) / (2 * step), abs=1e-6)
'''

INIT = '''
def test_only_the_forget_block_of_bias_ih_starts_at_one():
    cell = LSTMCell(3, 5, rng=PCG32(1))
    b_ih, b_hh = cell.bias_ih.data, cell.bias_hh.data
    np.testing.assert_array_equal(b_ih[5:10], np.ones(5))
    np.testing.assert_array_equal(np.concatenate([b_ih[:5], b_ih[10:]]), np.zeros(15))
    np.testing.assert_array_equal(b_hh, np.zeros(20))
'''

PADDING = '''
def test_a_padded_step_changes_neither_h_nor_c():
    rng = np.random.default_rng(13)
    layer = LSTM(2, 3, rng=PCG32(2))
    x = rng.normal(size=(4, 2, 2))
    h0, c0 = rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 2, 3))
    out, (h_n, c_n) = layer(x, (h0, c0), lengths=[4, 1])
    short, (h_1, c_1) = layer(x[:1, 1:], (h0[:, 1:], c0[:, 1:]))
    np.testing.assert_allclose(h_n.data[:, 1], h_1.data[:, 0], atol=1e-12)
    np.testing.assert_allclose(c_n.data[:, 1], c_1.data[:, 0], atol=1e-12)
    assert np.all(out.data[1:, 1] == 0.0)
'''

LAYERS = '''
def test_each_layer_starts_from_its_own_state():
    rng = np.random.default_rng(14)
    layer = LSTM(2, 3, num_layers=2, rng=PCG32(3))
    params = layer.state_dict()
    x = rng.normal(size=(3, 1, 2))
    h0, c0 = rng.normal(size=(2, 1, 3)), rng.normal(size=(2, 1, 3))
    out, (h_n, c_n) = layer(x, (h0, c0))
    seq = x
    for k in range(2):
        h, c = h0[k], c0[k]
        w = [np.asarray(params[f"{n}_l{k}"]) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        steps = []
        for t in range(3):
            h, c = my_step(seq[t], h, c, *w)
            steps.append(h)
        seq = np.stack(steps)
        np.testing.assert_allclose(h_n.data[k], h, atol=1e-10)
        np.testing.assert_allclose(c_n.data[k], c, atol=1e-10)
    np.testing.assert_allclose(out.data, seq, atol=1e-10)
'''

DROPOUT = '''
def test_dropout_touches_neither_a_single_layer_nor_evaluation():
    rng = np.random.default_rng(15)
    x = rng.normal(size=(3, 2, 2))
    single = LSTM(2, 3, dropout=0.9, rng=PCG32(4))
    a, _ = single.train()(x)
    b, _ = single.eval()(x)
    np.testing.assert_array_equal(a.data, b.data)
    noisy, plain = LSTM(2, 3, num_layers=2, dropout=0.9, rng=PCG32(5)), LSTM(2, 3, num_layers=2, rng=PCG32(5))
    plain.load_state_dict(noisy.state_dict())
    np.testing.assert_allclose(noisy.eval()(x)[0].data, plain.eval()(x)[0].data, atol=1e-12)
'''

GOOD = HEADER + FORMULA + GRADIENT + INIT + PADDING + LAYERS + DROPOUT
WITHOUT_THE_GATES = HEADER + INIT + PADDING + DROPOUT  # nothing pins the gate order or o * tanh(c)
WRONG = HEADER + FORMULA + '''
def test_the_output_is_not_squashed():
    h_new, c_new = lstm_cell(np.ones((1, 1)), np.zeros((1, 1)), np.ones((1, 1)),
                             np.ones((4, 1)), np.zeros((4, 1)), np.zeros(4), np.zeros(4))
    o = 1.0 / (1.0 + math.exp(-1.0))
    assert h_new.data[0, 0] == pytest.approx(o * c_new.data[0, 0])  # the chapter says o * tanh(c)
'''


def _suite(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "test_lstm.py").write_text(source, encoding="utf-8")
    return folder


def _grade(folder: Path, **options):
    return grade_suite(folder, layout=LSTM, assignment=ASSIGNMENT, **options)


def _statuses(report) -> dict[str, TestStatus]:
    return {t.id.split("::")[-1]: t.status for t in report.tests}


def test_a_good_lstm_suite_passes_killing_the_required_mutants(tmp_path):
    report = _grade(_suite(tmp_path / "good", GOOD))
    assert report.passed, report.reasons
    assert set(_statuses(report).values()) == {TestStatus.VALID}, _statuses(report)
    killed = {m.id for m in report.mutants if m.killed}
    assert {"s01", "s05"} <= killed and report.score.killed == report.score.total == 15, killed


def test_a_suite_that_misses_the_required_fault_fails_naming_it(tmp_path):
    report = _grade(_suite(tmp_path / "weak", WITHOUT_THE_GATES))
    assert not report.passed
    survived = {m.id for m in report.mutants if not m.killed}
    assert {"s01", "s05"} <= survived
    assert any("required" in reason for reason in report.reasons), report.reasons


def test_a_brittle_test_that_holds_the_references_last_bits_counts_for_nothing(tmp_path):
    """Exact floats of the reference: true there, false on a wheat computing tanh(c) as
    2σ(2c) - 1 (w04), so the test is brittle, and its kills count for nothing."""
    reference = load_implementation(LSTM.module_source.read_text(), LSTM.reference, "lstm_grading_reference")
    rng = np.random.default_rng(21)
    arrays = [rng.normal(size=(2, 3)), rng.normal(size=(2, 4)), rng.normal(size=(2, 4)),
              *[rng.uniform(-0.7, 0.7, size=s) for s in ((16, 3), (16, 4), (16,), (16,))]]
    h, _ = reference.lstm_cell(*arrays)
    source = HEADER + FORMULA + f'''
def test_exactly_these_numbers():
    arrays = [np.array(a) for a in {[a.tolist() for a in arrays]!r}]
    h, _ = lstm_cell(*arrays)
    assert h.data.tolist() == {h.data.tolist()!r}
'''
    report = _grade(_suite(tmp_path / "brittle", source), audience=Audience.STAFF)
    brittle = next(t for t in report.tests if t.id.endswith("test_exactly_these_numbers"))
    assert brittle.status is TestStatus.BRITTLE and not brittle.valid and brittle.kills == [], brittle
    assert "w04" in brittle.reason or "wheat" in brittle.reason, brittle.reason
    assert _statuses(report)["test_one_step_agrees_with_my_numpy_lstm"] is TestStatus.VALID


def test_a_test_that_fails_on_the_reference_is_wrong(tmp_path):
    report = _grade(_suite(tmp_path / "wrong", WRONG))
    assert _statuses(report)["test_the_output_is_not_squashed"] is TestStatus.WRONG
    assert _statuses(report)["test_one_step_agrees_with_my_numpy_lstm"] is TestStatus.VALID
    assert not report.passed  # allow_invalid_tests = false in the LSTM's assignment.toml


@pytest.mark.parametrize("source, said", [
    # The GRU's module is not the LSTM's contract: the policy says so at the line.
    (HEADER + "\nimport tinyllm.rnn.gru\n\n\ndef test_x():\n    assert tinyllm.rnn.gru\n", "tinyllm.rnn.gru"),
    (HEADER + "\n\ndef test_peek():\n    assert open('/etc/passwd').read()\n", "open"),
])
def test_a_suite_reaching_outside_the_lstms_contract_is_refused_by_the_policy(tmp_path, source, said):
    report = _grade(_suite(tmp_path / "outside", source))
    assert report.input_refused and not report.policy.ok and not report.passed
    assert any(said in v for v in report.policy.violations), report.policy.violations


def test_with_the_policy_off_no_run_reads_any_reference_module(tmp_path):
    """Every reference module of the course (the LSTM's and the GRU's) is out of a run's reach
    (unreadable, or empty): a test that fails with their text tells the student nothing."""
    probe = HEADER + FORMULA + '''

def test_read_the_answers():
    import tinyllm
    from pathlib import Path

    rnn = Path(tinyllm.__file__).parent / "rnn"
    texts = {}
    for name in ("lstm.py", "gru.py"):
        try:
            texts[name] = (rnn / name).read_text()
        except OSError:
            texts[name] = ""
    assert (rnn / "lstm.pyi").read_text()  # the contract is in reach: the probe looked in the right place
    assert texts == {"lstm.py": "", "gru.py": ""}, texts
'''
    report = _grade(_suite(tmp_path / "probe", probe), policy=False)
    assert _statuses(report)["test_read_the_answers"] is TestStatus.VALID, report.tests


def test_the_command_line_grades_the_lstm_by_name(tmp_path):
    folder = _suite(tmp_path / "cli", GOOD)
    done = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(folder), "--assignment", "l3-2-lstm"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "PASSED" in done.stdout and "15/15" in done.stdout.replace(" ", ""), done.stdout[-2000:]
    unknown = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(folder), "--assignment", "l9-9-none"],
                             capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2
    assert "--assignment l9-9-none" in unknown.stderr and "l3-2-lstm" in unknown.stderr and "l3-3-gru" in unknown.stderr
