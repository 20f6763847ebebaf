"""The GRU against torch (L3.3): the stored goldens (``gru_torch.npz``, made by
``make_gru_torch.py`` beside this file) and live ``torch.nn.GRU`` on fresh random cases.

Loaded by :func:`grader.flows.golden.load_comparison`; an implementation is a loaded
``tinyllm.rnn.gru`` (a namespace holding ``gru_cell`` and ``GRU``).
"""

from __future__ import annotations

import math
import types
from typing import Callable

import numpy as np

from grader.flows.golden import (
    FLOAT32_TOLERANCE,
    GOLDEN_TOLERANCE,
    CaseDeviation,
    LiveCases,
    Throughput,
    raised,
    tensor_type,
    worst_of,
)

SEQUENCE_CASES = ("seq1", "seq2", "packed")


def _cell_case(impl: types.ModuleType, g: dict[str, np.ndarray]) -> CaseDeviation:
    Tensor = tensor_type(impl)
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    x = Tensor(g["cell/x"], requires_grad=True)
    h = Tensor(g["cell/h"], requires_grad=True)
    params = [Tensor(g[f"cell/state/{n}"], requires_grad=True) for n in names]
    out = impl.gru_cell(x, h, *params)
    (out * Tensor(g["cell/c"])).sum().backward()
    pairs = [("out", out.data, g["cell/out"]), ("grad x", x.grad, g["cell/grad/x"]), ("grad h", h.grad, g["cell/grad/h"])]
    pairs += [(f"grad {n}", p.grad, g[f"cell/grad/{n}"]) for n, p in zip(names, params)]
    return worst_of("cell", pairs)


def _sequence_case(impl: types.ModuleType, g: dict[str, np.ndarray], case: str) -> CaseDeviation:
    Tensor = tensor_type(impl)
    h0_array = g[f"{case}/h0"]
    layers, _, hidden = h0_array.shape
    d_in = g[f"{case}/x"].shape[2]
    gru = impl.GRU(d_in, hidden, num_layers=layers)
    prefix = f"{case}/state/"
    gru.load_state_dict({k[len(prefix):]: v for k, v in g.items() if k.startswith(prefix)})
    x = Tensor(g[f"{case}/x"], requires_grad=True)
    h0 = Tensor(h0_array, requires_grad=True)
    lengths = g.get(f"{case}/lengths") if case == "packed" else None
    out, h_n = gru(x, h0, lengths=None if lengths is None else [int(v) for v in lengths])
    ((out * Tensor(g[f"{case}/c_out"])).sum() + (h_n * Tensor(g[f"{case}/c_h"])).sum()).backward()
    pairs = [
        ("out", out.data, g[f"{case}/out"]),
        ("h_n", h_n.data, g[f"{case}/h_n"]),
        ("grad x", x.grad, g[f"{case}/grad/x"]),
        ("grad h0", h0.grad, g[f"{case}/grad/h0"]),
    ]
    pairs += [(f"grad {name}", p.grad, g[f"{case}/grad/{name}"]) for name, p in gru.named_parameters()]
    return worst_of(case, pairs)


def golden_deviations(impl: types.ModuleType, goldens: dict[str, np.ndarray]) -> list[CaseDeviation]:
    """Compare an implementation with every stored golden case (cell, seq1, seq2, packed).

    A case that raises counts as an infinite deviation, with the error as ``worst``.
    """
    results = []
    for case in ("cell", *SEQUENCE_CASES):
        try:
            if case == "cell":
                results.append(_cell_case(impl, goldens))
            else:
                results.append(_sequence_case(impl, goldens, case))
        except Exception as exc:  # noqa: BLE001 - a mutant may raise; that is a difference
            results.append(raised(case, exc))
    return results


def live_deviations(
    impl: types.ModuleType, *, seed: int = 0, cases: int = 4, device: str = "cpu", dtype: str = "float64"
) -> list[CaseDeviation]:
    """Compare an implementation with live ``torch.nn.GRU`` on fresh random cases.

    Each case draws sizes, 1–3 layers, an initial state and, every other case, a padded batch
    with unsorted lengths (:class:`grader.flows.golden.LiveCases`); torch runs on ``device`` in
    ``dtype``. Compared: out, h_n and the gradients of x, h0 and every parameter.

    Raises:
        ImportError: if torch is not installed.
    """
    live = LiveCases(seed=seed, device=device, dtype=dtype)
    Tensor = tensor_type(impl)
    results = []
    for number in range(cases):
        steps, batch, d_in, hidden, layers, name = live.sizes(number)
        try:
            module = live.module(live.torch.nn.GRU, d_in, hidden, layers)
            x = live.draw((steps, batch, d_in))
            h0 = live.draw((layers, batch, hidden), 0.5)
            lengths = live.lengths(number, steps, batch)
            xt, ht = live.leaf(x), live.leaf(h0)
            out_t, hn_t = live.run(module, xt, ht, lengths, steps)
            (out_t.sum() + hn_t.sum()).backward()

            gru = impl.GRU(d_in, hidden, num_layers=layers)
            gru.load_state_dict({k: live.numpy(v) for k, v in module.state_dict().items()})
            xa, ha = Tensor(x, requires_grad=True), Tensor(h0, requires_grad=True)
            out, h_n = gru(xa, ha, lengths=None if lengths is None else [int(v) for v in lengths])
            (out.sum() + h_n.sum()).backward()
            pairs = [
                ("out", out.data, live.numpy(out_t)),
                ("h_n", h_n.data, live.numpy(hn_t)),
                ("grad x", xa.grad, live.numpy(xt.grad)),
                ("grad h0", ha.grad, live.numpy(ht.grad)),
            ]
            torch_params = dict(module.named_parameters())
            pairs += [(f"grad {n}", p.grad, live.numpy(torch_params[n].grad)) for n, p in gru.named_parameters()]
            results.append(worst_of(name, pairs, live.tolerance))
        except Exception as exc:  # noqa: BLE001 - a mutant may raise; that is a difference
            results.append(raised(name, exc, live.tolerance))
    return results


def golden_throughput(
    impl: types.ModuleType,
    *,
    device: str,
    dtype: str,
    cases: int = 256,
    batch: int = 64,
    seed: int = 0,
) -> Throughput:
    """Compare ``cases`` random sequences with torch, ``batch`` of them per call (one set of
    weights per batch), so the device has whole batches to work on.

    Raises:
        ImportError: if torch is not installed.
    """
    import time

    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch_dtype = torch.float32 if dtype == "float32" else torch.float64
    tolerance = FLOAT32_TOLERANCE if dtype == "float32" else GOLDEN_TOLERANCE
    rng = np.random.default_rng(seed)
    Tensor = tensor_type(impl)
    steps, d_in, hidden, layers = 16, 32, 64, 2
    done, worst = 0, 0.0
    started = time.perf_counter()
    while done < cases:
        size = min(batch, cases - done)
        module = torch.nn.GRU(d_in, hidden, num_layers=layers).to(device=device, dtype=torch_dtype)
        with torch.no_grad():
            for param in module.parameters():
                param.uniform_(-0.3, 0.3)
        x = rng.normal(size=(steps, size, d_in)).astype(np.float32).astype(np.float64)
        xt = torch.tensor(x, device=device, dtype=torch_dtype)
        with torch.no_grad():
            out_t, hn_t = module(xt)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        gru = impl.GRU(d_in, hidden, num_layers=layers)
        gru.load_state_dict({k: v.detach().cpu().double().numpy() for k, v in module.state_dict().items()})
        out, h_n = gru(Tensor(x))
        deviation = worst_of("batch", [("out", out.data, out_t.cpu().double().numpy()),
                                     ("h_n", h_n.data, hn_t.cpu().double().numpy())], tolerance)
        worst = max(worst, deviation.deviation)
        done += size
    seconds = time.perf_counter() - started
    return Throughput(
        device=device, dtype=dtype, cases=done, seconds=round(seconds, 4),
        cases_per_s=round(done / seconds, 1), max_deviation=worst,
    )


# ------------------------------------------------------------- contract properties
# What calibration (grader/flows/calibration.py) checks beside torch: each a function of the
# loaded implementation, True when the property holds.
def _orthogonal_blocks(impl: types.ModuleType) -> bool:
    """Each of the three recurrent gate blocks is orthogonal at initialisation."""
    hidden = 6
    state = impl.GRU(5, hidden, num_layers=2).state_dict()
    for k in range(2):
        w_hh = np.asarray(state[f"weight_hh_l{k}"], dtype=np.float64)
        for gate in range(3):
            block = w_hh[gate * hidden : (gate + 1) * hidden]
            if not np.allclose(block @ block.T, np.eye(hidden), atol=1e-5):
                return False
    return True


def _random_weights(gru: object, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-0.5, 0.5, size=v.shape) for k, v in gru.state_dict().items()}


def _no_dropout_after_last_layer(impl: types.ModuleType) -> bool:
    """A 1-layer GRU with dropout gives the same outputs in training and evaluation mode."""
    gru = impl.GRU(4, 5, num_layers=1, dropout=0.5)
    gru.load_state_dict(_random_weights(gru, 1))
    x = np.random.default_rng(2).normal(size=(4, 3, 4))
    train_out, _ = gru.train()(x)
    eval_out, _ = gru.eval()(x)
    return bool(np.array_equal(train_out.data, eval_out.data))


def _no_dropout_in_eval(impl: types.ModuleType) -> bool:
    """In evaluation mode a 2-layer GRU with dropout equals one without dropout."""
    noisy = impl.GRU(4, 5, num_layers=2, dropout=0.5)
    plain = impl.GRU(4, 5, num_layers=2, dropout=0.0)
    weights = _random_weights(noisy, 3)
    noisy.load_state_dict(weights)
    plain.load_state_dict(weights)
    x = np.random.default_rng(4).normal(size=(4, 3, 4))
    a, _ = noisy.eval()(x)
    b, _ = plain.eval()(x)
    return bool(np.allclose(a.data, b.data, atol=1e-12))


# The contract properties torch's goldens cannot see, by the name ``differs_on`` uses.
PROPERTIES: dict[str, Callable[[types.ModuleType], bool]] = {
    "orthogonal_blocks": _orthogonal_blocks,
    "dropout_last_layer": _no_dropout_after_last_layer,
    "dropout_in_eval": _no_dropout_in_eval,
}


# ------------------------------------------------------------- the hand example
def hand_example(impl: types.ModuleType) -> list[str]:
    """The chapter's worked example, computed by ``impl``, as ``mutagrade demo`` prints it:
    h′ and ∂h′/∂h for one unit, x = 1, h = 0.5, W_ih = 0, b_ih = [0, ln 3, 0], W_hh = [0, 0, 1]ᵀ,
    b_hh = [0, 0, 1]."""
    gru = impl
    Tensor = tensor_type(impl)
    h = Tensor(np.array([[0.5]]), requires_grad=True)
    out = gru.gru_cell(
        Tensor(np.array([[1.0]])),
        h,
        Tensor(np.zeros((3, 1))),
        Tensor(np.array([[0.0], [0.0], [1.0]])),
        Tensor(np.array([0.0, math.log(3.0), 0.0])),
        Tensor(np.array([0.0, 0.0, 1.0])),
    )
    out.sum().backward()
    h_next, grad = float(out.data[0, 0]), float(h.grad[0, 0])
    return [
        "Hand example (one unit, x = 1, h = 0.5, b_ih = [0, ln 3, 0], W_hh = [0, 0, 1]ᵀ, b_hh = [0, 0, 1]):",
        "  r = σ(0) = 0.5,  z = σ(ln 3) = 0.75,  n = tanh(0 + 0.5 × 1.5) = 0.635149",
        f"  h′ = 0.25 × n + 0.75 × 0.5 = {h_next:.6f}",
        f"  ∂h′/∂h = z + (1 − z)(1 − n²) r W_hn = {grad:.6f}",
    ]
