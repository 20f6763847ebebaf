"""The result types every stage shares: outcomes of tests on variants, and runs of suites.

The same models cross the pipe from a sandboxed child, the queue, the database and every
reporter, so they are plain pydantic models that serialise to JSON and back.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

__all__ = ["Outcome", "SuiteRun", "TestOutcome"]


class Outcome(StrEnum):
    """What happened to one test on one variant."""

    PASSED = "passed"
    FAILED = "failed"  # an assertion or an exception in the test body
    ERROR = "error"  # in set-up, tear-down or collection
    TIMEOUT = "timeout"
    MISSING = "missing"  # collected but never reported: the child died or lied
    SKIPPED = "skipped"

    @property
    def kills(self) -> bool:
        """Whether this outcome, on a mutant, counts as the test catching it."""
        return self in (Outcome.FAILED, Outcome.ERROR, Outcome.TIMEOUT, Outcome.MISSING)


class TestOutcome(BaseModel):
    """One test's outcome on one run, with a short message when it did not pass."""

    __test__ = False  # not a pytest test class, despite the name
    model_config = ConfigDict(frozen=True)

    test_id: str
    outcome: Outcome
    message: str = ""
    duration: float = 0.0


class SuiteRun(BaseModel):
    """A whole suite run once against one variant, in one child process."""

    model_config = ConfigDict(frozen=True)

    variant: str
    hash_seed: int
    results: tuple[TestOutcome, ...] = ()
    collection_errors: tuple[str, ...] = ()
    crashed: str = ""  # why the child ended abnormally, if it did
    duration: float = 0.0

    def outcome(self, test_id: str) -> Outcome:
        """The outcome of ``test_id`` in this run (MISSING if it never reported)."""
        for result in self.results:
            if result.test_id == test_id:
                return result.outcome
        return Outcome.MISSING

    @property
    def test_ids(self) -> list[str]:
        return [r.test_id for r in self.results]
