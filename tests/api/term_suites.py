"""Test suites as a class of students would write them, for the simulated term
(tests/api/test_term.py): each student's own golden values, pasted as literals the way students
paste torch's outputs, over the parts of the GRU they chose to test.

Every suite is different code: its inputs are the student's own random numbers, so no two
honest suites share more than the few lines of structure every such test has. Which parts a
student tests (the cell, a padded sequence, two layers) varies, so that the class's kill rates
differ by mutant. ``copied`` makes the planted copy: another student's suite with every name
changed and the lines re-wrapped.
"""

from __future__ import annotations

import re

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, gru_cell

__all__ = ["PARTS", "copied", "suite"]

# What each student tests, by their number: the cell alone, the cell and a padded sequence, all
# three, or the sequence parts alone.
PARTS = (("cell",), ("cell", "padded"), ("cell", "padded", "layers"), ("padded", "layers"))


def _literal(array: np.ndarray) -> str:
    return np.array2string(np.asarray(array), separator=", ", precision=6, floatmode="fixed",
                           max_line_width=100, threshold=10_000).replace("\n", "\n        ")


def _cell_test(rng: np.random.Generator, name: str) -> str:
    x, h = rng.normal(size=(2, 3)), rng.normal(size=(2, 2))
    w = [rng.normal(size=(6, 3)), rng.normal(size=(6, 2)), rng.normal(size=6), rng.normal(size=6)]
    x, h, w = np.round(x, 6), np.round(h, 6), [np.round(a, 6) for a in w]
    expected = gru_cell(Tensor(x), Tensor(h), *(Tensor(a) for a in w)).data
    args = ", ".join(f"Tensor(np.array({_literal(a)}))" for a in (x, h, *w))
    return (f"def test_{name}_cell_golden():\n"
            f"    out = gru_cell({args})\n"
            f"    assert np.allclose(out.data, np.array({_literal(expected)}), atol=1e-5)\n")


def _weights(gru: GRU, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {key: np.round(rng.uniform(-0.8, 0.8, size=value.shape), 6) for key, value in gru.state_dict().items()}


def _sequence_test(rng: np.random.Generator, name: str, *, layers: int) -> str:
    gru = GRU(3, 2, num_layers=layers)
    weights = _weights(gru, rng)
    gru.load_state_dict(weights)
    x = np.round(rng.normal(size=(3, 2, 3)), 6)
    lengths = [3, 1] if layers == 1 else None
    out, h_n = gru(Tensor(x), lengths=lengths) if lengths else gru(Tensor(x))
    state = ",\n        ".join(f"{key!r}: np.array({_literal(value)})" for key, value in weights.items())
    call = "gru(Tensor(x), lengths=[3, 1])" if lengths else "gru(Tensor(x))"
    kind = "padded" if lengths else "two_layer"
    return (f"def test_{name}_{kind}_sequence_golden():\n"
            f"    gru = GRU(3, 2, num_layers={layers})\n"
            f"    gru.load_state_dict({{\n        {state}}})\n"
            f"    x = np.array({_literal(x)})\n"
            f"    out, h_n = {call}\n"
            f"    assert np.allclose(out.data, np.array({_literal(out.data)}), atol=1e-5)\n"
            f"    assert np.allclose(h_n.data, np.array({_literal(h_n.data)}), atol=1e-5)\n")


def suite(number: int) -> str:
    """Student ``number``'s test file."""
    rng = np.random.default_rng(10_000 + number)
    name = f"s{number}"
    parts = PARTS[number % len(PARTS)]
    tests = []
    if "cell" in parts:
        tests.append(_cell_test(rng, name))
    if "padded" in parts:
        tests.append(_sequence_test(rng, name, layers=1))
    if "layers" in parts:
        tests.append(_sequence_test(rng, name, layers=2))
    header = ("import numpy as np\n\nfrom tinyllm.autograd.tensor import Tensor\n"
              "from tinyllm.rnn.gru import GRU, gru_cell\n\n\n")
    return header + "\n\n".join(tests)


def copied(text: str, *, to: str) -> str:
    """``text`` with its test names changed to ``to``'s and each `, ` wrapped onto a new line:
    the same tests, looking different to the eye."""
    renamed = re.sub(r"def test_s\d+_", f"def test_{to}_", text)
    return renamed.replace("atol=1e-5)", "atol=1e-5,\n    )").replace("out, h_n =", "out, last =").replace(
        "h_n.data", "last.data")
