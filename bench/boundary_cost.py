"""What a call across the boundary costs: the stand-in against the variant in-process.

A graded run's tests reach the implementation through the stand-in ``tinyllm.rnn.gru``
(:mod:`grader.worker.standin`), which sends every call to the run's implementation process.
This script measures, side by side in one run, with the reference served by a forked process
over a socket pair exactly as a run serves it (no sandbox):

- one ``gru_cell`` call (B=2, D=3, H=4, float64), in microseconds;
- one ``GRU`` forward pass (T=5, B=3, 2 layers) with its backward pass;
- a central-difference gradient test of ``gru_cell`` with respect to ``h``, as a student
  writes it: 200 calls (100 entries of a 2x50 state, two calls each), in milliseconds.

Each figure is the median of ``--rounds`` rounds; the ratio is stand-in / in-process.

    .venv/bin/python bench/boundary_cost.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.flows.golden import load_implementation  # noqa: E402
from grader.core.contract import read_contract  # noqa: E402
from grader.core.paths import default_layout  # noqa: E402
from grader.worker import standin  # noqa: E402
from grader.worker.boundary import Connection  # noqa: E402
from grader.worker.impl import serve_implementation  # noqa: E402
from tinyllm.autograd.tensor import Tensor  # noqa: E402


def _serve(source: str, reference: Path) -> int:
    """Fork an implementation process serving ``source``; returns this side's descriptor."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        module = load_implementation(source, reference, "bench_served_gru")
        layout = default_layout()
        serve_implementation(Connection(theirs.detach()), module,
                             read_contract(layout.contract_stub, layout.module_under_test))
        os._exit(0)
    theirs.close()
    return ours.detach()


def _cell_inputs(hidden: int = 4, batch: int = 2, d_in: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [
        rng.normal(size=(batch, d_in)), rng.normal(size=(batch, hidden)),
        rng.normal(size=(3 * hidden, d_in)), rng.normal(size=(3 * hidden, hidden)),
        rng.normal(size=3 * hidden), rng.normal(size=3 * hidden),
    ]


def one_call(gru_cell, count: int = 200) -> float:
    """Microseconds per gru_cell call."""
    arrays = _cell_inputs()
    start = time.perf_counter()
    for _ in range(count):
        gru_cell(*arrays)
    return (time.perf_counter() - start) / count * 1e6


def forward_backward(gru_cls, count: int = 20) -> float:
    """Milliseconds per GRU forward and backward pass."""
    gru = gru_cls(3, 4, num_layers=2)
    x = Tensor(np.random.default_rng(1).normal(size=(5, 3, 3)), requires_grad=True)
    start = time.perf_counter()
    for _ in range(count):
        out, h_n = gru(x)
        (out.sum() + h_n.sum()).backward()
    return (time.perf_counter() - start) / count * 1e3


def central_difference(gru_cell) -> float:
    """Milliseconds for a central-difference check of d(sum h')/dh: 200 calls."""
    x, h, *weights = _cell_inputs(hidden=50)
    eps = 1e-6
    start = time.perf_counter()
    numeric = np.zeros_like(h)
    for index in np.ndindex(h.shape):
        plus, minus = h.copy(), h.copy()
        plus[index] += eps
        minus[index] -= eps
        numeric[index] = (gru_cell(x, plus, *weights).data.sum() - gru_cell(x, minus, *weights).data.sum()) / (2 * eps)
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    layout = default_layout()
    source = layout.module_source.read_text()
    direct = load_implementation(source, layout.reference, "bench_direct_gru")
    served = standin.build(read_contract(layout.contract_stub, layout.module_under_test))
    standin.connect(Connection(_serve(source, layout.reference)))
    cases = [
        ("gru_cell call", "us", one_call, direct.gru_cell, served.gru_cell),
        ("GRU forward+backward (T=5, B=3, 2 layers)", "ms", forward_backward, direct.GRU, served.GRU),
        ("central-difference test, 200 calls", "ms", central_difference, direct.gru_cell, served.gru_cell),
    ]
    print(f"{'case':45} {'in-process':>11} {'stand-in':>11} {'ratio':>7} {'added':>9}")
    for name, unit, measure, here, there in cases:
        local = statistics.median(measure(here) for _ in range(args.rounds))
        remote = statistics.median(measure(there) for _ in range(args.rounds))
        print(f"{name:45} {local:9.1f}{unit:>2} {remote:9.1f}{unit:>2} {remote / local:6.2f}x {remote - local:7.1f}{unit}")


if __name__ == "__main__":
    main()
