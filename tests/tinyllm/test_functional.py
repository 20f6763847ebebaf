"""Tests of tinyllm.autograd.functional: where, stack, concatenate and the thin wrappers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm.autograd import functional as F
from tinyllm.autograd.tensor import Tensor

torch.set_num_threads(1)

TOL = 1e-12


def _normal(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


# ---------------------------------------------------------------------------------- where
def test_where_sends_the_gradient_only_to_the_chosen_side():
    cond = np.array([[True, False, True], [False, False, True]])
    a = Tensor(_normal(2, 3, seed=1), requires_grad=True)
    b = Tensor(_normal(2, 3, seed=2), requires_grad=True)
    out = F.where(cond, a, b)
    np.testing.assert_array_equal(out.data, np.where(cond, a.data, b.data))
    g = _normal(2, 3, seed=3)
    out.backward(g)
    np.testing.assert_array_equal(a.grad, np.where(cond, g, 0.0))
    np.testing.assert_array_equal(b.grad, np.where(cond, 0.0, g))


@pytest.mark.parametrize("scalar_side", ["a", "b"])
def test_where_with_a_python_scalar_keeps_dtype_and_masks_the_gradient(scalar_side):
    cond = np.array([True, False, True, False])
    x = Tensor(np.arange(1.0, 5.0, dtype=np.float32), requires_grad=True)
    out = F.where(cond, x, 0.0) if scalar_side == "a" else F.where(cond, 0.0, x)
    assert out.dtype == np.float32
    out.backward()
    chosen = cond if scalar_side == "a" else ~cond
    np.testing.assert_array_equal(x.grad, chosen.astype(np.float32))
    np.testing.assert_array_equal(out.data, np.where(chosen, x.data, 0.0))


def test_where_broadcasts_a_scalar_tensor_and_the_condition_like_torch():
    cond = np.array([[True], [False], [True]])  # [3, 1] against [3, 4]
    a = _normal(3, 4, seed=4)
    b = np.array(0.75)
    g = _normal(3, 4, seed=5)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    F.where(Tensor(cond), ta, tb).backward(g)  # a Tensor condition is accepted too
    qa = torch.tensor(a, requires_grad=True)
    qb = torch.tensor(b, requires_grad=True)
    torch.where(torch.from_numpy(cond), qa, qb).backward(torch.from_numpy(g))
    assert tb.grad.shape == ()
    np.testing.assert_allclose(ta.grad, qa.grad.numpy(), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(tb.grad, qb.grad.numpy(), rtol=TOL, atol=TOL)


# ------------------------------------------------------------------- stack / concatenate
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_matches_torch(axis):
    arrays = [_normal(2, 3, seed=s) for s in range(3)]
    parts = [Tensor(a, requires_grad=True) for a in arrays]
    out = F.stack(parts, axis=axis)
    t_parts = [torch.tensor(a, requires_grad=True) for a in arrays]
    t_out = torch.stack(t_parts, dim=axis)
    np.testing.assert_array_equal(out.data, t_out.detach().numpy())
    g = _normal(*out.shape, seed=9)
    out.backward(g)
    t_out.backward(torch.from_numpy(g))
    for part, t_part in zip(parts, t_parts):
        np.testing.assert_allclose(part.grad, t_part.grad.numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(1, 3), (2, 3), (4, 3)], 0),
        ([(2, 1), (2, 3), (2, 2)], 1),
        ([(2, 3, 1), (2, 3, 2)], -1),
        ([(5,)], 0),
    ],
)
def test_concatenate_matches_torch(shapes, axis):
    arrays = [_normal(*shape, seed=i) for i, shape in enumerate(shapes)]
    parts = [Tensor(a, requires_grad=True) for a in arrays]
    out = F.concatenate(parts, axis=axis)
    t_parts = [torch.tensor(a, requires_grad=True) for a in arrays]
    t_out = torch.cat(t_parts, dim=axis)
    np.testing.assert_array_equal(out.data, t_out.detach().numpy())
    g = _normal(*out.shape, seed=9)
    (out * Tensor(g)).sum().backward()
    (t_out * torch.from_numpy(g)).sum().backward()
    for part, t_part in zip(parts, t_parts):
        assert part.grad.shape == part.shape
        np.testing.assert_allclose(part.grad, t_part.grad.numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("join", [F.stack, F.concatenate])
def test_joining_constants_with_a_parameter_sends_gradient_only_to_the_parameter(join):
    x = Tensor(np.ones((2, 2)), requires_grad=True)
    out = join([np.zeros((2, 2)), x, Tensor(np.ones((2, 2)))], axis=0)
    assert out.requires_grad
    (out * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad, np.full((2, 2), 3.0))


def test_stack_of_one_tensor_used_twice_sums_both_slots():
    x = Tensor([1.0, 2.0], requires_grad=True)
    F.stack([x, x]).backward(np.array([[1.0, 10.0], [100.0, 1000.0]]))
    np.testing.assert_array_equal(x.grad, [101.0, 1010.0])


@pytest.mark.parametrize("join", [F.stack, F.concatenate])
@pytest.mark.parametrize("empty", [[], ()])
def test_joining_an_empty_sequence_raises_value_error(join, empty):
    with pytest.raises(ValueError, match="empty"):
        join(empty)


# ------------------------------------------------------------------------------ wrappers
def test_wrappers_equal_the_tensor_methods():
    x = _normal(2, 3)
    t = Tensor(x)
    np.testing.assert_array_equal(F.sigmoid(x).data, t.sigmoid().data)
    np.testing.assert_array_equal(F.tanh(t).data, np.tanh(x))
    np.testing.assert_array_equal(F.transpose(t).data, x.T)
    np.testing.assert_array_equal(F.transpose(t, 1, 0).data, x.T)
    np.testing.assert_allclose(F.matmul(x, t.T).data, x @ x.T, rtol=TOL, atol=TOL)


def test_matmul_wrapper_gradient_matches_torch():
    a, b = _normal(2, 3, seed=1), _normal(3, 4, seed=2)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    F.matmul(ta, tb).sum().backward()
    qa, qb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (qa @ qb).sum().backward()
    np.testing.assert_allclose(ta.grad, qa.grad.numpy(), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(tb.grad, qb.grad.numpy(), rtol=TOL, atol=TOL)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zeros_is_a_constant_of_the_given_shape_and_dtype(dtype):
    z = F.zeros([2, 3], dtype=dtype)
    assert z.shape == (2, 3)
    assert z.dtype == dtype
    assert not z.requires_grad
    assert not z.data.any()
