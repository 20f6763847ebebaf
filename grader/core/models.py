"""The result types every stage shares: outcomes of tests on variants, and runs of suites.

The same models cross the pipe from a sandboxed child, the queue, the database and every
reporter, so they are plain pydantic models that serialise to JSON and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from string import Formatter

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grader.core.protocol import Budget, Outcome, WorkerSandbox

__all__ = [
    "LEGACY_REPORT_SCHEMA",
    "REPORT_SCHEMA",
    "Audience",
    "CourseTestResult",
    "ImplementationCheck",
    "JournalSummary",
    "Mention",
    "MutantVerdict",
    "Outcome",
    "PolicySummary",
    "Purpose",
    "Report",
    "Score",
    "SuiteRun",
    "TestOutcome",
    "TestStatus",
    "TestVerdict",
    "Timing",
    "WorkerRun",
    "WorkerSandbox",
]


class Audience(StrEnum):
    """Who reads a report: a student sees no hidden mutant; staff see everything."""

    STUDENT = "student"
    STAFF = "staff"


class Purpose(StrEnum):
    """Why a run is made (the grader's to know; a run's processes are never told)."""

    FIRST = "first"  # a variant's first run: the reference under the first seed, a wheat, a mutant
    SECOND_SEED = "second_seed"  # the reference under the second seed
    CONFIRMING = "confirming"  # a mutant's killing tests again, under the other seed
    CONFIRMING_AGAIN = "confirming_again"  # ... and once more under each seed, once the grading has shown chance
    CONTINUING = "continuing"  # a mutant's tests not reached, after a kill that did not hold
    RECHECK = "recheck"  # the reference again, among the late runs

    @property
    def late(self) -> bool:
        return self in (Purpose.CONFIRMING, Purpose.CONFIRMING_AGAIN, Purpose.CONTINUING, Purpose.RECHECK)


class TestOutcome(BaseModel):
    """One test's outcome on one run, with a short message when it did not pass."""

    __test__ = False  # not a pytest test class, despite the name
    model_config = ConfigDict(frozen=True)

    test_id: str
    outcome: Outcome
    message: str = ""
    duration: float = 0.0
    raised_in: str = ""  # "file.py:LINE" of the suite's own code that raised, if it did


class SuiteRun(BaseModel):
    """A whole suite run once against one variant, in one child process."""

    model_config = ConfigDict(frozen=True)

    variant: str
    hash_seed: int
    purpose: Purpose = Purpose.FIRST
    results: tuple[TestOutcome, ...] = ()
    collection_errors: tuple[str, ...] = ()
    crashed: str = ""  # why the child ended abnormally, if it did
    duration: float = 0.0
    cpu_s: float = 0.0  # CPU seconds the run's child used (user and system)
    stopped_early: bool = False  # stopped after its first test that did not pass, as asked
    budget_exceeded: str = ""  # the test running when the grading budget ran out
    budget: Budget | None = None  # which budget ran out, with budget_exceeded
    # How many tests the run collected, when more than the job allows: then none of them ran.
    tests_over_limit: int = 0
    phases: dict[str, float] = {}  # seconds: "setup" (lock-down, the variant), "collect", "run"

    def outcome(self, test_id: str) -> Outcome:
        """The outcome of ``test_id`` in this run (MISSING if it never reported)."""
        for result in self.results:
            if result.test_id == test_id:
                return result.outcome
        return Outcome.MISSING

    @property
    def test_ids(self) -> list[str]:
        return [r.test_id for r in self.results]


# ------------------------------------------------------------------ the worker's job
class WorkerRun(BaseModel):
    """One suite run the grader asks a worker for (the worker sees a
    :class:`~grader.core.protocol.RunHeader`, never the variant's name, and only its child the source)."""

    variant: str
    source: str
    # Node ids to report (a run's test process runs every test, whatever the run); None: all.
    select: list[str] | None = None
    purpose: Purpose = Purpose.FIRST
    seed: int | None = None  # the hash seed (the worker) it must run under; None: either
    tests: str | None = None  # a sub-folder of the job's tests to run instead of all of it
    time_limits: dict[str, float] | None = None  # test id -> seconds, instead of the test limit
    stop_at_first_kill: bool = False  # stop at the first selected test that does not pass


# ----------------------------------------------------------------------- the report
REPORT_SCHEMA = "mutagrade.report/2"
# Before /2 every line of reasons and problems was a plain sentence (reports stored then still load).
LEGACY_REPORT_SCHEMA = "mutagrade.report/1"


class Mention(BaseModel):
    """A line of a report that names variants, kept as data so that each audience reads the
    names it may see (a student never reads a hidden mutant's id), and nothing else is renamed.

    ``text`` holds ``{}`` where each of ``variants`` goes, in order, and its own braces doubled,
    as :meth:`str.format` writes them; ``variants`` are the names the report's audience sees.
    Build one with :meth:`of`, which does the doubling.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    variants: list[str] = []

    @model_validator(mode="after")
    def _one_field_per_variant(self) -> Mention:
        try:
            fields = [(name, spec, conversion) for _, name, spec, conversion in Formatter().parse(self.text)
                      if name is not None]
        except ValueError as error:
            raise ValueError(f"text must be a template with {{}} fields, got {self.text!r}: {error}") from None
        if any(field != ("", "", None) for field in fields):
            raise ValueError(f"text's fields must all be a bare {{}}, got {self.text!r}")
        if len(fields) != len(self.variants):
            raise ValueError(
                f"text must hold one {{}} for each of the {len(self.variants)} variant(s), got {len(fields)}"
            )
        return self

    @classmethod
    def of(cls, words: list[str], variants: list[str]) -> Mention:
        """The line ``words[0]``, ``variants[0]``, ``words[1]``, ... ``words[-1]``.

        Raises:
            ValueError: unless there is one more word than variants.
        """
        if len(words) != len(variants) + 1:
            raise ValueError(f"words must be one more than variants ({len(variants) + 1}), got {len(words)}")
        return cls(text="{}".join(w.replace("{", "{{").replace("}", "}}") for w in words), variants=variants)

    def words(self) -> list[str]:
        """The text between the names, as :meth:`of` took it: one more than the variants."""
        words = [""]
        for literal, name, _, _ in Formatter().parse(self.text):
            words[-1] += literal
            if name is not None:
                words.append("")
        return words

    def renamed(self, names: Mapping[str, str]) -> Mention:
        """This line with each variant named as ``names`` names it (unlisted ones as they are)."""
        return self.model_copy(update={"variants": [names.get(v, v) for v in self.variants]})

    def __str__(self) -> str:
        words = self.words()
        return words[0] + "".join(name + word for name, word in zip(self.variants, words[1:]))


class TestStatus(StrEnum):
    """Whether a student's test counts, and if not, why."""

    __test__ = False  # not a pytest test class, despite the name

    VALID = "valid"  # passed on the reference (every run) and on every wheat
    WRONG = "wrong"  # fails on the reference
    FLAKY = "flaky"  # differs between the reference's runs
    BRITTLE = "brittle"  # passes on the reference, fails on a correct implementation (a wheat)
    COPIED = "copied"  # a course test handed in as one's own (grader/core/copies.py), whatever its runs


class TestVerdict(BaseModel):
    """One student test: whether it counts, what it killed, and its outcome on each variant."""

    __test__ = False
    model_config = ConfigDict(frozen=True)

    id: str
    valid: bool
    status: TestStatus
    kills: list[str]  # mutant ids (or "hidden mutant N") this valid test killed, confirmed
    reason: str = ""  # for an invalid test: which correct implementation it rejected, and why
    outcomes: dict[str, Outcome] = {}  # variant id (as shown) -> first-run outcome
    # How like the closest course test it is (0 to 1), and which that is ("reference/tests/
    # test_x.py::test_y"); None where it was not compared. A student's report has them only for a
    # copied test (its reason names the course test anyway).
    similarity: float | None = None
    similar_to: str = ""


class MutantVerdict(BaseModel):
    """One mutant: killed or not, by which valid tests, and the hint when it survived."""

    model_config = ConfigDict(frozen=True)

    id: str  # "hidden mutant N" for a hidden mutant in a student's report
    title: str
    required: bool
    hidden: bool
    killed: bool
    killed_by: list[str]
    hint: str = ""  # the pitfall, shown when no valid test kills it


class Score(BaseModel):
    model_config = ConfigDict(frozen=True)

    kill_rate: float
    killed: int
    total: int
    threshold: float
    required: list[str]
    required_missing: list[str]


class JournalSummary(BaseModel):
    """The red-then-green journal's verification, as the report shows it."""

    model_config = ConfigDict(frozen=True)

    checked: bool = False
    ok: bool = True
    problems: list[str] = []  # each names the entry (and test) it is about
    entries: int = 0
    history: dict[str, str] = {}  # test id -> "red at entry 3, green at entry 4"
    replay_s: float = 0.0  # time spent re-running the snapshots
    replay_cpu_s: float = 0.0  # CPU seconds those runs used (spent of the grading's budget)
    problems_omitted: int = 0  # problems found beyond those listed (grader.core.caps)
    history_omitted: int = 0  # tests whose history is not listed


class CourseTestResult(BaseModel):
    """One course test on the student's own implementation."""

    model_config = ConfigDict(frozen=True)

    id: str
    outcome: Outcome
    message: str = ""


class ImplementationCheck(BaseModel):
    """The course tests (goldens from fixtures, and live torch where installed) on the
    student's implementation."""

    model_config = ConfigDict(frozen=True)

    checked: bool = False
    ok: bool = True
    implementation: str = ""
    live_torch: bool = False
    tests: list[CourseTestResult] = []
    problems: list[str] = []


class PolicySummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool = True
    checked: bool = True
    violations: list[str] = []
    violations_omitted: int = 0  # violations found beyond those listed (grader.core.caps)
    syntax_errors: int = 0  # of those found, files Python cannot parse (one violation each)

    @property
    def found(self) -> int:
        """Every violation found, listed or not."""
        return len(self.violations) + self.violations_omitted

    @property
    def refusal(self) -> str:
        """Why a suite with these violations is refused, a syntax error named as one: "a test
        file has a syntax error", "the policy check failed (2 violation(s))"; "" when it holds."""
        if self.ok:
            return ""
        syntax, other = self.syntax_errors, self.found - self.syntax_errors
        if not syntax:
            return f"the policy check failed ({self.found} violation(s))"
        named = "a test file has a syntax error" if syntax == 1 else f"{syntax} test files have syntax errors"
        if not other:
            return named
        return f"{named}, and the policy check found {other} other violation{'s' if other > 1 else ''}"


class Timing(BaseModel):
    model_config = ConfigDict(frozen=True)

    total_s: float = 0.0  # the whole grading, the journal's replay included
    journal_s: float = 0.0  # the journal's replay (its runs spend the grading's budgets first)
    runs: int = 0  # suite runs, confirmations included
    tests_s: float = 0.0  # time spent inside the tests themselves, summed over runs
    cpu_s: float = 0.0  # CPU seconds of every run together (what the grading budget counts)
    not_run: int = 0  # cells of the matrix not run: already decided (see each cell's reason)


class Report(BaseModel):
    """The whole result of grading one suite: every reporter renders this and nothing else."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    schema_: str = Field(default=REPORT_SCHEMA, alias="schema")
    submission: str
    audience: Audience = Audience.STUDENT
    passed: bool
    # Why it did not pass, in words, first the most important; a line naming variants is a Mention.
    reasons: list[str | Mention] = []
    score: Score
    tests: list[TestVerdict]
    mutants: list[MutantVerdict]
    variants: list[str]  # column order of the matrix: reference, wheats, mutants (as shown)
    journal: JournalSummary = JournalSummary()
    policy: PolicySummary = PolicySummary()
    implementation: ImplementationCheck = ImplementationCheck()
    # Collection errors, crashed runs: what went wrong while running, each a Mention of its variant.
    problems: list[str | Mention] = []
    timing: Timing = Timing()
    # Why the suite was refused as a whole after it was collected (more tests than the grader
    # takes): nothing else was run. Empty when it was graded.
    refused: str = ""
    problems_omitted: int = 0  # problems beyond those listed (grader.core.caps)
    tests_omitted: int = 0  # tests not listed: only a report shortened to be stored leaves any out

    @property
    def input_refused(self) -> bool:
        """Whether the suite could not be graded as it is (exit code 2): it breaks the policy,
        or a rule of the grader such as the number of tests."""
        return not self.policy.ok or bool(self.refused)
