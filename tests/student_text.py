"""A suite written to attack every place its text is shown: test ids, parametrize ids, an
assertion message and a file name carrying HTML, Markdown and spreadsheet formulas. It is a
valid suite (the policy check lets it through) that passes on the reference."""

from __future__ import annotations

__all__ = ["EXPECTED_IDS", "FILE", "IDS", "MESSAGE", "SUITE"]

# Parametrize ids: HTML that would run, a Markdown code span closed early to let a tag out, an
# entity, table pipes, and the four characters a spreadsheet reads as the start of a formula.
IDS = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "a|b`c``<b>bold</b>``&amp;",
    "=1+2",
    "+SUM(1)",
    "-2+3",
    "@SUM(A1)",
]
MESSAGE = '<script>alert(2)</script> =HYPERLINK("http://x") | `code` &lt;'
SUITE = f'''
import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell

IDS = {IDS!r}


def _cell(h):
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, np.log(3), 0], [0, 0, 1.0])]
    return gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[h]], dtype=np.float64), *w).data


@pytest.mark.parametrize("h", [0.5] * len(IDS), ids=IDS)
def test_hand(h):
    assert np.allclose(_cell(h), [[0.25 * np.tanh(0.75) + 0.375]])


def test_message_is_data():
    assert False, {MESSAGE!r}
'''
FILE = 'test_"><img src=x onerror=alert(1)>.py'
EXPECTED_IDS = {f"{FILE}::test_hand[{i}]" for i in IDS} | {f"{FILE}::test_message_is_data"}
