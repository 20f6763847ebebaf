import math

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.lstm import lstm_cell


def test_hand_example_lstm_cell():
    """i = 0.5, f = 0.75, g = tanh(0.5 + 0.25), o = 0.8: c' = 0.75 c + 0.5 g and h' = 0.8 tanh(c')."""
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 4, [[0.0], [0.0], [1.0], [0.0]],
                                               [0, math.log(3), 0, math.log(4)], [0, 0, 0.25, 0])]
    h2, c2 = lstm_cell(Tensor([[1.0]], dtype=np.float64), np.array([[0.5]]), np.array([[0.4]]), *w)
    c_want = 0.75 * 0.4 + 0.5 * np.tanh(0.75)
    assert np.allclose(c2.data, [[c_want]])
    assert np.allclose(h2.data, [[0.8 * np.tanh(c_want)]])
