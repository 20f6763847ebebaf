"""The assignment's grading rules (threshold, validity, journal, limits), read from TOML."""

from __future__ import annotations

from pathlib import Path
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from grader.core.deadlines import Deadline
from grader.core.tomlfile import field_problems, read_toml

__all__ = ["Assignment", "AssignmentError", "Limits", "Subject", "load_assignment", "subject_of"]

# A course test as given_tests names it: "test_x", or "test_file.py::test_x" ("::Class::" between).
_TEST_NAME = re.compile(r"(?:[\w./-]+\.py::)?(?:\w+::)*\w+")


_MODULE_PATTERN = r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$"  # tinyllm.rnn.name: a module inside a package
_STUDENT_TESTS_PATTERN = r"^[\w.-]+(/[\w.-]+)*$"  # a relative path, forward slashes


class AssignmentError(ValueError):
    """The assignment file is missing or invalid; the message names the file and field."""


class Limits(BaseModel):
    """The limits every run of every command works under: the assignment's ``[limits]``.

    ``mutagrade tdd``, ``check``, ``calibrate``, grading and the journal's replay all run under
    these (:class:`grader.run.runner.RunLimits` adds only how runs are made), so a test that
    times out in one times out in all. A test's limit is ``test_timeout_s`` on the reference;
    away from it, ``max(timeout_floor_s, timeout_factor × its time on the reference)``, at most
    ``test_timeout_s``; after a time-out, later tests of that run get at most the floor. The
    budgets bound one grading: CPU seconds of every run together, seconds of wall clock from
    the first run sent, and the memory every run's processes hold together (None: no bound);
    the journal's replay spends them first, and the variants' runs get what is left.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    test_timeout_s: float = Field(default=10.0, gt=0)
    run_timeout_s: float = Field(default=120.0, gt=0)
    memory_mb: int = Field(default=2048, ge=256)
    timeout_factor: float = Field(default=10.0, ge=1.0)
    timeout_floor_s: float = Field(default=1.0, gt=0)
    budget_cpu_s: float | None = Field(default=300.0, gt=0)
    budget_wall_s: float | None = Field(default=120.0, gt=0)
    budget_memory_mb: int | None = Field(default=2048, ge=256)
    # The most entries a red-then-green journal may hold (two per test, red then green): every
    # entry is a run when the journal is replayed, so a longer one is refused before any is.
    max_journal_entries: int = Field(default=100, ge=2)

    @property
    def memory_bytes(self) -> int:
        """Each process's address space, in bytes."""
        return self.memory_mb * 1024 * 1024

    @property
    def budget_memory_bytes(self) -> int | None:
        return None if self.budget_memory_mb is None else self.budget_memory_mb * 1024 * 1024

    @property
    def floor_s(self) -> float:
        """The floor as applied: never above the test limit itself."""
        return min(self.timeout_floor_s, self.test_timeout_s)


class Assignment(BaseModel):
    """How a suite is graded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    # What is graded (:class:`Subject`): an assignment's folder says it; a file of rules alone
    # (``--assignment rules.toml``) may leave it to the folder it grades with.
    module: str | None = Field(default=None, pattern=_MODULE_PATTERN)
    student_tests: str | None = Field(default=None, pattern=_STUDENT_TESTS_PATTERN)
    goldens: str | None = Field(default=None, pattern=_STUDENT_TESTS_PATTERN)
    example: str | None = Field(default=None, pattern=_STUDENT_TESTS_PATTERN)  # relative to the checkout
    threshold: float = Field(ge=0.0, le=1.0)
    allow_invalid_tests: bool = False
    require_journal: bool = False
    # Copies of the course tests (grader/core/copies.py): a test at least this similar to a
    # course test is not valid; the given tests (course tests handed out to start from, by name
    # or as "file.py::name") may be submitted as they are.
    copy_similarity: float = Field(default=0.8, gt=0.0, le=1.0)
    given_tests: tuple[str, ...] = ()
    # Gradescope's results.json (grader/report/gradescope.py): the points follow the verdict
    # (full when passed, else gradescope_not_passed_share per killed mutant) or count kills;
    # hidden mutants can be revealed after the due date (a test's visibility on Gradescope).
    gradescope_score: Literal["verdict", "kills"] = "verdict"
    gradescope_not_passed_share: float = Field(default=0.5, ge=0.0, lt=1.0)
    gradescope_hidden_hints: Literal["never", "after_due_date", "after_published"] = "never"
    # The gradebook (grader/core/points.py): full marks are ``points``, a grade follows the rule
    # of Gradescope's score above; ``deadline`` (a ``[deadline]`` table, none by default) says
    # when work is late and what that costs; ``grade_of_record`` which submission counts: the
    # latest made on time (a late one only when none was), or the best.
    points: float = Field(default=100.0, gt=0, allow_inf_nan=False)
    deadline: Deadline | None = None
    grade_of_record: Literal["latest_on_time", "best"] = "latest_on_time"
    limits: Limits = Limits()

    @field_validator("student_tests", "goldens", "example")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        if value is not None and ".." in value.split("/"):
            raise ValueError(f"must be a path inside the folder, without '..', got {value!r}")
        return value

    @field_validator("given_tests")
    @classmethod
    def _test_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [name for name in value if not _TEST_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"must name course tests as test_x or test_file.py::test_x, got {bad}")
        return value


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


class Subject(BaseModel):
    """What an assignment grades: the module under test (``tinyllm.rnn.<name>``), where a
    student's repository keeps its tests for it, and the torch goldens (relative to the
    assignment's folder)."""

    model_config = ConfigDict(frozen=True)

    module: str
    student_tests: str
    goldens: str
    example: str | None = None  # an example student repository, relative to the checkout


def subject_of(path: Path) -> Subject:
    """The subject an assignment's folder names in its ``assignment.toml``.

    Raises:
        AssignmentError: if the file is invalid or leaves one of ``module``, ``student_tests``
            and ``goldens`` out.
    """
    assignment = load_assignment(path)
    missing = [name for name in ("module", "student_tests", "goldens") if getattr(assignment, name) is None]
    if missing:
        raise AssignmentError(
            f"{path}: field {', '.join(missing)}: required in an assignment's folder "
            "(module = \"tinyllm.rnn.x\", student_tests = \"python/tests/...\", goldens = \"goldens/x.npz\")"
        )
    return Subject(module=assignment.module, student_tests=assignment.student_tests, goldens=assignment.goldens,
                   example=assignment.example)
