"""``bench/gpu_golden.sh`` run for real on the CPU (``DEVICE=cpu``): the same script a GPU
machine runs, with the figures it prints checked, and its refusals of what it cannot run."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_golden.sh"


def _run(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT)], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


def test_on_the_cpu_it_prints_the_rate_and_a_float64_deviation_within_tolerance() -> None:
    done = _run(DEVICE="cpu", N="64", BATCH="32")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "device: cpu (float64)" in done.stdout
    assert "cases: 64 in batches of 32" in done.stdout
    rate = float(re.search(r"^cases_per_s: ([0-9.]+)$", done.stdout, re.M).group(1))
    deviation = float(re.search(r"^max_deviation: (\S+) \(tolerance 1e-10\)$", done.stdout, re.M).group(1))
    assert rate > 0
    assert 0 <= deviation <= 1e-10  # torch in float64 against the float64 reference: rounding only
    # The variant table came first: the reference matches, a mutant differs.
    assert re.search(r"^reference .* matches torch$", done.stdout, re.M)
    assert re.search(r"^s02 .* differs$", done.stdout, re.M)


def test_what_it_cannot_run_is_refused_with_exit_2() -> None:
    unknown = _run(DEVICE="tpu", N="8")
    assert unknown.returncode == 2 and "DEVICE must be cpu or cuda" in unknown.stderr
    nothing = _run(DEVICE="cpu", N="0")
    assert nothing.returncode == 2 and "positive integers" in nothing.stderr
    # A CUDA index past the devices there are (none here; far fewer than 4096 anywhere).
    missing = _run(DEVICE="cuda:4096", N="8")
    assert missing.returncode == 2 and "gpu_golden:" in missing.stderr
