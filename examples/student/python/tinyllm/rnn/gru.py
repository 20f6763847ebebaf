"""The gated recurrent unit in torch's (and cuDNN's) form: gru_cell, GRUCell and GRU.

For an input ``x`` [B, D] and a state ``h`` [B, H], with the gate blocks stacked r, z, n::

    a  = x W_ihᵀ + b_ih                 the input part of all three pre-activations [B, 3H]
    u  = h W_hhᵀ + b_hh                 the recurrent part, bias included          [B, 3H]
    r  = σ(a_r + u_r)                   reset gate
    z  = σ(a_z + u_z)                   update gate
    n  = tanh(a_n + r ⊙ u_n)            candidate
    h′ = (1 − z) ⊙ n + z ⊙ h

Where the reset gate goes: Cho et al. (2014) compute ``n = tanh(W_in x + W_hn (r ⊙ h) + b_n)``,
resetting the state before the matrix product. cuDNN, and torch after it, reset the
recurrent part *after* its matrix product and its bias, ``r ⊙ (W_hn h + b_hn)``, so that one
matrix product serves all three gates before any gate is known. The two forms are different
functions with the same parameter shapes: weights trained in one form give wrong outputs in
the other, and nothing fails at load time. This module computes torch's form.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tinyllm.autograd.functional import sigmoid, stack, tanh, where
from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.dropout import check_probability, dropout
from tinyllm.nn.init import orthogonal, xavier_uniform
from tinyllm.nn.module import Module, Parameter
from tinyllm.random import PCG32, default_init_rng

__all__ = ["GRU", "GRUCell", "gru_cell"]


# ------------------------------------------------------------------ argument checks
def _tensor(value: Any, name: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return Tensor(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a Tensor or array-like of numbers, got {value!r}") from exc


def _check_shape(t: Tensor, name: str, expected: Sequence[Any], meaning: str) -> None:
    """Raise unless ``t.shape`` matches ``expected``, whose ``None`` entries match any size."""
    ok = len(t.shape) == len(expected) and all(
        e is None or e == s for e, s in zip(expected, t.shape)
    )
    if not ok:
        shown = ", ".join("?" if e is None else str(e) for e in expected)
        raise ValueError(f"{name} must have shape [{shown}] ({meaning}), got {tuple(t.shape)}")


def _check_size(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_rng(rng: Any) -> PCG32:
    if rng is None:
        return default_init_rng()
    if not isinstance(rng, PCG32):
        raise TypeError(f"rng must be a tinyllm.random.PCG32 or None, got {type(rng).__name__}")
    return rng


def _check_lengths(lengths: Any, steps: int, batch: int) -> np.ndarray:
    """The lengths as an int array of B values in 1..T."""
    values = np.asarray(lengths.data if isinstance(lengths, Tensor) else lengths)
    if values.ndim != 1 or values.shape[0] != batch:
        raise ValueError(
            f"lengths must hold one length per sequence ({batch} values), got shape {values.shape}"
        )
    if values.dtype.kind not in "iu" and not (
        values.dtype.kind == "f" and np.all(values == np.round(values))
    ):
        raise ValueError(f"lengths must be integers, got {values.tolist()}")
    values = values.astype(np.int64)
    if np.any(values < 1) or np.any(values > steps):
        raise ValueError(f"lengths must be in 1..{steps} (the sequence length T), got {values.tolist()}")
    return values


# ---------------------------------------------------------------------- the cell
def gru_cell(x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any) -> Tensor:
    """One GRU step in torch's gate order: the new state h′.

    Args:
        x: input [B, D], a Tensor or array-like.
        h: state [B, H], a Tensor or array-like.
        w_ih: input weights [3H, D], blocks r, z, n.
        w_hh: recurrent weights [3H, H], blocks r, z, n.
        b_ih: input bias [3H].
        b_hh: recurrent bias [3H].

    Returns:
        h′ [B, H].

    Raises:
        ValueError: if a shape does not fit the others (the message names the argument).
    """
    x, h = _tensor(x, "x"), _tensor(h, "h")
    w_ih, w_hh = _tensor(w_ih, "w_ih"), _tensor(w_hh, "w_hh")
    b_ih, b_hh = _tensor(b_ih, "b_ih"), _tensor(b_hh, "b_hh")
    _check_shape(x, "x", (None, None), "batch, input size")
    _check_shape(h, "h", (x.shape[0], None), "batch of x, hidden size")
    batch, d_in = x.shape
    hidden = h.shape[1]
    _check_shape(w_ih, "w_ih", (3 * hidden, d_in), "3 * hidden size, input size")
    _check_shape(w_hh, "w_hh", (3 * hidden, hidden), "3 * hidden size, hidden size")
    _check_shape(b_ih, "b_ih", (3 * hidden,), "3 * hidden size")
    _check_shape(b_hh, "b_hh", (3 * hidden,), "3 * hidden size")

    a = x @ w_ih.T + b_ih  # [B, 3H]: the input part of r, z, n
    u = h @ w_hh.T + b_hh  # [B, 3H]: the recurrent part, bias included
    a_r, a_z, a_n = a[:, :hidden], a[:, hidden : 2 * hidden], a[:, 2 * hidden :]
    u_r, u_z, u_n = u[:, :hidden], u[:, hidden : 2 * hidden], u[:, 2 * hidden :]

    r = sigmoid(a_r + u_r)
    z = sigmoid(a_z + u_z)
    n = tanh(a_n + r * u_n)  # reset after W_hn h + b_hn: torch's and cuDNN's form
    return n + z * (h - n)  # = (1 - z) * n + z * h, one product fewer


# --------------------------------------------------------------------- the layers
def _init_layer(d_in: int, hidden: int, rng: PCG32) -> tuple[np.ndarray, ...]:
    """One layer's weights: three Xavier input blocks, three orthogonal recurrent blocks,
    zero biases (each gate block initialised on its own, as torch's ``[3H, ·]`` is three
    matrices side by side)."""
    w_ih = np.concatenate([xavier_uniform((hidden, d_in), rng) for _ in range(3)])
    w_hh = np.concatenate([orthogonal((hidden, hidden), rng) for _ in range(3)])
    zeros = np.zeros(3 * hidden, dtype=np.float32)
    return w_ih, w_hh, zeros, zeros.copy()


class GRUCell(Module):
    """A single GRU cell with parameters ``weight_ih`` [3H, D], ``weight_hh`` [3H, H],
    ``bias_ih`` [3H] and ``bias_hh`` [3H] (torch's names and order).

    Args:
        d_in: input size D.
        d_h: hidden size H.
        rng: the generator to initialise from; defaults to ``PCG32(0).substream("init")``.

    Raises:
        ValueError: if a size is not a positive int.
        TypeError: if ``rng`` is not a PCG32.
    """

    def __init__(self, d_in: int, d_h: int, rng: PCG32 | None = None) -> None:
        super().__init__()
        self.d_in = _check_size(d_in, "d_in")
        self.d_h = _check_size(d_h, "d_h")
        w_ih, w_hh, b_ih, b_hh = _init_layer(self.d_in, self.d_h, _check_rng(rng))
        self.weight_ih = Parameter(w_ih)
        self.weight_hh = Parameter(w_hh)
        self.bias_ih = Parameter(b_ih)
        self.bias_hh = Parameter(b_hh)

    def forward(self, x: Any, h: Any = None) -> Tensor:
        """h′ for input ``x`` [B, d_in] and state ``h`` [B, d_h] (zeros when omitted).

        Raises:
            ValueError: if ``x`` or ``h`` has the wrong shape.
        """
        x = _tensor(x, "x")
        _check_shape(x, "x", (None, self.d_in), f"batch, input size {self.d_in}")
        if h is None:
            h = Tensor(np.zeros((x.shape[0], self.d_h), dtype=x.dtype))
        h = _tensor(h, "h")
        _check_shape(h, "h", (x.shape[0], self.d_h), f"batch of x, hidden size {self.d_h}")
        return gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


class GRU(Module):
    """A stack of GRU layers over a sequence, with torch's parameter names and order:
    ``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` for each layer k.

    Args:
        d_in: input size D.
        d_h: hidden size H.
        num_layers: how many layers are stacked; layer k > 0 reads layer k − 1's outputs.
        dropout: probability of dropout on the outputs of every layer but the last,
            in training mode only.
        rng: the generator to initialise from (and to derive dropout masks from); defaults
            to ``PCG32(0).substream("init")``.

    Raises:
        ValueError: if a size or the layer count is not a positive int, or ``dropout`` is
            not in [0, 1).
        TypeError: if ``rng`` is not a PCG32.
    """

    def __init__(
        self,
        d_in: int,
        d_h: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        rng: PCG32 | None = None,
    ) -> None:
        super().__init__()
        self.d_in = _check_size(d_in, "d_in")
        self.d_h = _check_size(d_h, "d_h")
        self.num_layers = _check_size(num_layers, "num_layers")
        self.dropout = check_probability(dropout, "dropout")
        rng = _check_rng(rng)
        self._dropout_rng = rng.substream("dropout")
        for k in range(self.num_layers):
            layer_in = self.d_in if k == 0 else self.d_h
            w_ih, w_hh, b_ih, b_hh = _init_layer(layer_in, self.d_h, rng)
            setattr(self, f"weight_ih_l{k}", Parameter(w_ih))
            setattr(self, f"weight_hh_l{k}", Parameter(w_hh))
            setattr(self, f"bias_ih_l{k}", Parameter(b_ih))
            setattr(self, f"bias_hh_l{k}", Parameter(b_hh))

    def _layer(self, k: int) -> tuple[Parameter, Parameter, Parameter, Parameter]:
        return (
            getattr(self, f"weight_ih_l{k}"),
            getattr(self, f"weight_hh_l{k}"),
            getattr(self, f"bias_ih_l{k}"),
            getattr(self, f"bias_hh_l{k}"),
        )

    def forward(self, x: Any, state: Any = None, lengths: Any = None) -> tuple[Tensor, Tensor]:
        """Run the sequence ``x`` [T, B, d_in] through every layer.

        Args:
            x: the inputs, time first.
            state: initial states [num_layers, B, d_h]; zeros when omitted.
            lengths: B ints in 1..T for a padded batch: sequence b is real for steps
                ``t < lengths[b]``. Past its length a sequence's state is frozen and its
                outputs are zero, and no gradient flows into its padding.

        Returns:
            ``(out, h_n)``: the last layer's outputs [T, B, d_h] and each layer's final
            state [num_layers, B, d_h].

        Raises:
            ValueError: if a shape or the lengths do not fit (the message names the argument).
        """
        x = _tensor(x, "x")
        _check_shape(x, "x", (None, None, self.d_in), f"T, B, input size {self.d_in}")
        steps, batch, _ = x.shape
        if steps < 1 or batch < 1:
            raise ValueError(f"x must hold at least one step and one sequence, got {x.shape}")
        if state is None:
            state = Tensor(np.zeros((self.num_layers, batch, self.d_h), dtype=x.dtype))
        state = _tensor(state, "state")
        _check_shape(
            state, "state", (self.num_layers, batch, self.d_h),
            f"num_layers {self.num_layers}, batch {batch}, hidden size {self.d_h}",
        )
        alive = None
        if lengths is not None:
            # alive[t, b] holds while step t is inside sequence b.
            alive = (np.arange(steps)[:, None] < _check_lengths(lengths, steps, batch)[None, :])
            alive = alive[:, :, None]

        layer_input = x
        finals = []
        for k in range(self.num_layers):
            weights = self._layer(k)
            h = state[k]
            outputs = []
            for t in range(steps):
                h_new = gru_cell(layer_input[t], h, *weights)
                if alive is None:
                    h = h_new
                    outputs.append(h_new)
                else:
                    h = where(alive[t], h_new, h)  # a finished sequence keeps its state
                    outputs.append(where(alive[t], h_new, 0.0))  # and emits zeros
            finals.append(h)
            layer_input = stack(outputs)
            if k < self.num_layers - 1:
                layer_input = dropout(layer_input, self.dropout, self._dropout_rng, self.training)
        return layer_input, stack(finals)
