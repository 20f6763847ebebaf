"""Tests of tinyllm.autograd.tensor: dtypes, every op's gradient against torch, accumulation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinyllm.autograd.tensor import Tensor, as_tensor

torch.set_num_threads(1)

TOL = 1e-12  # float64 gradients must agree with torch's to this (relative and absolute)
_A = np.random.default_rng(7).standard_normal((2, 3))  # a constant left operand for rmatmul


def _inputs(shapes, *, positive: bool, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if positive:  # log, fractional and negative powers, and division need x > 0
        return [rng.uniform(0.5, 2.0, shape) for shape in shapes]
    return [rng.standard_normal(shape) for shape in shapes]


def _case(case_id, shapes, fn, torch_fn=None, *, positive=False):
    return pytest.param(shapes, fn, torch_fn or fn, positive, id=case_id)


# (shapes of the leaves, the op in tinyllm, the same op in torch when spelt differently)
OPS = [
    _case("add-broadcast-3x1+4", [(3, 1), (4,)], lambda x, y: x + y),
    _case("add-same-shape", [(2, 3), (2, 3)], lambda x, y: x + y),
    _case("add-0d-tensor", [(2, 3), ()], lambda x, y: x + y),
    _case("add-python-scalar", [(2, 3)], lambda x: x + 2.5),
    _case("radd-python-scalar", [(2, 3)], lambda x: 2.5 + x),
    _case("sub-broadcast", [(2, 3), (3,)], lambda x, y: x - y),
    _case("rsub-python-scalar", [(2, 3)], lambda x: 1.0 - x),
    _case("mul-broadcast-2x3*3", [(2, 3), (3,)], lambda x, y: x * y),
    _case("mul-broadcast-3x1*1x4", [(3, 1), (1, 4)], lambda x, y: x * y),
    _case("mul-0d-tensor", [(2, 3), ()], lambda x, y: x * y),
    _case("rmul-python-scalar", [(2, 3)], lambda x: 3.0 * x),
    _case("div-broadcast", [(2, 3), (3,)], lambda x, y: x / y, positive=True),
    _case("div-0d-tensor", [(2, 3), ()], lambda x, y: x / y, positive=True),
    _case("rdiv-python-scalar", [(2, 3)], lambda x: 2.0 / x, positive=True),
    _case("pow-3", [(2, 3)], lambda x: x**3),
    _case("pow-minus-half", [(2, 3)], lambda x: x**-0.5, positive=True),
    _case("pow-2.5", [(2, 3)], lambda x: x**2.5, positive=True),
    _case("neg", [(2, 3)], lambda x: -x),
    _case("matmul", [(2, 3), (3, 4)], lambda x, y: x @ y),
    _case("matmul-vector-like", [(1, 3), (3, 1)], lambda x, y: x @ y),
    _case(
        "rmatmul-ndarray",
        [(3, 4)],
        lambda x: _A @ x,
        lambda x: torch.from_numpy(_A) @ x,
    ),
    _case("getitem-int", [(3, 4)], lambda x: x[1]),
    _case("getitem-negative-int", [(3, 4)], lambda x: x[-1]),
    _case("getitem-slices", [(4, 5)], lambda x: x[1:, ::2]),
    _case("getitem-column", [(3, 4)], lambda x: x[:, 2]),
    _case("getitem-ellipsis", [(2, 3, 4)], lambda x: x[..., 1:3]),
    _case("getitem-newaxis", [(3, 4)], lambda x: x[None, 1]),
    _case(
        "getitem-repeated-ints",
        [(3, 4)],
        lambda x: x[np.array([0, 2, 0, 0])],
        lambda x: x[torch.tensor([0, 2, 0, 0])],
    ),
    _case(
        "getitem-repeated-pairs",
        [(3, 4)],
        lambda x: x[np.array([0, 0, 2, 0]), np.array([1, 1, 3, 1])],
        lambda x: x[torch.tensor([0, 0, 2, 0]), torch.tensor([1, 1, 3, 1])],
    ),
    _case(
        "getitem-ints-and-slice",
        [(3, 4)],
        lambda x: x[np.array([1, 1, 2]), 1:3],
        lambda x: x[torch.tensor([1, 1, 2]), 1:3],
    ),
    _case("T-2d", [(2, 3)], lambda x: x.T),
    _case(
        "transpose-no-axes-3d", [(2, 3, 4)], lambda x: x.transpose(), lambda x: x.permute(2, 1, 0)
    ),
    _case(
        "transpose-axes", [(2, 3, 4)], lambda x: x.transpose(1, 2, 0), lambda x: x.permute(1, 2, 0)
    ),
    _case(
        "transpose-axes-tuple",
        [(2, 3, 4)],
        lambda x: x.transpose((2, 0, 1)),
        lambda x: x.permute(2, 0, 1),
    ),
    _case(
        "transpose-negative-axes",
        [(2, 3, 4)],
        lambda x: x.transpose(-1, 0, 1),
        lambda x: x.permute(2, 0, 1),
    ),
    _case("reshape-args", [(2, 3, 4)], lambda x: x.reshape(6, 4)),
    _case("reshape-tuple", [(2, 3, 4)], lambda x: x.reshape((4, 6)), lambda x: x.reshape(4, 6)),
    _case("reshape-minus-one", [(2, 3, 4)], lambda x: x.reshape(-1)),
    _case("sum-all", [(2, 3, 4)], lambda x: x.sum()),
    _case(
        "sum-all-keepdims",
        [(2, 3)],
        lambda x: x.sum(keepdims=True),
        lambda x: x.sum(dim=(0, 1), keepdim=True),
    ),
    _case("sum-axis0", [(2, 3, 4)], lambda x: x.sum(axis=0), lambda x: x.sum(dim=0)),
    _case(
        "sum-axis1-keepdims",
        [(2, 3, 4)],
        lambda x: x.sum(axis=1, keepdims=True),
        lambda x: x.sum(dim=1, keepdim=True),
    ),
    _case("sum-axis-negative", [(2, 3, 4)], lambda x: x.sum(axis=-1), lambda x: x.sum(dim=-1)),
    _case("sum-axes-tuple", [(2, 3, 4)], lambda x: x.sum(axis=(0, 2)), lambda x: x.sum(dim=(0, 2))),
    _case(
        "sum-axes-tuple-keepdims",
        [(2, 3, 4)],
        lambda x: x.sum(axis=(0, 2), keepdims=True),
        lambda x: x.sum(dim=(0, 2), keepdim=True),
    ),
    _case("mean-all", [(2, 3, 4)], lambda x: x.mean()),
    _case("mean-axis1", [(2, 3, 4)], lambda x: x.mean(axis=1), lambda x: x.mean(dim=1)),
    _case(
        "mean-axes-keepdims",
        [(2, 3, 4)],
        lambda x: x.mean(axis=(0, -1), keepdims=True),
        lambda x: x.mean(dim=(0, -1), keepdim=True),
    ),
    _case("exp", [(2, 3)], lambda x: x.exp()),
    _case("log", [(2, 3)], lambda x: x.log(), positive=True),
    _case("sigmoid", [(2, 3)], lambda x: x.sigmoid()),
    _case("tanh", [(2, 3)], lambda x: x.tanh()),
    _case(
        "composite-affine-tanh",
        [(2, 3), (4, 3), (4,)],
        lambda x, w, b: ((x @ w.T + b).tanh() * (x @ w.T).sigmoid()).mean(axis=0),
    ),
    _case("composite-reuse", [(3, 3)], lambda x: x @ x + x.T * x - x.exp() / (1.0 + x * x)),
]


@pytest.mark.parametrize("shapes, fn, torch_fn, positive", OPS)
def test_forward_and_gradients_match_torch(shapes, fn, torch_fn, positive):
    arrays = _inputs(shapes, positive=positive)
    leaves = [Tensor(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    t_leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    t_out = torch_fn(*t_leaves)
    np.testing.assert_allclose(out.data, t_out.detach().numpy(), rtol=TOL, atol=TOL)
    assert out.dtype == np.float64

    seed = np.random.default_rng(1).standard_normal(out.shape)  # not all ones: catches mixups
    out.backward(seed)
    t_out.backward(torch.from_numpy(seed))
    for leaf, t_leaf in zip(leaves, t_leaves):
        assert leaf.grad is not None
        assert leaf.grad.shape == leaf.shape
        np.testing.assert_allclose(leaf.grad, t_leaf.grad.numpy(), rtol=TOL, atol=TOL)


def _numeric_grad(f, array: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(array)
    for i in np.ndindex(array.shape):
        up, down = array.copy(), array.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (f(Tensor(up)).item() - f(Tensor(down)).item()) / (2 * eps)
    return grad


_W = np.random.default_rng(3).standard_normal((4, 2, 3))  # weights that break symmetries


@pytest.mark.parametrize(
    "f",
    [
        pytest.param(lambda x: (x[np.array([0, 0, 1, 0])] * _W[0, 0]).sum(), id="getitem-repeats"),
        pytest.param(lambda x: (x * _W[0]).sigmoid().tanh().sum(), id="sigmoid-tanh"),
        pytest.param(lambda x: ((x + _W[1, 0]) * _W[1]).mean(axis=0).exp().sum(), id="broadcast"),
        pytest.param(lambda x: (x.transpose(-1, -2) @ _W[2]).sum(), id="transpose-matmul"),
        pytest.param(lambda x: ((x**2).sum(axis=1, keepdims=True) / x).sum(), id="div-keepdims"),
    ],
)
def test_gradients_match_central_differences(f):
    x = np.random.default_rng(5).uniform(0.5, 1.5, (2, 3))
    leaf = Tensor(x, requires_grad=True)
    f(leaf).backward()
    np.testing.assert_allclose(leaf.grad, _numeric_grad(f, x), rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------------------------ dtypes
def test_python_floats_become_float64():
    assert Tensor(1.5).dtype == np.float64
    assert Tensor([1.0, 2.0]).dtype == np.float64


def test_numpy_dtype_is_kept_and_dtype_argument_converts():
    assert Tensor(np.ones(3, dtype=np.float32)).dtype == np.float32
    assert Tensor(np.ones(3, dtype=np.float64)).dtype == np.float64
    assert Tensor([1.0, 2.0], dtype=np.float32).dtype == np.float32


def test_python_integers_become_float64_and_numpy_integers_are_kept():
    assert Tensor([1, 2, 3]).dtype == np.float64
    assert Tensor(True).dtype == np.float64
    assert Tensor(np.array([1, 2], dtype=np.int32)).dtype == np.int32
    assert Tensor(np.array([True, False])).dtype == np.bool_


def test_an_integer_tensor_indexes_another_and_cannot_require_a_gradient():
    t = Tensor(np.arange(4.0), requires_grad=True)
    picked = t[Tensor(np.array([0, 2, 2]))]
    picked.sum().backward()
    assert picked.data.tolist() == [0.0, 2.0, 2.0]
    assert t.grad.tolist() == [1.0, 0.0, 2.0, 0.0]
    with pytest.raises(ValueError, match="requires_grad needs a floating dtype, got int64"):
        Tensor(np.array([1, 2]), requires_grad=True)


def test_constructor_copies_its_data():
    array = np.ones(3)
    t = Tensor(array)
    array[0] = 5.0
    assert t.data[0] == 1.0


FLOAT32_OPS = [
    pytest.param(lambda x: x + 2, id="add-int"),
    pytest.param(lambda x: 2.5 + x, id="radd"),
    pytest.param(lambda x: x - 1.5, id="sub"),
    pytest.param(lambda x: 1.5 - x, id="rsub"),
    pytest.param(lambda x: x * 2.0, id="mul"),
    pytest.param(lambda x: 2.0 * x, id="rmul"),
    pytest.param(lambda x: x / 3.0, id="div"),
    pytest.param(lambda x: 3.0 / x, id="rdiv"),
    pytest.param(lambda x: x**2, id="pow"),
    pytest.param(lambda x: -x, id="neg"),
    pytest.param(lambda x: x @ x.T, id="matmul"),
    pytest.param(lambda x: x[0], id="getitem"),
    pytest.param(lambda x: x.T, id="T"),
    pytest.param(lambda x: x.reshape(-1), id="reshape"),
    pytest.param(lambda x: x.sum(), id="sum"),
    pytest.param(lambda x: x.mean(axis=0), id="mean"),
    pytest.param(lambda x: x.exp(), id="exp"),
    pytest.param(lambda x: x.log(), id="log"),
    pytest.param(lambda x: x.sigmoid(), id="sigmoid"),
    pytest.param(lambda x: x.tanh(), id="tanh"),
]


@pytest.mark.parametrize("fn", FLOAT32_OPS)
def test_float32_stays_float32_with_python_scalars(fn):
    x = Tensor(np.full((2, 3), 0.5, dtype=np.float32), requires_grad=True)
    out = fn(x)
    assert out.dtype == np.float32
    out.backward()
    assert x.grad.dtype == np.float32


def test_gradient_takes_the_leaf_dtype_when_dtypes_mix():
    x = Tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    y = Tensor(np.full(3, 2.0), requires_grad=True)
    out = x * y
    assert out.dtype == np.float64
    out.sum().backward()
    assert x.grad.dtype == np.float32
    assert y.grad.dtype == np.float64
    np.testing.assert_array_equal(x.grad, [2.0, 2.0, 2.0])


def test_as_tensor_returns_tensors_unchanged_and_gives_scalars_the_dtype_of_like():
    x = Tensor(np.ones(2, dtype=np.float32))
    assert as_tensor(x) is x
    assert as_tensor(2.0, like=x).dtype == np.float32
    assert as_tensor(2.0).dtype == np.float64


def test_sigmoid_does_not_overflow_for_large_inputs():
    with np.errstate(all="raise"):
        out = Tensor([-1000.0, 0.0, 1000.0]).sigmoid()
    np.testing.assert_array_equal(out.data, [0.0, 0.5, 1.0])


# -------------------------------------------------------------------------- accumulation
def test_leaf_gradients_add_across_backward_calls():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * 2.0).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad, 2.0 + 2.0 * x.data, rtol=0, atol=1e-15)


def test_backward_twice_on_one_graph_gives_exactly_twice_the_gradient():
    x = Tensor([0.3, -1.2, 2.0], requires_grad=True)
    w = Tensor([1.5, 0.5, -0.7], requires_grad=True)
    h = (x * w).tanh()  # an interior node used twice: a stale interior grad would show
    y = (h * h + h.exp() * x).sum()
    y.backward()
    once_x, once_w = x.grad.copy(), w.grad.copy()
    y.backward()
    np.testing.assert_array_equal(x.grad, 2.0 * once_x)
    np.testing.assert_array_equal(w.grad, 2.0 * once_w)


def test_setting_grad_to_none_resets_accumulation():
    x = Tensor([1.0, 2.0], requires_grad=True)
    (x * 3.0).sum().backward()
    x.grad = None
    (x * 5.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [5.0, 5.0])


def test_diamond_graph_sums_both_paths():
    x = Tensor([0.5, -2.0, 3.0], requires_grad=True)
    a = x * 3.0
    b = x * x
    (a + b).sum().backward()
    np.testing.assert_allclose(x.grad, 3.0 + 2.0 * x.data, rtol=0, atol=1e-15)


def test_same_tensor_on_both_sides_of_an_op():
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    (x @ x).sum().backward()
    t = torch.tensor(x.data, requires_grad=True)
    (t @ t).sum().backward()
    np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=TOL, atol=TOL)


def test_default_backward_seed_is_ones():
    x = Tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    (x * 4.0).backward()
    np.testing.assert_array_equal(x.grad, [[4.0, 4.0, 4.0]])


def test_constants_get_no_gradient_and_results_of_constants_need_none():
    c = Tensor([1.0, 2.0])
    x = Tensor([3.0, 4.0], requires_grad=True)
    (c * x).sum().backward()
    assert c.grad is None
    assert not (c * 2.0).requires_grad
    assert (c * x).requires_grad


def test_detach_cuts_the_graph():
    x = Tensor([1.0, 2.0], requires_grad=True)
    d = (x * 2.0).detach()
    assert not d.requires_grad
    np.testing.assert_array_equal(d.data, [2.0, 4.0])


# --------------------------------------------------------------------------------- errors
def test_backward_without_requires_grad_raises_runtime_error():
    with pytest.raises(RuntimeError, match="requires_grad"):
        Tensor([1.0, 2.0]).backward()
    with pytest.raises(RuntimeError):
        (Tensor([1.0]) * 2.0).backward()


@pytest.mark.parametrize("grad", [np.ones(3), np.ones((3, 2)), np.ones(()), [1.0]])
def test_backward_with_wrong_shaped_grad_raises_value_error(grad):
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    y = x * 2.0
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        y.backward(grad)
    assert x.grad is None


def test_pow_with_a_tensor_exponent_raises_type_error():
    with pytest.raises(TypeError, match="exponent"):
        Tensor([2.0]) ** Tensor([2.0])


@pytest.mark.parametrize(
    "left, right",
    [((2, 3), (4, 5)), ((3,), (3, 2)), ((2, 3), (3,)), ((1, 2, 3), (3, 2))],
)
def test_matmul_shape_errors_raise_value_error(left, right):
    with pytest.raises(ValueError, match="matmul"):
        Tensor(np.ones(left)) @ Tensor(np.ones(right))


def test_deep_chain_does_not_hit_the_recursion_limit():
    x = Tensor([1.0], requires_grad=True)
    y = x
    for _ in range(5000):
        y = y * 1.0001
    y.backward()
    np.testing.assert_allclose(x.grad, [1.0001**5000], rtol=1e-10)


# ---------------------------------------------------------------------- numpy interplay
@pytest.mark.parametrize(
    "fn, expected_grad",
    [
        pytest.param(lambda a, t: a + t, [1.0, 1.0], id="add"),
        pytest.param(lambda a, t: a - t, [-1.0, -1.0], id="sub"),
        pytest.param(lambda a, t: a * t, [2.0, 3.0], id="mul"),
        pytest.param(lambda a, t: np.float64(2.0) * t, [2.0, 2.0], id="numpy-scalar-mul"),
    ],
)
def test_ndarray_on_the_left_defers_to_tensor(fn, expected_grad):
    t = Tensor([1.0, 4.0], requires_grad=True)
    out = fn(np.array([2.0, 3.0]), t)
    assert isinstance(out, Tensor)
    out.sum().backward()
    np.testing.assert_array_equal(t.grad, expected_grad)


def test_ndarray_matmul_tensor_returns_tensor():
    out = np.eye(2) @ Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(out, Tensor)
    np.testing.assert_array_equal(out.data, [[1.0, 2.0], [3.0, 4.0]])


def test_basic_attributes():
    t = Tensor(np.arange(6.0).reshape(2, 3))
    assert t.shape == (2, 3)
    assert t.ndim == 2
    assert len(t) == 2
    assert t.numpy() is t.data
    assert Tensor(2.5).item() == 2.5
    assert not t.requires_grad and t.grad is None
    assert "requires_grad=True" in repr(Tensor([1.0], requires_grad=True))
