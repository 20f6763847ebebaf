"""Contract of L3.2: the LSTM students build, in torch's gate order (i, f, g, o).

    i  = σ(x W_iiᵀ + b_ii + h W_hiᵀ + b_hi)
    f  = σ(x W_ifᵀ + b_if + h W_hfᵀ + b_hf)
    g  = tanh(x W_igᵀ + b_ig + h W_hgᵀ + b_hg)
    o  = σ(x W_ioᵀ + b_io + h W_hoᵀ + b_ho)
    c′ = f ⊙ c + i ⊙ g
    h′ = o ⊙ tanh(c′)

Bad arguments raise ValueError at the call site, naming the argument, what was expected and
what was given.
"""

from typing import Any

from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.module import Module, Parameter
from tinyllm.random import PCG32

__all__ = ["FORGET_BIAS", "LSTM", "LSTMCell", "lstm_cell"]

FORGET_BIAS: float

def lstm_cell(
    x: Any, h: Any, c: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any
) -> tuple[Tensor, Tensor]:
    """(h′, c′) for x [B, D], h [B, H] and c [B, H] (Tensors or array-likes); w_ih [4H, D],
    w_hh [4H, H], b_ih [4H], b_hh [4H], gate blocks stacked i, f, g, o."""

class LSTMCell(Module):
    """Parameters weight_ih [4H, D], weight_hh [4H, H], bias_ih [4H], bias_hh [4H], in that
    order. Init: four Xavier-uniform input blocks, four orthogonal recurrent blocks, bias_ih
    0 but FORGET_BIAS (1.0) in its forget block, bias_hh 0; rng defaults to
    PCG32(0).substream("init")."""

    weight_ih: Parameter
    weight_hh: Parameter
    bias_ih: Parameter
    bias_hh: Parameter
    def __init__(self, d_in: int, d_h: int, rng: PCG32 | None = None) -> None: ...
    def forward(self, x: Any, state: Any = None) -> tuple[Tensor, Tensor]:
        """x [B, d_in], state (h, c) each [B, d_h] (both zeros when None) -> (h′, c′), each
        [B, d_h]."""

class LSTM(Module):
    """Parameters weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k} for each layer k,
    in torch's order, initialised as LSTMCell's. Dropout (probability ``dropout``) on the
    outputs of every layer but the last, in training mode only."""

    def __init__(
        self,
        d_in: int,
        d_h: int,
        num_layers: int = 1,
        dropout: float = 0.0,
        rng: PCG32 | None = None,
    ) -> None: ...
    def forward(
        self, x: Any, state: Any = None, lengths: Any = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x [T, B, d_in]; state (h0, c0) each [num_layers, B, d_h] (both zeros when None);
        lengths: B ints in 1..T, freezing a finished sequence's state and cell, zeroing its
        outputs, and letting no gradient into its padding. Returns (out [T, B, d_h],
        (h_n [num_layers, B, d_h], c_n [num_layers, B, d_h]))."""
