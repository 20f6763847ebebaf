"""Golden course tests: the GRU against values torch computed (``fixtures/gru_torch.npz``).

The goldens hold torch's float64 outputs and gradients for a GRUCell, a one-layer sequence
with an initial state, a two-layer sequence whose layers start from different states, and a
packed padded batch with unsorted lengths, plus torch's state_dict names and shapes
(``fixtures/make_gru_torch.py`` documents every key). No torch is needed here.

These tests grade students' implementations and calibrate the mutants, so they use only the
contract of SPEC §3 through ``tinyllm.rnn.gru`` and ``tinyllm.autograd.tensor``: whichever
``tinyllm`` is first on ``sys.path`` is the one under test.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, GRUCell, gru_cell

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


def _grad(tensor: Any, what: str) -> np.ndarray:
    """``tensor.grad``, failing with a message when backward left it empty."""
    grad = getattr(tensor, "grad", None)
    assert grad is not None, f"{what}: no gradient reached it"
    return np.asarray(grad)


def _shapes(rows: np.ndarray) -> list[tuple[int, ...]]:
    """Shape rows as stored (1-D shapes padded with -1) back to shape tuples."""
    return [tuple(int(d) for d in row if d >= 0) for row in rows]


def test_matches_torch_cell(goldens: dict[str, np.ndarray], assert_close) -> None:
    """torch.nn.GRUCell's h' and every gradient of sum(h' * c), through gru_cell and GRUCell.

    The golden b_hh has a clearly nonzero n-block, so this tells torch's reset placement
    r ⊙ (W_hn h + b_hn) from Cho's and from resetting W_hn h alone, and the random weights
    tell the gate order r, z, n from z, r, n.
    """
    state = _state(goldens, "cell")
    c = Tensor(goldens["cell/c"], dtype=np.float64)

    # The functional cell, with the weights as leaves of their own.
    x, h = _leaf(goldens["cell/x"]), _leaf(goldens["cell/h"])
    weights = [_leaf(state[name]) for name in _CELL_PARAMETERS]
    out = gru_cell(x, h, *weights)
    assert_close(out, goldens["cell/out"], "gru_cell: h'")
    (out * c).sum().backward()
    assert_close(_grad(x, "gru_cell: d/dx"), goldens["cell/grad/x"], "gru_cell: d/dx")
    assert_close(_grad(h, "gru_cell: d/dh"), goldens["cell/grad/h"], "gru_cell: d/dh")
    for name, weight in zip(_CELL_PARAMETERS, weights, strict=True):
        what = f"gru_cell: d/d{name}"
        assert_close(_grad(weight, what), goldens[f"cell/grad/{name}"], what)

    # The module, with torch's state_dict loaded by name.
    d_h, d_in = state["weight_ih"].shape[0] // 3, state["weight_ih"].shape[1]
    cell = GRUCell(d_in, d_h)
    cell.load_state_dict(state)
    x, h = _leaf(goldens["cell/x"]), _leaf(goldens["cell/h"])
    out = cell(x, h)
    assert_close(out, goldens["cell/out"], "GRUCell: h'")
    (out * c).sum().backward()
    assert_close(_grad(x, "GRUCell: d/dx"), goldens["cell/grad/x"], "GRUCell: d/dx")
    assert_close(_grad(h, "GRUCell: d/dh"), goldens["cell/grad/h"], "GRUCell: d/dh")
    params = dict(cell.named_parameters())
    assert sorted(params) == sorted(_CELL_PARAMETERS), f"GRUCell parameters: {list(params)}"
    for name in _CELL_PARAMETERS:
        what = f"GRUCell: d/d{name}"
        assert_close(_grad(params[name], what), goldens[f"cell/grad/{name}"], what)


def _check_sequence(goldens: dict[str, np.ndarray], case: str, assert_close) -> None:
    """One stored torch.nn.GRU run: outputs, final states and every gradient."""
    state = _state(goldens, case)
    h0 = goldens[f"{case}/h0"]
    num_layers, _, d_h = h0.shape
    d_in = goldens[f"{case}/x"].shape[2]
    gru = GRU(d_in, d_h, num_layers=num_layers)
    gru.load_state_dict(state)

    x, state0 = _leaf(goldens[f"{case}/x"]), _leaf(h0)
    lengths_key = f"{case}/lengths"
    if lengths_key in goldens:
        # Plain ints: the contract asks for B ints, not a numpy array of them.
        lengths = [int(v) for v in goldens[lengths_key]]
        out, h_n = gru(x, state0, lengths=lengths)
    else:
        out, h_n = gru(x, state0)
    assert_close(out, goldens[f"{case}/out"], f"{case}: out")
    assert_close(h_n, goldens[f"{case}/h_n"], f"{case}: h_n")

    loss = (out * Tensor(goldens[f"{case}/c_out"], dtype=np.float64)).sum() + (
        h_n * Tensor(goldens[f"{case}/c_h"], dtype=np.float64)
    ).sum()
    loss.backward()
    assert_close(_grad(x, f"{case}: d/dx"), goldens[f"{case}/grad/x"], f"{case}: d/dx")
    assert_close(_grad(state0, f"{case}: d/dh0"), goldens[f"{case}/grad/h0"], f"{case}: d/dh0")
    params = dict(gru.named_parameters())
    assert sorted(params) == sorted(state), f"{case}: GRU parameters {list(params)}"
    for name in state:
        what = f"{case}: d/d{name}"
        assert_close(_grad(params[name], what), goldens[f"{case}/grad/{name}"], what)


def test_matches_torch_sequence(goldens: dict[str, np.ndarray], assert_close) -> None:
    """torch.nn.GRU with torch's weights: one layer from a state, two layers from different
    per-layer states, and a packed padded batch with unsorted lengths (padded outputs 0,
    final states taken at each sequence's own length, no gradient into the padding)."""
    for case in _SEQUENCE_CASES:
        _check_sequence(goldens, case, assert_close)


def test_state_dict_names_match_torch(goldens: dict[str, np.ndarray], assert_close) -> None:
    """torch's state_dict names, order and shapes for GRU(…, num_layers=2) and GRUCell, and
    a torch state_dict loaded by name comes back out under the same names."""
    for key, case in (("gru2", "seq2"), ("cell", "cell")):
        names = [str(name) for name in goldens[f"names/{key}"]]
        shapes = _shapes(goldens[f"shapes/{key}"])
        d_h, d_in = shapes[0][0] // 3, shapes[0][1]
        module = GRU(d_in, d_h, num_layers=2) if key == "gru2" else GRUCell(d_in, d_h)

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
