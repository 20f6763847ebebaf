"""A suite that tries to tell its author what the hidden mutants compute wrongly, through every
text a run produces: it passes on the reference and the wheats, and where the GRU's output (or its
gradient) differs from the contract's formulas computed here with numpy the way a hidden mutant's
does, it prints, warns, skips, fails, raises and calls ``pytest.exit`` with a marked message
saying so, or fails to import (a collection error). No marked text may reach anything a student
reads; staff's report keeps what staff need of it.

It detects s04's formula (the reset gate leaves the recurrent bias ``b_hn`` out) by the
output, and s12's (``z * h`` on raw arrays) by a right output with a wrong gradient; both are
hidden in ``assignments/l3-3-gru/manifest.toml``. ``SUITE`` holds every attack, ``pytest.exit``
last so that a full matrix runs the others first. ``POLICY_CLEAN`` is the attack the policy check
lets through (no ``warnings``), for the service, which always checks it: ``pytest.exit`` first of
the tests that fail, since a mutant's run stops at its first kill, and no collection error.
"""

from __future__ import annotations

__all__ = ["FILE", "MARK", "POLICY_CLEAN", "SUITE"]

MARK = "SECRET-"
FILE = "test_spy.py"

_DETECT = '''
import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell

_RNG = np.random.default_rng(7)
B, D, H = 2, 3, 4
X = _RNG.normal(size=(B, D))
H0 = _RNG.normal(size=(B, H))
W_IH = _RNG.normal(size=(3 * H, D))
W_HH = _RNG.normal(size=(3 * H, H))
B_IH = _RNG.normal(size=3 * H)
B_HH = _RNG.normal(size=3 * H)


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _expected(h, reset_bias=True):
    """h' by the contract's formulas, or with the reset gate leaving b_hn out."""
    a = X @ W_IH.T + B_IH
    product = h @ W_HH.T
    u = product + B_HH
    r = _sigmoid(a[:, :H] + u[:, :H])
    z = _sigmoid(a[:, H:2 * H] + u[:, H:2 * H])
    recurrent = r * u[:, 2 * H:] if reset_bias else r * product[:, 2 * H:] + B_HH[2 * H:]
    n = np.tanh(a[:, 2 * H:] + recurrent)
    return (1.0 - z) * n + z * h


def _spy():
    """What this implementation gets wrong the way a hidden mutant does: "bias", "grad" or ""."""
    h = Tensor(H0.copy(), requires_grad=True)
    out = gru_cell(Tensor(X), h, Tensor(W_IH), Tensor(W_HH), Tensor(B_IH), Tensor(B_HH))
    right = np.allclose(out.data, _expected(H0))
    if not right:
        return "bias" if np.allclose(out.data, _expected(H0, reset_bias=False)) else ""
    out.sum().backward()
    numeric = np.zeros_like(H0)
    for index in np.ndindex(*H0.shape):
        step = np.zeros_like(H0)
        step[index] = 1e-6
        numeric[index] = (_expected(H0 + step).sum() - _expected(H0 - step).sum()) / 2e-6
    return "" if h.grad is not None and np.allclose(h.grad, numeric, atol=1e-5) else "grad"


SPY = _spy()
'''

_COLLECT = '''
if SPY == "grad":  # a collection error, every test of the file with it
    raise RuntimeError("SECRET-COLLECT: z * h is computed on raw arrays, dh' / dh is cut")
'''

_TESTS = {
    "warns": '''

def test_warns():
    import warnings

    if SPY == "bias":
        warnings.warn("SECRET-WARN: the reset gate leaves b_hn out")
''',
    "prints": '''

def test_prints():
    if SPY == "bias":
        print("SECRET-PRINT: the reset gate leaves b_hn out")
''',
    "skips": '''

def test_skips():
    if SPY == "bias":
        pytest.skip("SECRET-SKIP: the reset gate leaves b_hn out")
''',
    "asserts": '''

def test_asserts():
    assert SPY != "bias", "SECRET-ASSERT: the reset gate leaves b_hn out"
''',
    "raises": '''

def test_raises():
    if SPY == "bias":
        raise ValueError("SECRET-RAISE: n = tanh(a_n + r * (W_hn h) + b_hn)")
''',
    "exits": '''

def test_exits():
    if SPY == "bias":
        pytest.exit("SECRET-EXIT: n = tanh(a_n + r * (W_hn h) + b_hn), not r * (W_hn h + b_hn)")
''',
}

# pytest runs a file's tests in their order, and pytest.exit ends the run.
SUITE = _DETECT + _COLLECT + "".join(_TESTS[n] for n in ("warns", "prints", "skips", "asserts", "raises", "exits"))
POLICY_CLEAN = _DETECT + "".join(_TESTS[n] for n in ("prints", "skips", "exits", "asserts", "raises"))
