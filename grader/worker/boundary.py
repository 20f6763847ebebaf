"""The boundary between a test process and the implementation process: data only.

A message is a 4-byte big-endian length, a JSON object of at most :data:`HEADER_CAP` bytes,
then the raw bytes of the arrays it describes (``"arrays": [{"dtype": "<f8", "shape": [2, 3]},
...]``), in order. Arrays are decoded with :func:`numpy.frombuffer` from a fixed list of plain
numeric dtypes (never ``object``), so nothing that crosses can be code: no pickle, no
``allow_pickle``. Either side may be hostile to the other's parser only through these bytes,
and every field is checked where it is read (:class:`BoundaryError` otherwise).

Values (arguments, outputs) are carried as small JSON objects, ``{"t": kind, ...}``, that
refer to the message's arrays by index; :func:`describe` makes one, :func:`restore` turns one
back into a Python value. A tuple or list that holds tensors or generators (a recurrent layer's state
``(h, c)``) crosses as ``{"t": "tuple" | "seq", "items": [...]}``, at most :data:`MAX_ITEMS`
items and :data:`MAX_DEPTH` levels deep; a plain numeric one as one array.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from typing import Any, Callable, Sequence

import numpy as np

__all__ = [
    "ARRAY_CAP",
    "HEADER_CAP",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "BoundaryError",
    "Connection",
    "Message",
    "describe",
    "restore",
    "rng_state",
    "set_rng_state",
]

_LENGTH = struct.Struct(">I")
HEADER_CAP = 1 << 20  # bytes of JSON in one message
ARRAY_CAP = 256 << 20  # bytes of arrays in one message
_MAX_ARRAYS = 4096
MAX_ITEMS = 64  # items of one tuple or list of values
MAX_DEPTH = 8  # tuples within tuples
_MAX_NDIM = 16
# Plain numbers only: an object, void or string dtype never crosses as an array.
_DTYPES = frozenset(
    np.dtype(name).str
    for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)


class BoundaryError(ValueError):
    """A message that does not follow the schema (or a stream that ended inside one)."""


class Message:
    """A decoded message: its JSON header and its arrays."""

    __slots__ = ("header", "arrays")

    def __init__(self, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        self.header = header
        self.arrays = arrays

    def array(self, index: Any) -> np.ndarray:
        """The array at ``index``, checked to be one of this message's."""
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(self.arrays):
            raise BoundaryError(f"an array index must be in 0..{len(self.arrays) - 1}, got {index!r}")
        return self.arrays[index]


class Connection:
    """One end of the boundary: whole messages out in one write, in through one buffer."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def _fill(self, size: int) -> None:
        """Read until the buffer holds ``size`` bytes. What was read stays in the buffer even
        when a signal handler raises during a read (a test interrupted at its time limit), so
        the next call finds the stream whole."""
        while len(self._buffer) < size:
            chunk = os.read(self.fd, max(1 << 16, size - len(self._buffer)))
            if not chunk:
                raise BoundaryError(f"the stream ended inside a message ({len(self._buffer)} of {size} bytes)")
            self._buffer += chunk

    def send(self, header: dict[str, Any], arrays: Sequence[np.ndarray] = ()) -> None:
        """Send ``header`` and ``arrays`` (each made contiguous) as one message.

        Raises:
            BoundaryError: if an array is not one of plain numbers (a student's Tensor whose
                ``data`` is something else: the request fails, the stream stays whole).
        """
        try:
            arrays = [np.ascontiguousarray(a) for a in arrays]
        except Exception as exc:  # noqa: BLE001 - whatever a foreign .data raises, nothing is sent
            raise BoundaryError(f"an array to send must be of plain numbers: {type(exc).__name__}: {exc}"[:300]) from None
        for a in arrays:
            if a.dtype.str not in _DTYPES:
                raise BoundaryError(f"an array to send must be of plain numbers, got dtype {a.dtype}")
        body = json.dumps(
            {**header, "arrays": [{"dtype": a.dtype.str, "shape": list(a.shape)} for a in arrays]},
            separators=(",", ":"),
        ).encode()
        if len(body) > HEADER_CAP:
            raise BoundaryError(f"a message header must be at most {HEADER_CAP} bytes, got {len(body)}")
        view = memoryview(b"".join([_LENGTH.pack(len(body)), body, *(a.tobytes() for a in arrays)]))
        # Whole or not at all: a test interrupted at its time limit in the middle of a write
        # would leave half a message for the next call to misread; the interrupt waits until
        # the message is out.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        try:
            while view:
                view = view[os.write(self.fd, view):]
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def receive(self) -> Message | None:
        """The next message, or None at a clean end of the stream. Nothing is taken from the
        buffer until the whole message is in it (see :meth:`_fill`).

        Raises:
            BoundaryError: if the bytes do not follow the schema.
        """
        if not self._buffer:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        self._fill(_LENGTH.size)
        (size,) = _LENGTH.unpack_from(self._buffer)
        if size > HEADER_CAP:
            raise BoundaryError(f"a message header must be at most {HEADER_CAP} bytes, got a length of {size}")
        start = _LENGTH.size + size
        self._fill(start)
        try:
            header = json.loads(bytes(self._buffer[_LENGTH.size:start]))
        except (ValueError, RecursionError) as exc:
            raise BoundaryError(f"a message header must be JSON: {exc}") from None
        if not isinstance(header, dict):
            raise BoundaryError(f"a message header must be a JSON object, got {type(header).__name__}")
        specs = header.pop("arrays", [])
        if not isinstance(specs, list) or len(specs) > _MAX_ARRAYS:
            raise BoundaryError(f"a message's arrays must be a list of at most {_MAX_ARRAYS}")
        shapes = [_checked_spec(spec) for spec in specs]
        sizes = [dtype.itemsize * int(np.prod(shape, dtype=np.int64)) for dtype, shape in shapes]
        if sum(sizes) > ARRAY_CAP:
            raise BoundaryError(f"a message's arrays must hold at most {ARRAY_CAP} bytes, got {sum(sizes)}")
        self._fill(start + sum(sizes))
        arrays = []
        for (dtype, shape), nbytes in zip(shapes, sizes):
            data = bytes(self._buffer[start:start + nbytes])
            start += nbytes
            arrays.append(np.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape).copy())
        del self._buffer[:start]
        return Message(header, arrays)


def _checked_spec(spec: Any) -> tuple[np.dtype, tuple[int, ...]]:
    if not isinstance(spec, dict) or spec.get("dtype") not in _DTYPES:
        raise BoundaryError(f"an array must name a plain numeric dtype, got {spec!r:.200}")
    shape = spec.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_NDIM
        or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= ARRAY_CAP for n in shape)
    ):
        raise BoundaryError(f"an array's shape must be a list of at most {_MAX_NDIM} sizes, got {shape!r:.200}")
    return np.dtype(spec["dtype"]), tuple(shape)


# ----------------------------------------------------------------------------- values
_SCALARS = (bool, int, float, str)
_TEXT_CAP = 200  # characters of a repr or a type name that cross for a value nothing else fits


class _Opaque:
    """What the implementation sees for an argument that cannot cross as data: an object
    whose type name and repr are the original's (so error messages read the same)."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


def describe(value: Any, arrays: list[np.ndarray], tensor: type, rng: type | None = None) -> dict[str, Any]:
    """``value`` as a JSON value of the schema, its arrays appended to ``arrays``.

    ``tensor`` is the Tensor class of the sending side (a Tensor crosses as its array and
    whether it requires a gradient); ``rng`` its PCG32 class (a generator crosses as its state).
    """
    if value is None:
        return {"t": "none"}
    if isinstance(value, tensor):
        arrays.append(value.data)
        return {"t": "tensor", "a": len(arrays) - 1, "grad": bool(value.requires_grad)}
    if rng is not None and isinstance(value, rng):
        return {"t": "rng", **rng_state(value)}
    if isinstance(value, _SCALARS) and type(value) in _SCALARS:
        return {"t": "scalar", "v": value if not isinstance(value, str) else value[:4096]}
    if isinstance(value, np.generic) and value.dtype.str in _DTYPES:
        arrays.append(np.asarray(value))
        return {"t": "npscalar", "a": len(arrays) - 1}
    if isinstance(value, np.ndarray) and value.dtype.str in _DTYPES:
        arrays.append(value)
        return {"t": "array", "a": len(arrays) - 1}
    if isinstance(value, (list, tuple)):
        try:
            converted = np.asarray(value)
        except (ValueError, TypeError):
            converted = None
        if converted is not None and converted.dtype.str in _DTYPES:
            arrays.append(converted)
            return {"t": "list", "a": len(arrays) - 1}
    return {"t": "opaque", "type": type(value).__name__[:_TEXT_CAP], "repr": _safe_repr(value)}


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)[:_TEXT_CAP]
    except Exception:  # noqa: BLE001 - a repr that raises still needs some text
        return f"<{type(value).__name__[:_TEXT_CAP]} object>"


def rng_state(generator: Any) -> dict[str, int]:
    """A PCG32's whole state, as integers."""
    return {
        "seed": int(generator.seed), "stream": int(generator.stream),
        "inc": int(generator._inc), "state": int(generator._state),
    }


def set_rng_state(generator: Any, state: dict[str, Any]) -> None:
    """Give a PCG32 the state :func:`rng_state` read (each field checked to be an integer)."""
    values = {}
    for key in ("seed", "stream", "inc", "state"):
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
            raise BoundaryError(f"a generator's {key} must be an integer in [0, 2**64), got {value!r:.100}")
        values[key] = value
    generator.seed, generator.stream = values["seed"], values["stream"]
    generator._inc, generator._state = values["inc"], values["state"]


def restore(
    value: Any, message: Message, *, tensor: Callable[[np.ndarray, bool], Any],
    rng: Callable[[dict[str, Any]], Any] | None = None, depth: int = 0,
) -> Any:
    """A value :func:`describe` made (or a tuple of them), back as a Python value:
    ``tensor(array, requires_grad)`` builds a Tensor, ``rng(state)`` a generator; a tuple's
    items are restored in order.

    Raises:
        BoundaryError: if ``value`` does not follow the schema.
    """
    if not isinstance(value, dict):
        raise BoundaryError(f"a value must be a JSON object, got {type(value).__name__}")
    kind = value.get("t")
    if kind in ("tuple", "seq"):
        items = value.get("items")
        if not isinstance(items, list) or len(items) > MAX_ITEMS or depth >= MAX_DEPTH:
            raise BoundaryError(f"a tuple of values must list at most {MAX_ITEMS} items, at most {MAX_DEPTH} deep")
        restored = [restore(item, message, tensor=tensor, rng=rng, depth=depth + 1) for item in items]
        return tuple(restored) if kind == "tuple" else restored
    if kind == "none":
        return None
    if kind == "scalar":
        scalar = value.get("v")
        if not isinstance(scalar, _SCALARS):
            raise BoundaryError(f"a scalar must be a bool, int, float or str, got {scalar!r:.100}")
        return scalar
    if kind == "tensor":
        return tensor(message.array(value.get("a")), value.get("grad") is True)
    if kind == "array":
        return message.array(value.get("a"))
    if kind == "npscalar":
        return message.array(value.get("a"))[()]
    if kind == "list":
        return message.array(value.get("a")).tolist()
    if kind == "rng" and rng is not None:
        return rng(value)
    if kind == "opaque":
        name, text = value.get("type"), value.get("repr")
        if not isinstance(name, str) or not isinstance(text, str) or not name.isidentifier():
            raise BoundaryError("an opaque value must carry its type's name and its repr as text")
        return type(name[:_TEXT_CAP], (_Opaque,), {})(text[:_TEXT_CAP])
    raise BoundaryError(f"a value's kind must be one of the schema's, got {kind!r:.100}")
