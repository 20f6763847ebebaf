"""Contract of L3.3: the GRU students build, in torch's gate order (r, z, n).

    r  = σ(x W_irᵀ + b_ir + h W_hrᵀ + b_hr)
    z  = σ(x W_izᵀ + b_iz + h W_hzᵀ + b_hz)
    n  = tanh(x W_inᵀ + b_in + r ⊙ (h W_hnᵀ + b_hn))     reset after the recurrent bias
    h′ = (1 − z) ⊙ n + z ⊙ h

Bad arguments raise ValueError at the call site, naming the argument, what was expected and
what was given.
"""

from typing import Any

from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.module import Module, Parameter
from tinyllm.random import PCG32

__all__ = ["GRU", "GRUCell", "gru_cell"]

def gru_cell(x: Any, h: Any, w_ih: Any, w_hh: Any, b_ih: Any, b_hh: Any) -> Tensor:
    """h′ for x [B, D] and h [B, H] (Tensors or array-likes); w_ih [3H, D], w_hh [3H, H],
    b_ih [3H], b_hh [3H], gate blocks stacked r, z, n."""

class GRUCell(Module):
    """Parameters weight_ih [3H, D], weight_hh [3H, H], bias_ih [3H], bias_hh [3H], in that
    order. Init: three Xavier-uniform input blocks, three orthogonal recurrent blocks, zero
    biases; rng defaults to PCG32(0).substream("init")."""

    weight_ih: Parameter
    weight_hh: Parameter
    bias_ih: Parameter
    bias_hh: Parameter
    def __init__(self, d_in: int, d_h: int, rng: PCG32 | None = None) -> None: ...
    def forward(self, x: Any, h: Any = None) -> Tensor:
        """x [B, d_in], h [B, d_h] (zeros when None) -> h′ [B, d_h]."""

class GRU(Module):
    """Parameters weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k} for each layer k,
    in torch's order. Dropout (probability ``dropout``) on the outputs of every layer but the
    last, in training mode only."""

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
    ) -> tuple[Tensor, Tensor]:
        """x [T, B, d_in]; state [num_layers, B, d_h] (zeros when None); lengths: B ints in
        1..T, freezing a finished sequence's state, zeroing its outputs, and letting no
        gradient into its padding. Returns (out [T, B, d_h], h_n [num_layers, B, d_h])."""
