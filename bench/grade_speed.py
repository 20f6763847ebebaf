"""Grading speed: ``mutagrade grade`` against a naive baseline, side by side in one run.

The baseline is what one would write first: one fresh ``python -m pytest`` process per
variant run (the reference twice, every wheat, every mutant), each on an exported copy of the
variant. Both grade the bundled example's tests. Several rounds alternate the two; the medians
and their ratio are printed, with the per-variant overhead of mutagrade (wall time per suite
run minus the time spent inside the tests).

    .venv/bin/python bench/grade_speed.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.paths import default_layout  # noqa: E402
from grader.variants import VariantKind, build_variants, export_variant  # noqa: E402

TESTS = ROOT / "examples" / "student" / "python" / "tests" / "l3-3-gru"
# pytest plugins installed beside the project (hypothesis, schemathesis) would slow the baseline
# unfairly: both sides load only pytest's own.
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def mutagrade_once() -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(TESTS), "--format", "json"],
        capture_output=True, text=True, env=ENV, cwd=ROOT,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mutagrade grade failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, json.loads(done.stdout)["timing"]


def baseline_once(exports: list[Path]) -> float:
    started = time.perf_counter()
    for folder in exports:
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TESTS)],
            capture_output=True, env={**ENV, "PYTHONPATH": str(folder)}, cwd=folder,
        )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    layout = default_layout()
    variants = build_variants(layout)
    with tempfile.TemporaryDirectory() as tmp:
        exports = [export_variant(layout, v, Path(tmp) / v.id) for v in variants]
        reference = next(e for e, v in zip(exports, variants) if v.kind is VariantKind.REFERENCE)
        exports.insert(0, reference)  # the reference runs twice, as in grading
        fast, slow, overhead = [], [], []
        for _ in range(args.rounds):
            wall, timing = mutagrade_once()
            fast.append(wall)
            overhead.append((wall - timing["tests_s"]) / timing["runs"] * 1000)
            slow.append(baseline_once(exports))
    mg, base = statistics.median(fast), statistics.median(slow)
    print(f"variants: {len(variants)} ({sum(v.kind is VariantKind.MUTANT for v in variants)} mutants); "
          f"baseline runs per round: {len(exports)}; rounds: {args.rounds}; cores: {os.cpu_count()}")
    print(f"mutagrade grade (whole process)   median {mg:.3f} s   all {[round(x, 3) for x in fast]}")
    print(f"baseline (pytest per variant)     median {base:.3f} s   all {[round(x, 3) for x in slow]}")
    print(f"speedup_vs_subprocess             {base / mg:.1f}x")
    print(f"per_variant_overhead_ms           {statistics.median(overhead):.1f}")


if __name__ == "__main__":
    main()
