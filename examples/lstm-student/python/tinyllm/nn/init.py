"""Weight initialisers: Xavier-uniform and orthogonal, drawn from a PCG32."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyllm.random import PCG32

__all__ = ["orthogonal", "xavier_uniform"]


def _matrix_shape(shape: tuple[int, ...], what: str) -> tuple[int, int]:
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"{what} needs a 2-D shape of positive sizes, got {shape}")
    return shape[0], shape[1]


def xavier_uniform(
    shape: tuple[int, int], rng: PCG32, gain: float = 1.0, dtype: Any = np.float32
) -> np.ndarray:
    """Uniform in [-b, b] with ``b = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio).

    For a weight of shape [fan_out, fan_in], as a layer's ``x @ W.T`` uses it.

    Raises:
        ValueError: if ``shape`` is not 2-D with positive sizes.
    """
    fan_out, fan_in = _matrix_shape(tuple(shape), "xavier_uniform")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, (fan_out, fan_in)).astype(dtype)


def orthogonal(shape: tuple[int, int], rng: PCG32, gain: float = 1.0, dtype: Any = np.float32) -> np.ndarray:
    """A (semi-)orthogonal matrix: orthonormal rows or columns, whichever are fewer.

    QR of a standard normal matrix, with the signs of R's diagonal moved into Q so the
    result is uniformly distributed (Saxe et al., 2013; Mezzadri, 2007).

    Raises:
        ValueError: if ``shape`` is not 2-D with positive sizes.
    """
    rows, cols = _matrix_shape(tuple(shape), "orthogonal")
    tall = (max(rows, cols), min(rows, cols))
    q, r = np.linalg.qr(rng.normal(tall))
    q = q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))
    if rows < cols:
        q = q.T
    return (gain * q).astype(dtype)
