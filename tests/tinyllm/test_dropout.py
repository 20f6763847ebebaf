"""Tests of tinyllm.nn.dropout: identity when off, the drop rate, scaling, determinism, bad p."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.dropout import Dropout, check_probability, dropout
from tinyllm.random import PCG32

N = 10_000


def _x(n: int = N, dtype=np.float64) -> Tensor:
    # Values in [1, 2): no element is zero before dropout, so a zero means dropped.
    return Tensor(np.random.default_rng(0).uniform(1.0, 2.0, n).astype(dtype), requires_grad=True)


def test_eval_mode_is_the_identity():
    x = _x(100)
    layer = Dropout(0.5, rng=PCG32(1)).eval()
    out = layer(x)
    np.testing.assert_array_equal(out.data, x.data)


def test_p_zero_in_training_is_the_identity():
    x = _x(100)
    layer = Dropout(0.0, rng=PCG32(1))
    assert layer.training
    np.testing.assert_array_equal(layer(x).data, x.data)


def test_functional_form_is_the_identity_unless_training():
    x = _x(100)
    np.testing.assert_array_equal(dropout(x, 0.5, PCG32(1), training=False).data, x.data)


def test_training_zeroes_about_p_and_scales_the_rest():
    p = 0.3
    x = _x()
    out = Dropout(p, rng=PCG32(2024))(x).data
    dropped = out == 0.0
    sigma = math.sqrt(N * p * (1 - p))
    assert abs(dropped.sum() - N * p) < 3 * sigma
    np.testing.assert_allclose(out[~dropped], x.data[~dropped] / (1 - p), rtol=1e-15)


def test_gradient_is_the_mask_scaled():
    p = 0.25
    x = _x(1000)
    out = Dropout(p, rng=PCG32(3))(x)
    out.sum().backward()
    kept = out.data != 0.0
    np.testing.assert_allclose(x.grad, np.where(kept, 1 / (1 - p), 0.0), rtol=1e-15)


def test_float32_input_stays_float32():
    out = Dropout(0.5, rng=PCG32(4))(_x(50, dtype=np.float32))
    assert out.dtype == np.float32


def test_same_seed_gives_the_same_mask_and_another_seed_another():
    x = _x(500)
    first = Dropout(0.5, rng=PCG32(11))(x).data
    again = Dropout(0.5, rng=PCG32(11))(x).data
    other = Dropout(0.5, rng=PCG32(12))(x).data
    np.testing.assert_array_equal(first == 0.0, again == 0.0)
    assert not np.array_equal(first == 0.0, other == 0.0)


def test_successive_calls_draw_fresh_masks():
    x = _x(500)
    layer = Dropout(0.5, rng=PCG32(5))
    assert not np.array_equal(layer(x).data == 0.0, layer(x).data == 0.0)


def test_default_generator_is_deterministic():
    x = _x(500)
    np.testing.assert_array_equal(Dropout(0.5)(x).data, Dropout(0.5)(x).data)


@pytest.mark.parametrize("p", [0, 0.0, 0.5, 0.999])
def test_valid_probabilities_are_accepted_as_floats(p):
    assert Dropout(p).p == float(p)
    assert isinstance(check_probability(p), float)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1, 1.5, True, False, "0.5", None, float("nan")])
def test_bad_probability_raises_value_error(p):
    with pytest.raises(ValueError, match=r"p must be a probability in \[0, 1\)"):
        Dropout(p)


@pytest.mark.parametrize("p", [-0.1, 1.0, "0.5"])
def test_functional_form_rejects_a_bad_probability(p):
    with pytest.raises(ValueError, match="p must be"):
        dropout(_x(10), p, PCG32(0), training=True)


def test_check_probability_names_the_argument():
    with pytest.raises(ValueError, match="dropout must be a probability"):
        check_probability(2.0, "dropout")
