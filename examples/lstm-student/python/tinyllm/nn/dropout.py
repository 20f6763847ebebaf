"""Dropout: zero each element with probability p in training mode, scale the rest by 1/(1-p)."""

from __future__ import annotations

from typing import Any

from tinyllm.autograd.tensor import Tensor, as_tensor
from tinyllm.nn.module import Module
from tinyllm.random import PCG32

__all__ = ["Dropout", "dropout"]


def check_probability(p: Any, name: str = "p") -> float:
    """``p`` as a float, if it is a number in [0, 1).

    Raises:
        ValueError: naming ``name``, if ``p`` is not a number in [0, 1).
    """
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1), got {p!r}")
    return float(p)


def dropout(x: Any, p: float, rng: PCG32, training: bool) -> Tensor:
    """Inverted dropout of ``x``: the identity unless ``training`` and ``p > 0``.

    Each element is zeroed with probability ``p`` (masks drawn from ``rng``) and the kept
    ones are scaled by ``1 / (1 - p)`` so the expected value is unchanged.

    Raises:
        ValueError: if ``p`` is not a number in [0, 1).
    """
    p = check_probability(p)
    x = as_tensor(x)
    if not training or p == 0.0:
        return x
    keep = rng.random_array(x.shape) >= p
    return x * (keep.astype(x.dtype) / (1.0 - p))


class Dropout(Module):
    """Inverted dropout; the identity in evaluation mode or when ``p == 0``.

    Args:
        p: probability of zeroing an element, in [0, 1).
        rng: the generator masks are drawn from; defaults to ``PCG32(0).substream("dropout")``.

    Raises:
        ValueError: if ``p`` is not in [0, 1).
    """

    def __init__(self, p: float = 0.5, rng: PCG32 | None = None) -> None:
        super().__init__()
        self.p = check_probability(p)
        self.rng = rng if rng is not None else PCG32(0).substream("dropout")

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.rng, self.training)
