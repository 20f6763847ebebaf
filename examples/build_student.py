"""Rebuild the bundled student repository's journal, cycle by cycle, with the real commands.

The bundled student (``examples/student``) wrote ten tests first, one red-then-green cycle each:
for every cycle this script writes the tests introduced so far, runs ``mutagrade tdd red``
against the implementation as it stood, moves the implementation on to the next stage, and runs
``mutagrade tdd green``. The stages are the final ``gru.py`` with the features not yet written
(or the mistakes not yet found) put back in.

    .venv/bin/python examples/build_student.py [DEST]     # default: examples/student, in place
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STUDENT = HERE / "student"
TESTS = Path("python") / "tests" / "l3-3-gru" / "test_gru.py"
GRU = Path("python") / "tinyllm" / "rnn" / "gru.py"

# What the implementation lacked before each feature was written: (old, new) edits of the final
# gru.py. Stage k has the features of cycles 1..k and lacks the rest.
MISSING: dict[str, list[tuple[str, str]]] = {
    "cell": [('    x, h = _tensor(x, "x"), _tensor(h, "h")\n',
              '    raise NotImplementedError("gru_cell is not written yet")\n    x, h = _tensor(x, "x"), _tensor(h, "h")\n')],
    "matmul": [("    a = x @ w_ih.T + b_ih", "    a = x * w_ih.T + b_ih"),
               ("    u = h @ w_hh.T + b_hh", "    u = h * w_hh.T + b_hh")],
    "gradient": [("    return n + z * (h - n)", "    return n + z * (h.data - n)")],
    "layers": [('        super().__init__()\n        self.d_in = _check_size(d_in, "d_in")\n        self.d_h = _check_size(d_h, "d_h")\n        w_ih',
                '        raise NotImplementedError("GRUCell is not written yet")\n        super().__init__()\n        self.d_in = _check_size(d_in, "d_in")\n        self.d_h = _check_size(d_h, "d_h")\n        w_ih'),
               ('        super().__init__()\n        self.d_in = _check_size(d_in, "d_in")\n        self.d_h = _check_size(d_h, "d_h")\n        self.num_layers',
                '        raise NotImplementedError("GRU is not written yet")\n        super().__init__()\n        self.d_in = _check_size(d_in, "d_in")\n        self.d_h = _check_size(d_h, "d_h")\n        self.num_layers')],
    "block_init": [("    w_hh = np.concatenate([orthogonal((hidden, hidden), rng) for _ in range(3)])",
                    "    w_hh = orthogonal((3 * hidden, hidden), rng)")],
    "forward": [('        x = _tensor(x, "x")\n        _check_shape(x, "x", (None, None, self.d_in)',
                 '        raise NotImplementedError("GRU.forward is not written yet")\n        x = _tensor(x, "x")\n        _check_shape(x, "x", (None, None, self.d_in)')],
    "lengths": [("        if lengths is not None:\n            # alive",
                 '        if lengths is not None:\n            raise NotImplementedError("lengths are not supported yet")\n            # alive')],
    "dropout_last": [("            if k < self.num_layers - 1:\n                layer_input = dropout(layer_input, self.dropout, self._dropout_rng, self.training)\n",
                      "            layer_input = dropout(layer_input, self.dropout, self._dropout_rng, self.training)\n")],
    "dropout_eval": [("self._dropout_rng, self.training)", "self._dropout_rng, True)")],
    "validation": [('        self.dropout = check_probability(dropout, "dropout")', "        self.dropout = float(dropout)"),
                   ("    if np.any(values < 1) or np.any(values > steps):", "    if False:")],
}

# The cycles: the tests each red introduces, and the feature its green adds.
CYCLES: list[tuple[list[str], str]] = [
    (["test_hand_example_gru_cell"], "cell"),
    (["test_cell_matches_my_numpy_formula_with_nonzero_b_hn"], "matmul"),
    (["test_hand_example_gradient_with_respect_to_h"], "gradient"),
    (["test_state_dict_keys_follow_torch"], "layers"),
    (["test_each_recurrent_block_is_orthogonal_and_biases_are_zero"], "block_init"),
    (["test_two_layers_match_my_cells_stacked_from_a_nonzero_state"], "forward"),
    (["test_padded_batch_freezes_the_state_and_zeroes_the_outputs"], "lengths"),
    (["test_dropout_is_ignored_by_a_one_layer_gru"], "dropout_last"),
    (["test_evaluation_mode_has_no_dropout"], "dropout_eval"),
    (["test_no_state_means_zeros_and_bad_arguments_raise"], "validation"),
]


def split_tests(source: str) -> tuple[str, dict[str, str]]:
    """The test file's header and each test function's block (up to the next test), in order."""
    starts = [m.start() for m in re.finditer(r"^def test_", source, flags=re.M)]
    header = source[: starts[0]]
    blocks = {}
    for begin, end in zip(starts, [*starts[1:], len(source)]):
        name = re.match(r"def (test_\w+)", source[begin:]).group(1)
        blocks[name] = source[begin:end]
    return header, blocks


def stage_source(final: str, missing: list[str]) -> str:
    source = final
    for feature in missing:
        for old, new in MISSING[feature]:
            if source.count(old) != 1:
                raise SystemExit(f"stage edit for {feature!r} does not fit the final gru.py: {old[:60]!r}")
            source = source.replace(old, new)
    return source


def mutagrade(dest: Path, phase: str) -> None:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "tdd", phase, "--repo", str(dest)],
        capture_output=True, text=True, env=env,
    )
    print(f"  tdd {phase}: {(done.stdout or done.stderr).strip().splitlines()[0]}")
    if done.returncode != 0:
        raise SystemExit(f"`mutagrade tdd {phase}` refused:\n{done.stderr}")


def build(dest: Path) -> None:
    """Rebuild ``dest`` (a copy of the bundled student, or the bundled student itself)."""
    final_tests = (STUDENT / TESTS).read_text()
    final_gru = (STUDENT / GRU).read_text()
    if dest.resolve() != STUDENT.resolve():
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(STUDENT, dest, ignore=shutil.ignore_patterns(".tdd", "__pycache__"))
    shutil.rmtree(dest / ".tdd", ignore_errors=True)
    header, blocks = split_tests(final_tests)
    planned = [name for names, _ in CYCLES for name in names]
    if sorted(planned) != sorted(blocks):
        raise SystemExit(f"the cycles must introduce every test once; tests {sorted(blocks)}, cycles {planned}")
    features = [feature for _, feature in CYCLES]
    written: set[str] = set()
    for number, (names, feature) in enumerate(CYCLES, start=1):
        print(f"cycle {number}: {', '.join(names)}")
        written.update(names)
        (dest / TESTS).write_text(header + "".join(b for n, b in blocks.items() if n in written))
        (dest / GRU).write_text(stage_source(final_gru, features[number - 1 :]))
        mutagrade(dest, "red")
        (dest / GRU).write_text(stage_source(final_gru, features[number:]))
        mutagrade(dest, "green")
    if (dest / TESTS).read_text() != final_tests or (dest / GRU).read_text() != final_gru:
        raise SystemExit("the last green does not leave the final tests and implementation")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", default=str(STUDENT))
    build(Path(parser.parse_args().dest))


if __name__ == "__main__":
    main()
