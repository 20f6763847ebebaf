"""A grade in points: the rule of Gradescope's score, scaled to the assignment's ``points``.

One rule for every gradebook. In mutant units (full marks: one per mutant graded), with the
assignment's ``gradescope_score``:

- ``"verdict"``: a suite that passed earns every unit; one that did not earns
  ``gradescope_not_passed_share`` per killed mutant, so it always earns less than a passed one;
- ``"kills"``: one unit per killed mutant, whatever the verdict.

Gradescope's ``results.json`` scores in these units (:mod:`grader.report.gradescope`); a
gradebook scales them so that full marks are ``points``. A late penalty then takes its share
(:func:`grader.core.deadlines.judge`) off the points.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from grader.core.assignment import Assignment

__all__ = ["apply_penalty", "mutant_units", "points_of"]


def mutant_units(*, passed: bool, killed: int, mutants: int, score: Literal["verdict", "kills"],
                 not_passed_share: float) -> float:
    """The grade in mutant units, out of ``mutants`` (Gradescope's score, before rounding).

    Raises:
        ValueError: ``killed`` is not from 0 to ``mutants``.
    """
    if not 0 <= killed <= mutants:
        raise ValueError(f"killed: expected 0 to {mutants} killed mutants, got {killed}")
    if score == "kills":
        return float(killed)
    if passed:
        return float(mutants)
    return killed * not_passed_share


def points_of(*, passed: bool, killed: int, mutants: int, assignment: Assignment) -> float:
    """The grade in the assignment's points, rounded to 2 decimals.

    Args:
        passed: the suite's verdict.
        killed: the mutants its valid tests killed.
        mutants: the mutants graded (hidden ones included).
        assignment: its ``points`` (full marks), ``gradescope_score`` and
            ``gradescope_not_passed_share``.

    Raises:
        ValueError: no mutant was graded, or ``killed`` is not from 0 to ``mutants``.
    """
    if mutants < 1:
        raise ValueError(f"mutants: expected at least 1 mutant graded, got {mutants}")
    units = mutant_units(passed=passed, killed=killed, mutants=mutants, score=assignment.gradescope_score,
                         not_passed_share=assignment.gradescope_not_passed_share)
    return round(units / mutants * assignment.points, 2)


def apply_penalty(points: float, penalty: float) -> float:
    """``points`` less the ``penalty`` share of them (a late penalty), rounded to 2 decimals.

    Raises:
        ValueError: ``points`` is negative or ``penalty`` is not from 0 to 1.
    """
    if not points >= 0:
        raise ValueError(f"points: expected at least 0 points, got {points}")
    if not 0 <= penalty <= 1:
        raise ValueError(f"penalty: expected a share from 0 to 1, got {penalty}")
    return round(points * (1 - penalty), 2)
