"""A reverse-mode autograd Tensor over numpy arrays, in the spirit of micrograd.

Every operation builds its output and attaches a ``_backward`` closure that *adds* the
output's gradient, pulled back through the operation, into its inputs' ``grad``.
``backward()`` sorts the graph topologically once and runs the closures in reverse.
Derived operations are built from primitives (``a - b`` is ``a + (-b)``, ``a / b`` is
``a * b**-1``), so each gradient rule is written once.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

__all__ = ["Tensor", "as_tensor"]

_Send = Callable[["Tensor", np.ndarray], None]


def _to_array(data: Any, dtype: Any = None) -> np.ndarray:
    """An ndarray of ``data``: numpy dtypes are kept, Python floats become float64."""
    if isinstance(data, Tensor):
        data = data.data
    array = np.array(data, dtype=dtype, copy=True)
    if dtype is None and array.dtype.kind in "biu" and not isinstance(data, (np.ndarray, np.generic)):
        # Python numbers are values to compute with: float64, as for Python floats. A numpy
        # array keeps its dtype (an integer Tensor can index another).
        array = array.astype(np.float64)
    return array


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting added or stretched to reach ``shape``."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


class Tensor:
    """An n-dimensional array that records the operations applied to it.

    Args:
        data: array-like; a numpy array keeps its dtype, Python floats become float64.
        dtype: optional numpy dtype to convert ``data`` to.
        requires_grad: whether ``backward`` should fill ``.grad`` for this tensor.

    Gradients accumulate: each ``backward`` adds into ``.grad``; set it to ``None`` to reset.
    """

    __array_priority__ = 1000  # so that ``ndarray + Tensor`` defers to Tensor.__radd__

    def __init__(self, data: Any, dtype: Any = None, requires_grad: bool = False) -> None:
        self.data: np.ndarray = _to_array(data, dtype)
        self.grad: np.ndarray | None = None
        if requires_grad and self.data.dtype.kind not in "fc":
            raise ValueError(f"requires_grad needs a floating dtype, got {self.data.dtype}")
        self.requires_grad = bool(requires_grad)
        self._parents: tuple[Tensor, ...] = ()
        self._backward: Callable[[np.ndarray, _Send], None] | None = None
        self._op = ""

    # ------------------------------------------------------------------ basics
    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({self.data!r}{grad})"

    def numpy(self) -> np.ndarray:
        """The underlying array (not a copy)."""
        return self.data

    def item(self) -> float:
        return self.data.item()

    def detach(self) -> Tensor:
        """A new leaf tensor sharing no graph with this one."""
        return Tensor(self.data)

    # ------------------------------------------------------------- graph core
    def _child(self, data: np.ndarray, parents: Iterable[Tensor], op: str) -> Tensor:
        parents = tuple(parents)
        out = Tensor.__new__(Tensor)
        out.data = data
        out.grad = None
        out.requires_grad = any(p.requires_grad for p in parents)
        out._parents = parents if out.requires_grad else ()
        out._backward = None
        out._op = op
        return out

    def _accumulate(self, grad: np.ndarray) -> None:
        if not self.requires_grad:
            return
        if grad.shape != self.data.shape:
            raise RuntimeError(
                f"gradient shape must equal the tensor's shape {self.data.shape}, "
                f"got {grad.shape} (from op {self._op or 'leaf'!r})"
            )
        grad = grad.astype(self.data.dtype, copy=False)
        self.grad = grad.copy() if self.grad is None else self.grad + grad

    def backward(self, grad: Any = None) -> None:
        """Back-propagate from this tensor, adding into ``.grad`` of every tensor on the way.

        Args:
            grad: the gradient of the final scalar with respect to this tensor; defaults
                to ones of this tensor's shape.

        Raises:
            RuntimeError: if this tensor does not require a gradient.
            ValueError: if ``grad`` does not have this tensor's shape.
        """
        if not self.requires_grad:
            raise RuntimeError("backward() needs a tensor with requires_grad=True")
        seed = np.ones_like(self.data) if grad is None else _to_array(grad, self.data.dtype)
        if seed.shape != self.data.shape:
            raise ValueError(f"grad must have shape {self.data.shape}, got {seed.shape}")

        order: list[Tensor] = []
        seen: set[int] = set()
        stack: list[tuple[Tensor, bool]] = [(self, False)]
        while stack:  # iterative post-order DFS: long sequences would exhaust recursion
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((p, False) for p in node._parents if id(p) not in seen)

        # Interior gradients are gathered fresh for this pass; every tensor that requires a
        # gradient then adds what reached it into its ``.grad`` (leaves accumulate across passes).
        pending: dict[int, np.ndarray] = {id(self): seed}

        def send(parent: Tensor, grad: np.ndarray) -> None:
            if not parent.requires_grad:
                return
            grad = _unbroadcast(np.asarray(grad), parent.data.shape)
            prev = pending.get(id(parent))
            pending[id(parent)] = grad if prev is None else prev + grad

        for node in reversed(order):
            g = pending.pop(id(node), None)
            if g is None:
                continue
            node._accumulate(g)
            if node._backward is not None:
                node._backward(g, send)

    # -------------------------------------------------------------- primitives
    def __add__(self, other: Any) -> Tensor:
        other = as_tensor(other, like=self)
        out = self._child(self.data + other.data, (self, other), "add")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g)
            send(other, g)

        out._backward = _backward
        return out

    def __mul__(self, other: Any) -> Tensor:
        other = as_tensor(other, like=self)
        out = self._child(self.data * other.data, (self, other), "mul")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g * other.data)
            send(other, g * self.data)

        out._backward = _backward
        return out

    def __neg__(self) -> Tensor:
        out = self._child(-self.data, (self,), "neg")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, -g)

        out._backward = _backward
        return out

    def __pow__(self, exponent: float) -> Tensor:
        if isinstance(exponent, Tensor):
            raise TypeError("exponent must be a Python number, got a Tensor")
        out = self._child(self.data**exponent, (self,), "pow")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g * exponent * self.data ** (exponent - 1))

        out._backward = _backward
        return out

    def __matmul__(self, other: Any) -> Tensor:
        other = as_tensor(other, like=self)
        if self.ndim != 2 or other.ndim != 2:
            raise ValueError(
                f"matmul operands must be 2-D, got shapes {self.shape} and {other.shape}"
            )
        if self.shape[1] != other.shape[0]:
            raise ValueError(
                f"matmul inner sizes must agree, got {self.shape} @ {other.shape}"
            )
        out = self._child(self.data @ other.data, (self, other), "matmul")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g @ other.data.T)
            send(other, self.data.T @ g)

        out._backward = _backward
        return out

    def __getitem__(self, index: Any) -> Tensor:
        if isinstance(index, Tensor):
            index = index.data
        out = self._child(self.data[index], (self,), "getitem")

        def _backward(g: np.ndarray, send: _Send) -> None:
            grad = np.zeros_like(self.data)
            np.add.at(grad, index, g)
            send(self, grad)

        out._backward = _backward
        return out

    def transpose(self, *axes: int) -> Tensor:
        """Permute the axes (reverse them when none are given), like ``ndarray.transpose``."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        perm = tuple(axes) if axes else tuple(reversed(range(self.ndim)))
        out = self._child(self.data.transpose(perm), (self,), "transpose")
        # numpy accepts negative axes (checked just above); the inverse needs them in 0..ndim-1.
        inverse = tuple(np.argsort([axis % self.ndim for axis in perm]))

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g.transpose(inverse))

        out._backward = _backward
        return out

    def reshape(self, *shape: int) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        out = self._child(self.data.reshape(shape), (self,), "reshape")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g.reshape(self.data.shape))

        out._backward = _backward
        return out

    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        out = self._child(
            np.asarray(self.data.sum(axis=axis, keepdims=keepdims)), (self,), "sum"
        )

        def _backward(g: np.ndarray, send: _Send) -> None:
            grad = g
            if not keepdims and axis is not None:
                grad = np.expand_dims(grad, axis)
            send(self, np.broadcast_to(grad, self.data.shape))

        out._backward = _backward
        return out

    def exp(self) -> Tensor:
        value = np.exp(self.data)
        out = self._child(value, (self,), "exp")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g * value)

        out._backward = _backward
        return out

    def log(self) -> Tensor:
        out = self._child(np.log(self.data), (self,), "log")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g / self.data)

        out._backward = _backward
        return out

    def sigmoid(self) -> Tensor:
        # 0.5 * (1 + tanh(x / 2)) is the logistic function without overflow for large |x|.
        value = 0.5 * (1.0 + np.tanh(0.5 * self.data))
        out = self._child(value, (self,), "sigmoid")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g * value * (1.0 - value))

        out._backward = _backward
        return out

    def tanh(self) -> Tensor:
        value = np.tanh(self.data)
        out = self._child(value, (self,), "tanh")

        def _backward(g: np.ndarray, send: _Send) -> None:
            send(self, g * (1.0 - value * value))

        out._backward = _backward
        return out

    # ----------------------------------------------------------------- derived
    def __radd__(self, other: Any) -> Tensor:
        return as_tensor(other, like=self) + self

    def __sub__(self, other: Any) -> Tensor:
        return self + (-as_tensor(other, like=self))

    def __rsub__(self, other: Any) -> Tensor:
        return as_tensor(other, like=self) + (-self)

    def __rmul__(self, other: Any) -> Tensor:
        return as_tensor(other, like=self) * self

    def __truediv__(self, other: Any) -> Tensor:
        return self * as_tensor(other, like=self) ** -1

    def __rtruediv__(self, other: Any) -> Tensor:
        return as_tensor(other, like=self) * self**-1

    def __rmatmul__(self, other: Any) -> Tensor:
        return as_tensor(other, like=self) @ self

    @property
    def T(self) -> Tensor:
        return self.transpose()

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Tensor:
        count = self.data.size if axis is None else np.prod(
            [self.data.shape[a] for a in np.atleast_1d(axis)]
        )
        return self.sum(axis=axis, keepdims=keepdims) * (1.0 / float(count))


def as_tensor(value: Any, like: Tensor | None = None) -> Tensor:
    """``value`` itself if it is a Tensor, else a constant Tensor of it.

    A Python number takes the dtype of ``like`` so float32 graphs stay float32.
    """
    if isinstance(value, Tensor):
        return value
    if like is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        return Tensor(np.asarray(value, dtype=like.dtype))
    return Tensor(value)
