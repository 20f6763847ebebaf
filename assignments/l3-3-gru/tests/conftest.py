"""Fixtures for the course tests: the torch goldens and one comparison rule.

The tests themselves import only ``tinyllm``, numpy and pytest, so they run against any
implementation of the contract that is first on ``sys.path``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

_DEFAULT_GOLDENS = Path(__file__).resolve().parents[1] / "goldens" / "gru_torch.npz"


@pytest.fixture(scope="session")
def goldens() -> dict[str, np.ndarray]:
    """Every array of ``goldens/gru_torch.npz`` (or of ``$MUTAGRADE_GOLDENS``), by name."""
    path = Path(os.environ.get("MUTAGRADE_GOLDENS", _DEFAULT_GOLDENS))
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _assert_close(actual, expected, what: str) -> None:
    actual = np.asarray(getattr(actual, "data", actual))
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    # Goldens are float64; an implementation computing in float32 is held to float32 precision.
    tol = 1e-10 if actual.dtype == np.float64 else 1e-5
    worst = float(np.max(np.abs(actual - expected), initial=0.0))
    assert np.allclose(actual, expected, rtol=tol, atol=tol), (
        f"{what}: max |difference| {worst:.3g} exceeds {tol:g}"
    )


@pytest.fixture(scope="session")
def assert_close():
    """``assert_close(actual, expected, what)``: equal within 1e-10 (float64) or 1e-5."""
    return _assert_close
