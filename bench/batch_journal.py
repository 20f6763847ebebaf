"""What journals cost ``grade-batch``: N copies of the bundled student repository (journal of
ten cycles, replayed) against N copies of its tests alone, and how long the warm pool waits.

    .venv/bin/python bench/batch_journal.py [--students 10] [--rounds 3] [--ahead 0 1 2]

Each round grades, in this process through :func:`grader.flows.batch.grade_batch`: the tests alone,
then the repositories once for each ``--ahead``. ``pool idle`` is the batch's wall time less the
gradings' own (``report.timing.total_s``): what the pool spent waiting for the next submission
to be prepared (its journal replayed). Medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from grader.core.assignment import load_assignment  # noqa: E402
from grader.flows.batch import grade_batch  # noqa: E402
from grader.core.paths import default_layout  # noqa: E402


def batch(folder: Path, ahead: int) -> tuple[float, float]:
    layout = default_layout()
    started = time.perf_counter()
    rows = grade_batch(folder, layout=layout, assignment=load_assignment(layout.assignment), ahead=ahead)
    wall = time.perf_counter() - started
    if not all(row.passed for row in rows):
        raise SystemExit(f"a copy did not pass: {[r.problems for r in rows if not r.passed]}")
    return wall, wall - sum(row.report.timing.total_s for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ahead", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    layout = default_layout()
    student = layout.examples / "student"
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        bare, repos = Path(tmp) / "bare", Path(tmp) / "repos"
        for number in range(args.students):
            shutil.copytree(student / layout.student_tests, bare / f"s{number:02d}", ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copytree(student, repos / f"s{number:02d}", ignore=shutil.ignore_patterns("__pycache__"))
        batch(bare, 1)  # warm the caches (bytecode, the variants' build) once
        results: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            results.setdefault("tests alone", []).append(batch(bare, 1))
            for ahead in args.ahead:
                results.setdefault(f"with journals, ahead {ahead}", []).append(batch(repos, ahead))
    base = statistics.median(w for w, _ in results["tests alone"])
    print(f"{args.students} students, {args.rounds} rounds, {os.cpu_count()} cores (medians)")
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        idle = statistics.median(i for _, i in runs)
        print(f"{name:<26} {wall:6.2f} s  ({wall / args.students:.2f} s a student, {wall / base:.2f}x)  "
              f"pool idle {idle:5.2f} s")


if __name__ == "__main__":
    main()
