"""The module under test as a graded run's tests see it: a stand-in that computes nothing itself.

The variant under test lives in another process (:mod:`grader.worker.impl`), so no code,
source, frame or traceback of it is ever in the test process: the stand-in is the same in
every run, and a test can tell variants apart only by what they compute. :func:`build` makes it
from the module's contract (:class:`~grader.core.protocol.Contract`, read from the module's
stub by :mod:`grader.core.contract`): exactly the functions and ``Module`` classes the stub
declares, nothing written for one module. A class offers the constructor's ``rng``, parameters
under the implementation's names as local ``Parameter``\\ s a test may read and change in place,
``forward``/``__call__``, ``train``/``eval`` and ``state_dict``/``load_state_dict`` (the local
``Module``'s, the same code in every variant).

Each call sends its arguments, the module's current parameters, its training flag and its
generators' states across the boundary (:mod:`grader.worker.boundary`, data only) and builds
the outputs from the arrays that come back. An output that needs a gradient is one operation
of the local autograd graph whose backward pass asks the implementation for the gradients of
its inputs, so forward and backward are both the variant's. Errors come back as their type's
name and message and are raised here as that builtin type.
"""

from __future__ import annotations

import builtins
import types
from typing import Any

import numpy as np

from grader.core.protocol import Contract
from grader.worker.boundary import MAX_DEPTH, MAX_ITEMS, Connection, describe, rng_state, set_rng_state
from grader.worker.impl import ERROR_TYPES
from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.module import Module, Parameter
from tinyllm.random import PCG32

__all__ = ["build", "connect", "connection_constants", "take_constants"]


class _Channel:
    """The test process's end of the boundary. Every request carries an id, and its answer is
    the reply with that id: a reply to a call the test abandoned (interrupted at its time limit
    while the implementation computed) is dropped, so every later call gets its own answer."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.sent = 0

    def request(self, header: dict[str, Any], arrays: list[np.ndarray]) -> Any:
        self.sent += 1
        number = self.sent
        self.connection.send({**header, "id": number}, arrays)
        while True:
            reply = self.connection.receive()
            if reply is None:
                raise RuntimeError("the implementation under test stopped answering")
            if reply.header.get("id") == number:
                break
        if reply.header.get("ok") is not True:
            name = reply.header.get("type")
            kind = getattr(builtins, name) if name in ERROR_TYPES else RuntimeError
            raise kind(str(reply.header.get("message", ""))) from None
        return reply


_channel: list[_Channel] = []  # set once, when the run's process installs this module


def connect(connection: Connection) -> None:
    """Send this process's requests over ``connection`` (the run's end of the boundary)."""
    _channel[:] = [_Channel(connection)]


def _request(header: dict[str, Any], arrays: list[np.ndarray]) -> Any:
    if not _channel:
        raise RuntimeError("the module under test is not connected to an implementation")
    return _channel[0].request(header, arrays)


class _Call:
    """One request's values: arguments and parameters described in order, the tensors among
    them that need a gradient (the output's parents, in the implementation's slot order) and
    the generators whose state comes back."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.parents: list[Tensor] = []
        self.rngs: list[PCG32] = []

    def value(self, value: Any, *, parameter: bool = False, depth: int = 0) -> dict[str, Any]:
        if isinstance(value, (tuple, list)) and _holds_objects(value) and len(value) <= MAX_ITEMS and depth < MAX_DEPTH:
            # (h, c): each item crosses as itself, its tensors parents in order.
            return {"t": "tuple" if isinstance(value, tuple) else "seq",
                    "items": [self.value(item, parameter=parameter, depth=depth + 1) for item in value]}
        described = describe(value, self.arrays, Tensor, PCG32)
        if described["t"] == "tensor":
            if described["grad"]:
                self.parents.append(value)
            if parameter and isinstance(value, Parameter):
                described["param"] = True
        elif described["t"] == "rng":
            self.rngs.append(value)
        return described

    def inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"args": [self.value(a) for a in args], "kwargs": {k: self.value(v) for k, v in kwargs.items()}}

    def send(self, header: dict[str, Any]) -> Any:
        reply = _request(header, self.arrays)
        for generator, state in zip(self.rngs, reply.header.get("rngs", [])):
            set_rng_state(generator, state)
        return reply

    def outputs(self, reply: Any) -> Any:
        """The outputs as local Tensors: constants, or views of one node whose backward pass is
        the implementation's."""
        out = reply.header.get("out")
        graph = reply.header.get("graph")
        specs: list[dict[str, Any]] = []
        _tensor_specs(out, specs)
        node = None
        if graph is not None and self.parents and specs:
            data = np.concatenate([reply.array(s["a"]).reshape(-1) for s in specs])
            node = Tensor(np.zeros(0))._child(data, self.parents, "implementation")
            node._backward = _backward(graph, self.parents)
        offsets: dict[int, int] = {}
        start = 0
        for spec in specs:
            offsets[id(spec)] = start
            start += reply.array(spec["a"]).size
        return _build(out, reply, node, offsets)


def _holds_objects(value: tuple | list) -> bool:
    """Whether a tuple or list holds a Tensor or a generator, at any depth (else it is data)."""
    return any(isinstance(item, (Tensor, PCG32)) or (isinstance(item, (tuple, list)) and _holds_objects(item))
               for item in value)


def _tensor_specs(out: Any, specs: list[dict[str, Any]]) -> None:
    if isinstance(out, dict) and out.get("t") == "tensor":
        specs.append(out)
    elif isinstance(out, dict) and out.get("t") in ("tuple", "seq"):
        for item in out.get("items", []):
            _tensor_specs(item, specs)


def _build(out: Any, reply: Any, node: Tensor | None, offsets: dict[int, int]) -> Any:
    kind = out.get("t") if isinstance(out, dict) else None
    if kind == "tensor":
        array = reply.array(out["a"])
        if node is None:
            return Tensor(array)
        start = offsets[id(out)]
        return node[start:start + array.size].reshape(array.shape)
    if kind in ("tuple", "seq"):
        items = [_build(item, reply, node, offsets) for item in out.get("items", [])]
        return tuple(items) if kind == "tuple" else items
    if kind == "none":
        return None
    if kind == "scalar":
        return out.get("v")
    if kind in ("array", "npscalar", "list"):
        array = reply.array(out["a"])
        return array[()] if kind == "npscalar" else array.tolist() if kind == "list" else array
    raise RuntimeError(f"the implementation returned a value the stand-in cannot build: {kind!r}")


def _backward(graph: int, parents: list[Tensor]) -> Any:
    def backward(g: np.ndarray, send: Any) -> None:
        reply = _request({"op": "backward", "graph": graph, "grad": 0}, [np.asarray(g)])
        for parent, index in zip(parents, reply.header.get("grads", [])):
            if index is not None:
                send(parent, reply.array(index))

    return backward


class _Remote(Module):
    """A module whose constructor and forward pass run in the implementation process."""

    _remote_class = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        call = _Call()
        reply = call.send({"op": "new", "cls": self._remote_class, **call.inputs(args, kwargs)})
        names = []
        for entry in reply.header.get("params", []):
            value = entry["value"]
            setattr(self, entry["name"], Parameter(reply.array(value["a"])))
            names.append(entry["name"])
        for name, value in reply.header.get("attrs", {}).items():
            setattr(self, name, value)
        object.__setattr__(self, "_remote", (reply.header["handle"], call.rngs, names))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        handle, rngs, names = self._remote
        call = _Call()
        params: dict[str, Any] = {}
        missing: list[str] = []
        for name in names:
            try:
                value = getattr(self, name)
            except AttributeError:
                missing.append(name)
                continue
            params[name] = call.value(value, parameter=True)
        call.rngs.extend(rngs)
        header = {
            "op": "forward", "handle": handle, "params": params, "missing": missing,
            "training": bool(self.training), "rngs": [rng_state(r) for r in rngs],
            **call.inputs(args, kwargs),
        }
        return call.outputs(call.send(header))


def _function(name: str, module: str) -> Any:
    """The stand-in for the contract's function ``name``: its arguments cross, its outputs
    come back."""

    def function(*args: Any, **kwargs: Any) -> Any:
        call = _Call()
        return call.outputs(call.send({"op": "call", "fn": name, **call.inputs(args, kwargs)}))

    function.__name__ = function.__qualname__ = name
    function.__module__ = module
    return function


def connection_constants(header: dict[str, Any]) -> dict[str, Any]:
    """The constants an implementation process sent with its first answer (nothing else)."""
    constants = header.get("constants")
    return constants if isinstance(constants, dict) else {}


def take_constants(module: types.ModuleType, values: dict[str, Any], contract: Contract) -> None:
    """Set on the stand-in ``module`` each of the contract's constants the implementation sent
    as a plain value; any other name or value is ignored."""
    for name in contract.constants:
        value = values.get(name)
        if type(value) in (bool, int, float, str) and name not in (*contract.functions, *contract.classes):
            setattr(module, name, value)
            module.__all__ = [*module.__all__, name]


def build(contract: Contract) -> types.ModuleType:
    """The stand-in module for ``contract``: a function for each of its functions and a
    :class:`Module` for each of its classes, under the contract's module name."""
    module = types.ModuleType(contract.module, f"{contract.module}: served by the implementation under test")
    module.__package__ = contract.module.rpartition(".")[0]
    for name in contract.functions:
        setattr(module, name, _function(name, contract.module))
    for name in contract.classes:
        setattr(module, name, type(name, (_Remote,), {"_remote_class": name, "__module__": contract.module,
                                                     "__qualname__": name, "__doc__": None}))
    module.__all__ = [*contract.functions, *contract.classes]
    return module
