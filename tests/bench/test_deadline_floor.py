"""``bench/deadline.py --floor``: three batches through the real ``grade-batch``, each line read
off the reports it wrote; a suite that calls nothing makes the fewest runs any grading makes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_floor_prints_each_suites_rate_cpu_and_runs():
    done = subprocess.run([sys.executable, "bench/deadline.py", "--floor", "--n", "2", "--target", "3.3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "the target, 3.3/s, leaves" in lines[0]
    runs = {}
    for name in ("one test, no call", "the hand example alone", "the bundled suite"):
        [line] = [line for line in lines if line.startswith(name + ":")]
        match = re.search(r"([\d.]+)/s; ([\d.]+) CPU-s a grading \(([\d.]+) in its runs' processes\), ([\d.]+) runs", line)
        assert match, line
        rate, cpu, in_runs, runs[name] = (float(g) for g in match.groups())
        assert rate > 0 and 0 < in_runs < cpu
    # The reference twice, each of the 4 wheats and 12 mutants once: no kill, nothing to confirm.
    assert runs["one test, no call"] == 18
    # Every kill is confirmed by a run of its own: more runs, the more a suite kills.
    assert runs["one test, no call"] < runs["the hand example alone"] < runs["the bundled suite"]
