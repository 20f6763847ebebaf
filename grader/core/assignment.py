"""The assignment's grading rules (threshold, validity, journal, limits), read from TOML."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.run.runner import RunLimits
from grader.core.tomlfile import field_problems, read_toml

__all__ = ["Assignment", "AssignmentError", "Limits", "load_assignment"]


class AssignmentError(ValueError):
    """The assignment file is missing or invalid; the message names the file and field."""


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    test_timeout_s: float = Field(default=10.0, gt=0)
    run_timeout_s: float = Field(default=120.0, gt=0)
    memory_mb: int = Field(default=2048, ge=256)
    timeout_factor: float = Field(default=10.0, ge=1.0)
    timeout_floor_s: float = Field(default=1.0, gt=0)
    budget_cpu_s: float | None = Field(default=300.0, gt=0)
    budget_wall_s: float | None = Field(default=120.0, gt=0)
    budget_memory_mb: int | None = Field(default=2048, ge=256)


class Assignment(BaseModel):
    """How a suite is graded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    threshold: float = Field(ge=0.0, le=1.0)
    allow_invalid_tests: bool = False
    require_journal: bool = False
    # Gradescope's results.json (grader/report/gradescope.py): the points follow the verdict
    # (full when passed, else gradescope_not_passed_share per killed mutant) or count kills;
    # hidden mutants can be revealed after the due date (a test's visibility on Gradescope).
    gradescope_score: Literal["verdict", "kills"] = "verdict"
    gradescope_not_passed_share: float = Field(default=0.5, ge=0.0, lt=1.0)
    gradescope_hidden_hints: Literal["never", "after_due_date", "after_published"] = "never"
    limits: Limits = Limits()

    def run_limits(self, jobs: int | None = None) -> RunLimits:
        """The runner's limits for this assignment (``jobs`` children at a time, default: cores)."""
        extra = {"jobs": jobs} if jobs else {}
        return RunLimits(
            run_timeout=self.limits.run_timeout_s,
            test_timeout=self.limits.test_timeout_s,
            memory_bytes=self.limits.memory_mb * 1024 * 1024,
            timeout_factor=self.limits.timeout_factor,
            timeout_floor=min(self.limits.timeout_floor_s, self.limits.test_timeout_s),
            cpu_budget=self.limits.budget_cpu_s,
            wall_budget=self.limits.budget_wall_s,
            memory_budget=None if self.limits.budget_memory_mb is None else self.limits.budget_memory_mb * 1024 * 1024,
            **extra,
        )


def load_assignment(path: Path) -> Assignment:
    """Read an assignment file.

    Raises:
        AssignmentError: if the file is missing, not TOML, or a field is missing or invalid.
    """
    data = read_toml(path, "assignment", AssignmentError)
    try:
        return Assignment.model_validate(data)
    except ValidationError as exc:
        raise AssignmentError(f"{path}: {field_problems(exc)}") from None
