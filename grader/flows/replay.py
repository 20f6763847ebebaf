"""Verifying a journal: every rule of :mod:`grader.core.journal` checked from the file, then
every snapshot **replayed** in the sandboxed worker: a red's new tests must fail, a green's
tests must all pass, under the assignment's limits (the grading's own).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import defaultdict
from functools import partial
from pathlib import Path

from grader.core.journal import GRU_FILE, RED_OUTCOMES, Journal, JournalEntry, Phase, verify
from grader.core.models import JournalSummary, Outcome, SuiteRun, WorkerRun
from grader.core.paths import Layout
from grader.run.runner import RunLimits, run_suites

__all__ = ["run_snapshot", "verify_journal"]


def run_snapshot(
    layout: Layout, tests_dir: Path, impl_dir: Path, limits: RunLimits, runs: list[WorkerRun]
) -> list[SuiteRun]:
    """Run suites against a student's implementation in the sandboxed worker."""
    student = Layout(layout.root, implementation=impl_dir.resolve())
    return run_suites(layout=student, tests_dir=tests_dir, runs=runs, hash_seed=1, limits=limits)


def _restore(journal: Journal, files: dict[str, str], dest: Path) -> None:
    for path, digest in files.items():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(journal.blobs / digest, target)


def replay_problems(journal: Journal, layout: Layout, limits: RunLimits) -> list[str]:
    """Re-run every snapshot: a red's new tests must fail, a green's tests must all pass.

    Snapshots whose implementations differ only in ``gru.py`` share one worker; each runs its
    own tests folder, restored from the blobs.
    """
    problems: list[str] = []
    groups: dict[tuple, list[JournalEntry]] = defaultdict(list)
    for entry in journal.entries:
        if GRU_FILE not in entry.impl:
            problems.append(f"entry {entry.seq}: the implementation snapshot has no {GRU_FILE}: cannot replay")
            continue
        rest = tuple(sorted((p, d) for p, d in entry.impl.items() if p != GRU_FILE))
        groups[rest].append(entry)
    with tempfile.TemporaryDirectory(prefix="mutagrade-replay-") as tmp:
        root = Path(tmp)
        for number, (rest, entries) in enumerate(groups.items()):
            impl = root / f"impl-{number}"
            _restore(journal, dict(rest), impl)
            _restore(journal, {GRU_FILE: entries[0].impl[GRU_FILE]}, impl)
            tests = root / f"tests-{number}"
            runs = []
            for entry in entries:
                _restore(journal, entry.tests, tests / f"entry-{entry.seq}")
                source = (journal.blobs / entry.impl[GRU_FILE]).read_text(encoding="utf-8")
                runs.append(WorkerRun(variant=f"entry-{entry.seq}", source=source, tests=f"entry-{entry.seq}"))
            for entry, run in zip(entries, run_snapshot(layout, tests, impl, limits, runs)):
                problems.extend(_judge_replay(entry, run))
    return problems


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
) -> JournalSummary:
    """Verify a journal against the submitted tests.

    Args:
        journal_path: ``.tdd/journal.jsonl`` (its blobs are in ``blobs/`` beside it).
        tests_dir: the submitted test files.
        layout: the checkout (for the worker).
        limits: the worker's limits: the assignment's, as grading has them.
        replay: re-run every snapshot (only skipped by tools that check the file alone).

    Returns:
        The summary: ``ok`` when no problem was found; problems name entries and tests.

    Raises:
        JournalFormatError: if the journal cannot be read at all.
    """
    replayer = partial(replay_problems, layout=layout, limits=limits) if replay else None
    return verify(journal_path, tests_dir, replay=replayer)
