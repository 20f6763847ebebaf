"""Course tests L3.2 that need no torch: the hand example, gradients, the forget gate, init,
padding, dropout, defaults and argument checks.

They import only ``tinyllm``, numpy and pytest, and hold any implementation of the contract
first on ``sys.path`` to it.
"""

import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.random import PCG32
from tinyllm.rnn.lstm import LSTM, LSTMCell, lstm_cell


def _random_state_dict(module, seed: int, scale: float = 0.5) -> dict:
    """Float64 weights for ``module``'s own keys and shapes, biases included."""
    rng = np.random.default_rng(seed)
    return {
        name: rng.uniform(-scale, scale, size=array.shape)
        for name, array in module.state_dict().items()
    }


def _hand_example_weights() -> list:
    """The weights of the chapter's worked example: one unit, only the candidate reads h."""
    return [
        Tensor([[0.0], [0.0], [0.0], [0.0]], dtype=np.float64),  # W_ih
        Tensor([[0.0], [0.0], [1.0], [0.0]], dtype=np.float64),  # W_hh: W_hg = 1
        # b_ih: i = σ(0) = 0.5, f = σ(ln 3) = 0.75, o = σ(ln 4) = 0.8
        Tensor([0.0, math.log(3.0), 0.0, math.log(4.0)], dtype=np.float64),
        Tensor([0.0, 0.0, 0.25, 0.0], dtype=np.float64),  # b_hh: b_hg = 0.25
    ]


def _hand_example_step():
    """The example's step from x = 1, h = 0.5, c = 0.4: (h, c, h′, c′), h and c leaves."""
    h = Tensor([[0.5]], dtype=np.float64, requires_grad=True)
    c = Tensor([[0.4]], dtype=np.float64, requires_grad=True)
    h_next, c_next = lstm_cell(Tensor([[1.0]], dtype=np.float64), h, c, *_hand_example_weights())
    return h, c, h_next, c_next


def test_hand_example_lstm_cell():
    """i = 0.5, f = 0.75, g = tanh(0.5 · 1 + 0.25) = 0.635149, o = 0.8 from x = 1, h = 0.5,
    c = 0.4: c′ = 0.75 · 0.4 + 0.5 g = 0.617574 and h′ = 0.8 tanh(c′) = 0.439550;
    ∂c′/∂c = 0.75, ∂c′/∂h = 0.298293, ∂h′/∂c = 0.418871 and ∂h′/∂h = 0.166595."""
    h, c, h_next, c_next = _hand_example_step()
    g = math.tanh(0.75)
    expected_c = 0.75 * 0.4 + 0.5 * g
    expected_h = 0.8 * math.tanh(expected_c)
    assert abs(float(c_next.data[0, 0]) - expected_c) < 1e-12
    assert abs(float(h_next.data[0, 0]) - expected_h) < 1e-12
    assert abs(float(c_next.data[0, 0]) - 0.617574) < 5e-7
    assert abs(float(h_next.data[0, 0]) - 0.439550) < 5e-7

    # Through h′: h′ = o tanh(c′), so ∂h′/∂· = o (1 − tanh² c′) ∂c′/∂·.
    h_next.sum().backward()
    dc_dh = 0.5 * (1.0 - g * g) * 1.0  # i (1 − g²) W_hg: only the candidate reads h
    squash = 0.8 * (1.0 - math.tanh(expected_c) ** 2)
    assert h.grad is not None and c.grad is not None, "no gradient reached h or c"
    assert abs(float(h.grad[0, 0]) - squash * dc_dh) < 1e-12
    assert abs(float(c.grad[0, 0]) - squash * 0.75) < 1e-12
    assert abs(float(h.grad[0, 0]) - 0.166595) < 5e-7
    assert abs(float(c.grad[0, 0]) - 0.418871) < 5e-7

    # Through c′ alone: the forget gate carries c, the input gate the candidate.
    h, c, _, c_next = _hand_example_step()
    c_next.sum().backward()
    assert h.grad is not None and c.grad is not None, "no gradient reached h or c"
    assert abs(float(c.grad[0, 0]) - 0.75) < 1e-12
    assert abs(float(h.grad[0, 0]) - dc_dh) < 1e-12
    assert abs(float(h.grad[0, 0]) - 0.298293) < 5e-7


def test_gradcheck_lstm_cell():
    """Autograd through the cell equals central differences, in float64, for every input,
    through both h′ and c′."""
    rng = np.random.default_rng(3)
    batch, d_in, hidden = 2, 3, 4
    arrays = [
        rng.normal(size=(batch, d_in)),
        rng.normal(size=(batch, hidden)) * 0.8,
        rng.normal(size=(batch, hidden)) * 1.2,
        rng.normal(size=(4 * hidden, d_in)) * 0.6,
        rng.normal(size=(4 * hidden, hidden)) * 0.6,
        rng.normal(size=4 * hidden) * 0.5,
        rng.normal(size=4 * hidden) * 0.5,
    ]
    names = ["x", "h", "c", "w_ih", "w_hh", "b_ih", "b_hh"]
    weight_h = rng.normal(size=(batch, hidden))
    weight_c = rng.normal(size=(batch, hidden))

    def loss(values) -> float:
        h_next, c_next = lstm_cell(*[Tensor(v, dtype=np.float64) for v in values])
        return float(np.sum(h_next.data * weight_h) + np.sum(c_next.data * weight_c))

    tensors = [Tensor(a, dtype=np.float64, requires_grad=True) for a in arrays]
    h_next, c_next = lstm_cell(*tensors)
    ((h_next * Tensor(weight_h)).sum() + (c_next * Tensor(weight_c)).sum()).backward()

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


def test_forget_gate_near_one_keeps_the_cell():
    """A saturated forget gate with a shut input gate copies the cell: c′ = c for one step,
    and over 15 steps c_T = c_0 and ∂c_T/∂c_0 = 1."""
    hidden = 4
    lstm = LSTM(3, hidden)
    state = _random_state_dict(lstm, seed=5)
    state["bias_ih_l0"][:hidden] = -30.0  # i = σ(-30 + …) ≈ 1e-13: nothing is written
    state["bias_ih_l0"][hidden : 2 * hidden] = 30.0  # f = σ(30 + …) ≈ 1 - 1e-13: all is kept
    lstm.load_state_dict(state)
    rng = np.random.default_rng(6)
    x = Tensor(rng.normal(size=(15, 2, 3)), dtype=np.float64)
    h0 = Tensor(rng.uniform(-0.9, 0.9, size=(1, 2, hidden)), dtype=np.float64)
    c0 = Tensor(rng.uniform(-1.5, 1.5, size=(1, 2, hidden)), dtype=np.float64, requires_grad=True)

    weights = [state[f"{name}_l0"] for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    _, c_step = lstm_cell(x.data[0], h0.data[0], c0.data[0], *weights)
    assert np.allclose(c_step.data, c0.data[0], atol=1e-9), (
        "c′ ≠ c under a saturated forget gate"
    )

    out, (h_n, c_n) = lstm(x, (h0, c0))
    assert np.allclose(c_n.data, c0.data, atol=1e-9), (
        "the cell changed under a saturated forget gate"
    )
    c_n.sum().backward()
    assert c0.grad is not None, "no gradient reached c_0"
    assert np.allclose(c0.grad, 1.0, atol=1e-9), f"∂c_T/∂c_0 = {c0.grad.ravel()}, expected 1"


def test_init_orthogonal_recurrence_and_forget_bias():
    """bias_ih 0 but 1 in its forget block, bias_hh 0, one orthogonal W_hh block per gate,
    Xavier input blocks, seeded init."""
    d_in, hidden = 6, 10
    lstm = LSTM(d_in, hidden, num_layers=2, rng=PCG32(11))
    params = dict(lstm.state_dict())

    def check_biases(b_ih, b_hh, where: str) -> None:
        expected = np.zeros(4 * hidden)
        expected[hidden : 2 * hidden] = 1.0
        assert np.allclose(b_ih, expected, rtol=0, atol=1e-7), (
            f"{where}: bias_ih must be 0 but 1 in the forget block (i, f, g, o), got {b_ih}"
        )
        assert np.allclose(b_hh, 0.0, rtol=0, atol=1e-7), f"{where}: bias_hh must be 0, got {b_hh}"

    def check_recurrent(w_hh, where: str) -> None:
        w_hh = np.asarray(w_hh, dtype=np.float64)
        assert w_hh.shape == (4 * hidden, hidden), f"{where}: weight_hh has shape {w_hh.shape}"
        for gate in range(4):
            block = w_hh[gate * hidden : (gate + 1) * hidden]
            assert np.allclose(block @ block.T, np.eye(hidden), atol=1e-5), (
                f"{where}: weight_hh block {gate} is not orthogonal"
            )

    for k in range(2):
        layer_in = d_in if k == 0 else hidden
        check_biases(params[f"bias_ih_l{k}"], params[f"bias_hh_l{k}"], f"layer {k}")
        check_recurrent(params[f"weight_hh_l{k}"], f"layer {k}")
        bound = math.sqrt(6.0 / (layer_in + hidden))
        w_ih = np.asarray(params[f"weight_ih_l{k}"], dtype=np.float64)
        for gate in range(4):
            block = w_ih[gate * hidden : (gate + 1) * hidden]
            assert np.max(np.abs(block)) <= bound + 1e-6, f"weight_ih_l{k} exceeds the Xavier bound"
            assert np.max(np.abs(block)) > 0.8 * bound, f"weight_ih_l{k} is far inside its bound"

    same = LSTM(d_in, hidden, num_layers=2, rng=PCG32(11)).state_dict()
    other = LSTM(d_in, hidden, num_layers=2, rng=PCG32(12)).state_dict()
    assert all(np.allclose(params[k], same[k], rtol=0, atol=1e-12) for k in params), (
        "same seed, other weights"
    )
    assert not np.allclose(params["weight_hh_l0"], other["weight_hh_l0"], atol=1e-3)
    default_a, default_b = LSTM(d_in, hidden).state_dict(), LSTM(d_in, hidden).state_dict()
    assert all(np.allclose(default_a[k], default_b[k], rtol=0, atol=1e-12) for k in default_a), (
        "the default initialisation is not deterministic"
    )
    cell = LSTMCell(d_in, hidden, rng=PCG32(11)).state_dict()
    check_biases(cell["bias_ih"], cell["bias_hh"], "LSTMCell")
    check_recurrent(cell["weight_hh"], "LSTMCell")


def test_lengths_keep_padding_out():
    """Padded outputs are 0, each final state and cell equal the sequence run alone, and no
    gradient reaches the padding."""
    steps, batch, d_in, hidden = 5, 3, 3, 4
    lengths = [5, 2, 4]
    lstm = LSTM(d_in, hidden, num_layers=2)
    lstm.load_state_dict(_random_state_dict(lstm, seed=7))
    rng = np.random.default_rng(8)
    x_data = rng.normal(size=(steps, batch, d_in))
    h0 = rng.normal(size=(2, batch, hidden)) * 0.5
    c0 = rng.normal(size=(2, batch, hidden))
    x = Tensor(x_data, dtype=np.float64, requires_grad=True)

    out, (h_n, c_n) = lstm(
        x, (Tensor(h0, dtype=np.float64), Tensor(c0, dtype=np.float64)), lengths=lengths
    )
    for b, length in enumerate(lengths):
        assert np.allclose(out.data[length:, b], 0.0, rtol=0, atol=1e-15), (
            f"padded outputs of sequence {b} are not zero"
        )
        alone_out, (alone_h, alone_c) = lstm(
            Tensor(x_data[:length, b : b + 1], dtype=np.float64),
            (
                Tensor(h0[:, b : b + 1], dtype=np.float64),
                Tensor(c0[:, b : b + 1], dtype=np.float64),
            ),
        )
        assert np.allclose(h_n.data[:, b], alone_h.data[:, 0], atol=1e-12), (
            f"final state of sequence {b} depends on its padding"
        )
        assert np.allclose(c_n.data[:, b], alone_c.data[:, 0], atol=1e-12), (
            f"final cell of sequence {b} depends on its padding"
        )
        assert np.allclose(out.data[:length, b], alone_out.data[:, 0], atol=1e-12)

    (out.sum() + h_n.sum() + c_n.sum()).backward()
    assert x.grad is not None
    for b, length in enumerate(lengths):
        assert np.allclose(x.grad[length:, b], 0.0, rtol=0, atol=1e-15), (
            f"gradient flows into the padding of sequence {b}"
        )
        assert np.max(np.abs(x.grad[:length, b])) > 1e-6, f"no gradient reached sequence {b}"


def test_dropout_between_layers_only():
    """Dropout acts between layers, in training mode only."""
    rng = np.random.default_rng(9)
    x = Tensor(rng.normal(size=(4, 3, 5)), dtype=np.float64)

    one = LSTM(5, 6, num_layers=1, dropout=0.5)
    one.load_state_dict(_random_state_dict(one, seed=10))
    train_out, (train_h, train_c) = one.train()(x)
    eval_out, (eval_h, eval_c) = one.eval()(x)
    assert np.allclose(train_out.data, eval_out.data, rtol=0, atol=1e-15), (
        "a 1-layer LSTM applied dropout"
    )
    assert np.allclose(train_h.data, eval_h.data, rtol=0, atol=1e-15)
    assert np.allclose(train_c.data, eval_c.data, rtol=0, atol=1e-15)

    two = LSTM(5, 6, num_layers=2, dropout=0.5)
    plain = LSTM(5, 6, num_layers=2, dropout=0.0)
    weights = _random_state_dict(two, seed=11)
    two.load_state_dict(weights)
    plain.load_state_dict(weights)
    two.eval()
    plain.eval()
    first, _ = two(x)
    second, _ = two(x)
    reference, (reference_h, _) = plain(x)
    assert np.allclose(first.data, second.data, rtol=0, atol=1e-15), (
        "evaluation mode is not deterministic"
    )
    assert np.allclose(first.data, reference.data, atol=1e-12), "dropout acted in evaluation mode"

    two.train()
    dropped, (dropped_h, _) = two(x)
    assert not np.allclose(dropped.data, reference.data), "no dropout between layers in training"
    # Layer 0 reads no dropped input: its final state is the same in training and evaluation.
    assert np.allclose(dropped_h.data[0], reference_h.data[0], atol=1e-12), (
        "dropout acted on the input of the first layer"
    )


def test_default_state_and_bad_arguments():
    """No state means zeros; bad shapes, states, lengths and sizes raise ValueError naming the
    argument."""
    rng = np.random.default_rng(12)
    lstm = LSTM(3, 4, num_layers=2)
    x = Tensor(rng.normal(size=(5, 2, 3)), dtype=np.float64)
    out, (h_n, c_n) = lstm(x)
    zeros = tuple(Tensor(np.zeros((2, 2, 4)), dtype=np.float64) for _ in range(2))
    out_zero, (h_zero, c_zero) = lstm(x, zeros)
    assert np.allclose(out.data, out_zero.data, rtol=0, atol=1e-15)
    assert np.allclose(h_n.data, h_zero.data, rtol=0, atol=1e-15)
    assert np.allclose(c_n.data, c_zero.data, rtol=0, atol=1e-15)
    assert out.shape == (5, 2, 4) and h_n.shape == (2, 2, 4) and c_n.shape == (2, 2, 4)

    cell = LSTMCell(3, 4)
    x_cell = Tensor(rng.normal(size=(2, 3)), dtype=np.float64)
    zero_state = tuple(Tensor(np.zeros((2, 4)), dtype=np.float64) for _ in range(2))
    for default, explicit in zip(cell(x_cell), cell(x_cell, zero_state), strict=True):
        assert default.shape == (2, 4)
        assert np.allclose(default.data, explicit.data, rtol=0, atol=1e-15)

    def raises(name: str, call) -> None:
        with pytest.raises(ValueError) as info:
            call()
        assert name in str(info.value), f"the error does not name {name!r}: {info.value}"

    def state(h_shape, c_shape):
        return (Tensor(np.zeros(h_shape)), Tensor(np.zeros(c_shape)))

    raises("x", lambda: lstm(Tensor(np.zeros((5, 2, 4)))))  # wrong input size
    raises("x", lambda: lstm(Tensor(np.zeros((2, 3)))))  # not [T, B, D]
    raises("state", lambda: lstm(x, Tensor(np.zeros((2, 2, 4)))))  # h0 alone, not (h0, c0)
    raises("h0", lambda: lstm(x, state((1, 2, 4), (2, 2, 4))))  # one layer short
    raises("c0", lambda: lstm(x, state((2, 2, 4), (2, 3, 4))))  # wrong batch
    raises("lengths", lambda: lstm(x, lengths=[5]))  # one length for two sequences
    raises("lengths", lambda: lstm(x, lengths=[0, 5]))  # below 1
    raises("lengths", lambda: lstm(x, lengths=[6, 5]))  # beyond T
    raises("d_h", lambda: LSTM(3, 0))
    raises("d_in", lambda: LSTM(-1, 4))
    raises("num_layers", lambda: LSTM(3, 4, num_layers=0))
    raises("dropout", lambda: LSTM(3, 4, dropout=1.5))
    raises("dropout", lambda: LSTM(3, 4, dropout=-0.1))
    raises("x", lambda: cell(Tensor(np.zeros((2, 5)))))
    raises("state", lambda: cell(x_cell, Tensor(np.zeros((2, 4)))))  # h alone, not (h, c)
    raises("h", lambda: cell(x_cell, state((2, 5), (2, 4))))
    raises("c", lambda: cell(x_cell, state((2, 4), (2, 5))))
    w = [np.zeros((16, 3)), np.zeros((16, 4)), np.zeros(16), np.zeros(16)]
    x2, h2, c2 = np.zeros((2, 3)), np.zeros((2, 4)), np.zeros((2, 4))
    raises("c", lambda: lstm_cell(x2, h2, np.zeros((2, 3)), *w))
    raises("w_ih", lambda: lstm_cell(x2, h2, c2, np.zeros((12, 3)), *w[1:]))  # a GRU's 3H rows
    raises("w_hh", lambda: lstm_cell(x2, h2, c2, w[0], np.zeros((16, 3)), *w[2:]))
    raises("b_ih", lambda: lstm_cell(x2, h2, c2, *w[:2], np.zeros(12), w[3]))
    raises("b_hh", lambda: lstm_cell(x2, h2, c2, *w[:3], np.zeros(15)))
