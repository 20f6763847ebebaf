"""Tests of tinyllm.nn.module: parameter registration, state dicts and train/eval modes."""

from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.nn.module import Module, Parameter


class Leaf(Module):
    def __init__(self) -> None:
        super().__init__()
        self.zeta = Parameter(np.ones((2, 3), dtype=np.float32))
        self.alpha = Parameter(np.zeros(3, dtype=np.float32))
        self.scale = 2.0  # a plain attribute
        self.buffer = Tensor(np.ones(2))  # a plain Tensor is not a parameter


class Middle(Module):
    def __init__(self) -> None:
        super().__init__()
        self.leaf = Leaf()
        self.gamma = Parameter(np.full((1,), 3.0, dtype=np.float32))


class Outer(Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = Parameter(np.arange(6, dtype=np.float32).reshape(3, 2))
        self.mid = Middle()
        self.first = Leaf()
        self.bias = Parameter(np.zeros(2, dtype=np.float32))

    def forward(self, x):
        return x @ self.weight + self.bias


OUTER_NAMES = [
    "weight",
    "bias",
    "mid.gamma",
    "mid.leaf.zeta",
    "mid.leaf.alpha",
    "first.zeta",
    "first.alpha",
]


def _fresh_state(module: Module, dtype=np.float32) -> OrderedDict:
    """A state dict of ``module``'s names and shapes whose values all differ from the module's."""
    return OrderedDict(
        (name, np.full(p.shape, 7.0 + i, dtype=dtype))
        for i, (name, p) in enumerate(module.named_parameters())
    )


# --------------------------------------------------------------------------- registration
def test_parameters_are_registered_in_assignment_order():
    assert [name for name, _ in Leaf().named_parameters()] == ["zeta", "alpha"]


def test_nested_modules_get_dotted_prefixes_after_own_parameters():
    assert [name for name, _ in Outer().named_parameters()] == OUTER_NAMES


def test_parameters_are_the_attribute_objects_in_named_order():
    m = Outer()
    assert [id(p) for p in m.parameters()] == [id(p) for _, p in m.named_parameters()]
    assert m.parameters()[0] is m.weight
    assert m.parameters()[3] is m.mid.leaf.zeta


def test_parameter_requires_grad():
    p = Parameter([1.0, 2.0])
    assert p.requires_grad
    assert isinstance(p, Tensor)
    assert repr(p).startswith("Parameter(")


@pytest.mark.parametrize("replacement", [None, 3.0, Tensor(np.ones(3))])
def test_reassigning_a_parameter_to_a_non_parameter_unregisters_it(replacement):
    m = Leaf()
    m.zeta = replacement
    assert [name for name, _ in m.named_parameters()] == ["alpha"]
    assert "zeta" not in m.state_dict()
    assert m.zeta is replacement


def test_reassigning_a_module_to_a_non_module_unregisters_its_parameters():
    m = Outer()
    m.mid = None
    assert [name for name, _ in m.named_parameters()] == [
        "weight",
        "bias",
        "first.zeta",
        "first.alpha",
    ]


def test_deleting_an_attribute_unregisters_it():
    m = Outer()
    del m.weight
    del m.first
    assert [name for name, _ in m.named_parameters()] == [
        "bias",
        "mid.gamma",
        "mid.leaf.zeta",
        "mid.leaf.alpha",
    ]


def test_plain_attributes_stay_plain():
    m = Leaf()
    assert m.scale == 2.0
    assert isinstance(m.buffer, Tensor)
    assert len(m.parameters()) == 2


def test_forgetting_super_init_gives_a_clear_attribute_error():
    class Broken(Module):
        def __init__(self) -> None:
            self.w = Parameter([1.0])

    with pytest.raises(AttributeError, match=re.escape("super().__init__()")) as info:
        Broken()
    assert "Broken" in str(info.value)
    assert "'w'" in str(info.value)


def test_call_runs_forward_and_a_missing_forward_raises():
    m = Outer()
    out = m(Tensor(np.ones((1, 3), dtype=np.float32)))
    np.testing.assert_array_equal(out.data, [[6.0, 9.0]])
    with pytest.raises(NotImplementedError, match="Leaf"):
        Leaf()(Tensor([1.0]))


def test_zero_grad_forgets_every_gradient():
    m = Outer()
    m(Tensor(np.ones((1, 3), dtype=np.float32))).sum().backward()
    assert m.weight.grad is not None and m.bias.grad is not None
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


# ---------------------------------------------------------------------------- state dicts
def test_state_dict_is_an_ordered_dict_of_array_copies():
    m = Outer()
    state = m.state_dict()
    assert isinstance(state, OrderedDict)
    assert list(state) == OUTER_NAMES
    for name, param in m.named_parameters():
        assert isinstance(state[name], np.ndarray)
        np.testing.assert_array_equal(state[name], param.data)
        assert not np.shares_memory(state[name], param.data)


def test_mutating_a_state_dict_does_not_change_the_module():
    m = Outer()
    before = m.weight.data.copy()
    state = m.state_dict()
    state["weight"][...] = 99.0
    state["weight"] = np.zeros((3, 2))
    np.testing.assert_array_equal(m.weight.data, before)


def test_load_state_dict_copies_values_into_the_same_parameters():
    source, target = Outer(), Outer()
    fresh = _fresh_state(source)
    source.load_state_dict(fresh)
    weight_before = target.weight
    target.load_state_dict(source.state_dict())
    assert target.weight is weight_before  # parameters are updated, not replaced
    for name, array in target.state_dict().items():
        np.testing.assert_array_equal(array, fresh[name])
        assert array.dtype == np.float32


def test_load_state_dict_keeps_no_reference_to_the_given_arrays():
    m = Outer()
    state = _fresh_state(m)
    m.load_state_dict(state)
    state["weight"][...] = -1.0
    np.testing.assert_array_equal(m.weight.data, np.full((3, 2), 7.0))


def test_load_state_dict_accepts_tensors_and_nested_lists():
    m = Leaf()
    m.load_state_dict({"alpha": [1.0, 2.0, 3.0], "zeta": Tensor(np.full((2, 3), 4.0))})
    np.testing.assert_array_equal(m.alpha.data, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(m.zeta.data, np.full((2, 3), 4.0))


def test_float64_state_dict_makes_float64_parameters():
    m = Outer()
    assert m.weight.dtype == np.float32
    m.load_state_dict(_fresh_state(m, dtype=np.float64))
    assert all(p.dtype == np.float64 for p in m.parameters())
    assert all(a.dtype == np.float64 for a in m.state_dict().values())


def _drop(state, key):
    del state[key]
    return state


def _add(state, key):
    state[key] = np.zeros(1, dtype=np.float32)
    return state


def _reshape(state, key):
    state[key] = np.zeros((1,) + state[key].shape, dtype=np.float32)
    return state


def _integers(state, key):
    state[key] = np.ones(state[key].shape, dtype=np.int64)
    return state


def _booleans(state, key):
    state[key] = np.ones(state[key].shape, dtype=bool)
    return state


@pytest.mark.parametrize(
    "corrupt, key",
    [
        pytest.param(_drop, "first.alpha", id="missing"),
        pytest.param(_add, "mid.extra", id="unexpected"),
        pytest.param(_reshape, "first.alpha", id="wrong-shape"),
        pytest.param(_reshape, "weight", id="wrong-shape-first-key"),
        pytest.param(_integers, "first.alpha", id="integer-array"),
        pytest.param(_booleans, "mid.leaf.zeta", id="boolean-array"),
    ],
)
def test_bad_state_dict_raises_value_error_naming_the_key_and_loads_nothing(corrupt, key):
    m = Outer()
    before = m.state_dict()
    state = corrupt(_fresh_state(m), key)  # every other entry is valid and new
    with pytest.raises(ValueError, match=re.escape(key)):
        m.load_state_dict(state)
    after = m.state_dict()
    assert list(after) == list(before)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
        assert after[name].dtype == before[name].dtype


# ---------------------------------------------------------------------------------- modes
def test_modules_start_in_training_mode():
    m = Outer()
    assert m.training and m.mid.training and m.mid.leaf.training


def test_eval_and_train_recurse_and_return_self():
    m = Outer()
    assert m.eval() is m
    assert not any([m.training, m.mid.training, m.mid.leaf.training, m.first.training])
    assert m.train() is m
    assert all([m.training, m.mid.training, m.mid.leaf.training, m.first.training])
    m.train(False)
    assert not m.mid.leaf.training


def test_modes_do_not_register_as_parameters():
    m = Outer().eval()
    assert [name for name, _ in m.named_parameters()] == OUTER_NAMES


def test_reassigning_a_parameter_keeps_its_place_in_the_order():
    module = Module()
    module.a = Parameter(np.zeros(1))
    module.b = Parameter(np.zeros(2))
    module.a = Parameter(np.ones(3))
    assert [name for name, _ in module.named_parameters()] == ["a", "b"]
    assert module.state_dict()["a"].shape == (3,)
