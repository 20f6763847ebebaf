"""Errors shared by modules that must not import one another: the student package holds
:mod:`grader.flows.check` but not the grading engine (:mod:`grader.flows.grading`)."""

from __future__ import annotations

__all__ = ["GradingInputError"]


class GradingInputError(ValueError):
    """The submission cannot be graded at all (a bad path, no test files)."""
