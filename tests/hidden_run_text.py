"""A suite that tries to tell its author what the hidden mutants compute wrongly, through every
text a run produces: it passes on the reference and the wheats, and where the module's output (or
its gradient) differs from the contract's formulas computed here with numpy the way a hidden
mutant's does, it prints, warns, skips, fails, raises and calls ``pytest.exit`` with a marked
message saying so, or fails to import (a collection error). No marked text may reach anything a
student reads; staff's report keeps what staff need of it. One such suite per assignment.

The GRU's (``SUITE``) detects s04's formula (the reset gate leaves the recurrent bias ``b_hn``
out) by the output, and s12's (``z * h`` on raw arrays) by a right output with a wrong gradient;
both are hidden in ``assignments/l3-3-gru/manifest.toml``. The LSTM's (``LSTM_SUITE``) detects
s14's (``bias_hh`` left out) and s08's (the output gate reads the cell ``c`` instead of the state
``h``) by the output, and s13's (``f * c`` on raw arrays) by a right output with a wrong gradient
with respect to ``c``; all three are hidden in ``assignments/l3-2-lstm/manifest.toml``. ``SPIES``
names, per assignment, its suite and the hidden mutants it detects each way.

Each suite holds every attack, ``pytest.exit`` last so that a full matrix runs the others first.
``POLICY_CLEAN`` (``LSTM_POLICY_CLEAN``) is the GRU's (LSTM's) attack the policy check lets through (no ``warnings``), for the
service, which always checks it: ``pytest.exit`` first of the tests that fail, since a mutant's
run stops at its first kill, and no collection error.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FILE", "LSTM_POLICY_CLEAN", "LSTM_SUITE", "MARK", "POLICY_CLEAN", "SPIES", "SUITE", "Spy"]

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

# The LSTM's: torch's gate order i, f, g, o (tinyllm/rnn/lstm.pyi), the cell c nonzero and apart
# from the state h, so that every formula of a hidden mutant gives another (h', c').
_LSTM_DETECT = '''
import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.lstm import lstm_cell

_RNG = np.random.default_rng(7)
B, D, H = 2, 3, 4
X = _RNG.normal(size=(B, D))
H0 = _RNG.normal(size=(B, H))
C0 = 2.0 * _RNG.normal(size=(B, H))
W_IH = _RNG.normal(size=(4 * H, D))
W_HH = _RNG.normal(size=(4 * H, H))
B_IH = _RNG.normal(size=4 * H)
B_HH = _RNG.normal(size=4 * H)

# What an implementation computes wrongly, by the name _spy gives it.
WRONG = {
    "bias": "s = x W_ih + b_ih + h W_hh leaves bias_hh out",
    "peephole": "the output gate reads the cell c where it should read the state h",
}


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _expected(c, wrong=""):
    """(h', c') by the contract's formulas, or by those of a key of WRONG."""
    a = X @ W_IH.T + B_IH
    s = a + H0 @ W_HH.T + (0.0 if wrong == "bias" else B_HH)
    i = _sigmoid(s[:, :H])
    f = _sigmoid(s[:, H:2 * H])
    g = np.tanh(s[:, 2 * H:3 * H])
    o = _sigmoid((a + c @ W_HH.T + B_HH if wrong == "peephole" else s)[:, 3 * H:])
    c_next = f * c + i * g
    return o * np.tanh(c_next), c_next


def _spy():
    """What this implementation gets wrong the way a hidden mutant does: a key of WRONG,
    "grad" or ""."""
    # h needs a gradient too: where c's path is cut, the sum is still something to differentiate.
    h, c = Tensor(H0.copy(), requires_grad=True), Tensor(C0.copy(), requires_grad=True)
    h_next, c_next = lstm_cell(Tensor(X), h, c, Tensor(W_IH), Tensor(W_HH), Tensor(B_IH), Tensor(B_HH))
    got = np.concatenate([h_next.data, c_next.data])
    if not np.allclose(got, np.concatenate(_expected(C0))):
        return next((w for w in WRONG if np.allclose(got, np.concatenate(_expected(C0, w)))), "")
    (h_next.sum() + c_next.sum()).backward()
    numeric = np.zeros_like(C0)
    for index in np.ndindex(*C0.shape):
        step = np.zeros_like(C0)
        step[index] = 1e-6
        up, down = _expected(C0 + step), _expected(C0 - step)
        numeric[index] = (up[0].sum() + up[1].sum() - down[0].sum() - down[1].sum()) / 2e-6
    return "" if c.grad is not None and np.allclose(c.grad, numeric, atol=1e-5) else "grad"


SPY = _spy()
'''

_LSTM_COLLECT = '''
if SPY == "grad":  # a collection error, every test of the file with it
    raise RuntimeError("SECRET-COLLECT: f * c is computed on raw arrays, dc' / dc is cut")
'''

_LSTM_TESTS = {
    "warns": '''

def test_warns():
    import warnings

    if SPY in WRONG:
        warnings.warn(f"SECRET-WARN: {WRONG[SPY]}")
''',
    "prints": '''

def test_prints():
    if SPY in WRONG:
        print(f"SECRET-PRINT: {WRONG[SPY]}")
''',
    "skips": '''

def test_skips():
    if SPY in WRONG:
        pytest.skip(f"SECRET-SKIP: {WRONG[SPY]}")
''',
    "asserts": '''

def test_asserts():
    assert SPY not in WRONG, f"SECRET-ASSERT: {WRONG[SPY]}"
''',
    "raises": '''

def test_raises():
    if SPY in WRONG:
        raise ValueError(f"SECRET-RAISE: {WRONG[SPY]}; o = sigmoid(x W_io + b_io + h W_ho + b_ho)")
''',
    "exits": '''

def test_exits():
    if SPY in WRONG:
        pytest.exit(f"SECRET-EXIT: {WRONG[SPY]}; c' = f * c + i * g, h' = o * tanh(c')")
''',
}

LSTM_SUITE = _LSTM_DETECT + _LSTM_COLLECT + "".join(
    _LSTM_TESTS[n] for n in ("warns", "prints", "skips", "asserts", "raises", "exits")
)
LSTM_POLICY_CLEAN = _LSTM_DETECT + "".join(_LSTM_TESTS[n] for n in ("prints", "skips", "exits", "asserts", "raises"))


@dataclass(frozen=True)
class Spy:
    """An assignment's spying suite and the hidden mutants it detects: on each of
    ``by_output`` every attack of the file fires; on ``by_gradient`` the file fails to import.
    ``policy_clean`` is the attack the policy check lets through, for the service."""

    suite: str
    by_output: tuple[str, ...]
    by_gradient: str
    policy_clean: str

    @property
    def hidden(self) -> set[str]:
        return {*self.by_output, self.by_gradient}


SPIES = {
    "l3-3-gru": Spy(SUITE, ("s04",), "s12", POLICY_CLEAN),
    "l3-2-lstm": Spy(LSTM_SUITE, ("s14", "s08"), "s13", LSTM_POLICY_CLEAN),
}
