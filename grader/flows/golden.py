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
    "FLOAT32_TOLERANCE",
    "GOLDEN_TOLERANCE",
    "CaseDeviation",
    "Throughput",
    "device_in_use",
    "golden_throughput",
    "golden_deviations",
    "live_deviations",
    "load_goldens",
    "load_implementation",
    "torch_available",
]

GOLDEN_TOLERANCE = 1e-10  # float64 against float64: only rounding may differ
# torch in float32 (CUDA) against our float64 on the same float32-rounded inputs: the worst
# difference relative to the array's scale (max(1, max |expected|)). TF32 is switched off.
FLOAT32_TOLERANCE = 1e-4
SEQUENCE_CASES = ("seq1", "seq2", "packed")


class CaseDeviation(BaseModel):
    """The worst absolute difference from torch over every array of one case."""

    case: str
    deviation: float
    worst: str  # which array it was in
    tolerance: float = GOLDEN_TOLERANCE

    @property
    def matches(self) -> bool:
        return self.deviation <= self.tolerance


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


def _worst(
    case: str, pairs: list[tuple[str, Any, np.ndarray]], tolerance: float = GOLDEN_TOLERANCE
) -> CaseDeviation:
    relative = tolerance != GOLDEN_TOLERANCE
    worst_name, worst = "", 0.0
    for label, actual, expected in pairs:
        if actual is None:
            return CaseDeviation(case=case, deviation=float("inf"), worst=f"{label} (no gradient)", tolerance=tolerance)
        actual = np.asarray(actual, dtype=np.float64)
        expected = np.asarray(expected, dtype=np.float64)
        if actual.shape != expected.shape:
            return CaseDeviation(case=case, deviation=float("inf"), worst=f"{label} (shape {actual.shape})", tolerance=tolerance)
        deviation = float(np.max(np.abs(actual - expected), initial=0.0))
        if relative:
            deviation /= max(1.0, float(np.max(np.abs(expected), initial=0.0)))
        if not np.isfinite(deviation):
            deviation = float("inf")
        if deviation > worst or not worst_name:
            worst_name, worst = label, deviation
    return CaseDeviation(case=case, deviation=worst, worst=worst_name, tolerance=tolerance)


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
    impl: types.ModuleType, *, seed: int = 0, cases: int = 4, device: str = "cpu", dtype: str = "float64"
) -> list[CaseDeviation]:
    """Compare an implementation with live ``torch.nn.GRU`` on fresh random cases.

    Each case draws sizes, 1–3 layers, an initial state (or none) and, every other case, a
    padded batch with unsorted lengths; torch runs on ``device`` in ``dtype``. In float32 the
    implementation gets the same float32-rounded numbers (in float64) and the comparison uses
    :data:`FLOAT32_TOLERANCE`, relative to each array's scale.

    Raises:
        ImportError: if torch is not installed.
    """
    import torch

    torch.set_num_threads(1)
    torch.backends.cudnn.allow_tf32 = False  # TF32 would round far below float32's precision
    torch.backends.cuda.matmul.allow_tf32 = False
    single = dtype == "float32"
    torch_dtype = torch.float32 if single else torch.float64
    tolerance = FLOAT32_TOLERANCE if single else GOLDEN_TOLERANCE

    def draw(shape: tuple[int, ...], scale: float = 1.0, uniform: bool = False) -> np.ndarray:
        values = rng.uniform(-scale, scale, size=shape) if uniform else rng.normal(size=shape) * scale
        # In float32 both sides start from the same float32 numbers.
        return values.astype(np.float32).astype(np.float64) if single else values

    rng = np.random.default_rng(seed)
    Tensor = _tensor_type(impl)
    results = []
    for number in range(cases):
        steps, batch = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        d_in, hidden, layers = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
        name = f"live{number}(T={steps},B={batch},D={d_in},H={hidden},L={layers})"
        try:
            module = torch.nn.GRU(d_in, hidden, num_layers=layers).to(device=device, dtype=torch_dtype)
            with torch.no_grad():
                for param in module.parameters():
                    param.copy_(torch.from_numpy(draw(tuple(param.shape), 0.6, uniform=True)))
            x = draw((steps, batch, d_in))
            h0 = draw((layers, batch, hidden), 0.5)
            padded = number % 2 == 1
            lengths = rng.integers(1, steps + 1, size=batch) if padded else None
            if lengths is not None:
                lengths[rng.integers(batch)] = steps  # torch needs one full-length sequence
            xt = torch.tensor(x, device=device, dtype=torch_dtype, requires_grad=True)
            ht = torch.tensor(h0, device=device, dtype=torch_dtype, requires_grad=True)
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
            gru.load_state_dict(
                {k: v.detach().cpu().double().numpy() for k, v in module.state_dict().items()}
            )
            xa, ha = Tensor(x, requires_grad=True), Tensor(h0, requires_grad=True)
            out, h_n = gru(xa, ha, lengths=None if lengths is None else [int(v) for v in lengths])
            (out.sum() + h_n.sum()).backward()
            pairs = [
                ("out", out.data, out_t.detach().cpu().double().numpy()),
                ("h_n", h_n.data, hn_t.detach().cpu().double().numpy()),
                ("grad x", xa.grad, xt.grad.cpu().double().numpy()),
                ("grad h0", ha.grad, ht.grad.cpu().double().numpy()),
            ]
            torch_params = dict(module.named_parameters())
            pairs += [
                (f"grad {n}", p.grad, torch_params[n].grad.cpu().double().numpy())
                for n, p in gru.named_parameters()
            ]
            results.append(_worst(name, pairs, tolerance))
        except Exception as exc:  # noqa: BLE001 - a mutant may raise; that is a difference
            results.append(
                CaseDeviation(case=name, deviation=float("inf"), worst=f"raised {exc!r}"[:300], tolerance=tolerance)
            )
    return results


def device_in_use() -> tuple[str, str]:
    """(device, dtype) live comparisons use here: CUDA in float32 when a GPU is present,
    else the CPU in float64. ("cpu", "float64") when torch is not installed."""
    if not torch_available():
        return "cpu", "float64"
    import torch

    return ("cuda", "float32") if torch.cuda.is_available() else ("cpu", "float64")


class Throughput(BaseModel):
    """How fast live comparisons ran on a device, batched."""

    device: str
    dtype: str
    cases: int
    seconds: float
    cases_per_s: float
    max_deviation: float  # relative to each array's scale in float32, absolute in float64


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
    Tensor = _tensor_type(impl)
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
        deviation = _worst("batch", [("out", out.data, out_t.cpu().double().numpy()),
                                     ("h_n", h_n.data, hn_t.cpu().double().numpy())], tolerance)
        worst = max(worst, deviation.deviation)
        done += size
    seconds = time.perf_counter() - started
    return Throughput(
        device=device, dtype=dtype, cases=done, seconds=round(seconds, 4),
        cases_per_s=round(done / seconds, 1), max_deviation=worst,
    )
