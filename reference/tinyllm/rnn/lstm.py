"""The long short-term memory in torch's (and cuDNN's) form: lstm_cell, LSTMCell and LSTM.

For an input ``x`` [B, D], a state ``h`` [B, H] and a cell ``c`` [B, H], with the gate blocks
stacked i, f, g, o::

    s  = x W_ihᵀ + b_ih + h W_hhᵀ + b_hh    all four pre-activations at once       [B, 4H]
    i  = σ(s_i)                             input gate
    f  = σ(s_f)                             forget gate
    g  = tanh(s_g)                          candidate
    o  = σ(s_o)                             output gate
    c′ = f ⊙ c + i ⊙ g
    h′ = o ⊙ tanh(c′)

The cell ``c`` is a sum, not a squashing: with f → 1 and i → 0 it, and its gradient, pass a
step unchanged, which is why the LSTM remembers. The output ``h′`` is squashed and gated.

The order of the blocks is a convention, and nothing checks it at load time: torch and cuDNN
stack i, f, g, o; ONNX stacks i, o, f, c. Weights stacked in one order give wrong outputs in
the other, with every shape right. The two biases only ever appear as their sum (torch keeps
both for cuDNN's sake); each receives the same gradient. This module computes torch's form.
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

__all__ = ["FORGET_BIAS", "LSTM", "LSTMCell", "lstm_cell"]

# The forget gate's share of ``bias_ih`` at initialisation (``bias_hh`` starts at 0): f starts
# at σ(1) ≈ 0.73, so a fresh LSTM keeps most of its cell (Gers et al., 2000; Jozefowicz et al.,
# 2015). Every other bias starts at 0.
FORGET_BIAS = 1.0


# ------------------------------------------------------------------ argument checks
def _tensor(value: Any, name: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return Tensor(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} must be a Tensor or array-like of numbers, got {value!r}"
        ) from exc


def _check_shape(t: Tensor, name: str, expected: Sequence[Any], meaning: str) -> None:
    """Raise unless ``t.shape`` matches ``expected``, whose ``None`` entries match any size."""
    ok = len(t.shape) == len(expected) and all(
        e is None or e == s for e, s in zip(expected, t.shape)
    )
    if not ok:
        shown = ", ".join("?" if e is None else str(e) for e in expected)
        raise ValueError(f"{name} must have shape [{shown}] ({meaning}), got {tuple(t.shape)}")


def _check_pair(state: Any, name: str, parts: str) -> tuple[Any, Any]:
    """``state`` as its two parts, if it is a tuple or list of two."""
    if isinstance(state, (tuple, list)) and len(state) == 2:
        return state[0], state[1]
    shown = type(state).__name__ if isinstance(state, (Tensor, np.ndarray)) else repr(state)
    raise ValueError(f"{name} must be a pair {parts}, got {shown}")


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
        raise ValueError(
            f"lengths must be in 1..{steps} (the sequence length T), got {values.tolist()}"
        )
    return values


# ---------------------------------------------------------------------- the cell
def lstm_cell(
    x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any
) -> tuple[Tensor, Tensor]:
    """One LSTM step in torch's gate order: the new state h′ and the new cell c′.

    Args:
        x: input [B, D], a Tensor or array-like.
        h: state [B, H], a Tensor or array-like.
        c: cell [B, H], a Tensor or array-like.
        w_ih: input weights [4H, D], blocks i, f, g, o.
        w_hh: recurrent weights [4H, H], blocks i, f, g, o.
        b_ih: input bias [4H].
        b_hh: recurrent bias [4H].

    Returns:
        ``(h′, c′)``, each [B, H].

    Raises:
        ValueError: if a shape does not fit the others (the message names the argument).
    """
    x, h, c = _tensor(x, "x"), _tensor(h, "h"), _tensor(c, "c")
    w_ih, w_hh = _tensor(w_ih, "w_ih"), _tensor(w_hh, "w_hh")
    b_ih, b_hh = _tensor(b_ih, "b_ih"), _tensor(b_hh, "b_hh")
    _check_shape(x, "x", (None, None), "batch, input size")
    _check_shape(h, "h", (x.shape[0], None), "batch of x, hidden size")
    batch, d_in = x.shape
    hidden = h.shape[1]
    _check_shape(c, "c", (batch, hidden), "batch of x, hidden size of h")
    _check_shape(w_ih, "w_ih", (4 * hidden, d_in), "4 * hidden size, input size")
    _check_shape(w_hh, "w_hh", (4 * hidden, hidden), "4 * hidden size, hidden size")
    _check_shape(b_ih, "b_ih", (4 * hidden,), "4 * hidden size")
    _check_shape(b_hh, "b_hh", (4 * hidden,), "4 * hidden size")

    s = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh  # [B, 4H]: every pre-activation, blocks i, f, g, o
    i = sigmoid(s[:, :hidden])
    f = sigmoid(s[:, hidden : 2 * hidden])
    g = tanh(s[:, 2 * hidden : 3 * hidden])
    o = sigmoid(s[:, 3 * hidden :])
    c_next = f * c + i * g  # the cell: a gated sum, no squashing
    return o * tanh(c_next), c_next


# --------------------------------------------------------------------- the layers
def _init_layer(d_in: int, hidden: int, rng: PCG32) -> tuple[np.ndarray, ...]:
    """One layer's weights: four Xavier input blocks, four orthogonal recurrent blocks (each
    gate block initialised on its own, as torch's ``[4H, ·]`` is four matrices side by side),
    ``bias_ih`` 0 but for the forget block's FORGET_BIAS, ``bias_hh`` 0."""
    w_ih = np.concatenate([xavier_uniform((hidden, d_in), rng) for _ in range(4)])
    w_hh = np.concatenate([orthogonal((hidden, hidden), rng) for _ in range(4)])
    b_ih = np.zeros(4 * hidden, dtype=np.float32)
    b_ih[hidden : 2 * hidden] = FORGET_BIAS
    return w_ih, w_hh, b_ih, np.zeros(4 * hidden, dtype=np.float32)


class LSTMCell(Module):
    """A single LSTM cell with parameters ``weight_ih`` [4H, D], ``weight_hh`` [4H, H],
    ``bias_ih`` [4H] and ``bias_hh`` [4H] (torch's names and order).

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

    def forward(self, x: Any, state: Any = None) -> tuple[Tensor, Tensor]:
        """``(h′, c′)`` for input ``x`` [B, d_in] and ``state = (h, c)``, each [B, d_h]
        (both zeros when omitted).

        Raises:
            ValueError: if ``state`` is not a pair, or ``x``, ``h`` or ``c`` has the wrong shape.
        """
        x = _tensor(x, "x")
        _check_shape(x, "x", (None, self.d_in), f"batch, input size {self.d_in}")
        if state is None:
            zeros = np.zeros((x.shape[0], self.d_h), dtype=x.dtype)
            state = (Tensor(zeros), Tensor(zeros.copy()))
        h, c = _check_pair(state, "state", "(h, c)")
        h, c = _tensor(h, "state[0] (h)"), _tensor(c, "state[1] (c)")
        meaning = f"batch of x, hidden size {self.d_h}"
        _check_shape(h, "state[0] (h)", (x.shape[0], self.d_h), meaning)
        _check_shape(c, "state[1] (c)", (x.shape[0], self.d_h), meaning)
        return lstm_cell(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)


class LSTM(Module):
    """A stack of LSTM layers over a sequence, with torch's parameter names and order:
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

    def forward(
        self, x: Any, state: Any = None, lengths: Any = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Run the sequence ``x`` [T, B, d_in] through every layer.

        Args:
            x: the inputs, time first.
            state: ``(h0, c0)``, the initial states and cells, each [num_layers, B, d_h];
                both zeros when omitted.
            lengths: B ints in 1..T for a padded batch: sequence b is real for steps
                ``t < lengths[b]``. Past its length a sequence's state and cell are frozen and
                its outputs are zero, and no gradient flows into its padding.

        Returns:
            ``(out, (h_n, c_n))``: the last layer's outputs [T, B, d_h] and each layer's final
            state and cell, each [num_layers, B, d_h].

        Raises:
            ValueError: if ``state`` is not a pair, or a shape or the lengths do not fit (the
                message names the argument).
        """
        x = _tensor(x, "x")
        _check_shape(x, "x", (None, None, self.d_in), f"T, B, input size {self.d_in}")
        steps, batch, _ = x.shape
        if steps < 1 or batch < 1:
            raise ValueError(f"x must hold at least one step and one sequence, got {x.shape}")
        if state is None:
            zeros = np.zeros((self.num_layers, batch, self.d_h), dtype=x.dtype)
            state = (Tensor(zeros), Tensor(zeros.copy()))
        h0, c0 = _check_pair(state, "state", "(h0, c0)")
        h0, c0 = _tensor(h0, "state[0] (h0)"), _tensor(c0, "state[1] (c0)")
        meaning = f"num_layers {self.num_layers}, batch {batch}, hidden size {self.d_h}"
        _check_shape(h0, "state[0] (h0)", (self.num_layers, batch, self.d_h), meaning)
        _check_shape(c0, "state[1] (c0)", (self.num_layers, batch, self.d_h), meaning)
        alive = None
        if lengths is not None:
            # alive[t, b] holds while step t is inside sequence b.
            alive = (np.arange(steps)[:, None] < _check_lengths(lengths, steps, batch)[None, :])
            alive = alive[:, :, None]

        layer_input = x
        finals_h, finals_c = [], []
        for k in range(self.num_layers):
            weights = self._layer(k)
            h, c = h0[k], c0[k]
            outputs = []
            for t in range(steps):
                h_new, c_new = lstm_cell(layer_input[t], h, c, *weights)
                if alive is None:
                    h, c = h_new, c_new
                    outputs.append(h_new)
                else:
                    # A finished sequence keeps its state and its cell, and emits zeros.
                    h = where(alive[t], h_new, h)
                    c = where(alive[t], c_new, c)
                    outputs.append(where(alive[t], h_new, 0.0))
            finals_h.append(h)
            finals_c.append(c)
            layer_input = stack(outputs)
            if k < self.num_layers - 1:
                layer_input = dropout(layer_input, self.dropout, self._dropout_rng, self.training)
        return layer_input, (stack(finals_h), stack(finals_c))
