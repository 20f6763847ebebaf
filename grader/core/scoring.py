"""Scoring: which tests count, which mutants they kill, and whether the suite passes.

SPEC §5 steps 3–5. A test is valid when it passed on the reference in both runs and on every
wheat, and is no copy of a course test (:mod:`grader.core.copies`); only valid tests kill. A
mutant is killed when a valid test failed on it in the first run and again in the confirming
run. The suite passes when the policy holds, at least one test
is valid, every test is valid (unless the assignment allows invalid ones), the kill rate reaches
the threshold, every required mutant is killed and, when required, the journal verifies.
"""

from __future__ import annotations

from grader.core.assignment import Assignment
from grader.core.copies import CopyCheck
from grader.core.caps import (
    MAX_ID_CHARS,
    MAX_LISTED,
    MAX_NAMED_TESTS,
    MAX_TEST_REASON_CHARS,
    MAX_TEXT_CHARS,
    bound_journal,
    cap_lines,
    cap_text,
    first,
    short_ids,
)
from grader.core.models import (
    Audience,
    LEGACY_REPORT_SCHEMA,
    Budget,
    JournalSummary,
    Mention,
    MutantVerdict,
    Outcome,
    PolicySummary,
    Report,
    Score,
    TestStatus,
    TestVerdict,
    Timing,
)
from grader.core.matrix import Matrix
from grader.core.variants import Variant, VariantKind

__all__ = ["HIDDEN_HINT", "not_graded", "score_suite", "shown_ids", "student_view", "too_many_tests"]

HIDDEN_HINT = (
    "This mutant is hidden: its mistake is not shown. Look for a part of the contract "
    "(the docstrings of the module's contract stub, its .pyi) that none of your tests pins down."
)


def shown_ids(variants: list[Variant], audience: Audience) -> dict[str, str]:
    """Variant id -> the name shown in the report: hidden mutants become "hidden mutant N"
    for students (numbered in manifest order); staff see every id.

    Raises:
        ValueError: if ``audience`` is not an :class:`Audience`'s value.
    """
    audience = Audience(audience)
    names: dict[str, str] = {}
    hidden = 0
    for variant in variants:
        if audience is Audience.STUDENT and variant.kind is VariantKind.MUTANT and variant.spec.hidden:
            hidden += 1
            names[variant.id] = f"hidden mutant {hidden}"
        else:
            names[variant.id] = variant.id
    return names


def _failure(head: str, message: str) -> list[str]:
    """``head`` and the failure's message under it, as a reason shows them: the message's
    first line after the head, the rest of it indented below (numpy's assertion messages say
    what differs on their later lines)."""
    lines = cap_lines(message)
    if not lines:
        return [head]
    return [f"{head}: {lines[0]}", *(f"  {line}" for line in lines[1:])]


def _hidden_mutants(variants: list[Variant]) -> set[str]:
    return {v.id for v in variants if v.kind is VariantKind.MUTANT and v.spec.hidden}


def _cell(outcome: Outcome, *, hidden: bool) -> Outcome:
    """A cell of the matrix as its reader sees it: of a hidden mutant, a student sees whether
    the test caught it (FAILED), did not (PASSED) or was not run there, never how (an error, a
    time-out, a skip), which the run's own code chooses."""
    if not hidden or outcome is Outcome.NOT_RUN:
        return outcome
    return Outcome.FAILED if outcome.kills else Outcome.PASSED


def _staff_only(lines: list[Mention]) -> list[Mention]:
    """The problems of hidden mutants' runs as a staff report lists them: at most
    :data:`MAX_LISTED`, then one line naming the variants of the rest (a line of its own, not
    ``problems_omitted``, which counts only what a student may read of)."""
    listed, omitted = first(lines, MAX_LISTED)
    if omitted:
        rest = list(dict.fromkeys(v for line in lines[MAX_LISTED:] for v in line.variants))
        listed.append(Mention.of([f"... and {omitted} more of ", *[", "] * (len(rest) - 1), ""], rest))
    return listed


_BY_CHANCE = (
    "passed on the reference under both seeds, and failed on a correct implementation under one seed only "
    "(it passed there under the other): its result depends on chance (the numbers it draws, or how many of "
    "them an earlier test took from a generator they share), so it was not run on the mutants; give it a "
    "generator of its own with a fixed seed:"
)


# A mutant is named by no reason (a student may not read a hidden one's name).
_ON_A_MUTANT = (
    "passed on a mutant in one run and failed or raised on the same mutant in another (or its run ended there): "
    "the implementation was the same, so its result depends on chance (a clock, or numbers it draws without a "
    "seed of its own), and it counts for nothing; make it deterministic"
)


def _none_collected(matrix: Matrix) -> str:
    """Why no test counts when the reference's runs collected none: a file that could not be
    collected, or no name pytest collects (its defaults: the only ones a run uses)."""
    runs = [run for run in (matrix.first.get("reference"), matrix.second.get("reference")) if run is not None]
    if any(run.collection_errors or run.crashed for run in runs):
        return "no test was collected: a test file could not be collected (see the problems while running)"
    return ("no test was collected: pytest collects the functions whose names start with `test` (or such "
            "methods of a class named `Test*` without an `__init__`) from files named `test_*.py` or `*_test.py`")


def _classify(test_id: str, matrix: Matrix, wheats: list[Variant], mutants: list[Variant]) -> tuple[TestStatus, str]:
    first = matrix.first["reference"].outcome(test_id)
    second_run = matrix.second.get("reference")
    second = second_run.outcome(test_id) if second_run is not None else Outcome.MISSING
    message = next((r.message for r in matrix.first["reference"].results if r.test_id == test_id), "")
    if first is not Outcome.PASSED and second is not Outcome.PASSED:
        lines = cap_lines(message)
        return TestStatus.WRONG, "\n".join([
            f"fails on the reference implementation ({first.value}), so it was not run on the wheats or mutants"
            + (":" if lines else ""),
            *(f"  {line}" for line in lines),
        ])
    if first is not second:
        return TestStatus.FLAKY, (
            f"gave {first.value} and then {second.value} on the reference, run twice under "
            "different hash seeds: its result depends on chance, not on the implementation"
        )
    for again in matrix.rechecks:
        if again.budget_exceeded or test_id not in again.test_ids:
            continue  # a run the budget stopped says nothing about the test (one that died does)
        late = again.outcome(test_id)
        if late not in (Outcome.PASSED, Outcome.NOT_RUN):
            return TestStatus.FLAKY, (
                f"passed on the reference, then gave {late.value} when the reference was run again "
                "later in the grading: its result depends on when it runs, not on the implementation"
            )
    # Each wheat that failed it, by whether the failure held when run again under the other seed.
    held: dict[bool, list[str]] = {True: [], False: []}
    said: dict[bool, set[str]] = {True: set(), False: set()}
    for wheat in wheats:
        outcome = matrix.outcome(test_id, wheat.id)
        if outcome not in (Outcome.PASSED, Outcome.NOT_RUN):
            result = next((r for r in matrix.first[wheat.id].results if r.test_id == test_id), None)
            message = result.message.strip() if result else ""
            head = f"{wheat.id} ({wheat.spec.title}): {outcome.value}"
            kept = not matrix.passed_again(test_id, wheat.id)
            lines, seen = held[kept], said[kept]
            if message and message in seen:  # every wheat failing it alike: its message once
                lines.append(f"{head}, with the same message")
                continue
            seen.add(message)
            lines.extend(_failure(head, message))
    if held[True]:
        return TestStatus.BRITTLE, "\n".join(
            ["rejects a correct implementation, so it was not run on the mutants:", *(f"  {line}" for line in held[True])]
        )
    if held[False]:
        return TestStatus.FLAKY, "\n".join([_BY_CHANCE, *(f"  {line}" for line in held[False])])
    if any(matrix.differs_between_runs(test_id, mutant.id) for mutant in mutants):
        return TestStatus.FLAKY, _ON_A_MUTANT
    return TestStatus.VALID, ""


def score_suite(
    *,
    submission: str,
    matrix: Matrix,
    variants: list[Variant],
    assignment: Assignment,
    audience: Audience = Audience.STUDENT,
    policy: PolicySummary | None = None,
    journal: JournalSummary | None = None,
    timing: Timing | None = None,
    copies: CopyCheck | None = None,
) -> Report:
    """Turn a run matrix into the report.

    Args:
        submission: what was graded (a path or a name), for the report.
        matrix: the runs of :func:`grader.run.scheduler.run_matrix`.
        variants: the variants the matrix was run on (the reference first).
        assignment: threshold and validity rules.
        audience: a student's report hides hidden mutants; staff's shows them.
        policy: the policy check's result (checked and fine when omitted).
        journal: the journal's verification (not checked when omitted).
        timing: how long grading took.
        copies: each test's likeness to the course tests (not compared when omitted): a copy
            is not valid, whatever its runs.

    Returns:
        The report.

    Raises:
        ValueError: if ``audience`` is not an :class:`Audience`'s value.
    """
    audience = Audience(audience)
    policy = policy or PolicySummary()
    journal = journal or JournalSummary()
    names = shown_ids(variants, audience)
    wheats = [v for v in variants if v.kind is VariantKind.WHEAT]
    mutants = [v for v in variants if v.kind is VariantKind.MUTANT]

    # A problem is cut to MAX_TEXT_CHARS whoever reads it: its message leaves room for the
    # longest name of any audience, so the student's view of it is cut where the student's is.
    longest = max((len(n) for a in Audience for n in shown_ids(variants, a).values()), default=0)
    room = max(MAX_TEXT_CHARS - longest - len(": "), 1)
    # A hidden mutant's run is the suite's own code telling what that mutant computes (a
    # pytest.exit(text), an error's message, a module that fails to import): its lines are for
    # staff only. They come after the others with a cap of their own, so that what a student
    # reads (student_view drops them) and its count of omitted lines do not depend on them.
    secret = _hidden_mutants(variants)
    unseen = secret if audience is Audience.STUDENT else set()  # and their cells say only: caught?
    found: list[Mention] = []
    withheld: list[Mention] = []
    for variant in variants:
        if variant.id in unseen:
            continue
        said: set[str] = set()  # a confirming run meets the first run's errors again: once each
        for run in (matrix.first.get(variant.id), matrix.second.get(variant.id)):
            if run is None:
                continue
            errors = [e for e in [run.crashed, *run.collection_errors] if e and e not in said]
            said.update(errors)
            (withheld if variant.id in secret else found).extend(
                Mention.of(["", f": {cap_text(error, room)}"], [names[variant.id]]) for error in errors
            )
    problems, problems_omitted = first(found, MAX_LISTED)
    problems += _staff_only(withheld)

    test_ids = matrix.test_ids
    # The ids a report shows: the runs used whole ids, however long (grader.core.caps).
    shown = short_ids([*test_ids, *journal.history])
    verdicts: list[TestVerdict] = []
    kills: dict[str, list[str]] = {m.id: [] for m in mutants}
    for test_id in test_ids:
        status, reason = _classify(test_id, matrix, wheats, mutants)
        like = copies.likeness(test_id) if copies is not None else None
        if like is not None and like.copied:
            status, reason = TestStatus.COPIED, like.reason
        # Students see the likeness of a copy only (its reason names it): the figure of the
        # others would tell how far a copy could go unseen.
        shown_like = like if like is not None and (like.copied or audience is Audience.STAFF) else None
        killed = []
        if status is TestStatus.VALID:
            for mutant in mutants:
                if matrix.confirmed_failure(test_id, mutant.id):
                    killed.append(names[mutant.id])
                    kills[mutant.id].append(shown[test_id])
        verdicts.append(
            TestVerdict(
                id=shown[test_id],
                valid=status is TestStatus.VALID,
                status=status,
                kills=killed,
                reason=cap_text(reason, MAX_TEST_REASON_CHARS),
                similarity=shown_like.similarity if shown_like else None,
                similar_to=shown_like.course_test if shown_like else "",
                outcomes={names[v.id]: _cell(matrix.outcome(test_id, v.id), hidden=v.id in unseen)
                          for v in variants},
            )
        )

    mutant_verdicts = []
    for mutant in mutants:
        hidden = audience is Audience.STUDENT and mutant.spec.hidden
        killed = bool(kills[mutant.id])
        mutant_verdicts.append(
            MutantVerdict(
                id=names[mutant.id],
                title=names[mutant.id] if hidden else mutant.spec.title,
                required=mutant.spec.required,
                hidden=mutant.spec.hidden,
                killed=killed,
                killed_by=kills[mutant.id],
                hint="" if killed else (HIDDEN_HINT if hidden else mutant.spec.pitfall),
            )
        )

    killed_count = sum(v.killed for v in mutant_verdicts)
    total = len(mutant_verdicts)
    required = [names[m.id] for m in mutants if m.spec.required]
    required_missing = [names[m.id] for m in mutants if m.spec.required and not kills[m.id]]
    kill_rate = killed_count / total if total else 0.0
    score = Score(
        kill_rate=round(kill_rate, 6),
        killed=killed_count,
        total=total,
        threshold=assignment.threshold,
        required=required,
        required_missing=required_missing,
    )

    reasons: list[str | Mention] = []
    if matrix.budget_stop is not None:
        stop = matrix.budget_stop
        test = shown.get(stop.test) or cap_text(stop.test, MAX_ID_CHARS)
        what = {Budget.WALL: f"grading wall-clock budget of {stop.budget:g} s ran out",
                Budget.RUNS: f"grading's cap of {stop.budget:g} suite runs reached"}.get(
                    stop.kind, f"grading budget of {stop.budget:g} CPU s exceeded")
        then = ": grading stopped there, and cells not run count as not killed"
        if stop.variant:
            reasons.append(Mention.of([f"{what} in test {test} on variant ", then],
                                      [names.get(stop.variant, stop.variant)]))
        else:
            reasons.append(f"{what} while runs were going{then}")
    if not policy.ok:
        reasons.append(f"{policy.refusal}: nothing was run")
    invalid = [v for v in verdicts if not v.valid]
    if policy.ok and not test_ids:
        reasons.append(_none_collected(matrix))
    elif policy.ok and not any(v.valid for v in verdicts):
        reasons.append("no test is valid (every test fails on the reference or on a correct implementation, "
                       "or is a copy of a course test)")
    if invalid and not assignment.allow_invalid_tests:
        named, more = first((f"{v.id}: {v.status.value}" for v in invalid), MAX_NAMED_TESTS)
        reasons.append(
            f"{len(invalid)} test(s) are not valid ({', '.join(named)}{f', ... and {more} more' if more else ''})"
        )
    if policy.ok and kill_rate < assignment.threshold:
        reasons.append(
            f"kill rate {kill_rate:.0%} ({killed_count}/{total}) is below the threshold {assignment.threshold:.0%}"
        )
    if policy.ok and required_missing:
        commas = [", "] * (len(required_missing) - 1)
        reasons.append(Mention.of(["required mutant(s) not killed: ", *commas, ""], required_missing))
    # A journal that does not verify costs no more than none where none is required: its
    # problems stay in the report's journal section, and the verdict rests on the kills.
    if assignment.require_journal and not journal.checked:
        reasons.append("the assignment requires a red-then-green journal, and none was checked")
    elif assignment.require_journal and not journal.ok:
        reasons.append("the red-then-green journal does not verify")

    return Report(
        submission=submission,
        audience=audience,
        passed=not reasons,
        reasons=_for(audience, reasons),
        score=score,
        tests=verdicts,
        mutants=mutant_verdicts,
        variants=[names[v.id] for v in variants],
        journal=bound_journal(journal, shown),
        policy=policy,
        problems=_for(audience, problems),
        problems_omitted=problems_omitted,
        timing=timing or Timing(),
    )


def _for(audience: Audience, lines: list[str | Mention]) -> list[str | Mention]:
    """A report's lines for ``audience``: staff's keep the variants they name as data (a
    student's view is made from them); a student's are sentences, as every reader of
    ``mutagrade.report/1`` expects them."""
    return [str(line) for line in lines] if audience == Audience.STUDENT else lines


def student_view(report: Report, variants: list[Variant]) -> Report:
    """The report a student may see of a staff report: hidden mutants renamed "hidden mutant
    N", their titles and hints withheld, nothing of their runs (no problem of theirs, each of
    their cells only whether the test caught it), its lines sentences.

    A report stored as ``mutagrade.report/1`` holds its lines as plain sentences: a hidden
    mutant's id is replaced in them as that version did (in a problem only before its colon),
    and a problem of a hidden mutant's run (its id before the colon) is left out, so that an old
    report never shows a student what a new one hides."""
    if report.audience == Audience.STUDENT:  # ==: a copied report may hold the string
        return report
    names = shown_ids(variants, Audience.STUDENT)
    hidden = _hidden_mutants(variants)

    def rename(ids: list[str]) -> list[str]:
        return [names.get(i, i) for i in ids]

    legacy = report.schema_ == LEGACY_REPORT_SCHEMA  # stored before lines named variants as data

    def of_hidden_run(line: str | Mention) -> bool:
        if isinstance(line, Mention):
            return any(variant_id in hidden for variant_id in line.variants)
        return legacy and any(line.startswith(variant_id + ":") for variant_id in hidden)

    def rename_lines(lines: list[str | Mention], *, anywhere: bool) -> list[str]:
        # Only a Mention names variants: a plain line (and a test id in a Mention) stays as it is,
        # unless the report is of the old schema, whose lines are all plain.
        renamed: list[str] = []
        for line in lines:
            if isinstance(line, Mention):
                line = str(line.renamed(names))
            elif legacy:
                end = "" if anywhere else ":"
                for variant_id in hidden:
                    line = line.replace(variant_id + end, names[variant_id] + end)
            renamed.append(line)
        return renamed

    mutants = [
        m.model_copy(update={"id": names[m.id], "title": names[m.id], "hint": HIDDEN_HINT if not m.killed else ""})
        if m.id in hidden
        else m
        for m in report.mutants
    ]
    tests = [
        t.model_copy(update={"kills": rename(t.kills), "outcomes": {
            names.get(k, k): _cell(v, hidden=k in hidden) for k, v in t.outcomes.items()
        }, **({} if t.status is TestStatus.COPIED else {"similarity": None, "similar_to": ""})})
        for t in report.tests
    ]
    score = report.score.model_copy(
        update={"required": rename(report.score.required), "required_missing": rename(report.score.required_missing)}
    )
    return report.model_copy(
        update={
            "audience": Audience.STUDENT,
            "mutants": mutants,
            "tests": tests,
            "score": score,
            "variants": rename(report.variants),
            "problems": rename_lines([p for p in report.problems if not of_hidden_run(p)], anywhere=False),
            "reasons": rename_lines(report.reasons, anywhere=True),
        }
    )


def too_many_tests(matrix: Matrix, limit: int | None) -> str:
    """Why the suite is refused for its number of tests, from the reference's runs; empty if it is not."""
    runs = [matrix.first.get("reference"), matrix.second.get("reference")]
    over = max((run.tests_over_limit for run in runs if run is not None), default=0)
    if not over:
        return ""
    return f"the suite has {over} tests, more than the limit of {limit}: nothing else was run"


def not_graded(
    why: str, *, name: str, variants: list[Variant], assignment: Assignment, audience: Audience, policy: PolicySummary,
    journal: JournalSummary | None, timing: Timing,
) -> Report:
    """The report of a suite that could not be graded as it is: nothing of it counts, and
    ``why`` says what to change (a policy violation, or more tests than the grader takes)."""
    mutants = [v for v in variants if v.kind is VariantKind.MUTANT]
    names = shown_ids(variants, audience)
    required = [names[m.id] for m in mutants if m.spec.required]
    return Report(
        submission=name,
        audience=audience,
        passed=False,
        reasons=[why],
        score=Score(
            kill_rate=0.0, killed=0, total=len(mutants), threshold=assignment.threshold,
            required=required,
            required_missing=required,
        ),
        tests=[],
        mutants=[],
        variants=[],
        policy=policy,
        journal=bound_journal(journal or JournalSummary()),
        timing=timing,
        refused="" if not policy.ok else why,
    )
