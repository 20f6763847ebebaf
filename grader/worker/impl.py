"""The implementation process: holds one variant of the module under test and computes for a
test process that never sees it.

It reads requests from its end of the boundary (:mod:`grader.worker.boundary`: a fixed schema
and plain arrays, nothing executable) and answers each with data: the outputs, the parameters
a constructor made, the gradients a backward pass found, or an error as its type's name and
its message, never a traceback, a frame or a line of source. The test process's stand-in
(:mod:`grader.worker.standin`) is the other end.

Requests (``op``):

- ``new``: build one of the contract's ``Module`` classes from ``args``/``kwargs``; the answer
  holds a handle, the parameters in registration order and the module's plain attributes.
- ``forward``: run a module with the parameter values, the training flag and the generators'
  states the test process holds now.
- ``call``: run one of the contract's functions.
- ``backward``: pull a gradient back through the graph of an earlier output.

The contract (:class:`~grader.core.protocol.Contract`, read from the module's stub) names what
may be built and called, and which constants' plain values go with the first answer; nothing
else of the variant is reachable. Generators (PCG32) cross as
their state, both ways: a constructor's ``rng`` and every later
draw from it are the variant's own.
"""

from __future__ import annotations

import types
from collections import OrderedDict
from typing import Any

import numpy as np

from grader.core.protocol import Contract
from grader.worker.boundary import (
    BoundaryError,
    Connection,
    Message,
    describe,
    restore,
    rng_state,
    set_rng_state,
)

__all__ = ["ERROR_TYPES", "constant_values", "error_message", "serve_implementation"]

# Exceptions cross as one of these builtin types (the first in the raised type's MRO), with
# the message as text; anything else crosses as RuntimeError.
ERROR_TYPES = (
    "ValueError", "TypeError", "IndexError", "KeyError", "AttributeError", "NotImplementedError",
    "ZeroDivisionError", "FloatingPointError", "OverflowError", "RecursionError", "MemoryError",
    "AssertionError", "ArithmeticError", "LookupError", "RuntimeError",
)
_MESSAGE_CAP = 4000
_INT_CAP = 2**63  # a constant's int beyond this is not a plain value (JSON cannot carry every int)
_GRAPHS = 64  # graphs kept for a later backward pass, the oldest forgotten first


class _Module:
    """A module the test process built, and the generators its constructor was given."""

    def __init__(self, module: Any, rngs: list[Any]) -> None:
        self.module = module
        self.rngs = rngs


class _Server:
    def __init__(self, variant: types.ModuleType, contract: Contract) -> None:
        from tinyllm.autograd.functional import concatenate
        from tinyllm.autograd.tensor import Tensor
        from tinyllm.nn.module import Module, Parameter
        from tinyllm.random import PCG32

        self.variant = variant
        self.classes, self.functions = contract.classes, contract.functions
        self.tensor_cls, self.parameter_cls, self.module_cls, self.rng_cls = Tensor, Parameter, Module, PCG32
        self.concatenate = concatenate
        self.modules: dict[int, _Module] = {}
        self.graphs: OrderedDict[int, tuple[Any, list[Any]]] = OrderedDict()
        self.counter = 0

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    # ------------------------------------------------------------------ values in
    def _inputs(self, message: Message, slots: list[Any], rngs: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        header = message.header
        args, kwargs = header.get("args", []), header.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise BoundaryError("a request's args must be a list and its kwargs an object")
        restore_one = self._restorer(message, slots, rngs)
        return [restore_one(a) for a in args], {str(k): restore_one(v) for k, v in kwargs.items()}

    def _restorer(self, message: Message, slots: list[Any], rngs: list[Any]) -> Any:
        def rng(state: dict[str, Any]) -> Any:
            generator = self.rng_cls(0)
            set_rng_state(generator, state)
            rngs.append(generator)
            return generator

        return lambda value: restore(value, message, tensor=lambda a, g: self._leaf(a, g, slots), rng=rng)

    def _leaf(self, array: np.ndarray, grad: bool, slots: list[Any], cls: Any = None) -> Any:
        """A leaf of the implementation's graph; one that requires a gradient is a slot, whose
        gradient a backward pass sends back."""
        if grad and array.dtype.kind not in "fc":
            raise BoundaryError(f"a tensor that requires a gradient must be floating, got {array.dtype}")
        made = (cls or self.tensor_cls)(array)
        made.requires_grad = grad
        if grad:
            slots.append(made)
        return made

    def _parameter(self, value: Any, message: Message, slots: list[Any]) -> Any:
        if isinstance(value, dict) and value.get("t") == "tensor" and value.get("param") is True:
            return self._leaf(message.array(value.get("a")), value.get("grad") is True, slots, self.parameter_cls)
        return restore(value, message, tensor=lambda a, g: self._leaf(a, g, slots))

    # ------------------------------------------------------------------ values out
    def _outputs(self, result: Any, arrays: list[np.ndarray], tensors: list[Any]) -> Any:
        if isinstance(result, self.tensor_cls):
            tensors.append(result)
            arrays.append(result.data)
            return {"t": "tensor", "a": len(arrays) - 1, "grad": bool(result.requires_grad)}
        if isinstance(result, (tuple, list)) and len(result) <= 64:
            return {"t": "tuple" if isinstance(result, tuple) else "seq",
                    "items": [self._outputs(item, arrays, tensors) for item in result]}
        return describe(result, arrays, self.tensor_cls, self.rng_cls)

    def _answer(self, result: Any, slots: list[Any], rngs: list[Any]) -> tuple[dict[str, Any], list[np.ndarray]]:
        arrays: list[np.ndarray] = []
        tensors: list[Any] = []
        out = self._outputs(result, arrays, tensors)
        graph = None
        if slots and any(t.requires_grad for t in tensors):
            root = self.concatenate([t.reshape(-1) for t in tensors])
            graph = self._next()
            self.graphs[graph] = (root, slots)
            while len(self.graphs) > _GRAPHS:
                self.graphs.popitem(last=False)
        return {"ok": True, "out": out, "graph": graph, "rngs": [rng_state(r) for r in rngs]}, arrays

    # ------------------------------------------------------------------ requests
    def handle(self, message: Message) -> tuple[dict[str, Any], list[np.ndarray]]:
        op = message.header.get("op")
        if op == "new":
            return self._new(message)
        if op == "forward":
            return self._forward(message)
        if op == "call":
            return self._call(message)
        if op == "backward":
            return self._backward(message)
        raise BoundaryError(f"a request's op must be new, forward, call or backward, got {op!r:.100}")

    def _new(self, message: Message) -> tuple[dict[str, Any], list[np.ndarray]]:
        name = message.header.get("cls")
        if name not in self.classes:
            raise BoundaryError(f"a module's class must be one of {list(self.classes)}, got {name!r:.100}")
        rngs: list[Any] = []
        args, kwargs = self._inputs(message, [], rngs)
        module = getattr(self.variant, name)(*args, **kwargs)
        handle = self._next()
        self.modules[handle] = _Module(module, rngs)
        arrays: list[np.ndarray] = []
        params = [{"name": n, "value": describe(p, arrays, self.tensor_cls)} for n, p in module.named_parameters()]
        attrs = {
            key: value for key, value in vars(module).items()
            if not key.startswith("_") and type(value) in (bool, int, float, str)
        }
        return {"ok": True, "handle": handle, "params": params, "attrs": attrs,
                "rngs": [rng_state(r) for r in rngs]}, arrays

    def _forward(self, message: Message) -> tuple[dict[str, Any], list[np.ndarray]]:
        header = message.header
        held = self.modules.get(header.get("handle")) if isinstance(header.get("handle"), int) else None
        if held is None:
            raise BoundaryError("a forward request must name a module built earlier")
        self._sync_rngs(held.rngs, header.get("rngs"))
        slots: list[Any] = []
        params, missing = header.get("params", {}), header.get("missing", [])
        if not isinstance(params, dict) or not isinstance(missing, list):
            raise BoundaryError("a forward request's params must be an object and its missing names a list")
        module = held.module
        for name, value in params.items():
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise BoundaryError(f"a parameter's name must be a public identifier, got {name!r:.100}")
            setattr(module, name, self._parameter(value, message, slots))
        for name in missing:
            if isinstance(name, str) and name.isidentifier() and not name.startswith("_") and hasattr(module, name):
                delattr(module, name)
        module.train(header.get("training") is not False)
        args, kwargs = self._inputs(message, slots, [])
        return self._answer(module(*args, **kwargs), slots, held.rngs)

    def _call(self, message: Message) -> tuple[dict[str, Any], list[np.ndarray]]:
        name = message.header.get("fn")
        if name not in self.functions:
            raise BoundaryError(f"a call must name one of {list(self.functions)}, got {name!r:.100}")
        slots: list[Any] = []
        args, kwargs = self._inputs(message, slots, [])
        return self._answer(getattr(self.variant, name)(*args, **kwargs), slots, [])

    def _backward(self, message: Message) -> tuple[dict[str, Any], list[np.ndarray]]:
        graph = message.header.get("graph")
        held = self.graphs.get(graph) if isinstance(graph, int) else None
        if held is None:
            raise RuntimeError(
                f"backward through an output that is no longer held: only the outputs of the "
                f"last {_GRAPHS} calls can be differentiated"
            )
        root, slots = held
        grad = message.array(message.header.get("grad"))
        if grad.shape != root.data.shape:
            raise BoundaryError(f"a backward request's gradient must have shape {root.data.shape}, got {grad.shape}")
        for slot in slots:
            slot.grad = None
        root.backward(grad.astype(root.data.dtype, copy=False))
        arrays: list[np.ndarray] = []
        grads = []
        for slot in slots:
            if slot.grad is None:
                grads.append(None)
            else:
                arrays.append(np.asarray(slot.grad))
                grads.append(len(arrays) - 1)
        return {"ok": True, "grads": grads}, arrays

    def _sync_rngs(self, rngs: list[Any], states: Any) -> None:
        if not isinstance(states, list) or len(states) != len(rngs):
            raise BoundaryError(f"a request must carry the state of each of its module's {len(rngs)} generators")
        for generator, state in zip(rngs, states):
            if not isinstance(state, dict):
                raise BoundaryError("a generator's state must be an object")
            set_rng_state(generator, state)


def error_message(exc: BaseException) -> dict[str, Any]:
    """An exception as data: the first of :data:`ERROR_TYPES` in its type's MRO, and its text."""
    name = next((k.__name__ for k in type(exc).__mro__ if k.__name__ in ERROR_TYPES and k.__module__ == "builtins"),
                "RuntimeError")
    if isinstance(exc, BoundaryError):
        name = "RuntimeError"
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        text = exc.args[0]
    else:
        try:
            text = str(exc)
        except Exception:  # noqa: BLE001 - a message that cannot be made is an empty one
            text = ""
    return {"ok": False, "type": name, "message": text[:_MESSAGE_CAP]}


def constant_values(variant: types.ModuleType, contract: Contract) -> dict[str, Any]:
    """The contract's constants as ``variant`` defines them, where each is a plain value (a
    bool, a float, an int below 2**63 in size or a str of at most 4,000 characters): data a run's stand-in takes as it is. One the variant
    lacks, or holds as anything else, is left out (the stand-in then lacks it too)."""
    values: dict[str, Any] = {}
    for name in contract.constants:
        value = getattr(variant, name, None)
        if (type(value) in (bool, float) or (type(value) is int and abs(value) < _INT_CAP)
                or (type(value) is str and len(value) <= _MESSAGE_CAP)):
            values[name] = value
    return values


def serve_implementation(connection: Connection, variant: types.ModuleType, contract: Contract) -> None:
    """Answer requests on ``connection`` with ``variant`` (what ``contract`` names of it) until
    the other end closes it (or sends something that is not a message: the stream cannot be
    read past that)."""
    server = _Server(variant, contract)
    while True:
        try:
            message = connection.receive()
        except BoundaryError as exc:
            connection.send(error_message(exc))
            return
        if message is None:
            return
        answer = {"id": message.header.get("id")}  # which request this answers (see standin._Channel)
        try:
            header, arrays = server.handle(message)
        except RecursionError as exc:
            header, arrays = error_message(exc), []
        except Exception as exc:  # noqa: BLE001 - the variant's errors are results, sent as data
            header, arrays = error_message(exc), []
        try:
            connection.send({**header, **answer}, arrays)
        except BoundaryError as exc:
            connection.send({**error_message(exc), **answer})
