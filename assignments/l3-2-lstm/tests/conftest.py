"""Fixtures for the L3.2 course tests: the torch goldens, one comparison rule, and the path
to ``tinyllm.rnn.lstm``.

The tests themselves import only ``tinyllm``, numpy and pytest, so they run against any
implementation of the contract that is first on ``sys.path``. The reference ``lstm.py`` lives
in this assignment's ``reference/tinyllm/rnn/``, outside the shared ``tinyllm`` package: it is
appended to ``tinyllm.rnn.__path__``, after the package's own folder, so a ``tinyllm`` that
has its own ``rnn/lstm.py`` keeps it, and one without takes the reference's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

_ASSIGNMENT = Path(__file__).resolve().parents[1]
_LSTM_FOLDER = _ASSIGNMENT / "reference" / "tinyllm" / "rnn"
_SHARED_REFERENCE = _ASSIGNMENT.parents[1] / "reference"  # the repository's tinyllm
_DEFAULT_GOLDENS = _ASSIGNMENT / "goldens" / "lstm_torch.npz"

# Last on the path: a tinyllm already importable (the one under test) comes first.
if str(_SHARED_REFERENCE) not in sys.path:
    sys.path.append(str(_SHARED_REFERENCE))

import tinyllm.rnn  # noqa: E402  (needs the path above)

if str(_LSTM_FOLDER) not in tinyllm.rnn.__path__:
    tinyllm.rnn.__path__.append(str(_LSTM_FOLDER))


@pytest.fixture(scope="session")
def goldens() -> dict[str, np.ndarray]:
    """Every array of ``goldens/lstm_torch.npz`` (or of ``$MUTAGRADE_GOLDENS``), by name."""
    path = Path(os.environ.get("MUTAGRADE_GOLDENS", _DEFAULT_GOLDENS))
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def _assert_close(actual, expected, what: str) -> None:
    actual = np.asarray(getattr(actual, "data", actual))
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (
        f"{what}: shape {actual.shape}, expected {expected.shape}"
    )
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
