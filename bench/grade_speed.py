"""Grading speed: ``mutagrade grade`` against a naive baseline, side by side in one run.

The baseline is what one would write first: one fresh ``python -m pytest`` process per
variant run (the reference twice, every wheat, every mutant), each on an exported copy of the
variant. Both grade the bundled example's tests. Several rounds alternate the two; the medians
and their ratio are printed, with the per-variant overhead of mutagrade (wall time per suite
run minus the time spent inside the tests), and the same comparison in CPU-seconds (how long
the machine's cores were busy: mutagrade grades on both cores, the baseline runs on one).

This machine's speed drifts by a third within minutes, and files unused for a minute leave its
page cache. So one grading and one baseline process run first, untimed (the first grading of a
run otherwise reads its files from disk), and each round grades in the middle of its baseline
(half the baseline's processes, the grading, the other half): the ratio of each round compares
times taken at the same moment; their median is printed beside the ratio of the medians.
Beside them, in the same run:

* a suite of one test that spins forever, and the bundled suite with one more test that spins
  on a single mutant only (a time-out kill): what a broken suite costs;
* ``mutmut run`` (mutmut 3) on the same reference ``gru.py`` with the same suite: its time per
  mutant, beside mutagrade's time per variant run (``--skip-mutmut`` leaves it out);
* ``mutagrade grade-batch`` of N copies of the bundled suite against N separate ``grade`` runs.

    .venv/bin/python bench/grade_speed.py [--rounds 5] [--batch 20] [--skip-mutmut]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.core.paths import default_layout  # noqa: E402
from grader.core.variants import VariantKind, build_variants, export_variant  # noqa: E402

from ab_grade import ENV, TESTS, busy_seconds  # noqa: E402 - beside this script

SPIN = "def test_spins():\n    n = 0\n    while True:\n        n += 1\n"
# Spins on one mutant only (its hand-example value), passes everywhere else. Named to be
# collected first, so the mutant's run meets it before the tests that would kill it at once.
SPIN_ON_ONE = '''
import math
import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def test_a_waits_while_the_answer_is_{mutant}s():
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    value = float(gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[0.5]], dtype=np.float64), *w).data[0, 0])
    while abs(value - {value!r}) < 1e-12:
        pass
'''


def busy_during(measure, *args):
    """``measure(*args)``, with the CPU-seconds the machine's cores were busy meanwhile."""
    busy = busy_seconds()
    value = measure(*args)
    return value, busy_seconds() - busy


def grade_once(tests: Path, *extra: str) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(tests), "--format", "json", *extra],
        capture_output=True, text=True, env=ENV, cwd=ROOT,
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"mutagrade grade failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)


def round_once(exports: list[Path]) -> tuple[float, float, dict, float, float]:
    """One round: the first half of the baseline, one grading, the second half. Returns the
    grading's wall time, its report and busy CPU-seconds, and the baseline's wall time and
    busy CPU-seconds (both halves)."""
    half = len(exports) // 2
    first, first_cpu = busy_during(baseline_once, exports[:half])
    (wall, report), cpu = busy_during(grade_once, TESTS)
    second, second_cpu = busy_during(baseline_once, exports[half:])
    return wall, cpu, report, first + second, first_cpu + second_cpu


def baseline_once(exports: list[Path]) -> float:
    started = time.perf_counter()
    for folder in exports:
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS)],
            capture_output=True, env={**ENV, "PYTHONPATH": str(folder)}, cwd=folder,
        )
    return time.perf_counter() - started


def _hand_value(source: str) -> float:
    """The hand example's h' under a variant, computed in this process (trusted code)."""
    import math

    import numpy as np

    sys.path.insert(0, str(ROOT / "reference"))
    from tinyllm.autograd.tensor import Tensor

    module = types.ModuleType("bench_variant")
    module.__package__ = "tinyllm.rnn"
    exec(compile(source, "gru.py", "exec"), module.__dict__)  # noqa: S102 - a shipped variant
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    return float(module.gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[0.5]], dtype=np.float64), *w).data[0, 0])


def hostile_suites(tmp: Path, variants) -> tuple[Path, Path, str]:
    spin = tmp / "spin"
    spin.mkdir()
    (spin / "test_spin.py").write_text(SPIN)
    mutant = next(v for v in variants if v.id == "s03")
    one = tmp / "one-timeout"
    shutil.copytree(TESTS, one)
    (one / "test_a_waits.py").write_text(SPIN_ON_ONE.format(mutant=mutant.id, value=_hand_value(mutant.source)))
    return spin, one, mutant.id


def mutmut_per_mutant() -> tuple[float, int, float]:
    from grader.flows.automutants import run_auto_mutants

    pool = run_auto_mutants(default_layout(), tests=TESTS, max_children=2)
    return pool.run_s, pool.total, pool.run_s / max(1, pool.total)


def batch_versus_single(tmp: Path, copies: int) -> tuple[float, float]:
    submissions = tmp / "batch"
    for n in range(copies):
        shutil.copytree(TESTS, submissions / f"student{n:02d}")
    started = time.perf_counter()
    for n in range(copies):
        grade_once(submissions / f"student{n:02d}")
    singles = time.perf_counter() - started
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade-batch", str(submissions), "--output", str(tmp / "grades.csv")],
        capture_output=True, text=True, env=ENV, cwd=ROOT,
    )
    batch = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"grade-batch failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return singles, batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=20, help="copies of the suite for grade-batch (0: skip)")
    parser.add_argument("--skip-mutmut", action="store_true")
    args = parser.parse_args()
    layout = default_layout()
    variants = build_variants(layout)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        exports = [export_variant(layout, v, tmp / "exports" / v.id) for v in variants]
        reference = next(e for e, v in zip(exports, variants) if v.kind is VariantKind.REFERENCE)
        exports.insert(0, reference)  # the reference runs twice, as in grading
        grade_once(TESTS)  # untimed: the files both sides read come into the page cache
        baseline_once(exports[:1])
        fast, slow, overhead, runs, fast_cpu, slow_cpu = [], [], [], [], [], []
        for _ in range(args.rounds):
            wall, cpu, report, baseline, baseline_cpu = round_once(exports)
            timing = report["timing"]
            fast.append(wall)
            fast_cpu.append(cpu)
            runs.append(timing["runs"])
            overhead.append((wall - timing["tests_s"]) / timing["runs"] * 1000)
            slow.append(baseline)
            slow_cpu.append(baseline_cpu)
        spin, one, mutant = hostile_suites(tmp, variants)
        spin_wall, spin_report = grade_once(spin)
        one_wall, one_report = grade_once(one)
        killed_by_timeout = any(t["outcomes"].get(mutant) == "timeout" for t in one_report["tests"])
        mutmut = None if args.skip_mutmut else mutmut_per_mutant()
        batch = batch_versus_single(tmp, args.batch) if args.batch else None
    mg, base = statistics.median(fast), statistics.median(slow)
    print(f"variants: {len(variants)} ({sum(v.kind is VariantKind.MUTANT for v in variants)} mutants); "
          f"baseline runs per round: {len(exports)}, the grading in their middle; rounds: {args.rounds} after an untimed "
          f"grading and baseline process; cores: {os.cpu_count()}; "
          f"load average at start: {load:.2f}")
    print(f"mutagrade grade (whole process)   median {mg:.3f} s   all {[round(x, 3) for x in fast]}   "
          f"suite runs {statistics.median(runs):g}")
    print(f"baseline (pytest per variant)     median {base:.3f} s   all {[round(x, 3) for x in slow]}")
    print(f"speedup_vs_subprocess             {base / mg:.1f}x   (median of each round's own ratio: "
          f"{statistics.median(b / g for b, g in zip(slow, fast)):.1f}x)")
    # The same overhead against one baseline process of the same round (a figure that moves
    # less with the machine's speed than milliseconds do).
    shares = [o / (b / len(exports) * 1000) for o, b in zip(overhead, slow)]
    print(f"per_variant_overhead_ms           {statistics.median(overhead):.1f}   "
          f"({statistics.median(shares):.1%} of one baseline process of the same round)")
    # The same comparison in CPU-seconds (every core of the machine, busy): what is left of the
    # speed-up once mutagrade's use of both cores is taken out.
    mg_cpu, base_cpu = statistics.median(fast_cpu), statistics.median(slow_cpu)
    print(f"CPU-seconds busy                  mutagrade {mg_cpu:.2f}, baseline {base_cpu:.2f}: "
          f"{base_cpu / mg_cpu:.1f}x less CPU; wall/CPU {mg / mg_cpu:.2f} against {base / base_cpu:.2f}")
    print(f"one spinning test                 {spin_wall:.2f} s   ({spin_wall / mg:.1f}x the bundled suite; "
          f"{spin_report['timing']['runs']} suite runs)")
    print(f"bundled + a time-out on {mutant}     {one_wall:.2f} s   ({one_wall / mg:.1f}x the bundled suite; "
          f"killed by the time-out: {'yes' if killed_by_timeout else 'NO'})")
    if mutmut is not None:
        run_s, total, per = mutmut
        per_variant = mg / statistics.median(runs)
        print(f"mutmut run, same gru.py and suite {run_s:.1f} s for {total} mutants: {per * 1000:.0f} ms per mutant; "
              f"mutagrade {per_variant * 1000:.0f} ms per variant run ({per / per_variant:.1f}x less)")
    if batch is not None:
        singles, together = batch
        print(f"grade-batch of {args.batch}                  {together:.2f} s = {args.batch / together:.2f} suites/s; "
              f"{args.batch} separate grade runs {singles:.2f} s = {args.batch / singles:.2f} suites/s; "
              f"batch_throughput_ratio {singles / together:.2f}x")


if __name__ == "__main__":
    main()
