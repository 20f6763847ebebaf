"""PCG32: O'Neill's PCG-XSH-RR 64/32 generator, with named, deterministic substreams.

Every random number tinyllm draws (initialisation, dropout masks) comes from a PCG32, so a
seed fixes a model bit for bit on every platform. The default generator for
initialisation is ``PCG32(0).substream("init")``.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np

__all__ = ["DEFAULT_STREAM", "PCG32", "default_init_rng"]

_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1
_MULTIPLIER = 6364136223846793005
# The stream whose increment (2 * stream + 1) is PCG's default 64-bit increment.
DEFAULT_STREAM = 1442695040888963407 >> 1


class PCG32:
    """A PCG-XSH-RR 64/32 generator, seeded as ``pcg32_srandom_r(seed, stream)``.

    Args:
        seed: the initial state, any integer (taken modulo 2**64).
        stream: selects one of 2**63 independent sequences (taken modulo 2**63).

    Raises:
        TypeError: if ``seed`` or ``stream`` is not an integer.
    """

    def __init__(self, seed: int, stream: int = DEFAULT_STREAM) -> None:
        for name, value in (("seed", seed), ("stream", stream)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise TypeError(f"PCG32 {name} must be an integer, got {type(value).__name__}")
        self.seed = int(seed) & _MASK64
        self.stream = int(stream) & (_MASK64 >> 1)
        self._inc = ((self.stream << 1) | 1) & _MASK64
        self._state = 0
        self.next_u32()
        self._state = (self._state + self.seed) & _MASK64
        self.next_u32()

    def __repr__(self) -> str:
        return f"PCG32(seed={self.seed}, stream={self.stream})"

    def next_u32(self) -> int:
        """The next 32-bit output."""
        old = self._state
        self._state = (old * _MULTIPLIER + self._inc) & _MASK64
        xorshifted = (((old >> 18) ^ old) >> 27) & _MASK32
        rot = old >> 59
        return ((xorshifted >> rot) | (xorshifted << ((-rot) & 31))) & _MASK32

    def random(self) -> float:
        """A float in [0, 1) with 53 random bits (two 32-bit outputs)."""
        high = self.next_u32() >> 5
        low = self.next_u32() >> 6
        return (high * 67108864.0 + low) / 9007199254740992.0

    def random_array(self, shape: Sequence[int] | int) -> np.ndarray:
        """Floats in [0, 1), float64, filled in C order."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = math.prod(shape)
        return np.array([self.random() for _ in range(count)], dtype=np.float64).reshape(shape)

    def uniform(self, low: float, high: float, shape: Sequence[int] | int) -> np.ndarray:
        """Floats uniform in [low, high), float64."""
        return low + (high - low) * self.random_array(shape)

    def normal(self, shape: Sequence[int] | int) -> np.ndarray:
        """Standard normal floats (Box-Muller), float64, filled in C order."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        count = math.prod(shape)
        values: list[float] = []
        while len(values) < count:
            radius = math.sqrt(-2.0 * math.log(1.0 - self.random()))  # 1 - u is in (0, 1]
            angle = 2.0 * math.pi * self.random()
            values.extend((radius * math.cos(angle), radius * math.sin(angle)))
        return np.array(values[:count], dtype=np.float64).reshape(shape)

    def substream(self, name: str) -> PCG32:
        """An independent generator derived from this one's seed, stream and ``name``.

        It depends only on how this generator was seeded, not on how far it has been used,
        so ``PCG32(0).substream("init")`` is the same generator wherever it is made.

        Raises:
            TypeError: if ``name`` is not a string.
        """
        if not isinstance(name, str):
            raise TypeError(f"substream name must be a str, got {type(name).__name__}")
        digest = hashlib.sha256(
            f"tinyllm.pcg32/1\0{self.seed}\0{self.stream}\0{name}".encode()
        ).digest()
        return PCG32(
            int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:16], "little") >> 1
        )


def default_init_rng() -> PCG32:
    """The generator layers initialise from when none is given: ``PCG32(0).substream("init")``."""
    return PCG32(0).substream("init")
