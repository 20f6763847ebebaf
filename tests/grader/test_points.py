"""A grade in the assignment's points: the Gradescope score's rule, scaled so that full marks are
the assignment's ``points``, and the late penalty taken off it."""

from __future__ import annotations

import json

import pytest

from grader.core.assignment import Assignment, load_assignment
from grader.core.models import MutantVerdict, Report, Score, Timing
from grader.core.paths import default_layout
from grader.core.points import apply_penalty, mutant_units, points_of
from grader.report.gradescope import gradescope_options, render_gradescope

COURSE = load_assignment(default_layout().assignment)


def assignment(**fields) -> Assignment:
    return COURSE.model_copy(update=fields)


def report(*, killed: int, total: int, passed: bool) -> Report:
    """A graded suite: ``total`` mutants, the first ``killed`` of them killed."""
    mutants = [
        MutantVerdict(id=f"s{n:02d}", title=f"Mutant {n}", required=False, hidden=False, killed=n <= killed,
                      killed_by=["test_gru.py::test_all"] if n <= killed else [], hint="")
        for n in range(1, total + 1)
    ]
    return Report(
        submission="s", passed=passed, reasons=[] if passed else ["too few mutants killed"],
        score=Score(kill_rate=killed / total, killed=killed, total=total, threshold=0.7, required=[],
                    required_missing=[]),
        tests=[], mutants=mutants, variants=["reference", *(m.id for m in mutants)], timing=Timing(total_s=1.0),
    )


def test_a_passed_suite_earns_full_points_whatever_it_killed() -> None:
    for killed in (9, 12):
        assert points_of(passed=True, killed=killed, mutants=12, assignment=assignment(points=40)) == pytest.approx(40)
    assert points_of(passed=True, killed=9, mutants=12, assignment=COURSE) == pytest.approx(100)


def test_a_suite_not_passed_earns_its_share_per_killed_mutant_scaled_to_the_points() -> None:
    # 10 of 12 killed at 0.5 a mutant: 5 of 12 units, of 100 points.
    assert points_of(passed=False, killed=10, mutants=12, assignment=COURSE) == pytest.approx(41.67, abs=1e-9)
    half = assignment(points=24, gradescope_not_passed_share=0.25)
    assert points_of(passed=False, killed=8, mutants=12, assignment=half) == pytest.approx(4.0)
    assert points_of(passed=False, killed=0, mutants=12, assignment=COURSE) == 0.0


def test_a_suite_not_passed_always_earns_less_than_a_passed_one() -> None:
    for killed in range(13):
        assert points_of(passed=False, killed=killed, mutants=12, assignment=COURSE) < 100


def test_kills_mode_earns_one_unit_per_killed_mutant_whatever_the_verdict() -> None:
    kills = assignment(gradescope_score="kills", points=60)
    for passed in (True, False):
        assert points_of(passed=passed, killed=9, mutants=12, assignment=kills) == pytest.approx(45)
    assert points_of(passed=True, killed=12, mutants=12, assignment=kills) == pytest.approx(60)


@pytest.mark.parametrize("mode", ["verdict", "kills"])
@pytest.mark.parametrize(("killed", "passed"), [(12, True), (9, True), (10, False), (7, False), (0, False)])
def test_with_one_point_per_mutant_the_points_are_gradescopes_score(mode: str, killed: int, passed: bool) -> None:
    rules = assignment(gradescope_score=mode, points=12)
    graded = report(killed=killed, total=12, passed=passed)
    results = json.loads(render_gradescope(graded, gradescope_options(rules)))
    expected = points_of(passed=passed, killed=killed, mutants=12, assignment=rules)
    assert results["score"] == pytest.approx(expected, abs=1e-9)
    assert results["max_score"] == pytest.approx(rules.points)


def test_mutant_units_are_gradescopes_arithmetic() -> None:
    assert mutant_units(passed=True, killed=3, mutants=12, score="verdict", not_passed_share=0.5) == 12.0
    assert mutant_units(passed=False, killed=3, mutants=12, score="verdict", not_passed_share=0.5) == pytest.approx(1.5)
    assert mutant_units(passed=False, killed=3, mutants=12, score="kills", not_passed_share=0.5) == 3.0
    assert mutant_units(passed=True, killed=0, mutants=0, score="verdict", not_passed_share=0.5) == 0.0


@pytest.mark.parametrize(
    ("killed", "mutants", "expected"),
    [(13, 12, "killed: expected 0 to 12 killed mutants, got 13"),
     (-1, 12, "killed: expected 0 to 12 killed mutants, got -1"),
     (0, 0, "mutants: expected at least 1 mutant graded, got 0")],
)
def test_impossible_counts_are_refused(killed: int, mutants: int, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        points_of(passed=False, killed=killed, mutants=mutants, assignment=COURSE)


def test_the_penalty_takes_its_share_of_the_points() -> None:
    assert apply_penalty(80.0, 0.2) == pytest.approx(64.0)
    assert apply_penalty(80.0, 0.0) == pytest.approx(80.0)
    assert apply_penalty(80.0, 1.0) == 0.0
    assert apply_penalty(41.67, 0.3) == pytest.approx(29.17, abs=1e-9)  # at most 2 decimals


@pytest.mark.parametrize(("points", "penalty", "expected"),
                         [(80.0, 1.2, "penalty: expected a share from 0 to 1, got 1.2"),
                          (80.0, -0.1, "penalty: expected a share from 0 to 1, got -0.1"),
                          (-1.0, 0.1, "points: expected at least 0 points, got -1.0")])
def test_a_penalty_out_of_range_is_refused(points: float, penalty: float, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        apply_penalty(points, penalty)
