"""Tests of tinyllm.nn.init: Xavier-uniform bounds and orthogonality, shapes, determinism."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tinyllm.nn.init import orthogonal, xavier_uniform
from tinyllm.random import PCG32

INITS = [xavier_uniform, orthogonal]


# --------------------------------------------------------------------------------- xavier
@pytest.mark.parametrize("fan_out, fan_in", [(20, 50), (64, 16), (1, 1000)])
def test_xavier_uniform_stays_within_and_reaches_the_bound(fan_out, fan_in):
    w = xavier_uniform((fan_out, fan_in), PCG32(1), dtype=np.float64)
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    assert w.shape == (fan_out, fan_in)
    assert np.abs(w).max() <= bound
    assert np.abs(w).max() > 0.98 * bound
    assert w.min() < 0 < w.max()
    sd = bound / math.sqrt(3.0)  # the standard deviation of U(-b, b)
    assert abs(w.mean()) < 4 * sd / math.sqrt(w.size)
    assert abs(w.std() - sd) < 0.1 * sd


def test_xavier_uniform_gain_scales_the_bound():
    w = xavier_uniform((30, 30), PCG32(2), gain=2.0, dtype=np.float64)
    bound = 2.0 * math.sqrt(6.0 / 60)
    assert np.abs(w).max() <= bound
    assert np.abs(w).max() > 0.98 * bound


def test_xavier_uniform_draws_from_the_generator_in_c_order():
    w = xavier_uniform((3, 4), PCG32(9), dtype=np.float64)
    bound = math.sqrt(6.0 / 7)
    np.testing.assert_array_equal(w, PCG32(9).uniform(-bound, bound, (3, 4)))


# ----------------------------------------------------------------------------- orthogonal
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_orthogonal_square_is_orthogonal(dtype, tol):
    q = orthogonal((8, 8), PCG32(3), dtype=dtype)
    assert q.shape == (8, 8) and q.dtype == dtype
    np.testing.assert_allclose(q @ q.T, np.eye(8), atol=tol)
    np.testing.assert_allclose(q.T @ q, np.eye(8), atol=tol)


def test_orthogonal_tall_has_orthonormal_columns():
    q = orthogonal((10, 4), PCG32(4), dtype=np.float64)
    assert q.shape == (10, 4)
    np.testing.assert_allclose(q.T @ q, np.eye(4), atol=1e-12)


def test_orthogonal_wide_has_orthonormal_rows():
    q = orthogonal((4, 10), PCG32(5), dtype=np.float64)
    assert q.shape == (4, 10)
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-12)


def test_orthogonal_gain_scales():
    q = orthogonal((6, 6), PCG32(6), gain=2.0, dtype=np.float64)
    np.testing.assert_allclose(q @ q.T, 4.0 * np.eye(6), atol=1e-12)


def test_orthogonal_is_not_a_trivial_matrix():
    q = orthogonal((16, 16), PCG32(7), dtype=np.float64)
    assert np.count_nonzero(np.abs(q) > 1e-3) > 16 * 8  # dense, not a signed permutation
    assert not np.allclose(q, np.eye(16))


# ------------------------------------------------------------------------- both, together
@pytest.mark.parametrize("init", INITS)
def test_default_dtype_is_float32(init):
    assert init((3, 5), PCG32(0)).dtype == np.float32


@pytest.mark.parametrize("init", INITS)
def test_same_seed_gives_the_same_matrix_and_another_seed_another(init):
    np.testing.assert_array_equal(init((5, 7), PCG32(42)), init((5, 7), PCG32(42)))
    assert not np.array_equal(init((5, 7), PCG32(42)), init((5, 7), PCG32(43)))
    assert not np.array_equal(init((5, 7), PCG32(42, 1)), init((5, 7), PCG32(42, 2)))


@pytest.mark.parametrize("init", INITS)
def test_successive_draws_from_one_generator_differ(init):
    rng = PCG32(8)
    assert not np.array_equal(init((4, 4), rng), init((4, 4), rng))


@pytest.mark.parametrize("init", INITS)
@pytest.mark.parametrize("shape", [(3,), (2, 3, 4), (), (0, 3), (3, 0), (-1, 2)])
def test_bad_shapes_raise_value_error(init, shape):
    with pytest.raises(ValueError, match=re.escape(str(shape))):
        init(shape, PCG32(0))
