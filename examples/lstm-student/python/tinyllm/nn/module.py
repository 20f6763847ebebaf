"""Module: the base of every layer, with ordered parameters and state dicts."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterator, Mapping

import numpy as np

from tinyllm.autograd.tensor import Tensor

__all__ = ["Module", "Parameter"]


class Parameter(Tensor):
    """A Tensor that a Module registers as one of its parameters (it requires a gradient)."""

    def __init__(self, data: Any, dtype: Any = None) -> None:
        super().__init__(data, dtype=dtype, requires_grad=True)

    def __repr__(self) -> str:
        return f"Parameter({self.data!r})"


class Module:
    """Base class of layers: parameters and sub-modules are registered in assignment order.

    Assigning a :class:`Parameter` or a :class:`Module` to an attribute registers it; the
    order of assignment is the order of ``named_parameters()`` and of ``state_dict()``.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.__init__ must call super().__init__() "
                f"before assigning {name!r}"
            )
        # Re-assigning a parameter keeps its place in the order; anything else unregisters it.
        if not isinstance(value, Parameter):
            self._parameters.pop(name, None)
        if not isinstance(value, Module):
            self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        object.__delattr__(self, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    # ------------------------------------------------------------ parameters
    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """(name, parameter) pairs: this module's in assignment order, then each sub-module's."""
        for name, param in self._parameters.items():
            yield prefix + name, param
        for name, module in self._modules.items():
            yield from module.named_parameters(prefix=f"{prefix}{name}.")

    def parameters(self) -> list[Parameter]:
        """The parameters, in the order of ``named_parameters()``."""
        return [param for _, param in self.named_parameters()]

    def zero_grad(self) -> None:
        """Forget every parameter's accumulated gradient."""
        for param in self.parameters():
            param.grad = None

    def state_dict(self) -> OrderedDict[str, np.ndarray]:
        """An ordered dict of parameter name -> a copy of its array."""
        return OrderedDict((name, param.data.copy()) for name, param in self.named_parameters())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Copy arrays into the parameters by name.

        The key set must equal ``state_dict()``'s and each array must have its parameter's
        shape. Each parameter takes the array's floating dtype, so a float64 state dict gives
        a float64 module (as gradient checks need).

        Raises:
            ValueError: on missing or unexpected keys, a wrong shape or a non-float array;
                nothing is loaded then.
        """
        params = OrderedDict(self.named_parameters())
        missing = [k for k in params if k not in state]
        unexpected = [k for k in state if k not in params]
        if missing or unexpected:
            raise ValueError(
                f"state dict keys must be exactly {list(params)}, "
                f"got missing {missing} and unexpected {unexpected}"
            )
        arrays = {}
        for name, param in params.items():
            value = state[name]
            array = np.array(value.data if isinstance(value, Tensor) else value, copy=True)
            if array.shape != param.data.shape:
                raise ValueError(
                    f"state dict entry {name!r} must have shape {param.data.shape}, "
                    f"got {array.shape}"
                )
            if array.dtype.kind != "f":
                raise ValueError(
                    f"state dict entry {name!r} must be a floating array, got dtype {array.dtype}"
                )
            arrays[name] = array
        for name, array in arrays.items():
            params[name].data = array

    # ------------------------------------------------------------------ modes
    def train(self, mode: bool = True) -> Module:
        """Set training mode here and in every sub-module; returns self."""
        object.__setattr__(self, "training", bool(mode))
        for module in self._modules.values():
            module.train(mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode (``train(False)``); returns self."""
        return self.train(False)
