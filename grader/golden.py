"""Torch golden comparisons: how far an implementation's outputs and gradients are from torch's.

Two sources of truth: the stored goldens of ``fixtures/gru_torch.npz`` (no torch needed), and
live ``torch.nn.GRUCell`` / ``torch.nn.GRU`` on fresh random cases where torch is installed.
An implementation is given as a namespace holding ``gru_cell`` and ``GRU`` (a loaded
``tinyllm.rnn.gru``); everything runs in float64 and the result is the largest absolute
deviation per case.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

__all__ = [
    "GOLDEN_TOLERANCE",
    "CaseDeviation",
    "golden_deviations",
    "live_deviations",
    "load_goldens",
    "load_implementation",
    "torch_available",
]

GOLDEN_TOLERANCE = 1e-10  # float64 against float64: only rounding may differ
SEQUENCE_CASES = ("seq1", "seq2", "packed")


class CaseDeviation(BaseModel):
    """The worst absolute difference from torch over every array of one case."""

    case: str
    deviation: float
    worst: str  # which array it was in

    @property
    def matches(self) -> bool:
        return self.deviation <= GOLDEN_TOLERANCE


def load_goldens(path: Path) -> dict[str, np.ndarray]:
    """Every array of a goldens archive, by name."""
    with np.load(path, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def load_implementation(source: str, reference: Path, name: str) -> types.ModuleType:
    """Load a ``gru.py`` source as a fresh module named ``name`` (trusted code only: it runs
    in this process), importing the rest of ``tinyllm`` from ``reference``."""
    if str(reference) not in sys.path:
        sys.path.insert(0, str(reference))
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    exec(compile(source, f"<{name}>", "exec", dont_inherit=True), module.__dict__)
    return module


def _tensor_type(impl: types.ModuleType) -> Any:
    return impl.Tensor if hasattr(impl, "Tensor") else sys.modules["tinyllm.autograd.tensor"].Tensor


def _worst(case: str, pairs: list[tuple[str, Any, np.ndarray]]) -> CaseDeviation:
    worst_name, worst = "", 0.0
    for label, actual, expected in pairs:
        if actual is None:
            return CaseDeviation(case=case, deviation=float("inf"), worst=f"{label} (no gradient)")
        actual = np.asarray(actual, dtype=np.float64)
        if actual.shape != expected.shape:
            return CaseDeviation(case=case, deviation=float("inf"), worst=f"{label} (shape {actual.shape})")
        deviation = float(np.max(np.abs(actual - expected), initial=0.0))
        if not np.isfinite(deviation):
            deviation = float("inf")
        if deviation > worst or not worst_name:
            worst_name, worst = label, deviation
    return CaseDeviation(case=case, deviation=worst, worst=worst_name)


def _cell_case(impl: types.ModuleType, g: dict[str, np.ndarray]) -> CaseDeviation:
    Tensor = _tensor_type(impl)
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    x = Tensor(g["cell/x"], requires_grad=True)
    h = Tensor(g["cell/h"], requires_grad=True)
    params = [Tensor(g[f"cell/state/{n}"], requires_grad=True) for n in names]
    out = impl.gru_cell(x, h, *params)
    (out * Tensor(g["cell/c"])).sum().backward()
    pairs = [("out", out.data, g["cell/out"]), ("grad x", x.grad, g["cell/grad/x"]), ("grad h", h.grad, g["cell/grad/h"])]
    pairs += [(f"grad {n}", p.grad, g[f"cell/grad/{n}"]) for n, p in zip(names, params)]
    return _worst("cell", pairs)


def _sequence_case(impl: types.ModuleType, g: dict[str, np.ndarray], case: str) -> CaseDeviation:
    Tensor = _tensor_type(impl)
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
    return _worst(case, pairs)


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
            results.append(CaseDeviation(case=case, deviation=float("inf"), worst=f"raised {exc!r}"[:300]))
    return results


def torch_available() -> bool:
    """Whether torch can be imported here."""
    return importlib.util.find_spec("torch") is not None


def live_deviations(
    impl: types.ModuleType, *, seed: int = 0, cases: int = 4, device: str = "cpu"
) -> list[CaseDeviation]:
    """Compare an implementation with live ``torch.nn.GRU`` on fresh random cases.

    Each case draws sizes, 1–3 layers, an initial state (or none) and, every other case, a
    padded batch with unsorted lengths; torch runs in float64 on ``device``.

    Raises:
        ImportError: if torch is not installed.
    """
    import torch

    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    Tensor = _tensor_type(impl)
    results = []
    for number in range(cases):
        steps, batch = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        d_in, hidden, layers = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
        name = f"live{number}(T={steps},B={batch},D={d_in},H={hidden},L={layers})"
        try:
            module = torch.nn.GRU(d_in, hidden, num_layers=layers).double().to(device)
            with torch.no_grad():
                for param in module.parameters():
                    param.copy_(torch.from_numpy(rng.uniform(-0.6, 0.6, size=tuple(param.shape))))
            x = rng.normal(size=(steps, batch, d_in))
            h0 = rng.normal(size=(layers, batch, hidden)) * 0.5
            padded = number % 2 == 1
            lengths = rng.integers(1, steps + 1, size=batch) if padded else None
            if lengths is not None:
                lengths[rng.integers(batch)] = steps  # torch needs one full-length sequence
            xt = torch.tensor(x, device=device, requires_grad=True)
            ht = torch.tensor(h0, device=device, requires_grad=True)
            if lengths is None:
                out_t, hn_t = module(xt, ht)
            else:
                packed = torch.nn.utils.rnn.pack_padded_sequence(
                    xt, torch.as_tensor(lengths), enforce_sorted=False
                )
                out_p, hn_t = module(packed, ht)
                out_t, _ = torch.nn.utils.rnn.pad_packed_sequence(out_p, total_length=steps)
            (out_t.sum() + hn_t.sum()).backward()

            gru = impl.GRU(d_in, hidden, num_layers=layers)
            gru.load_state_dict({k: v.detach().cpu().numpy() for k, v in module.state_dict().items()})
            xa, ha = Tensor(x, requires_grad=True), Tensor(h0, requires_grad=True)
            out, h_n = gru(xa, ha, lengths=None if lengths is None else [int(v) for v in lengths])
            (out.sum() + h_n.sum()).backward()
            pairs = [
                ("out", out.data, out_t.detach().cpu().numpy()),
                ("h_n", h_n.data, hn_t.detach().cpu().numpy()),
                ("grad x", xa.grad, xt.grad.cpu().numpy()),
                ("grad h0", ha.grad, ht.grad.cpu().numpy()),
            ]
            torch_params = dict(module.named_parameters())
            pairs += [
                (f"grad {n}", p.grad, torch_params[n].grad.cpu().numpy())
                for n, p in gru.named_parameters()
            ]
            results.append(_worst(name, pairs))
        except Exception as exc:  # noqa: BLE001 - a mutant may raise; that is a difference
            results.append(CaseDeviation(case=name, deviation=float("inf"), worst=f"raised {exc!r}"[:300]))
    return results
