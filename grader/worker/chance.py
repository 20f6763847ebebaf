"""Chance in a test process, under a seed: the same draws in every run, whatever the variant.

A test that draws chance and states no expected value (``assert random.random() > 0.05``)
must not kill a mutant by luck. Every run of a grading runs under one of its two seeds (the
worker's hash seed), and at the start of each test every source of randomness the test
process can draw from is set from that seed and the test's id: ``random`` (the module's
functions and every new ``random.Random()``), ``os.urandom`` and ``os.getrandom``, and so
``random.SystemRandom``, ``secrets``, ``uuid.uuid4``, numpy's global generator and
``numpy.random.default_rng()`` (numpy draws its entropy through ``secrets``), and the hash
seed itself (fixed per worker). A test that draws chance then behaves the same on every
variant under one seed unless the outputs differ; the reference runs under both seeds, so a
test whose verdict depends on the draws shows up as flaky there.

Standard library and numpy only: this runs in the worker's children.
"""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any

import numpy as np

__all__ = ["begin", "install"]


class _Stream:
    """Bytes that look random and are fixed by a key: SHA-256 of the key and a counter."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.counter = 0
        self.left = b""

    def read(self, size: int) -> bytes:
        out = [self.left]
        have = len(self.left)
        while have < size:
            block = hashlib.sha256(self.key + self.counter.to_bytes(8, "big")).digest()
            self.counter += 1
            out.append(block)
            have += len(block)
        data = b"".join(out)
        self.left = data[size:]
        return data[:size]


_state: dict[str, Any] = {"seed": 0, "stream": _Stream(b"")}
_original_seed = random.Random.seed


def _size(size: Any, name: str) -> int:
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"{name}() argument must be an int, not {type(size).__name__}")
    if size < 0:
        raise ValueError("negative argument not allowed")
    return size


def urandom(size: int, /) -> bytes:
    """``os.urandom`` under the run's seed."""
    return _state["stream"].read(_size(size, "urandom"))


def getrandom(size: int, /, flags: int = 0) -> bytes:
    """``os.getrandom`` under the run's seed."""
    return _state["stream"].read(_size(size, "getrandom"))


def _seeded(self: random.Random, a: Any = None, version: int = 2) -> None:
    """``random.Random.seed``: no seed means one drawn from the run's stream, not the OS's."""
    if a is None:
        a = int.from_bytes(urandom(32), "big")
    _original_seed(self, a, version)


def install(seed: int) -> None:
    """In a test process, before any submitted code runs: every source of randomness draws
    from a stream fixed by ``seed`` (and, from :func:`begin` on, by the test)."""
    _state["seed"] = seed
    os.urandom = urandom
    if hasattr(os, "getrandom"):
        os.getrandom = getrandom
    random._urandom = urandom  # type: ignore[attr-defined]  # SystemRandom, secrets
    random.Random.seed = _seeded  # type: ignore[method-assign]
    begin("(collection)")


def begin(test_id: str) -> None:
    """A test (or the collection) begins: its draws start afresh from the seed and its id, so
    they do not depend on which tests ran before it either."""
    key = hashlib.sha256(f"{_state['seed']}\0{test_id}".encode()).digest()
    _state["stream"] = _Stream(key)
    random.seed(int.from_bytes(urandom(32), "big"))
    np.random.seed(int.from_bytes(urandom(4), "big"))
