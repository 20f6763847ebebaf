"""Golden comparisons: stored goldens and live torch, float64 and float32, batched throughput."""

from __future__ import annotations

import pytest

from grader.flows.golden import (
    FLOAT32_TOLERANCE,
    GOLDEN_TOLERANCE,
    device_in_use,
    load_comparison,
    load_goldens,
    load_implementation,
)
from grader.core.paths import default_layout
from grader.core.variants import build_variants

LAYOUT = default_layout()
COMPARE = load_comparison(LAYOUT.golden_code)
golden_deviations = COMPARE.golden_deviations
golden_throughput = COMPARE.golden_throughput
live_deviations = COMPARE.live_deviations
VARIANTS = {v.id: v for v in build_variants(LAYOUT)}


def impl(variant_id: str):
    return load_implementation(VARIANTS[variant_id].source, LAYOUT.reference, f"golden_test_{variant_id}")


def test_the_reference_matches_the_stored_goldens_and_s02_does_not():
    goldens = load_goldens(LAYOUT.goldens)
    assert all(c.matches and c.deviation < 1e-12 for c in golden_deviations(impl("reference"), goldens))
    assert any(not c.matches for c in golden_deviations(impl("s02"), goldens))


@pytest.mark.parametrize(("dtype", "tolerance"), [("float64", GOLDEN_TOLERANCE), ("float32", FLOAT32_TOLERANCE)])
def test_live_torch_in_both_precisions(dtype, tolerance):
    reference = live_deviations(impl("reference"), cases=4, dtype=dtype)
    assert all(c.matches and c.tolerance == tolerance for c in reference), reference
    mutant = live_deviations(impl("s04"), cases=4, dtype=dtype)
    assert any(c.deviation > 100 * tolerance for c in mutant)


def test_a_variant_that_raises_is_an_infinite_deviation():
    broken = load_implementation("raise_later = 1\n", LAYOUT.reference, "golden_test_broken")
    found = live_deviations(broken, cases=1)
    assert found[0].deviation == float("inf") and "raised" in found[0].worst


def test_batched_throughput_on_the_cpu():
    speed = golden_throughput(impl("reference"), device="cpu", dtype="float32", cases=96, batch=32)
    assert speed.cases == 96 and speed.cases_per_s > 0
    assert speed.max_deviation < FLOAT32_TOLERANCE


def test_the_device_without_a_gpu_is_the_cpu_in_float64():
    import torch

    expected = ("cuda", "float32") if torch.cuda.is_available() else ("cpu", "float64")
    assert device_in_use() == expected
