"""Verifying a journal: every rule of :mod:`grader.core.journal` checked from the file, then
every snapshot **replayed** in the sandboxed worker: a red's new tests must fail, a green's
tests must all pass, under the assignment's limits (the grading's own).

A snapshot's implementation (the student's whole ``tinyllm``, restored from the blobs) runs
only in each run's implementation process; its tests run in a test process that holds the
course's framework and the stand-in, so nothing recorded can change how outcomes are reported.
The replay spends the grading's CPU and wall-clock budgets, and stops where one runs out.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from functools import partial
from pathlib import Path

from grader.core.journal import RED_OUTCOMES, Journal, JournalEntry, Phase, verify
from grader.core.models import JournalSummary, Outcome, SuiteRun, WorkerRun
from grader.core.paths import Layout
from grader.run.runner import GradingBudget, RunLimits, run_suites

__all__ = ["run_snapshot", "verify_journal"]

_NAMED_ENTRIES = 10  # entries a budget's problem names before "... and N more"
_STOPPED = "replay stopped: "  # starts the problem of a replay a budget stopped (listed first)


def run_snapshot(
    layout: Layout, tests_dir: Path, impl_dir: Path, limits: RunLimits, runs: list[WorkerRun],
    budget: GradingBudget | None = None,
) -> list[SuiteRun]:
    """Run suites against a student's implementation (the ``tinyllm`` package in
    ``impl_dir``) in the sandboxed worker: the package in each run's implementation process,
    the tests beside the stand-in on the course's framework (``layout.reference``), under
    ``budget`` when one is given (:func:`grader.run.runner.run_suites`)."""
    student = layout.with_implementation(impl_dir.resolve())
    return run_suites(layout=student, tests_dir=tests_dir, runs=runs, hash_seed=1, limits=limits, budget=budget)


def _restore(journal: Journal, files: dict[str, str], dest: Path) -> None:
    for path, digest in files.items():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(journal.blobs / digest, target)


def replay_problems(journal: Journal, layout: Layout, limits: RunLimits, budget: GradingBudget) -> list[str]:
    """Re-run every snapshot: a red's new tests must fail, a green's tests must all pass.

    Snapshots whose implementations differ only in the module under test share one worker; each runs its
    own tests folder, restored from the blobs. Every run spends ``budget``; once it has run
    out, the entries not replayed are named in one problem.
    """
    problems: list[str] = []
    cut: list[tuple[JournalEntry, SuiteRun]] = []
    groups: dict[tuple, list[JournalEntry]] = defaultdict(list)
    module = layout.module_file
    for entry in journal.entries:
        if module not in entry.impl:
            problems.append(f"entry {entry.seq}: the implementation snapshot has no {module}: cannot replay")
            continue
        rest = tuple(sorted((p, d) for p, d in entry.impl.items() if p != module))
        groups[rest].append(entry)
    with tempfile.TemporaryDirectory(prefix="mutagrade-replay-") as tmp:
        root = Path(tmp)
        for number, (rest, entries) in enumerate(groups.items()):
            if budget.exhausted():
                cut += [(entry, budget.cut(WorkerRun(variant=f"entry-{entry.seq}", source=""), 1)) for entry in entries]
                continue
            impl = root / f"impl-{number}"
            _restore(journal, dict(rest), impl)
            _restore(journal, {module: entries[0].impl[module]}, impl)
            tests = root / f"tests-{number}"
            runs = []
            for entry in entries:
                _restore(journal, entry.tests, tests / f"entry-{entry.seq}")
                source = (journal.blobs / entry.impl[module]).read_text(encoding="utf-8")
                runs.append(WorkerRun(variant=f"entry-{entry.seq}", source=source, tests=f"entry-{entry.seq}"))
            for entry, run in zip(entries, run_snapshot(layout, tests, impl, limits, runs, budget)):
                if run.budget is not None:
                    cut.append((entry, run))
                else:
                    problems.extend(_judge_replay(entry, run))
    if cut:
        problems.append(_budget_problem(cut, budget, len(journal.entries)))
    return problems


def _budget_problem(cut: list[tuple[JournalEntry, SuiteRun]], budget: GradingBudget, total: int) -> str:
    """One problem for every entry a budget stopped or never let run: which budget, where."""
    cut = sorted(cut, key=lambda pair: pair[0].seq)
    kind = budget.exhausted() or cut[0][1].budget
    where = next((f" in entry {e.seq}, test {r.budget_exceeded}" for e, r in cut if not r.budget_exceeded.startswith("(")), "")
    named = ", ".join(str(e.seq) for e, _ in cut[:_NAMED_ENTRIES])
    more = f", ... and {len(cut) - _NAMED_ENTRIES} more" if len(cut) > _NAMED_ENTRIES else ""
    return (f"{_STOPPED}{budget.describe(kind)} ran out{where}; {len(cut)} of {total} entries were not "
            f"replayed to their end (entries {named}{more}), so the journal cannot be verified")


def _judge_replay(entry: JournalEntry, run: SuiteRun) -> list[str]:
    label = f"entry {entry.seq} ({entry.phase.value})"
    problems = [f"{label}: replay: {e}" for e in run.collection_errors]
    if run.crashed:
        problems.append(f"{label}: replay: {run.crashed}")
    if entry.phase is Phase.RED:
        for test in entry.introduced:
            outcome = run.outcome(test)
            if outcome is Outcome.PASSED:
                problems.append(
                    f"{label}: test {test}: passed when its red snapshot was replayed: "
                    "the recorded failure is not what this code does (outcome forged?)"
                )
            elif outcome not in RED_OUTCOMES:
                problems.append(f"{label}: test {test}: replayed as {outcome.value}, expected a failure")
    else:
        recorded = set(entry.outcomes)
        replayed = {r.test_id: r.outcome for r in run.results}
        for test in sorted(recorded | set(replayed)):
            outcome = replayed.get(test, Outcome.MISSING)
            if outcome is not Outcome.PASSED:
                problems.append(
                    f"{label}: test {test}: {outcome.value} when its green snapshot was replayed, "
                    "but a green must pass"
                )
    return problems


def verify_journal(
    journal_path: Path,
    tests_dir: Path,
    *,
    layout: Layout,
    limits: RunLimits,
    replay: bool = True,
    budget: GradingBudget | None = None,
) -> JournalSummary:
    """Verify a journal against the submitted tests.

    Args:
        journal_path: ``.tdd/journal.jsonl`` (its blobs are in ``blobs/`` beside it).
        tests_dir: the submitted test files.
        layout: the checkout (for the worker).
        limits: the worker's limits: the assignment's, as grading has them (its
            ``max_journal_entries`` among them).
        replay: re-run every snapshot (only skipped by tools that check the file alone).
        budget: the grading's budgets, which the replay spends first (default: the budgets of
            ``limits``, for this replay alone).

    Returns:
        The summary: ``ok`` when no problem was found; problems name entries and tests, and
        a budget that stopped the replay; ``replay_s`` and ``replay_cpu_s`` what it spent.

    Raises:
        JournalFormatError: if the journal cannot be read at all, or holds more entries than
            the assignment allows (refused before anything is replayed).
    """
    budget = budget if budget is not None else GradingBudget(limits.limits)
    spent = budget.spent
    replayer = partial(replay_problems, layout=layout, limits=limits, budget=budget) if replay else None
    summary = verify(journal_path, tests_dir, replay=replayer, max_entries=limits.limits.max_journal_entries)
    # Where a budget stopped the replay comes first: the rest of what was found is incomplete.
    problems = sorted(summary.problems, key=lambda problem: not problem.startswith(_STOPPED))
    return summary.model_copy(update={"problems": problems, "replay_cpu_s": round(budget.spent - spent, 3)})
