"""Differentiable functions over Tensors: the op library the layers are written with."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tinyllm.autograd.tensor import Tensor, as_tensor

__all__ = [
    "concatenate",
    "matmul",
    "sigmoid",
    "stack",
    "tanh",
    "transpose",
    "where",
    "zeros",
]


def sigmoid(x: Any) -> Tensor:
    """The logistic function ``1 / (1 + exp(-x))``, elementwise."""
    return as_tensor(x).sigmoid()


def tanh(x: Any) -> Tensor:
    """The hyperbolic tangent, elementwise."""
    return as_tensor(x).tanh()


def matmul(a: Any, b: Any) -> Tensor:
    """The matrix product ``a @ b`` of two 2-D tensors."""
    return as_tensor(a) @ b


def transpose(x: Any, *axes: int) -> Tensor:
    """``x`` with its axes permuted (reversed when none are given)."""
    return as_tensor(x).transpose(*axes)


def zeros(shape: Sequence[int], dtype: Any = np.float64) -> Tensor:
    """A constant tensor of zeros."""
    return Tensor(np.zeros(tuple(shape), dtype=dtype))


def where(condition: Any, a: Any, b: Any) -> Tensor:
    """Elementwise ``a`` where ``condition`` holds, else ``b`` (all three broadcast).

    The gradient flows into ``a`` only where the condition holds and into ``b`` only
    where it does not.
    """
    cond = np.asarray(condition.data if isinstance(condition, Tensor) else condition, dtype=bool)
    a = as_tensor(a, like=b if isinstance(b, Tensor) else None)
    b = as_tensor(b, like=a)
    out = a._child(np.where(cond, a.data, b.data), (a, b), "where")

    def _backward(g: np.ndarray, send) -> None:
        send(a, np.where(cond, g, 0.0))
        send(b, np.where(cond, 0.0, g))

    out._backward = _backward
    return out


def stack(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis."""
    if len(tensors) == 0:
        raise ValueError("stack needs at least one tensor, got an empty sequence")
    parts = [as_tensor(t) for t in tensors]
    out = parts[0]._child(np.stack([p.data for p in parts], axis=axis), parts, "stack")

    def _backward(g: np.ndarray, send) -> None:
        for i, part in enumerate(parts):
            send(part, np.take(g, i, axis=axis))

    out._backward = _backward
    return out


def concatenate(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    if len(tensors) == 0:
        raise ValueError("concatenate needs at least one tensor, got an empty sequence")
    parts = [as_tensor(t) for t in tensors]
    out = parts[0]._child(np.concatenate([p.data for p in parts], axis=axis), parts, "concatenate")
    bounds = np.cumsum([p.data.shape[axis] for p in parts])[:-1]

    def _backward(g: np.ndarray, send) -> None:
        for part, piece in zip(parts, np.split(g, bounds, axis=axis)):
            send(part, piece)

    out._backward = _backward
    return out
