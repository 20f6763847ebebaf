"""The reference GRU against live torch (CPU, float64) on fresh random cases.

The fixture file holds a handful of frozen torch cases; these tests draw new ones: cells of
several sizes, stacks of one to three layers with and without an initial state, padded
batches with unsorted lengths (run through torch as packed sequences), inter-layer dropout in
evaluation mode, and a one-layer GRU with dropout in training mode (where there is none to
apply), plus the state_dict layout. Every comparison loads torch's own ``state_dict`` (converted to
arrays) into the reference by name, then compares outputs and the gradients of a random
linear loss with respect to the inputs, the initial state and every parameter at 1e-10.
torch is a required test dependency here: nothing is skipped when it is missing.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, GRUCell, gru_cell

torch.set_num_threads(1)

TOL = 1e-10


def _assert_close(actual: object, expected: object, what: str) -> None:
    """Equal within 1e-10 (float64 on both sides), with the worst difference in the message."""
    actual = np.asarray(getattr(actual, "data", actual))
    if isinstance(expected, torch.Tensor):
        expected = expected.detach().numpy()
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, torch {expected.shape}"
    assert actual.dtype == np.float64, f"{what}: dtype {actual.dtype}, expected float64"
    worst = float(np.max(np.abs(actual - expected), initial=0.0))
    assert np.allclose(actual, expected, rtol=TOL, atol=TOL), (
        f"{what}: max |difference| {worst:.3g} exceeds {TOL:g}"
    )


def _randomize(module: torch.nn.Module, rng: np.random.Generator) -> None:
    """Replace torch's initialisation (small, from torch's generator) with numpy draws large
    enough that every gate and both biases matter, b_hh's n-block included."""
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.from_numpy(rng.uniform(-1.0, 1.0, size=tuple(param.shape))))


def _arrays(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """torch's state_dict as arrays: what a user would hand to ``load_state_dict``."""
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def _leaf(array: np.ndarray) -> Tensor:
    return Tensor(array, dtype=np.float64, requires_grad=True)


def _grad(tensor: Tensor, what: str) -> np.ndarray:
    assert tensor.grad is not None, f"{what}: no gradient reached it"
    return tensor.grad


def _torch_leaf(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(array.copy()).requires_grad_(True)


# ------------------------------------------------------------------------- the cell
@pytest.mark.parametrize(
    ("seed", "d_in", "d_h", "batch", "with_state"),
    [(0, 3, 4, 2, True), (1, 5, 2, 3, True), (2, 1, 1, 1, True), (3, 4, 3, 4, False)],
)
def test_cell_matches_torch_grucell(
    seed: int, d_in: int, d_h: int, batch: int, with_state: bool
) -> None:
    """GRUCell and gru_cell with torch's GRUCell weights: h' and every gradient."""
    rng = np.random.default_rng([7, seed])
    theirs = torch.nn.GRUCell(d_in, d_h, dtype=torch.float64)
    _randomize(theirs, rng)
    x_np = rng.normal(size=(batch, d_in))
    h_np = rng.uniform(-0.9, 0.9, size=(batch, d_h))
    c_np = rng.normal(size=(batch, d_h))

    x_t = _torch_leaf(x_np)
    h_t = _torch_leaf(h_np) if with_state else None
    out_t = theirs(x_t, h_t)
    (out_t * torch.from_numpy(c_np)).sum().backward()

    ours = GRUCell(d_in, d_h)
    ours.load_state_dict(_arrays(theirs))
    x = _leaf(x_np)
    h = _leaf(h_np) if with_state else None
    out = ours(x, h)
    _assert_close(out, out_t, "GRUCell h'")
    (out * Tensor(c_np)).sum().backward()
    _assert_close(_grad(x, "d/dx"), x_t.grad, "GRUCell d/dx")
    if with_state:
        _assert_close(_grad(h, "d/dh"), h_t.grad, "GRUCell d/dh")
    theirs_params = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        _assert_close(_grad(param, name), theirs_params[name].grad, f"GRUCell d/d{name}")

    # The functional cell with the same weights gives the same state (zeros when none).
    h_in = h_np if with_state else np.zeros((batch, d_h))
    _assert_close(gru_cell(x_np, h_in, *_arrays(theirs).values()), out_t, "gru_cell h'")


# ------------------------------------------------------------------------ sequences
def _unsorted_lengths(rng: np.random.Generator, steps: int, batch: int) -> list[int]:
    """B lengths in 1..T, one of them T and one 1, not in descending order (torch's packed
    path would otherwise not have to sort)."""
    lengths = rng.integers(1, steps + 1, size=batch)
    lengths[0], lengths[1] = 1, steps
    lengths = rng.permutation(lengths)
    if list(lengths) == sorted(lengths, reverse=True):
        lengths = lengths[::-1].copy()
    return [int(v) for v in lengths]


def _run_torch(
    gru: torch.nn.GRU,
    x: torch.Tensor,
    h0: torch.Tensor | None,
    lengths: list[int] | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's (out, h_n); a padded batch goes through pack/pad so padded outputs are 0."""
    if lengths is None:
        return gru(x, h0)
    packed = torch.nn.utils.rnn.pack_padded_sequence(
        x, torch.tensor(lengths, dtype=torch.int64), enforce_sorted=False
    )
    packed_out, h_n = gru(packed, h0)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(packed_out, total_length=x.shape[0])
    return out, h_n


def _compare_sequence(
    theirs: torch.nn.GRU,
    ours: GRU,
    rng: np.random.Generator,
    steps: int,
    batch: int,
    with_state: bool,
    padded: bool,
) -> None:
    """Run both on one random batch; compare out, h_n and every gradient of a linear loss."""
    layers, d_in, d_h = theirs.num_layers, theirs.input_size, theirs.hidden_size
    x_np = rng.normal(size=(steps, batch, d_in))
    h0_np = rng.uniform(-0.9, 0.9, size=(layers, batch, d_h))  # each layer its own state
    c_out = rng.normal(size=(steps, batch, d_h))
    c_h = rng.normal(size=(layers, batch, d_h))
    lengths = _unsorted_lengths(rng, steps, batch) if padded else None

    x_t = _torch_leaf(x_np)
    h0_t = _torch_leaf(h0_np) if with_state else None
    out_t, h_n_t = _run_torch(theirs, x_t, h0_t, lengths)
    ((out_t * torch.from_numpy(c_out)).sum() + (h_n_t * torch.from_numpy(c_h)).sum()).backward()

    x = _leaf(x_np)
    h0 = _leaf(h0_np) if with_state else None
    out, h_n = ours(x, h0, lengths=lengths)
    _assert_close(out, out_t, "out")
    _assert_close(h_n, h_n_t, "h_n")
    ((out * Tensor(c_out)).sum() + (h_n * Tensor(c_h)).sum()).backward()
    _assert_close(_grad(x, "d/dx"), x_t.grad, "d/dx")
    if with_state:
        _assert_close(_grad(h0, "d/dh0"), h0_t.grad, "d/dh0")
    theirs_params = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        _assert_close(_grad(param, name), theirs_params[name].grad, f"d/d{name}")


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "with_state"])
@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_gru_matches_torch_gru(num_layers: int, with_state: bool, padded: bool) -> None:
    """torch.nn.GRU's state_dict loaded by name gives torch's outputs, final states and
    gradients; padded batches with unsorted lengths against torch's packed sequences."""
    seed = 100 * num_layers + 10 * with_state + padded
    rng = np.random.default_rng([11, seed])
    d_in, d_h, steps, batch = 3, 4, 6, 5
    theirs = torch.nn.GRU(d_in, d_h, num_layers=num_layers, dtype=torch.float64)
    _randomize(theirs, rng)
    ours = GRU(d_in, d_h, num_layers=num_layers)
    state = _arrays(theirs)
    assert list(ours.state_dict()) == list(state), "parameter names or order differ from torch's"
    ours.load_state_dict(state)
    _compare_sequence(theirs, ours, rng, steps, batch, with_state, padded)


def test_gru_with_dropout_in_eval_mode_matches_torch() -> None:
    """Inter-layer dropout is off in evaluation mode in both: outputs and gradients agree.

    Also checks that ours in training mode differs, so that dropout was really configured
    and the agreement above is not an accident of dropout being ignored altogether.
    """
    rng = np.random.default_rng([13, 0])
    d_in, d_h, steps, batch, layers = 3, 4, 6, 5, 3
    theirs = torch.nn.GRU(d_in, d_h, num_layers=layers, dropout=0.5, dtype=torch.float64)
    _randomize(theirs, rng)
    theirs.eval()
    ours = GRU(d_in, d_h, num_layers=layers, dropout=0.5)
    ours.load_state_dict(_arrays(theirs))
    ours.eval()
    _compare_sequence(theirs, ours, rng, steps, batch, with_state=True, padded=True)

    x = rng.normal(size=(steps, batch, d_in))
    eval_out, _ = ours(x)
    ours.train()
    train_out, _ = ours(x)
    assert not np.allclose(train_out.data, eval_out.data), "dropout=0.5 changed nothing in training"


def test_one_layer_gru_with_dropout_in_training_mode_matches_torch() -> None:
    """Dropout acts between layers only, so a one-layer GRU has none even in training mode:
    torch's (deterministic there) and ours agree, outputs and gradients."""
    rng = np.random.default_rng([13, 1])
    d_in, d_h, steps, batch = 3, 4, 6, 5
    with warnings.catch_warnings():
        # torch warns that dropout with one layer does nothing, which is the point here.
        warnings.simplefilter("ignore", UserWarning)
        theirs = torch.nn.GRU(d_in, d_h, num_layers=1, dropout=0.5, dtype=torch.float64)
    _randomize(theirs, rng)
    theirs.train()
    ours = GRU(d_in, d_h, num_layers=1, dropout=0.5)
    ours.load_state_dict(_arrays(theirs))
    ours.train()
    _compare_sequence(theirs, ours, rng, steps, batch, with_state=True, padded=False)


@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_state_dict_layout_matches_torch(num_layers: int) -> None:
    """Names, order and shapes of GRU(5, 2, num_layers) and GRUCell(5, 2) are torch's."""
    pairs = [
        (GRU(5, 2, num_layers=num_layers), torch.nn.GRU(5, 2, num_layers=num_layers)),
        (GRUCell(5, 2), torch.nn.GRUCell(5, 2)),
    ]
    for ours, theirs in pairs:
        got = [(name, value.shape) for name, value in ours.state_dict().items()]
        want = [(name, tuple(value.shape)) for name, value in theirs.state_dict().items()]
        assert got == want, f"{type(ours).__name__}: {got}, torch's {want}"
