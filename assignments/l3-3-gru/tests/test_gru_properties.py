"""Course tests L3.3 that need no torch: the hand example, gradients, init, padding, dropout,
defaults and argument checks.

They import only ``tinyllm``, numpy and pytest, and hold any implementation of the contract
first on ``sys.path`` to it.
"""

import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.random import PCG32
from tinyllm.rnn.gru import GRU, GRUCell, gru_cell


def _random_state_dict(module, seed: int, scale: float = 0.5) -> dict:
    """Float64 weights for ``module``'s own keys and shapes, biases included (b_hn ≠ 0)."""
    rng = np.random.default_rng(seed)
    return {
        name: rng.uniform(-scale, scale, size=array.shape)
        for name, array in module.state_dict().items()
    }


def _hand_example_weights() -> list:
    """The weights of the chapter's worked example: one unit, only the candidate reads h."""
    return [
        Tensor([[0.0], [0.0], [0.0]], dtype=np.float64),  # W_ih
        Tensor([[0.0], [0.0], [1.0]], dtype=np.float64),  # W_hh
        Tensor([0.0, math.log(3.0), 0.0], dtype=np.float64),  # b_ih: z = σ(ln 3) = 0.75
        Tensor([0.0, 0.0, 1.0], dtype=np.float64),  # b_hh: b_hn = 1
    ]


def test_hand_example_gru_cell():
    """r = 0.5, z = 0.75, n = tanh(0.5 · (0.5 + 1)): h′ = 0.533787 and ∂h′/∂h = 0.824573."""
    h = Tensor([[0.5]], dtype=np.float64, requires_grad=True)
    h_next = gru_cell(Tensor([[1.0]], dtype=np.float64), h, *_hand_example_weights())
    n = math.tanh(0.75)
    expected = 0.25 * n + 0.75 * 0.5
    assert abs(float(h_next.data[0, 0]) - expected) < 1e-12
    assert round(float(h_next.data[0, 0]), 6) == 0.533787

    h_next.sum().backward()
    expected_grad = 0.75 + 0.25 * (1.0 - n * n) * 0.5 * 1.0
    assert h.grad is not None, "no gradient reached h"
    assert abs(float(h.grad[0, 0]) - expected_grad) < 1e-12
    assert round(float(h.grad[0, 0]), 6) == 0.824573


def test_gradcheck_gru_cell():
    """Autograd through the cell equals central differences, in float64, for every input."""
    rng = np.random.default_rng(3)
    batch, d_in, hidden = 2, 3, 4
    arrays = [
        rng.normal(size=(batch, d_in)),
        rng.normal(size=(batch, hidden)) * 0.8,
        rng.normal(size=(3 * hidden, d_in)) * 0.6,
        rng.normal(size=(3 * hidden, hidden)) * 0.6,
        rng.normal(size=3 * hidden) * 0.5,
        rng.normal(size=3 * hidden) * 0.5,
    ]
    names = ["x", "h", "w_ih", "w_hh", "b_ih", "b_hh"]
    weight = rng.normal(size=(batch, hidden))

    def loss(values) -> float:
        out = gru_cell(*[Tensor(v, dtype=np.float64) for v in values])
        return float(np.sum(out.data * weight))

    tensors = [Tensor(a, dtype=np.float64, requires_grad=True) for a in arrays]
    (gru_cell(*tensors) * Tensor(weight)).sum().backward()

    eps = 1e-6
    for name, array, tensor in zip(names, arrays, tensors):
        numeric = np.zeros_like(array)
        for index in np.ndindex(array.shape):
            plus = [a.copy() for a in arrays]
            minus = [a.copy() for a in arrays]
            plus[names.index(name)][index] += eps
            minus[names.index(name)][index] -= eps
            numeric[index] = (loss(plus) - loss(minus)) / (2 * eps)
        assert tensor.grad is not None, f"no gradient reached {name}"
        assert tensor.grad.shape == array.shape, f"gradient of {name} has shape {tensor.grad.shape}"
        assert np.allclose(tensor.grad, numeric, rtol=1e-6, atol=1e-8), (
            f"gradient of {name}: max |autograd - numeric| = "
            f"{np.max(np.abs(tensor.grad - numeric)):.3g}"
        )


def test_update_gate_near_one_keeps_the_state():
    """A saturated update gate copies the state: over 15 steps h_T = h_0 and ∂h_T/∂h_0 = 1."""
    gru = GRU(3, 4)
    state = _random_state_dict(gru, seed=5)
    state["bias_ih_l0"][4:8] = 30.0  # z = σ(30 + …) ≈ 1 - 1e-13: the update gate is shut
    gru.load_state_dict(state)
    rng = np.random.default_rng(6)
    x = Tensor(rng.normal(size=(15, 2, 3)), dtype=np.float64)
    h0 = Tensor(rng.uniform(-0.9, 0.9, size=(1, 2, 4)), dtype=np.float64, requires_grad=True)

    out, h_n = gru(x, h0)
    assert np.allclose(h_n.data, h0.data, atol=1e-9), "the state changed under a shut update gate"
    assert np.allclose(out.data[-1], h0.data[0], atol=1e-9)
    h_n.sum().backward()
    assert h0.grad is not None, "no gradient reached h_0"
    assert np.allclose(h0.grad, 1.0, atol=1e-9), f"∂h_T/∂h_0 = {h0.grad.ravel()}, expected 1"


def test_init_orthogonal_recurrence_and_zero_bias():
    """Zero biases, one orthogonal W_hh block per gate, Xavier input blocks, seeded init."""
    d_in, hidden = 6, 10
    gru = GRU(d_in, hidden, num_layers=2, rng=PCG32(11))
    params = dict(gru.state_dict())
    for k in range(2):
        layer_in = d_in if k == 0 else hidden
        assert np.all(params[f"bias_ih_l{k}"] == 0) and np.all(params[f"bias_hh_l{k}"] == 0)
        w_hh = np.asarray(params[f"weight_hh_l{k}"], dtype=np.float64)
        for gate in range(3):
            block = w_hh[gate * hidden : (gate + 1) * hidden]
            assert np.allclose(block @ block.T, np.eye(hidden), atol=1e-5), (
                f"weight_hh_l{k} block {gate} is not orthogonal"
            )
        bound = math.sqrt(6.0 / (layer_in + hidden))
        w_ih = np.asarray(params[f"weight_ih_l{k}"], dtype=np.float64)
        for gate in range(3):
            block = w_ih[gate * hidden : (gate + 1) * hidden]
            assert np.max(np.abs(block)) <= bound + 1e-6, f"weight_ih_l{k} exceeds the Xavier bound"
            assert np.max(np.abs(block)) > 0.8 * bound, f"weight_ih_l{k} is far inside its bound"

    same = GRU(d_in, hidden, num_layers=2, rng=PCG32(11)).state_dict()
    other = GRU(d_in, hidden, num_layers=2, rng=PCG32(12)).state_dict()
    assert all(np.array_equal(params[k], same[k]) for k in params), "same seed, other weights"
    assert not np.array_equal(params["weight_hh_l0"], other["weight_hh_l0"])
    default_a, default_b = GRU(d_in, hidden).state_dict(), GRU(d_in, hidden).state_dict()
    assert all(np.array_equal(default_a[k], default_b[k]) for k in default_a), (
        "the default initialisation is not deterministic"
    )
    cell = GRUCell(d_in, hidden, rng=PCG32(11)).state_dict()
    assert np.all(cell["bias_ih"] == 0) and np.all(cell["bias_hh"] == 0)
    for gate in range(3):
        block = np.asarray(cell["weight_hh"], dtype=np.float64)[gate * hidden : (gate + 1) * hidden]
        assert np.allclose(block @ block.T, np.eye(hidden), atol=1e-5)


def test_lengths_keep_padding_out():
    """Padded outputs are 0, each final state equals the sequence run alone, and no gradient
    reaches the padding."""
    steps, batch, d_in, hidden = 5, 3, 3, 4
    lengths = [5, 2, 4]
    gru = GRU(d_in, hidden, num_layers=2)
    gru.load_state_dict(_random_state_dict(gru, seed=7))
    rng = np.random.default_rng(8)
    x_data = rng.normal(size=(steps, batch, d_in))
    h0 = rng.normal(size=(2, batch, hidden)) * 0.5
    x = Tensor(x_data, dtype=np.float64, requires_grad=True)

    out, h_n = gru(x, Tensor(h0, dtype=np.float64), lengths=lengths)
    for b, length in enumerate(lengths):
        assert np.all(out.data[length:, b] == 0), f"padded outputs of sequence {b} are not zero"
        alone_out, alone_h = gru(
            Tensor(x_data[:length, b : b + 1], dtype=np.float64),
            Tensor(h0[:, b : b + 1], dtype=np.float64),
        )
        assert np.allclose(h_n.data[:, b], alone_h.data[:, 0], atol=1e-12), (
            f"final state of sequence {b} depends on its padding"
        )
        assert np.allclose(out.data[:length, b], alone_out.data[:, 0], atol=1e-12)

    (out.sum() + h_n.sum()).backward()
    assert x.grad is not None
    for b, length in enumerate(lengths):
        assert np.all(x.grad[length:, b] == 0), f"gradient flows into the padding of sequence {b}"
        assert np.any(x.grad[:length, b] != 0)


def test_dropout_between_layers_only():
    """Dropout acts between layers, in training mode only."""
    rng = np.random.default_rng(9)
    x = Tensor(rng.normal(size=(4, 3, 5)), dtype=np.float64)

    one = GRU(5, 6, num_layers=1, dropout=0.5)
    one.load_state_dict(_random_state_dict(one, seed=10))
    train_out, train_h = one.train()(x)
    eval_out, eval_h = one.eval()(x)
    assert np.array_equal(train_out.data, eval_out.data), "a 1-layer GRU applied dropout"
    assert np.array_equal(train_h.data, eval_h.data)

    two = GRU(5, 6, num_layers=2, dropout=0.5)
    plain = GRU(5, 6, num_layers=2, dropout=0.0)
    weights = _random_state_dict(two, seed=11)
    two.load_state_dict(weights)
    plain.load_state_dict(weights)
    two.eval()
    plain.eval()
    first, _ = two(x)
    second, _ = two(x)
    reference, _ = plain(x)
    assert np.array_equal(first.data, second.data), "evaluation mode is not deterministic"
    assert np.allclose(first.data, reference.data, atol=1e-12), "dropout acted in evaluation mode"

    two.train()
    dropped, _ = two(x)
    assert not np.allclose(dropped.data, reference.data), "no dropout between layers in training"


def test_default_state_and_bad_arguments():
    """No state means zeros; bad shapes, lengths and sizes raise ValueError naming the argument."""
    rng = np.random.default_rng(12)
    gru = GRU(3, 4, num_layers=2)
    x = Tensor(rng.normal(size=(5, 2, 3)), dtype=np.float64)
    out, h_n = gru(x)
    out_zero, h_zero = gru(x, Tensor(np.zeros((2, 2, 4)), dtype=np.float64))
    assert np.array_equal(out.data, out_zero.data) and np.array_equal(h_n.data, h_zero.data)
    assert out.shape == (5, 2, 4) and h_n.shape == (2, 2, 4)

    cell = GRUCell(3, 4)
    x_cell = Tensor(rng.normal(size=(2, 3)), dtype=np.float64)
    assert np.array_equal(
        cell(x_cell).data, cell(x_cell, Tensor(np.zeros((2, 4)), dtype=np.float64)).data
    )

    def raises(name: str, call) -> None:
        with pytest.raises(ValueError) as info:
            call()
        assert name in str(info.value), f"the error does not name {name!r}: {info.value}"

    raises("x", lambda: gru(Tensor(np.zeros((5, 2, 4)))))  # wrong input size
    raises("x", lambda: gru(Tensor(np.zeros((2, 3)))))  # not [T, B, D]
    raises("state", lambda: gru(x, Tensor(np.zeros((1, 2, 4)))))  # one layer short
    raises("state", lambda: gru(x, Tensor(np.zeros((2, 3, 4)))))  # wrong batch
    raises("lengths", lambda: gru(x, lengths=[5]))  # one length for two sequences
    raises("lengths", lambda: gru(x, lengths=[0, 5]))  # below 1
    raises("lengths", lambda: gru(x, lengths=[6, 5]))  # beyond T
    raises("d_h", lambda: GRU(3, 0))
    raises("d_in", lambda: GRU(-1, 4))
    raises("num_layers", lambda: GRU(3, 4, num_layers=0))
    raises("dropout", lambda: GRU(3, 4, dropout=1.5))
    raises("dropout", lambda: GRU(3, 4, dropout=-0.1))
    raises("x", lambda: cell(Tensor(np.zeros((2, 5)))))
    raises("h", lambda: cell(x_cell, Tensor(np.zeros((2, 5)))))
    w = [np.zeros((12, 3)), np.zeros((12, 4)), np.zeros(12), np.zeros(12)]
    raises("w_ih", lambda: gru_cell(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((12, 2)), *w[1:]))
    raises("w_hh", lambda: gru_cell(np.zeros((2, 3)), np.zeros((2, 4)), w[0], np.zeros((9, 4)), *w[2:]))
    raises("b_hh", lambda: gru_cell(np.zeros((2, 3)), np.zeros((2, 4)), *w[:3], np.zeros(11)))
