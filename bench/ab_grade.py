r"""Two checkouts side by side: ``mutagrade grade`` of the bundled suite in each, alternating.

A change to the grader is judged against the code before it, on the same machine in the same
minutes: this machine's speed drifts by a quarter within an hour, so figures taken at different
times cannot be compared. Each round grades once with each checkout (whole process, as a user
runs it); the machine's busy time is read from ``/proc/stat`` around each grading, so the CPU a
grading costs (command, workers, children) is printed beside its wall time.

    git worktree add /tmp/before <commit>
    (cd /tmp/before && "$OLDPWD/.venv/bin/python" -m compileall -q -x 'reference/tinyllm/rnn/(gru|lstm)\.py' grader api reference)
    .venv/bin/python bench/ab_grade.py /tmp/before . --rounds 20

Bytecode matters: a checkout whose ``.pyc`` files are stale imports from source, slower.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SUITE = Path("examples") / "student" / "python" / "tests" / "l3-3-gru"
# The bundled suite in this checkout, and the environment every benchmark grades it under: one
# BLAS thread, and only pytest's own plugins (hypothesis, schemathesis installed beside the
# project would slow a baseline pytest process unfairly).
TESTS = Path(__file__).resolve().parents[1] / SUITE
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def busy_seconds() -> float:
    """CPU-seconds both cores have spent busy since boot (idle and I/O wait left out)."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def grade_once(checkout: Path, report: Path) -> tuple[float, float]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    busy, started = busy_seconds(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(SUITE), "--format", "json", "--output", str(report)],
        cwd=checkout, env=env, capture_output=True, text=True,
    )
    wall, cpu = time.perf_counter() - started, busy_seconds() - busy
    if done.returncode not in (0, 1):
        raise SystemExit(f"{checkout}: grade failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="the checkout to compare against")
    parser.add_argument("after", type=Path, help="the checkout with the change")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    checkouts = [args.before.resolve(), args.after.resolve()]
    walls: dict[Path, list[float]] = {c: [] for c in checkouts}
    cpus: dict[Path, list[float]] = {c: [] for c in checkouts}
    report = Path(os.environ.get("TMPDIR", "/tmp")) / "ab_grade_report.json"
    for _ in range(args.rounds):
        for checkout in checkouts:
            wall, cpu = grade_once(checkout, report)
            walls[checkout].append(wall)
            cpus[checkout].append(cpu)
    print(f"rounds: {args.rounds}; cores: {os.cpu_count()}; load average at the end: {os.getloadavg()[0]:.2f}")
    for checkout in checkouts:
        print(f"{str(checkout):40} wall median {statistics.median(walls[checkout]):.3f} s  "
              f"min {min(walls[checkout]):.3f} s   CPU median {statistics.median(cpus[checkout]):.2f} s")
    before, after = (statistics.median(walls[c]) for c in checkouts)
    cpu_before, cpu_after = (statistics.median(cpus[c]) for c in checkouts)
    print(f"after / before: wall {after / before:.2f}, CPU {cpu_after / cpu_before:.2f}")


if __name__ == "__main__":
    main()
