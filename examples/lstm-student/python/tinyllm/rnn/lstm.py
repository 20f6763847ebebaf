"""My LSTM for L3.2: lstm_cell, LSTMCell and LSTM, with torch's gate order i, f, g, o.

I compute each gate on its own: its rows of the weights, one product with x and one with h,
and its two biases added first. For a gate k (rows k·H to (k+1)·H of every parameter)::

    pre_k = x W_kᵀ + h U_kᵀ + (b_k + b'_k)
    i, f, o = σ(pre_i), σ(pre_f), σ(pre_o)      g = tanh(pre_g)
    c′ = f ⊙ c + i ⊙ g                          h′ = o ⊙ tanh(c′)

Padded steps are masked by arithmetic: with m = 1 inside a sequence and 0 past its end,
state = m ⊙ new + (1 − m) ⊙ old, for h and for c, and the output is m ⊙ new.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from tinyllm.autograd.functional import stack
from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.dropout import check_probability, dropout
from tinyllm.nn.init import orthogonal, xavier_uniform
from tinyllm.nn.module import Module, Parameter
from tinyllm.random import PCG32, default_init_rng

__all__ = ["FORGET_BIAS", "LSTM", "LSTMCell", "lstm_cell"]

FORGET_BIAS = 1.0  # bias_ih's forget block at init, so a fresh LSTM keeps σ(1) ≈ 73% of its cell
GATES = ("i", "f", "g", "o")  # torch's order of the four row blocks


# ------------------------------------------------------------------------ helpers
def _fail(name: str, wanted: str, got: Any) -> NoReturn:
    raise ValueError(f"{name}: expected {wanted}, got {got}")


def _as_tensor(value: Any, name: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return Tensor(value)
    except (TypeError, ValueError):
        _fail(name, "a Tensor or an array-like of numbers", repr(value))


def _expect_shape(t: Tensor, name: str, *sizes: int | None) -> None:
    """``t`` must have len(sizes) axes; a None size accepts anything."""
    if t.ndim != len(sizes) or any(s is not None and s != n for s, n in zip(sizes, t.shape)):
        wanted = "[" + ", ".join("any" if s is None else str(s) for s in sizes) + "]"
        _fail(name, f"shape {wanted}", f"shape {tuple(t.shape)}")


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        _fail(name, "a positive int", repr(value))
    return int(value)


def _two_parts(state: Any, name: str, parts: str) -> tuple[Any, Any]:
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        _fail(name, f"a pair {parts}", type(state).__name__)
    return state[0], state[1]


def _generator(rng: Any) -> PCG32:
    if rng is None:
        return default_init_rng()
    if not isinstance(rng, PCG32):
        raise TypeError(f"rng: expected a tinyllm.random.PCG32 or None, got {type(rng).__name__}")
    return rng


def _length_mask(lengths: Any, steps: int, batch: int, dtype: Any) -> np.ndarray:
    """mask[t, b, 0] = 1 while step t is inside sequence b, else 0."""
    raw = np.asarray(lengths.data if isinstance(lengths, Tensor) else lengths)
    if raw.shape != (batch,):
        _fail("lengths", f"{batch} lengths, one per sequence", f"shape {raw.shape}")
    if raw.dtype.kind not in "iuf" or not np.all(raw == np.floor(raw)):
        _fail("lengths", "whole numbers", raw.tolist())
    whole = raw.astype(np.int64)
    if whole.min() < 1 or whole.max() > steps:
        _fail("lengths", f"values between 1 and T = {steps}", whole.tolist())
    return (np.arange(steps)[:, None] < whole[None, :]).astype(dtype)[:, :, None]


# ----------------------------------------------------------------------- one step
def lstm_cell(
    x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any
) -> tuple[Tensor, Tensor]:
    """One step: ``(h′, c′)`` for x [B, D], h [B, H], c [B, H], w_ih [4H, D], w_hh [4H, H],
    b_ih [4H] and b_hh [4H], each block of rows one gate (i, f, g, o).

    Raises:
        ValueError: naming the argument whose shape does not fit.
    """
    x, h, c = _as_tensor(x, "x"), _as_tensor(h, "h"), _as_tensor(c, "c")
    w_ih, w_hh = _as_tensor(w_ih, "w_ih"), _as_tensor(w_hh, "w_hh")
    b_ih, b_hh = _as_tensor(b_ih, "b_ih"), _as_tensor(b_hh, "b_hh")
    _expect_shape(x, "x", None, None)
    batch, d_in = x.shape
    _expect_shape(h, "h", batch, None)
    hidden = h.shape[1]
    _expect_shape(c, "c", batch, hidden)
    _expect_shape(w_ih, "w_ih", 4 * hidden, d_in)
    _expect_shape(w_hh, "w_hh", 4 * hidden, hidden)
    _expect_shape(b_ih, "b_ih", 4 * hidden)
    _expect_shape(b_hh, "b_hh", 4 * hidden)

    pre = {}
    for k, gate in enumerate(GATES):
        rows = slice(k * hidden, (k + 1) * hidden)
        bias = b_ih[rows] + b_hh[rows]
        pre[gate] = x @ w_ih[rows].T + h @ w_hh[rows].T + bias
    input_gate = pre["i"].sigmoid()
    forget_gate = pre["f"].sigmoid()
    candidate = pre["g"].tanh()
    output_gate = pre["o"].sigmoid()

    c_next = forget_gate * c + input_gate * candidate
    h_next = output_gate * c_next.tanh()
    return h_next, c_next


# ----------------------------------------------------------------------- modules
def _fresh_weights(d_in: int, hidden: int, rng: PCG32) -> list[np.ndarray]:
    """[weight_ih, weight_hh, bias_ih, bias_hh] for one layer: gate by gate, a Xavier block of
    weight_ih and an orthogonal block of weight_hh; biases 0 but FORGET_BIAS in bias_ih's f."""
    w_blocks, u_blocks = [], []
    for _ in GATES:
        w_blocks.append(xavier_uniform((hidden, d_in), rng))
        u_blocks.append(orthogonal((hidden, hidden), rng))
    bias_ih = np.zeros((len(GATES), hidden), dtype=np.float32)
    bias_ih[GATES.index("f")] = FORGET_BIAS
    return [
        np.vstack(w_blocks),
        np.vstack(u_blocks),
        bias_ih.reshape(-1),
        np.zeros(4 * hidden, dtype=np.float32),
    ]


PARAMETER_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")


class LSTMCell(Module):
    """One LSTM step as a module: weight_ih [4H, D], weight_hh [4H, H], bias_ih [4H] and
    bias_hh [4H], in that order (torch's names)."""

    def __init__(self, d_in: int, d_h: int, rng: PCG32 | None = None) -> None:
        super().__init__()
        self.d_in = _positive_int(d_in, "d_in")
        self.d_h = _positive_int(d_h, "d_h")
        arrays = _fresh_weights(self.d_in, self.d_h, _generator(rng))
        for name, array in zip(PARAMETER_NAMES, arrays):
            setattr(self, name, Parameter(array))

    def forward(self, x: Any, state: Any = None) -> tuple[Tensor, Tensor]:
        """``(h′, c′)`` from x [B, d_in] and state (h, c), both zeros when state is None."""
        x = _as_tensor(x, "x")
        _expect_shape(x, "x", None, self.d_in)
        if state is None:
            blank = np.zeros((x.shape[0], self.d_h), dtype=x.dtype)
            state = (blank, blank.copy())
        h, c = _two_parts(state, "state", "(h, c)")
        h, c = _as_tensor(h, "state h"), _as_tensor(c, "state c")
        _expect_shape(h, "state h", x.shape[0], self.d_h)
        _expect_shape(c, "state c", x.shape[0], self.d_h)
        return lstm_cell(x, h, c, *(getattr(self, name) for name in PARAMETER_NAMES))


class LSTM(Module):
    """Stacked LSTM layers over a time-first sequence; parameters weight_ih_l{k},
    weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k} per layer k. Dropout between layers, in
    training mode only."""

    def __init__(
        self,
        d_in: int,
        d_h: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        rng: PCG32 | None = None,
    ) -> None:
        super().__init__()
        self.d_in = _positive_int(d_in, "d_in")
        self.d_h = _positive_int(d_h, "d_h")
        self.num_layers = _positive_int(num_layers, "num_layers")
        self.dropout = check_probability(dropout, "dropout")
        rng = _generator(rng)
        self._mask_rng = rng.substream("dropout")
        for layer in range(self.num_layers):
            width = self.d_in if layer == 0 else self.d_h
            for name, array in zip(PARAMETER_NAMES, _fresh_weights(width, self.d_h, rng)):
                setattr(self, f"{name}_l{layer}", Parameter(array))

    def forward(
        self, x: Any, state: Any = None, lengths: Any = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x [T, B, d_in]; state (h0, c0) each [num_layers, B, d_h] (zeros when None);
        lengths: B ints in 1..T. Returns (out [T, B, d_h], (h_n, c_n))."""
        x = _as_tensor(x, "x")
        _expect_shape(x, "x", None, None, self.d_in)
        steps, batch = x.shape[0], x.shape[1]
        if steps == 0 or batch == 0:
            _fail("x", "at least one step and one sequence", f"shape {tuple(x.shape)}")
        if state is None:
            blank = np.zeros((self.num_layers, batch, self.d_h), dtype=x.dtype)
            state = (blank, blank.copy())
        h0, c0 = _two_parts(state, "state", "(h0, c0)")
        h0, c0 = _as_tensor(h0, "state h0"), _as_tensor(c0, "state c0")
        _expect_shape(h0, "state h0", self.num_layers, batch, self.d_h)
        _expect_shape(c0, "state c0", self.num_layers, batch, self.d_h)
        mask = None
        if lengths is not None:
            mask = _length_mask(lengths, steps, batch, x.dtype)

        sequence = x
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            weights = [getattr(self, f"{name}_l{layer}") for name in PARAMETER_NAMES]
            h, c = h0[layer], c0[layer]
            outputs = []
            for t in range(steps):
                h_step, c_step = lstm_cell(sequence[t], h, c, *weights)
                if mask is None:
                    h, c = h_step, c_step
                    outputs.append(h_step)
                else:
                    keep = mask[t]  # 1.0 inside the sequence, 0.0 in its padding
                    h = h_step * keep + h * (1.0 - keep)
                    c = c_step * keep + c * (1.0 - keep)
                    outputs.append(h_step * keep)
            last_h.append(h)
            last_c.append(c)
            sequence = stack(outputs)
            if layer + 1 < self.num_layers:
                sequence = dropout(sequence, self.dropout, self._mask_rng, self.training)
        return sequence, (stack(last_h), stack(last_c))
