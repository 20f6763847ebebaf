"""Torch golden comparisons: how far an implementation's outputs and gradients are from torch's.

Two sources of truth: the stored goldens of the assignment (``goldens`` in its
``assignment.toml``; no torch needed), and live torch on fresh random cases where torch is
installed. What is compared, case by case, is the assignment's own: ``goldens/compare.py`` of
its folder (:func:`load_comparison`), which defines

- ``golden_deviations(impl, goldens) -> list[CaseDeviation]``, every stored case;
- ``live_deviations(impl, *, seed, cases, device, dtype) -> list[CaseDeviation]``;
- ``golden_throughput(impl, *, device, dtype, cases, batch, seed) -> Throughput``.

An implementation is given as a loaded module under test (:func:`load_implementation`);
everything runs in float64 and the result is the largest absolute deviation per case. This
module holds what every comparison shares: the tolerances, :func:`worst_of`, the device.
"""

from __future__ import annotations

import hashlib
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
    "LiveCases",
    "Throughput",
    "device_in_use",
    "load_comparison",
    "load_goldens",
    "load_implementation",
    "raised",
    "tensor_type",
    "torch_available",
    "worst_of",
]

GOLDEN_TOLERANCE = 1e-10  # float64 against float64: only rounding may differ
# torch in float32 (CUDA) against our float64 on the same float32-rounded inputs: the worst
# difference relative to the array's scale (max(1, max |expected|)). TF32 is switched off.
FLOAT32_TOLERANCE = 1e-4


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
    """Load a module under test's source as a fresh module named ``name`` (trusted code only: it runs
    in this process), importing the rest of ``tinyllm`` from ``reference``."""
    if str(reference) not in sys.path:
        sys.path.insert(0, str(reference))
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    exec(compile(source, f"<{name}>", "exec", dont_inherit=True), module.__dict__)
    return module


def load_comparison(path: Path) -> types.ModuleType:
    """An assignment's comparison with torch, ``goldens/compare.py`` of its folder (trusted
    staff code, as the course tests are), loaded once per file.

    Raises:
        GradingInputError: if there is no such file.
    """
    from grader.core.errors import GradingInputError

    path = Path(path).resolve()
    name = f"mutagrade_compare_{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"
    if name in sys.modules:
        return sys.modules[name]
    if not path.is_file():
        raise GradingInputError(f"{path}: no such file (the assignment's comparison with torch)")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def tensor_type(impl: types.ModuleType) -> Any:
    """The ``Tensor`` type an implementation computes with."""
    return impl.Tensor if hasattr(impl, "Tensor") else sys.modules["tinyllm.autograd.tensor"].Tensor


def raised(case: str, exc: BaseException, tolerance: float = GOLDEN_TOLERANCE) -> CaseDeviation:
    """A case that raised: an infinite deviation, the error as ``worst`` (a mutant may raise;
    that is a difference)."""
    return CaseDeviation(case=case, deviation=float("inf"), worst=f"raised {exc!r}"[:300], tolerance=tolerance)


def worst_of(
    case: str, pairs: list[tuple[str, Any, np.ndarray]], tolerance: float = GOLDEN_TOLERANCE
) -> CaseDeviation:
    """The worst of ``(label, actual, expected)`` arrays: absolute in float64, relative to the
    expected array's scale otherwise; a missing gradient or a shape that differs is infinite."""
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


def torch_available() -> bool:
    """Whether torch can be imported here."""
    return importlib.util.find_spec("torch") is not None


class LiveCases:
    """What every live comparison with torch shares, whatever the module: torch set up to
    compare exactly (one thread, no TF32) on ``device`` in ``dtype``, the tolerance that goes
    with it, and random cases drawn the same way (sizes, torch's weights, inputs, lengths).

    In float32 both sides start from the same float32-rounded numbers (the implementation in
    float64) and :data:`FLOAT32_TOLERANCE` applies, relative to each array's scale.

    Raises:
        ImportError: if torch is not installed.
    """

    def __init__(self, *, seed: int, device: str, dtype: str) -> None:
        import torch

        torch.set_num_threads(1)
        torch.backends.cudnn.allow_tf32 = False  # TF32 would round far below float32's precision
        torch.backends.cuda.matmul.allow_tf32 = False
        self.torch, self.device = torch, device
        self.single = dtype == "float32"
        self.torch_dtype = torch.float32 if self.single else torch.float64
        self.tolerance = FLOAT32_TOLERANCE if self.single else GOLDEN_TOLERANCE
        self.rng = np.random.default_rng(seed)

    def draw(self, shape: tuple[int, ...], scale: float = 1.0, uniform: bool = False) -> np.ndarray:
        values = self.rng.uniform(-scale, scale, size=shape) if uniform else self.rng.normal(size=shape) * scale
        return values.astype(np.float32).astype(np.float64) if self.single else values

    def sizes(self, number: int) -> tuple[int, int, int, int, int, str]:
        """Steps, batch, inputs, hidden units and layers of case ``number``, and its name."""
        steps, batch = int(self.rng.integers(2, 6)), int(self.rng.integers(1, 4))
        d_in, hidden, layers = int(self.rng.integers(1, 5)), int(self.rng.integers(1, 5)), int(self.rng.integers(1, 4))
        return steps, batch, d_in, hidden, layers, f"live{number}(T={steps},B={batch},D={d_in},H={hidden},L={layers})"

    def module(self, cls: Any, d_in: int, hidden: int, layers: int) -> Any:
        """A torch recurrent layer of ``cls`` on the device, its weights drawn in [-0.6, 0.6]."""
        module = cls(d_in, hidden, num_layers=layers).to(device=self.device, dtype=self.torch_dtype)
        with self.torch.no_grad():
            for param in module.parameters():
                param.copy_(self.torch.from_numpy(self.draw(tuple(param.shape), 0.6, uniform=True)))
        return module

    def lengths(self, number: int, steps: int, batch: int) -> np.ndarray | None:
        """Every other case a padded batch: unsorted lengths, one of them full (torch needs it)."""
        if number % 2 == 0:
            return None
        lengths = self.rng.integers(1, steps + 1, size=batch)
        lengths[self.rng.integers(batch)] = steps
        return lengths

    def leaf(self, array: np.ndarray) -> Any:
        return self.torch.tensor(array, device=self.device, dtype=self.torch_dtype, requires_grad=True)

    def run(self, module: Any, x: Any, state: Any, lengths: np.ndarray | None, steps: int) -> tuple[Any, Any]:
        """torch's outputs and final state, through a packed sequence when there are lengths."""
        if lengths is None:
            return module(x, state)
        rnn = self.torch.nn.utils.rnn
        packed, final = module(rnn.pack_padded_sequence(x, self.torch.as_tensor(lengths), enforce_sorted=False), state)
        return rnn.pad_packed_sequence(packed, total_length=steps)[0], final

    @staticmethod
    def numpy(value: Any) -> np.ndarray:
        """A torch tensor (or its gradient) as float64 numbers on the CPU."""
        return value.detach().cpu().double().numpy()


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


