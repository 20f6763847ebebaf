"""Test set-up for the project's own tests: one BLAS thread and the reference on the path.

(That a skipped test fails a CI run is the plugin ``grader.pytest_ci``, enabled in pyproject.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference"
if str(REFERENCE) not in sys.path:
    sys.path.insert(0, str(REFERENCE))
