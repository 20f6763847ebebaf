"""Errors shared by modules that must not import one another: the student package holds
:mod:`grader.check` but not the grading engine (:mod:`grader.grading`)."""

from __future__ import annotations

__all__ = ["GradingInputError"]


class GradingInputError(ValueError):
    """The submission cannot be graded at all (a bad path, no test files)."""
