"""My tests for L3.3, written one at a time, red then green."""

import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, GRUCell, gru_cell


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def numpy_cell(x, h, w_ih, w_hh, b_ih, b_hh):
    """The GRU step written out in numpy, torch's form: r resets W_hn h + b_hn."""
    hidden = h.shape[1]
    a = x @ w_ih.T + b_ih
    u = h @ w_hh.T + b_hh
    r = sigmoid(a[:, :hidden] + u[:, :hidden])
    z = sigmoid(a[:, hidden : 2 * hidden] + u[:, hidden : 2 * hidden])
    n = np.tanh(a[:, 2 * hidden :] + r * u[:, 2 * hidden :])
    return (1 - z) * n + z * h


def random_weights(gru, seed):
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-0.7, 0.7, size=value.shape) for name, value in gru.state_dict().items()}


def test_hand_example_gru_cell():
    """r = 0.5, z = 0.75, n = tanh(0.5 * 1.5): h' = 0.25 n + 0.75 * 0.5."""
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    h2 = gru_cell(Tensor([[1.0]], dtype=np.float64), np.array([[0.5]]), *w)
    assert np.allclose(h2.data, [[0.25 * np.tanh(0.75) + 0.375]])


def test_hand_example_gradient_with_respect_to_h():
    """dh'/dh = z + (1 - z)(1 - n^2) r W_hn = 0.824573."""
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    h = Tensor([[0.5]], dtype=np.float64, requires_grad=True)
    gru_cell(Tensor([[1.0]], dtype=np.float64), h, *w).sum().backward()
    n = np.tanh(0.75)
    assert np.allclose(h.grad, [[0.75 + 0.25 * (1 - n * n) * 0.5]])


def test_cell_matches_my_numpy_formula_with_nonzero_b_hn():
    rng = np.random.default_rng(1)
    x, h = rng.normal(size=(3, 4)), rng.normal(size=(3, 5))
    w_ih, w_hh = rng.normal(size=(15, 4)), rng.normal(size=(15, 5))
    b_ih, b_hh = rng.normal(size=15), rng.normal(size=15) + 1.0
    out = gru_cell(Tensor(x), Tensor(h), Tensor(w_ih), Tensor(w_hh), Tensor(b_ih), Tensor(b_hh))
    assert np.allclose(out.data, numpy_cell(x, h, w_ih, w_hh, b_ih, b_hh), atol=1e-12)


def test_state_dict_keys_follow_torch():
    gru = GRU(3, 4, num_layers=2)
    keys = list(gru.state_dict())
    assert keys == [
        "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
        "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
    ]
    assert gru.state_dict()["weight_hh_l1"].shape == (12, 4)
    assert list(GRUCell(3, 4).state_dict()) == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]


def test_each_recurrent_block_is_orthogonal_and_biases_are_zero():
    state = GRU(5, 6).state_dict()
    w_hh = state["weight_hh_l0"].astype(np.float64)
    for gate in range(3):
        block = w_hh[gate * 6 : (gate + 1) * 6]
        assert np.allclose(block @ block.T, np.eye(6), atol=1e-5)
    assert not state["bias_ih_l0"].any() and not state["bias_hh_l0"].any()


def test_padded_batch_freezes_the_state_and_zeroes_the_outputs():
    gru = GRU(2, 3)
    gru.load_state_dict(random_weights(gru, 2))
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 2, 2))
    out, h_n = gru(Tensor(x), lengths=[4, 2])
    alone_out, alone_h = gru(Tensor(x[:2, 1:2]))
    assert np.all(out.data[2:, 1] == 0)
    assert np.allclose(h_n.data[0, 1], alone_h.data[0, 0])
    assert np.allclose(out.data[:2, 1], alone_out.data[:, 0])


def test_two_layers_match_my_cells_stacked_from_a_nonzero_state():
    gru = GRU(3, 4, num_layers=2)
    weights = random_weights(gru, 4)
    gru.load_state_dict(weights)
    rng = np.random.default_rng(5)
    x, h0 = rng.normal(size=(3, 2, 3)), rng.normal(size=(2, 2, 4))
    out, h_n = gru(Tensor(x), Tensor(h0))
    layer_input = x
    for k in range(2):
        h = h0[k]
        outputs = []
        for t in range(3):
            h = numpy_cell(layer_input[t], h, *(weights[f"{p}_l{k}"] for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")))
            outputs.append(h)
        assert np.allclose(h_n.data[k], h, atol=1e-12)
        layer_input = np.stack(outputs)
    assert np.allclose(out.data, layer_input, atol=1e-12)


def test_dropout_is_ignored_by_a_one_layer_gru():
    gru = GRU(3, 4, dropout=0.5)
    x = Tensor(np.random.default_rng(6).normal(size=(3, 2, 3)))
    train_out, _ = gru.train()(x)
    eval_out, _ = gru.eval()(x)
    assert np.array_equal(train_out.data, eval_out.data)


def test_evaluation_mode_has_no_dropout():
    noisy, plain = GRU(3, 4, num_layers=2, dropout=0.5), GRU(3, 4, num_layers=2)
    weights = random_weights(noisy, 7)
    noisy.load_state_dict(weights)
    plain.load_state_dict(weights)
    x = Tensor(np.random.default_rng(8).normal(size=(3, 2, 3)))
    assert np.allclose(noisy.eval()(x)[0].data, plain.eval()(x)[0].data)


def test_no_state_means_zeros_and_bad_arguments_raise():
    gru = GRU(3, 4)
    x = Tensor(np.random.default_rng(9).normal(size=(2, 2, 3)))
    assert np.array_equal(gru(x)[0].data, gru(x, Tensor(np.zeros((1, 2, 4))))[0].data)
    with pytest.raises(ValueError):
        gru(Tensor(np.zeros((2, 2, 5))))
    with pytest.raises(ValueError):
        gru(x, lengths=[3, 1])
    with pytest.raises(ValueError):
        GRU(3, 4, dropout=1.0)
