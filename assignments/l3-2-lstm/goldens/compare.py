"""The LSTM against torch (L3.2): the stored goldens (``lstm_torch.npz``, made by
``make_lstm_torch.py`` beside this file) and live ``torch.nn.LSTM`` on fresh random cases.

Loaded by :func:`grader.flows.golden.load_comparison`; an implementation is a loaded
``tinyllm.rnn.lstm`` (a namespace holding ``lstm_cell``, ``LSTM`` and ``FORGET_BIAS``).
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
    c = Tensor(g["cell/c"], requires_grad=True)
    params = [Tensor(g[f"cell/state/{n}"], requires_grad=True) for n in names]
    h_next, c_next = impl.lstm_cell(x, h, c, *params)
    ((h_next * Tensor(g["cell/loss_h"])).sum() + (c_next * Tensor(g["cell/loss_c"])).sum()).backward()
    pairs = [
        ("h_next", h_next.data, g["cell/h_next"]),
        ("c_next", c_next.data, g["cell/c_next"]),
        ("grad x", x.grad, g["cell/grad/x"]),
        ("grad h", h.grad, g["cell/grad/h"]),
        ("grad c", c.grad, g["cell/grad/c"]),
    ]
    pairs += [(f"grad {n}", p.grad, g[f"cell/grad/{n}"]) for n, p in zip(names, params)]
    return worst_of("cell", pairs)


def _sequence_case(impl: types.ModuleType, g: dict[str, np.ndarray], case: str) -> CaseDeviation:
    Tensor = tensor_type(impl)
    h0_array = g[f"{case}/h0"]
    layers, _, hidden = h0_array.shape
    d_in = g[f"{case}/x"].shape[2]
    lstm = impl.LSTM(d_in, hidden, num_layers=layers)
    prefix = f"{case}/state/"
    lstm.load_state_dict({k[len(prefix):]: v for k, v in g.items() if k.startswith(prefix)})
    x = Tensor(g[f"{case}/x"], requires_grad=True)
    h0 = Tensor(h0_array, requires_grad=True)
    c0 = Tensor(g[f"{case}/c0"], requires_grad=True)
    lengths = g.get(f"{case}/lengths") if case == "packed" else None
    out, (h_n, c_n) = lstm(x, (h0, c0), lengths=None if lengths is None else [int(v) for v in lengths])
    (
        (out * Tensor(g[f"{case}/loss_out"])).sum()
        + (h_n * Tensor(g[f"{case}/loss_h"])).sum()
        + (c_n * Tensor(g[f"{case}/loss_c"])).sum()
    ).backward()
    pairs = [
        ("out", out.data, g[f"{case}/out"]),
        ("h_n", h_n.data, g[f"{case}/h_n"]),
        ("c_n", c_n.data, g[f"{case}/c_n"]),
        ("grad x", x.grad, g[f"{case}/grad/x"]),
        ("grad h0", h0.grad, g[f"{case}/grad/h0"]),
        ("grad c0", c0.grad, g[f"{case}/grad/c0"]),
    ]
    pairs += [(f"grad {name}", p.grad, g[f"{case}/grad/{name}"]) for name, p in lstm.named_parameters()]
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
    """Compare an implementation with live ``torch.nn.LSTM`` on fresh random cases.

    Each case draws sizes, 1–3 layers, an initial state and cell (h0, c0) and, every other
    case, a padded batch with unsorted lengths (:class:`grader.flows.golden.LiveCases`); torch
    runs on ``device`` in ``dtype``. Compared: out, h_n, c_n and the gradients of x, h0, c0 and
    every parameter.

    Raises:
        ImportError: if torch is not installed.
    """
    live = LiveCases(seed=seed, device=device, dtype=dtype)
    Tensor = tensor_type(impl)
    results = []
    for number in range(cases):
        steps, batch, d_in, hidden, layers, name = live.sizes(number)
        try:
            module = live.module(live.torch.nn.LSTM, d_in, hidden, layers)
            x = live.draw((steps, batch, d_in))
            h0 = live.draw((layers, batch, hidden), 0.5)
            c0 = live.draw((layers, batch, hidden), 1.0)  # wider than h0: a cell is not bounded by 1
            lengths = live.lengths(number, steps, batch)
            xt, ht, ct = live.leaf(x), live.leaf(h0), live.leaf(c0)
            out_t, (hn_t, cn_t) = live.run(module, xt, (ht, ct), lengths, steps)
            (out_t.sum() + hn_t.sum() + cn_t.sum()).backward()

            lstm = impl.LSTM(d_in, hidden, num_layers=layers)
            lstm.load_state_dict({k: live.numpy(v) for k, v in module.state_dict().items()})
            xa = Tensor(x, requires_grad=True)
            ha, ca = Tensor(h0, requires_grad=True), Tensor(c0, requires_grad=True)
            out, (h_n, c_n) = lstm(xa, (ha, ca), lengths=None if lengths is None else [int(v) for v in lengths])
            (out.sum() + h_n.sum() + c_n.sum()).backward()
            pairs = [
                ("out", out.data, live.numpy(out_t)),
                ("h_n", h_n.data, live.numpy(hn_t)),
                ("c_n", c_n.data, live.numpy(cn_t)),
                ("grad x", xa.grad, live.numpy(xt.grad)),
                ("grad h0", ha.grad, live.numpy(ht.grad)),
                ("grad c0", ca.grad, live.numpy(ct.grad)),
            ]
            torch_params = dict(module.named_parameters())
            pairs += [(f"grad {n}", p.grad, live.numpy(torch_params[n].grad)) for n, p in lstm.named_parameters()]
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
        module = torch.nn.LSTM(d_in, hidden, num_layers=layers).to(device=device, dtype=torch_dtype)
        with torch.no_grad():
            for param in module.parameters():
                param.uniform_(-0.3, 0.3)
        x = rng.normal(size=(steps, size, d_in)).astype(np.float32).astype(np.float64)
        xt = torch.tensor(x, device=device, dtype=torch_dtype)
        with torch.no_grad():
            out_t, (hn_t, cn_t) = module(xt)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        lstm = impl.LSTM(d_in, hidden, num_layers=layers)
        lstm.load_state_dict({k: v.detach().cpu().double().numpy() for k, v in module.state_dict().items()})
        out, (h_n, c_n) = lstm(Tensor(x))
        deviation = worst_of("batch", [("out", out.data, out_t.cpu().double().numpy()),
                                     ("h_n", h_n.data, hn_t.cpu().double().numpy()),
                                     ("c_n", c_n.data, cn_t.cpu().double().numpy())], tolerance)
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
    """Each of the four recurrent gate blocks is orthogonal at initialisation."""
    hidden = 6
    state = impl.LSTM(5, hidden, num_layers=2).state_dict()
    for k in range(2):
        w_hh = np.asarray(state[f"weight_hh_l{k}"], dtype=np.float64)
        for gate in range(4):
            block = w_hh[gate * hidden : (gate + 1) * hidden]
            if not np.allclose(block @ block.T, np.eye(hidden), atol=1e-5):
                return False
    return True


def _forget_bias_block(impl: types.ModuleType) -> bool:
    """At initialisation bias_ih is 0 but FORGET_BIAS in its forget block (the second of i, f,
    g, o) and bias_hh is 0, in every layer of an LSTM; FORGET_BIAS is the contract's 1.0."""
    hidden = 6
    forget_bias = float(impl.FORGET_BIAS)
    if forget_bias != 1.0:
        return False
    expected = np.zeros(4 * hidden)
    expected[hidden : 2 * hidden] = forget_bias
    state = impl.LSTM(5, hidden, num_layers=2).state_dict()
    for k in range(2):
        b_ih = np.asarray(state[f"bias_ih_l{k}"], dtype=np.float64)
        b_hh = np.asarray(state[f"bias_hh_l{k}"], dtype=np.float64)
        if b_ih.shape != expected.shape or b_hh.shape != expected.shape:
            return False
        if not (np.allclose(b_ih, expected, rtol=0, atol=1e-7) and np.allclose(b_hh, 0.0, rtol=0, atol=1e-7)):
            return False
    return True


def _random_weights(lstm: object, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-0.5, 0.5, size=v.shape) for k, v in lstm.state_dict().items()}


def _no_dropout_after_last_layer(impl: types.ModuleType) -> bool:
    """A 1-layer LSTM with dropout gives the same outputs in training and evaluation mode."""
    lstm = impl.LSTM(4, 5, num_layers=1, dropout=0.5)
    lstm.load_state_dict(_random_weights(lstm, 1))
    x = np.random.default_rng(2).normal(size=(4, 3, 4))
    train_out, _ = lstm.train()(x)
    eval_out, _ = lstm.eval()(x)
    return bool(np.array_equal(train_out.data, eval_out.data))


def _no_dropout_in_eval(impl: types.ModuleType) -> bool:
    """In evaluation mode a 2-layer LSTM with dropout equals one without dropout."""
    noisy = impl.LSTM(4, 5, num_layers=2, dropout=0.5)
    plain = impl.LSTM(4, 5, num_layers=2, dropout=0.0)
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
    "forget_bias_block": _forget_bias_block,
    "dropout_last_layer": _no_dropout_after_last_layer,
    "dropout_in_eval": _no_dropout_in_eval,
}


# ------------------------------------------------------------- the hand example
def hand_example(impl: types.ModuleType) -> list[str]:
    """The chapter's worked example, computed by ``impl``, as ``mutagrade demo`` prints it:
    c′, h′, ∂h′/∂c and ∂h′/∂h for one unit, x = 1, h = 0.5, c = 0.4, W_ih = 0,
    W_hh = [0, 0, 1, 0]ᵀ, b_ih = [0, ln 3, 0, ln 4], b_hh = [0, 0, 0.25, 0]."""
    lstm = impl
    Tensor = tensor_type(impl)
    h = Tensor(np.array([[0.5]]), requires_grad=True)
    c = Tensor(np.array([[0.4]]), requires_grad=True)
    h_next, c_next = lstm.lstm_cell(
        Tensor(np.array([[1.0]])),
        h,
        c,
        Tensor(np.zeros((4, 1))),
        Tensor(np.array([[0.0], [0.0], [1.0], [0.0]])),
        Tensor(np.array([0.0, math.log(3.0), 0.0, math.log(4.0)])),
        Tensor(np.array([0.0, 0.0, 0.25, 0.0])),
    )
    h_next.sum().backward()
    h_value, c_value = float(h_next.data[0, 0]), float(c_next.data[0, 0])

    def shown(grad: np.ndarray | None) -> str:
        return "none (no gradient reached it)" if grad is None else f"{float(grad[0, 0]):.6f}"

    return [
        "Hand example (one unit, x = 1, h = 0.5, c = 0.4, W_hh = [0, 0, 1, 0]ᵀ, "
        "b_ih = [0, ln 3, 0, ln 4], b_hh = [0, 0, 0.25, 0]):",
        "  i = σ(0) = 0.5,  f = σ(ln 3) = 0.75,  g = tanh(0.5 × 1 + 0.25) = 0.635149,  o = σ(ln 4) = 0.8",
        f"  c′ = 0.75 × 0.4 + 0.5 × g = {c_value:.6f}",
        f"  h′ = 0.8 × tanh(c′) = {h_value:.6f}",
        f"  ∂h′/∂c = o (1 − tanh² c′) f = {shown(c.grad)}",
        f"  ∂h′/∂h = o (1 − tanh² c′) i (1 − g²) W_hg = {shown(h.grad)}",
    ]
