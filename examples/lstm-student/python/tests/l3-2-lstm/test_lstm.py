"""My tests for L3.2, written one at a time, red then green."""

import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.random import PCG32
from tinyllm.rnn.lstm import LSTM, LSTMCell, lstm_cell

NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


def logistic(v):
    return 1.0 / (1.0 + np.exp(-v))


def my_step(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """My LSTM step in numpy: one [B, 4H] product, cut into i, f, g, o."""
    i, f, g, o = np.split(x @ w_ih.T + h @ w_hh.T + b_ih + b_hh, 4, axis=1)
    c_new = logistic(f) * c + logistic(i) * np.tanh(g)
    return logistic(o) * np.tanh(c_new), c_new


def my_weights(module, seed):
    """Float64 weights under the module's own names, biases far from 0."""
    draw = np.random.default_rng(seed)
    return {key: draw.uniform(-0.8, 0.8, size=a.shape) for key, a in module.state_dict().items()}


def one_unit():
    """i = σ(ln 4) = 0.8, f = σ(ln 9) = 0.9, o = σ(-ln 3) = 0.25; g = tanh(2x + 0.5h)."""
    return [
        np.array([[0.0], [0.0], [2.0], [0.0]]),
        np.array([[0.0], [0.0], [0.5], [0.0]]),
        np.array([math.log(4.0), math.log(9.0), 0.0, -math.log(3.0)]),
        np.zeros(4),
    ]


def test_one_unit_worked_by_hand():
    """x = 0.5, h = -1, c = 2: g = tanh(1 - 0.5) = 0.462117, c' = 0.9 * 2 + 0.8 g = 2.169694,
    h' = 0.25 tanh(c') = 0.243562 (o * c' would be 0.542423)."""
    h_new, c_new = lstm_cell([[0.5]], [[-1.0]], [[2.0]], *one_unit())
    g = math.tanh(0.5)
    assert c_new.data[0, 0] == pytest.approx(1.8 + 0.8 * g, abs=1e-12)
    assert h_new.data[0, 0] == pytest.approx(0.25 * math.tanh(1.8 + 0.8 * g), abs=1e-12)
    assert c_new.data[0, 0] == pytest.approx(2.169694, abs=1e-6)
    assert h_new.data[0, 0] == pytest.approx(0.243562, abs=1e-6)


def test_cell_agrees_with_my_numpy_step_when_h_and_c_differ():
    draw = np.random.default_rng(21)
    x, h, c = draw.normal(size=(3, 2)), draw.normal(size=(3, 5)), 2.0 * draw.normal(size=(3, 5))
    weights = [draw.normal(size=shape) for shape in ((20, 2), (20, 5), 20, 20)]
    h_new, c_new = lstm_cell(Tensor(x), Tensor(h), Tensor(c), *(Tensor(w) for w in weights))
    want_h, want_c = my_step(x, h, c, *weights)
    assert np.allclose(h_new.data, want_h, atol=1e-12)
    assert np.allclose(c_new.data, want_c, atol=1e-12)


def test_one_unit_gradients_worked_by_hand():
    """For L = h' + c': dL/dc = f (1 + o (1 - tanh² c')) = 0.911440 and
    dL/dh = i (1 - g²) 0.5 (1 + o (1 - tanh² c')) = 0.318578."""
    h = Tensor([[-1.0]], requires_grad=True)
    c = Tensor([[2.0]], requires_grad=True)
    h_new, c_new = lstm_cell(Tensor([[0.5]]), h, c, *one_unit())
    (h_new + c_new).sum().backward()
    through_h = 1.0 + 0.25 * (1.0 - math.tanh(2.1696937258) ** 2)
    assert c.grad is not None and h.grad is not None
    assert c.grad[0, 0] == pytest.approx(0.9 * through_h, abs=1e-9)
    into_g = 0.8 * (1.0 - math.tanh(0.5) ** 2)
    assert h.grad[0, 0] == pytest.approx(into_g * 0.5 * through_h, abs=1e-9)
    assert c.grad[0, 0] == pytest.approx(0.911440, abs=1e-6)
    assert h.grad[0, 0] == pytest.approx(0.318578, abs=1e-6)


def test_parameter_names_shapes_and_a_loaded_cell():
    stacked = LSTM(3, 5, num_layers=2)
    shapes = {key: value.shape for key, value in stacked.state_dict().items()}
    assert list(shapes) == [f"{name}_l{k}" for k in (0, 1) for name in NAMES]
    assert shapes["weight_ih_l0"] == (20, 3) and shapes["weight_ih_l1"] == (20, 5)
    assert shapes["weight_hh_l1"] == (20, 5) and shapes["bias_hh_l0"] == (20,)

    cell = LSTMCell(3, 5)
    assert list(cell.state_dict()) == list(NAMES)
    loaded = my_weights(cell, 22)
    cell.load_state_dict(loaded)
    draw = np.random.default_rng(23)
    x, h, c = draw.normal(size=(2, 3)), draw.normal(size=(2, 5)), draw.normal(size=(2, 5))
    h_new, c_new = cell(Tensor(x), (Tensor(h), Tensor(c)))
    want_h, want_c = my_step(x, h, c, *(loaded[name] for name in NAMES))
    assert np.allclose(h_new.data, want_h, atol=1e-12)
    assert np.allclose(c_new.data, want_c, atol=1e-12)


def test_new_weights_have_a_forget_bias_of_one_and_orthogonal_blocks():
    hidden = 3
    stacked, cell = LSTM(4, hidden, num_layers=2, rng=PCG32(7)), LSTMCell(4, hidden)
    for module, suffixes in ((stacked, ("_l0", "_l1")), (cell, ("",))):
        state = module.state_dict()
        for suffix in suffixes:
            width = hidden if suffix == "_l1" else 4
            assert state["bias_ih" + suffix].tolist() == [0.0] * 3 + [1.0] * 3 + [0.0] * 6
            assert not state["bias_hh" + suffix].any()
            recurrent = state["weight_hh" + suffix].astype(np.float64)
            for block in np.split(recurrent, 4):
                assert np.allclose(block.T @ block, np.eye(hidden), atol=1e-5)
            bound = math.sqrt(6.0 / (width + hidden))
            assert np.abs(state["weight_ih" + suffix]).max() <= bound + 1e-6


def test_two_layers_from_their_own_states_follow_my_numpy_steps():
    lstm = LSTM(2, 3, num_layers=2)
    loaded = my_weights(lstm, 24)
    lstm.load_state_dict(loaded)
    draw = np.random.default_rng(25)
    x = draw.normal(size=(4, 2, 2))
    h0, c0 = draw.normal(size=(2, 2, 3)), 1.5 * draw.normal(size=(2, 2, 3))
    out, (h_n, c_n) = lstm(Tensor(x), (Tensor(h0), Tensor(c0)))

    seen = x
    for k in range(2):
        h, c = h0[k], c0[k]
        steps = []
        for t in range(4):
            h, c = my_step(seen[t], h, c, *(loaded[f"{name}_l{k}"] for name in NAMES))
            steps.append(h)
        seen = np.stack(steps)
        assert np.allclose(h_n.data[k], h, atol=1e-12)
        assert np.allclose(c_n.data[k], c, atol=1e-12)
    assert np.allclose(out.data, seen, atol=1e-12)


def test_short_sequences_stop_at_their_length():
    lstm = LSTM(2, 3)
    loaded = my_weights(lstm, 26)
    lstm.load_state_dict(loaded)
    draw = np.random.default_rng(27)
    x = Tensor(draw.normal(size=(5, 3, 2)), requires_grad=True)
    h0, c0 = draw.normal(size=(1, 3, 3)), draw.normal(size=(1, 3, 3))
    out, (h_n, c_n) = lstm(x, (Tensor(h0), Tensor(c0)), lengths=[2, 5, 3])

    for b, steps in enumerate([2, 5, 3]):
        h, c = h0[0, b : b + 1], c0[0, b : b + 1]
        for t in range(steps):
            h, c = my_step(x.data[t, b : b + 1], h, c, *(loaded[f"{name}_l0"] for name in NAMES))
            assert np.allclose(out.data[t, b], h[0], atol=1e-12)
        assert np.all(out.data[steps:, b] == 0.0)
        assert np.allclose(h_n.data[0, b], h[0], atol=1e-12)
        assert np.allclose(c_n.data[0, b], c[0], atol=1e-12)

    (out.sum() + c_n.sum()).backward()
    assert np.all(x.grad[2:, 0] == 0.0) and np.all(x.grad[3:, 2] == 0.0)
    assert np.abs(x.grad[:2, 0]).min() > 0.0


def test_dropout_is_ignored_by_a_one_layer_lstm():
    lstm = LSTM(2, 4, dropout=0.6)
    x = Tensor(np.random.default_rng(28).normal(size=(3, 2, 2)))
    train_out, (train_h, train_c) = lstm.train()(x)
    eval_out, (eval_h, eval_c) = lstm.eval()(x)
    assert np.allclose(train_out.data, eval_out.data, atol=1e-14)
    assert np.allclose(train_c.data, eval_c.data, atol=1e-14)


def test_evaluation_mode_switches_dropout_off():
    noisy, plain = LSTM(2, 4, num_layers=3, dropout=0.6), LSTM(2, 4, num_layers=3)
    loaded = my_weights(noisy, 29)
    noisy.load_state_dict(loaded)
    plain.load_state_dict(loaded)
    x = Tensor(np.random.default_rng(30).normal(size=(3, 2, 2)))
    expected = plain(x)[0].data
    assert np.allclose(noisy.eval()(x)[0].data, expected, atol=1e-12)
    assert not np.allclose(noisy.train()(x)[0].data, expected, atol=1e-6)


def test_missing_state_is_zero_and_bad_arguments_raise():
    lstm = LSTM(2, 3, num_layers=2)
    x = Tensor(np.random.default_rng(31).normal(size=(3, 2, 2)))
    zero = (Tensor(np.zeros((2, 2, 3))), Tensor(np.zeros((2, 2, 3))))
    assert np.allclose(lstm(x)[1][1].data, lstm(x, zero)[1][1].data, atol=1e-14)
    for args, options in (((2, 3), {"dropout": 1.0}), ((2, 0), {}), ((2, 3), {"num_layers": 0})):
        with pytest.raises(ValueError):
            LSTM(*args, **options)
    with pytest.raises(ValueError):
        lstm(x, lengths=[4, 1])
    with pytest.raises(ValueError):
        lstm(x, zero[0])
    with pytest.raises(ValueError):
        lstm(Tensor(np.zeros((3, 2, 4))))
    row, state = np.zeros((1, 2)), np.zeros((1, 3))
    with pytest.raises(ValueError, match="w_hh"):
        lstm_cell(row, state, state, np.zeros((12, 2)), np.zeros((9, 3)), *np.zeros((2, 12)))
