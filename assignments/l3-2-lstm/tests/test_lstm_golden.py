"""Golden course tests: the LSTM against values torch computed (``goldens/lstm_torch.npz``).

The goldens hold torch's float64 outputs and gradients for an LSTMCell, a one-layer sequence
with an initial state and cell, a two-layer sequence whose layers start from different states
and cells, and a packed padded batch with unsorted lengths, plus torch's state_dict names and
shapes (``goldens/make_lstm_torch.py`` documents every key). No torch is needed here.

These tests grade students' implementations and calibrate the mutants, so they use only the
contract (``tinyllm/rnn/lstm.pyi``) through ``tinyllm.rnn.lstm`` and
``tinyllm.autograd.tensor``: whichever ``tinyllm`` is first on ``sys.path`` is the one under
test.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.lstm import LSTM, LSTMCell, lstm_cell

_CELL_PARAMETERS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
_SEQUENCE_CASES = ("seq1", "seq2", "packed")


def _state(goldens: dict[str, np.ndarray], case: str) -> dict[str, np.ndarray]:
    """The torch state_dict stored for ``case``, keyed by parameter name."""
    start = f"{case}/state/"
    state = {key[len(start):]: value for key, value in goldens.items() if key.startswith(start)}
    assert state, f"the goldens hold no state for {case!r}"
    return state


def _leaf(array: np.ndarray) -> Tensor:
    """A float64 leaf that collects its gradient."""
    return Tensor(np.array(array, dtype=np.float64), dtype=np.float64, requires_grad=True)


def _const(array: np.ndarray) -> Tensor:
    """A float64 constant (a loss weight)."""
    return Tensor(np.array(array, dtype=np.float64), dtype=np.float64)


def _grad(tensor: Any, what: str) -> np.ndarray:
    """``tensor.grad``, failing with a message when backward left it empty."""
    grad = getattr(tensor, "grad", None)
    assert grad is not None, f"{what}: no gradient reached it"
    return np.asarray(grad)


def _pair(result: Any, what: str) -> tuple[Any, Any]:
    """``result`` as its two parts, failing with a message when it is not a pair."""
    assert isinstance(result, (tuple, list)) and len(result) == 2, (
        f"{what}: expected a pair, got {type(result).__name__}"
    )
    return result[0], result[1]


def _shapes(rows: np.ndarray) -> list[tuple[int, ...]]:
    """Shape rows as stored (1-D shapes padded with -1) back to shape tuples."""
    return [tuple(int(d) for d in row if d >= 0) for row in rows]


def _check_cell_step(goldens, assert_close, who: str, step) -> None:
    """Run ``step(x, h, c)`` on the golden inputs and compare h', c' and the input gradients;
    the loss is torch's, sum(h' * loss_h) + sum(c' * loss_c)."""
    x, h, c = _leaf(goldens["cell/x"]), _leaf(goldens["cell/h"]), _leaf(goldens["cell/c"])
    h_next, c_next = _pair(step(x, h, c), f"{who}: (h', c')")
    assert_close(h_next, goldens["cell/h_next"], f"{who}: h'")
    assert_close(c_next, goldens["cell/c_next"], f"{who}: c'")
    loss = (h_next * _const(goldens["cell/loss_h"])).sum() + (
        c_next * _const(goldens["cell/loss_c"])
    ).sum()
    loss.backward()
    for name, leaf in (("x", x), ("h", h), ("c", c)):
        what = f"{who}: d/d{name}"
        assert_close(_grad(leaf, what), goldens[f"cell/grad/{name}"], what)


def test_matches_torch_cell(goldens: dict[str, np.ndarray], assert_close) -> None:
    """torch.nn.LSTMCell's h', c' and every gradient of sum(h' * a) + sum(c' * b), through
    lstm_cell and LSTMCell.

    Every gate block of the golden weights is drawn on its own, so the gate order i, f, g, o
    is told from any other (ONNX's i, o, f, c among them), and the golden cells reach past 1,
    so h' = o ⊙ tanh(c') is told from o ⊙ c'.
    """
    state = _state(goldens, "cell")

    # The functional cell, with the weights as leaves of their own.
    weights = [_leaf(state[name]) for name in _CELL_PARAMETERS]
    _check_cell_step(
        goldens, assert_close, "lstm_cell", lambda x, h, c: lstm_cell(x, h, c, *weights)
    )
    for name, weight in zip(_CELL_PARAMETERS, weights, strict=True):
        what = f"lstm_cell: d/d{name}"
        assert_close(_grad(weight, what), goldens[f"cell/grad/{name}"], what)

    # The module, with torch's state_dict loaded by name.
    d_h, d_in = state["weight_ih"].shape[0] // 4, state["weight_ih"].shape[1]
    cell = LSTMCell(d_in, d_h)
    cell.load_state_dict(state)
    _check_cell_step(goldens, assert_close, "LSTMCell", lambda x, h, c: cell(x, (h, c)))
    params = dict(cell.named_parameters())
    assert sorted(params) == sorted(_CELL_PARAMETERS), f"LSTMCell parameters: {list(params)}"
    for name in _CELL_PARAMETERS:
        what = f"LSTMCell: d/d{name}"
        assert_close(_grad(params[name], what), goldens[f"cell/grad/{name}"], what)


def _check_sequence(goldens: dict[str, np.ndarray], case: str, assert_close) -> None:
    """One stored torch.nn.LSTM run: outputs, final states and cells, and every gradient."""
    state = _state(goldens, case)
    h0_data = goldens[f"{case}/h0"]
    num_layers, _, d_h = h0_data.shape
    d_in = goldens[f"{case}/x"].shape[2]
    lstm = LSTM(d_in, d_h, num_layers=num_layers)
    lstm.load_state_dict(state)

    x, h0, c0 = _leaf(goldens[f"{case}/x"]), _leaf(h0_data), _leaf(goldens[f"{case}/c0"])
    lengths_key = f"{case}/lengths"
    if lengths_key in goldens:
        # Plain ints: the contract asks for B ints, not a numpy array of them.
        lengths = [int(v) for v in goldens[lengths_key]]
        result = lstm(x, (h0, c0), lengths=lengths)
    else:
        result = lstm(x, (h0, c0))
    out, finals = _pair(result, f"{case}: (out, (h_n, c_n))")
    h_n, c_n = _pair(finals, f"{case}: (h_n, c_n)")
    assert_close(out, goldens[f"{case}/out"], f"{case}: out")
    assert_close(h_n, goldens[f"{case}/h_n"], f"{case}: h_n")
    assert_close(c_n, goldens[f"{case}/c_n"], f"{case}: c_n")

    loss = (
        (out * _const(goldens[f"{case}/loss_out"])).sum()
        + (h_n * _const(goldens[f"{case}/loss_h"])).sum()
        + (c_n * _const(goldens[f"{case}/loss_c"])).sum()
    )
    loss.backward()
    assert_close(_grad(x, f"{case}: d/dx"), goldens[f"{case}/grad/x"], f"{case}: d/dx")
    assert_close(_grad(h0, f"{case}: d/dh0"), goldens[f"{case}/grad/h0"], f"{case}: d/dh0")
    assert_close(_grad(c0, f"{case}: d/dc0"), goldens[f"{case}/grad/c0"], f"{case}: d/dc0")
    params = dict(lstm.named_parameters())
    assert sorted(params) == sorted(state), f"{case}: LSTM parameters {list(params)}"
    for name in state:
        what = f"{case}: d/d{name}"
        assert_close(_grad(params[name], what), goldens[f"{case}/grad/{name}"], what)


def test_matches_torch_sequence(goldens: dict[str, np.ndarray], assert_close) -> None:
    """torch.nn.LSTM with torch's weights: one layer from a state and a cell, two layers from
    different per-layer states and cells, and a packed padded batch with unsorted lengths
    (padded outputs 0, final states and cells taken at each sequence's own length, no gradient
    into the padding)."""
    for case in _SEQUENCE_CASES:
        _check_sequence(goldens, case, assert_close)


def test_state_dict_names_match_torch(goldens: dict[str, np.ndarray], assert_close) -> None:
    """torch's state_dict names, order and shapes for LSTM(…, num_layers=2) and LSTMCell, and
    a torch state_dict loaded by name comes back out under the same names."""
    for key, case in (("lstm2", "seq2"), ("cell", "cell")):
        names = [str(name) for name in goldens[f"names/{key}"]]
        shapes = _shapes(goldens[f"shapes/{key}"])
        d_h, d_in = shapes[0][0] // 4, shapes[0][1]
        module = LSTM(d_in, d_h, num_layers=2) if key == "lstm2" else LSTMCell(d_in, d_h)

        state = module.state_dict()
        assert list(state) == names, f"{key}: state_dict names {list(state)}, torch's {names}"
        got = [tuple(np.shape(value)) for value in state.values()]
        assert got == shapes, f"{key}: state_dict shapes {got}, torch's {shapes}"
        named = [name for name, _ in module.named_parameters()]
        assert named == names, f"{key}: named_parameters {named}, torch's {names}"

        # Load torch's values by name: each must come back under its own name.
        torch_state = _state(goldens, case)
        assert list(torch_state) == names, f"goldens: {case} state is not in torch's order"
        module.load_state_dict(torch_state)
        reloaded = module.state_dict()
        assert list(reloaded) == names, f"{key}: names after load_state_dict {list(reloaded)}"
        for name in names:
            assert_close(reloaded[name], torch_state[name], f"{key}: {name} after loading")
