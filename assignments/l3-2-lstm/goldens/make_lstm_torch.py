"""Regenerate ``goldens/lstm_torch.npz``: torch float64 goldens for the LSTM course tests.

Usage::

    python goldens/make_lstm_torch.py [--out PATH]   # default: lstm_torch.npz next to this file

Needs torch (the ``torch`` extra). Every random number (weights, inputs, states, cells, loss
weights) comes from numpy's ``np.random.default_rng``, never from torch's generator, so the
inputs do not depend on the torch version; torch only computes the outputs and the
gradients, in float64 on the CPU. The archive is written entry by entry with fixed
timestamps, fixed compression and a fixed key order, so running the script twice on one
machine gives byte-identical files (``np.savez`` would embed the current time). On another
CPU torch's kernels may round differently: outputs and gradients then differ in the last bits
(about 1e-15), so compare key by key, floats within 1e-12 of their scale.

Cases and sizes: D = 3 inputs, H = 4 hidden units, T = 5 steps. The cell case has B = 3, the
sequence cases B = 3, the packed case B = 4. Every weight and bias is drawn from
U(-0.8, 0.8), so the four gate blocks differ and any two swapped give other numbers. Initial
cells are drawn from U(-1.5, 1.5), wider than the states' U(-0.9, 0.9): a cell is not bounded
by 1, and a large one tells ``h' = o ⊙ tanh(c')`` from ``h' = o ⊙ c'``. Every loss weighs the
cells as well as the states, so the gradients through c are checked too.

Keys (every array is float64 unless said otherwise; ``P`` stands for a parameter name):

Metadata
    ``meta/format_version``   int64 scalar, the layout of this archive (currently 1).
    ``meta/seed``             int64 scalar, the seed every case was drawn from.
    ``meta/torch_version``    unicode scalar, ``torch.__version__`` that computed the goldens.

The cell (``torch.nn.LSTMCell(3, 4)``); loss ``sum(h' * loss_h) + sum(c' * loss_c)``
    ``cell/state/P``          for P in weight_ih [16, 3], weight_hh [16, 4], bias_ih [16],
                              bias_hh [16], in torch's state_dict order.
    ``cell/x``                input [3, 3].
    ``cell/h``                state [3, 4].
    ``cell/c``                cell [3, 4].
    ``cell/h_next``           h' [3, 4].
    ``cell/c_next``           c' [3, 4].
    ``cell/loss_h``           the loss weights of h' [3, 4].
    ``cell/loss_c``           the loss weights of c' [3, 4].
    ``cell/grad/x``           d loss / d x [3, 3].
    ``cell/grad/h``           d loss / d h [3, 4].
    ``cell/grad/c``           d loss / d c [3, 4].
    ``cell/grad/P``           d loss / d P, for each of the four parameters.

The sequences; loss ``sum(out * loss_out) + sum(h_n * loss_h) + sum(c_n * loss_c)``
    ``seq1/...``              ``torch.nn.LSTM(3, 4, num_layers=1)``, B = 3, with an initial
                              state and cell.
    ``seq2/...``              ``torch.nn.LSTM(3, 4, num_layers=2)``, B = 3, with nonzero
                              initial states and cells that differ between the layers.
    ``packed/...``            ``torch.nn.LSTM(3, 4, num_layers=2)``, B = 4, a padded batch
                              with unsorted lengths, run as a packed sequence
                              (``pack_padded_sequence(enforce_sorted=False)``, then
                              ``pad_packed_sequence(total_length=T)``, so padded outputs are 0);
                              its padded inputs are random, not zero, so a leak shows.
    Each of them holds (``S`` standing for the prefix, ``L`` for the layer count):
    ``S/state/P``             for P in weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k},
                              bias_hh_l{k}, k = 0..L-1, in torch's state_dict order.
    ``S/x``                   inputs [T, B, 3], time first.
    ``S/h0``                  initial states [L, B, 4].
    ``S/c0``                  initial cells [L, B, 4].
    ``S/out``                 the last layer's outputs [T, B, 4].
    ``S/h_n``                 each layer's final state [L, B, 4].
    ``S/c_n``                 each layer's final cell [L, B, 4].
    ``S/loss_out``            loss weights of ``out`` [T, B, 4].
    ``S/loss_h``              loss weights of ``h_n`` [L, B, 4].
    ``S/loss_c``              loss weights of ``c_n`` [L, B, 4].
    ``S/grad/x``              d loss / d x [T, B, 3] (zero in the padding of ``packed``).
    ``S/grad/h0``             d loss / d h0 [L, B, 4].
    ``S/grad/c0``             d loss / d c0 [L, B, 4].
    ``S/grad/P``              d loss / d P, for each parameter.
    ``packed/lengths``        int64 [4], the lengths, in 1..T and not sorted.

The state_dict layouts (no values)
    ``names/lstm2``           unicode [8], the state_dict names of ``torch.nn.LSTM(3, 4,
                              num_layers=2)`` in order.
    ``shapes/lstm2``          int64 [8, 2], their shapes; a 1-D shape is padded with -1, so
                              a row's shape is ``tuple(d for d in row if d >= 0)``.
    ``names/cell``            unicode [4], the state_dict names of ``torch.nn.LSTMCell(3, 4)``.
    ``shapes/cell``           int64 [4, 2], their shapes, padded the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import zipfile
from pathlib import Path

import numpy as np
import torch

FORMAT_VERSION = 1
SEED = 20240527
D_IN, HIDDEN, STEPS = 3, 4, 5
PACKED_LENGTHS = (3, 5, 1, 4)  # unsorted; includes the full length T and the shortest, 1
DEFAULT_OUT = Path(__file__).resolve().parent / "lstm_torch.npz"

# Fixed zip entry metadata: the DOS epoch as the timestamp, Unix as the creating system and
# rw-r--r-- permissions, so nothing about the machine or the moment ends up in the file.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_ZIP_COMPRESSION = zipfile.ZIP_DEFLATED
_ZIP_LEVEL = 9


def _rng(case: int) -> np.random.Generator:
    """An independent generator per case, so adding a case never changes the others."""
    return np.random.default_rng([SEED, case])


def _random_parameters(module: torch.nn.Module, rng: np.random.Generator) -> None:
    """Overwrite every parameter with numpy draws from U(-0.8, 0.8)."""
    with torch.no_grad():
        for _, param in module.named_parameters():
            param.copy_(torch.from_numpy(rng.uniform(-0.8, 0.8, size=tuple(param.shape))))


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64, order="C")


def _shape_rows(module: torch.nn.Module) -> tuple[np.ndarray, np.ndarray]:
    """The state_dict names (unicode) and shapes (int64, 1-D shapes padded with -1)."""
    items = list(module.state_dict().items())
    names = np.array([name for name, _ in items], dtype=np.str_)
    shapes = np.array(
        [list(v.shape) + [-1] * (2 - len(v.shape)) for _, v in items], dtype=np.int64
    )
    return names, shapes


def _cell_case(arrays: dict[str, np.ndarray]) -> None:
    rng = _rng(0)
    cell = torch.nn.LSTMCell(D_IN, HIDDEN, dtype=torch.float64)
    _random_parameters(cell, rng)
    batch = 3
    x = torch.from_numpy(rng.normal(size=(batch, D_IN))).requires_grad_(True)
    h = torch.from_numpy(rng.uniform(-0.9, 0.9, size=(batch, HIDDEN))).requires_grad_(True)
    c = torch.from_numpy(rng.uniform(-1.5, 1.5, size=(batch, HIDDEN))).requires_grad_(True)
    loss_h = torch.from_numpy(rng.normal(size=(batch, HIDDEN)))
    loss_c = torch.from_numpy(rng.normal(size=(batch, HIDDEN)))
    h_next, c_next = cell(x, (h, c))
    ((h_next * loss_h).sum() + (c_next * loss_c).sum()).backward()

    for name, value in cell.state_dict().items():
        arrays[f"cell/state/{name}"] = _numpy(value)
    arrays["cell/x"] = _numpy(x)
    arrays["cell/h"] = _numpy(h)
    arrays["cell/c"] = _numpy(c)
    arrays["cell/h_next"] = _numpy(h_next)
    arrays["cell/c_next"] = _numpy(c_next)
    arrays["cell/loss_h"] = _numpy(loss_h)
    arrays["cell/loss_c"] = _numpy(loss_c)
    arrays["cell/grad/x"] = _numpy(x.grad)
    arrays["cell/grad/h"] = _numpy(h.grad)
    arrays["cell/grad/c"] = _numpy(c.grad)
    for name, param in cell.named_parameters():
        arrays[f"cell/grad/{name}"] = _numpy(param.grad)


def _sequence_case(
    arrays: dict[str, np.ndarray],
    prefix: str,
    case: int,
    num_layers: int,
    batch: int,
    lengths: tuple[int, ...] | None = None,
) -> None:
    rng = _rng(case)
    lstm = torch.nn.LSTM(D_IN, HIDDEN, num_layers=num_layers, dtype=torch.float64)
    _random_parameters(lstm, rng)
    x = torch.from_numpy(rng.normal(size=(STEPS, batch, D_IN))).requires_grad_(True)
    # Each layer's initial state and cell are drawn separately, so a layer that starts from
    # another layer's state, or a state and a cell swapped, give different outputs.
    h0 = torch.from_numpy(
        rng.uniform(-0.9, 0.9, size=(num_layers, batch, HIDDEN))
    ).requires_grad_(True)
    c0 = torch.from_numpy(
        rng.uniform(-1.5, 1.5, size=(num_layers, batch, HIDDEN))
    ).requires_grad_(True)
    loss_out = torch.from_numpy(rng.normal(size=(STEPS, batch, HIDDEN)))
    loss_h = torch.from_numpy(rng.normal(size=(num_layers, batch, HIDDEN)))
    loss_c = torch.from_numpy(rng.normal(size=(num_layers, batch, HIDDEN)))

    if lengths is None:
        out, (h_n, c_n) = lstm(x, (h0, c0))
    else:
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(lengths, dtype=torch.int64), enforce_sorted=False
        )
        packed_out, (h_n, c_n) = lstm(packed, (h0, c0))
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(packed_out, total_length=STEPS)
    ((out * loss_out).sum() + (h_n * loss_h).sum() + (c_n * loss_c).sum()).backward()

    for name, value in lstm.state_dict().items():
        arrays[f"{prefix}/state/{name}"] = _numpy(value)
    arrays[f"{prefix}/x"] = _numpy(x)
    arrays[f"{prefix}/h0"] = _numpy(h0)
    arrays[f"{prefix}/c0"] = _numpy(c0)
    arrays[f"{prefix}/out"] = _numpy(out)
    arrays[f"{prefix}/h_n"] = _numpy(h_n)
    arrays[f"{prefix}/c_n"] = _numpy(c_n)
    arrays[f"{prefix}/loss_out"] = _numpy(loss_out)
    arrays[f"{prefix}/loss_h"] = _numpy(loss_h)
    arrays[f"{prefix}/loss_c"] = _numpy(loss_c)
    arrays[f"{prefix}/grad/x"] = _numpy(x.grad)
    arrays[f"{prefix}/grad/h0"] = _numpy(h0.grad)
    arrays[f"{prefix}/grad/c0"] = _numpy(c0.grad)
    for name, param in lstm.named_parameters():
        arrays[f"{prefix}/grad/{name}"] = _numpy(param.grad)
    if lengths is not None:
        arrays[f"{prefix}/lengths"] = np.array(lengths, dtype=np.int64)


def build() -> dict[str, np.ndarray]:
    """Every golden array by key, in the order they are written."""
    torch.set_num_threads(1)
    arrays: dict[str, np.ndarray] = {
        "meta/format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "meta/seed": np.array(SEED, dtype=np.int64),
        "meta/torch_version": np.array(str(torch.__version__), dtype=np.str_),
    }
    _cell_case(arrays)
    _sequence_case(arrays, "seq1", case=1, num_layers=1, batch=3)
    _sequence_case(arrays, "seq2", case=2, num_layers=2, batch=3)
    _sequence_case(arrays, "packed", case=3, num_layers=2, batch=4, lengths=PACKED_LENGTHS)
    # Layout only: the default initialisation draws from torch's generator, but names and
    # shapes do not depend on the values.
    names, shapes = _shape_rows(torch.nn.LSTM(D_IN, HIDDEN, num_layers=2))
    arrays["names/lstm2"], arrays["shapes/lstm2"] = names, shapes
    names, shapes = _shape_rows(torch.nn.LSTMCell(D_IN, HIDDEN))
    arrays["names/cell"], arrays["shapes/cell"] = names, shapes
    return arrays


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` as an .npz that ``np.load`` reads, byte-identical for equal input.

    The file is written beside ``path`` and renamed over it, so a failed run never leaves
    a truncated archive behind.
    """
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=_ZIP_COMPRESSION, compresslevel=_ZIP_LEVEL) as zf:
        for key, array in arrays.items():
            buffer = io.BytesIO()
            # copy(order="C") rather than ascontiguousarray, which would turn a 0-d array 1-d.
            np.lib.format.write_array(buffer, array.copy(order="C"), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE)
            info.compress_type = _ZIP_COMPRESSION
            info.create_system = 3
            info.external_attr = 0o644 << 16
            zf.writestr(info, buffer.getvalue(), compress_type=_ZIP_COMPRESSION,
                        compresslevel=_ZIP_LEVEL)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the .npz")
    args = parser.parse_args(argv)
    arrays = build()
    write_npz(args.out, arrays)
    # Read it back the way the course tests do: no pickles, every key present and equal.
    with np.load(args.out, allow_pickle=False) as data:
        assert list(data.files) == list(arrays), "keys read back differ from keys written"
        for key, array in arrays.items():
            assert np.array_equal(data[key], array), f"{key} read back differs"
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {len(arrays)} arrays, "
          f"sha256 {digest})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
