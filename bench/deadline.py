"""Deadline night, side by side in one run: ``grade-batch`` of N copies of the bundled suite,
and the same N with 5 % sleeping suites and 1 % looping suites mixed in (their throughputs and
the ratio between them); the plain batch on 1 core and on 2 (``taskset``); and, with
``--burst``, the service under a burst of the same mix (``bench/burst.py``'s measurement).

A sleeping suite blocks in a fixture until its time limit (no CPU: ``tests/api/burst.py``'s
sleeper); a looping suite holds a module that raises at import on every mutant whose hand
example differs (``tests/grader/test_structure_loops.py``), which once held a grading for its
whole wall budget.

    .venv/bin/python bench/deadline.py [--n 40] [--cores 0 0,1] [--rounds 1]

Each figure is one ``mutagrade grade-batch`` process, the real command line, timed from start to
exit; submissions per second is N over that time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.api.burst import SLEEPER_SUITE  # noqa: E402
from tests.grader.test_structure_loops import RAISES  # noqa: E402

BUNDLED = ROOT / "examples" / "student" / "python" / "tests" / "l3-3-gru"
MUTAGRADE = [sys.executable, "-m", "grader.cli"]


def make_batch(folder: Path, n: int, *, sleepers: int = 0, loopers: int = 0) -> Path:
    """N students: the bundled suite, with ``sleepers`` and ``loopers`` among them, spread out."""
    folder.mkdir(parents=True)
    hostile = {}
    for k in range(sleepers):
        hostile[(k * n) // max(1, sleepers) + 1] = ("test_sleeper.py", SLEEPER_SUITE.format(timeout=""))
    for k in range(loopers):
        hostile[(k * n) // max(1, loopers) + n // (2 * max(1, loopers))] = ("test_loop.py", RAISES)
    for i in range(n):
        student = folder / f"student-{i:04d}"
        if i in hostile:
            student.mkdir()
            name, text = hostile[i]
            (student / name).write_text(text)
        else:
            shutil.copytree(BUNDLED, student)
    return folder


def grade_batch(batch: Path, out: Path, cores: str | None) -> float:
    """Seconds one ``mutagrade grade-batch`` of ``batch`` takes (under ``taskset -c cores``)."""
    command = [*MUTAGRADE, "grade-batch", str(batch), "--output", str(out)]
    if cores is not None:
        command = ["taskset", "-c", cores, *command]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"grade-batch failed ({done.returncode}): {done.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="submissions per batch")
    parser.add_argument("--cores", nargs="*", default=["0", "0,1"], help="taskset core lists to compare")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    n = args.n
    sleepers, loopers = max(1, round(0.05 * n)), max(1, round(0.01 * n))
    with tempfile.TemporaryDirectory(prefix="mutagrade-deadline-") as tmp:
        base = Path(tmp)
        plain = make_batch(base / "plain", n)
        mixed = make_batch(base / "mixed", n, sleepers=sleepers, loopers=loopers)
        print(f"load average at the start: {os.getloadavg()[0]:.2f}; cores: {len(os.sched_getaffinity(0))}")
        print(f"{n} submissions; the mix: {sleepers} sleeping, {loopers} looping")
        for round_ in range(args.rounds):
            t_plain = grade_batch(plain, base / "plain.csv", None)
            t_mixed = grade_batch(mixed, base / "mixed.csv", None)
            print(f"round {round_ + 1}: plain {t_plain:.1f} s ({n / t_plain:.2f}/s), with the mix {t_mixed:.1f} s "
                  f"({n / t_mixed:.2f}/s): mixed / plain throughput {t_plain / t_mixed:.2f}")
            if not args.cores:
                continue
            by_cores = {cores: grade_batch(plain, base / f"cores-{cores}.csv", cores) for cores in args.cores}
            line = ", ".join(f"cores {c}: {t:.1f} s ({n / t:.2f}/s)" for c, t in by_cores.items())
            first = next(iter(by_cores.values()))
            ratios = ", ".join(f"{c} / {args.cores[0]}: {first / t:.2f}" for c, t in list(by_cores.items())[1:])
            print(f"round {round_ + 1}: {line}; throughput {ratios}")


if __name__ == "__main__":
    main()
