"""``bench/profile_grade.py``'s fork measurement: a worker set up as for a grading forks empty
children and children that run the bundled suite against the reference, and each figure it
prints is read off those children."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def profile_module():
    sys.path.insert(0, str(BENCH))  # the script imports ab_grade from beside itself
    spec = importlib.util.spec_from_file_location("profile_grade", BENCH / "profile_grade.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_a_child_that_runs_the_suite_costs_more_than_an_empty_one_and_its_phases_add_up(profile_module):
    forks = profile_module.fork_cost(children=3)
    empty, reference = forks["empty"], forks["reference"]
    assert set(forks) == {"empty", "reference"}
    # Even an empty child takes faults (its stack, the interpreter's after-fork work), far fewer
    # than one that imports the tests and runs them.
    assert 0 < empty["faults"] < reference["faults"]
    assert empty["cpu_ms"] < reference["cpu_ms"]
    assert 0 <= reference["kernel_ms"] <= reference["cpu_ms"]
    phases = [reference[f"{name}_faults"] for name in ("install", "collect", "run")]
    assert all(f > 0 for f in phases)
    assert sum(phases) <= reference["faults"]
    # Collecting imports the test module; running it runs ten tests: both take time.
    assert reference["collect_ms"] > 0 and reference["run_ms"] > reference["install_ms"] > 0
    assert reference["fork_ms"] > 0 and reference["worker_faults"] >= 0
