"""Tests of tinyllm.random: PCG32 known answers, the float draws, substreams and seeding."""

from __future__ import annotations

import numpy as np
import pytest

from tinyllm.random import DEFAULT_STREAM, PCG32, default_init_rng

# The first outputs printed by O'Neill's pcg32-demo (pcg32_srandom_r(&rng, 42u, 54u)).
PCG32_DEMO = [0xA15C02B7, 0x7B47F409, 0xBA1D3330, 0x83D2F293, 0xBFA4784B, 0xCBED606E]


def _outputs(rng: PCG32, n: int = 8) -> list[int]:
    return [rng.next_u32() for _ in range(n)]


# ----------------------------------------------------------------------------- the core
def test_known_answers_of_the_pcg32_demo():
    assert _outputs(PCG32(42, 54), 6) == PCG32_DEMO


def test_outputs_are_32_bit_integers():
    values = _outputs(PCG32(1), 1000)
    assert all(isinstance(v, int) and 0 <= v < 2**32 for v in values)
    assert max(values) >= 2**31  # the top bit is used


def test_default_stream_is_pcgs_default_increment():
    assert (DEFAULT_STREAM << 1) | 1 == 1442695040888963407
    assert _outputs(PCG32(42)) == _outputs(PCG32(42, DEFAULT_STREAM))


@pytest.mark.parametrize(
    "a, b",
    [
        ((42 + 2**64, 54), (42, 54)),  # seed modulo 2**64
        ((-1, 54), (2**64 - 1, 54)),
        ((42, 54 + 2**63), (42, 54)),  # stream modulo 2**63
        ((np.int64(42), np.uint32(54)), (42, 54)),  # numpy integers are integers
    ],
)
def test_equivalent_seeds_give_the_same_sequence(a, b):
    assert _outputs(PCG32(*a)) == _outputs(PCG32(*b))


@pytest.mark.parametrize("a, b", [((42, 54), (43, 54)), ((42, 54), (42, 55)), ((0, 0), (0, 1))])
def test_different_seeds_or_streams_give_different_sequences(a, b):
    assert _outputs(PCG32(*a)) != _outputs(PCG32(*b))


@pytest.mark.parametrize("seed", [1.0, 1.5, "1", None, True, [1]])
def test_non_integer_seed_raises_type_error(seed):
    with pytest.raises(TypeError, match="seed must be an integer"):
        PCG32(seed)


@pytest.mark.parametrize("stream", [1.0, "54", False])
def test_non_integer_stream_raises_type_error(stream):
    with pytest.raises(TypeError, match="stream must be an integer"):
        PCG32(42, stream)


# ------------------------------------------------------------------------------- floats
def test_random_is_in_the_unit_interval_and_uniform_enough():
    rng = PCG32(7)
    values = np.array([rng.random() for _ in range(20_000)])
    assert values.min() >= 0.0 and values.max() < 1.0
    assert abs(values.mean() - 0.5) < 0.01  # sd of the mean is about 0.002
    assert np.all(np.histogram(values, bins=10, range=(0, 1))[0] > 1800)


def test_random_uses_53_bits():
    rng = PCG32(8)
    values = [rng.random() for _ in range(200)]
    assert any((v * 2**32) % 1 != 0 for v in values)  # more than one 32-bit word's worth


def test_random_array_is_sequential_random_in_c_order():
    rng = PCG32(9)
    expected = np.array([rng.random() for _ in range(6)]).reshape(2, 3)
    array = PCG32(9).random_array((2, 3))
    assert array.dtype == np.float64
    np.testing.assert_array_equal(array, expected)
    assert PCG32(9).random_array(4).shape == (4,)


def test_uniform_is_in_the_half_open_range():
    values = PCG32(10).uniform(-3.0, 5.0, 5000)
    assert values.min() >= -3.0 and values.max() < 5.0
    assert values.min() < -2.9 and values.max() > 4.9


def test_normal_has_mean_zero_and_unit_std():
    values = PCG32(11).normal(20_000)
    assert values.shape == (20_000,) and values.dtype == np.float64
    assert abs(values.mean()) < 0.03  # sd of the mean is about 0.007
    assert abs(values.std() - 1.0) < 0.03
    assert np.all(np.isfinite(values))
    assert abs(np.mean(values**3)) < 0.1  # symmetric


@pytest.mark.parametrize("shape", [3, (3,), (2, 3), (1, 5, 1)])
def test_normal_shapes_including_odd_counts(shape):
    expected = (shape,) if isinstance(shape, int) else shape
    assert PCG32(12).normal(shape).shape == expected


def test_normal_is_deterministic():
    np.testing.assert_array_equal(PCG32(13).normal((4, 5)), PCG32(13).normal((4, 5)))


# --------------------------------------------------------------------------- substreams
def test_substream_is_deterministic():
    assert _outputs(PCG32(5).substream("a")) == _outputs(PCG32(5).substream("a"))


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: PCG32(5).substream("b"), id="name"),
        pytest.param(lambda: PCG32(5).substream("A"), id="name-case"),
        pytest.param(lambda: PCG32(6).substream("a"), id="parent-seed"),
        pytest.param(lambda: PCG32(5, 1).substream("a"), id="parent-stream"),
        pytest.param(lambda: PCG32(5).substream("a").substream("a"), id="nested"),
        pytest.param(lambda: PCG32(5), id="the-parent-itself"),
    ],
)
def test_substream_depends_on_name_and_parent_seeding(other):
    assert _outputs(PCG32(5).substream("a")) != _outputs(other())


def test_substream_does_not_depend_on_how_far_the_parent_has_advanced():
    used = PCG32(5)
    for _ in range(37):
        used.next_u32()
    used.normal(3)
    assert _outputs(used.substream("a")) == _outputs(PCG32(5).substream("a"))


def test_substream_does_not_advance_the_parent():
    parent = PCG32(5)
    parent.substream("a")
    assert _outputs(parent) == _outputs(PCG32(5))


@pytest.mark.parametrize("name", [1, None, b"init"])
def test_substream_name_must_be_a_string(name):
    with pytest.raises(TypeError, match="name must be a str"):
        PCG32(0).substream(name)


def test_default_init_rng_is_the_init_substream_of_seed_zero():
    assert _outputs(default_init_rng(), 10) == _outputs(PCG32(0).substream("init"), 10)
    assert _outputs(default_init_rng(), 10) != _outputs(PCG32(0), 10)


def test_default_init_rng_is_fresh_on_every_call():
    first = default_init_rng()
    first.next_u32()
    assert _outputs(default_init_rng()) == _outputs(PCG32(0).substream("init"))
