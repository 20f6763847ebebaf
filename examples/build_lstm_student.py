"""Rebuild the bundled LSTM student repository's journal, cycle by cycle, with the real commands.

The bundled LSTM student (``examples/lstm-student``, assignment ``l3-2-lstm``) wrote ten tests
first, one red-then-green cycle each: for every cycle this script writes the tests introduced so
far, runs ``mutagrade tdd red --assignment l3-2-lstm`` against the implementation as it stood,
moves the implementation on to the next stage, and runs ``mutagrade tdd green --assignment
l3-2-lstm``. The stages are the final ``lstm.py`` with the features not yet written (or the
mistakes not yet found) put back in. ``examples/build_student.py`` does the same for the GRU.

    .venv/bin/python examples/build_lstm_student.py [DEST]   # default: examples/lstm-student, in place
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
STUDENT = HERE / "lstm-student"
ASSIGNMENT = "l3-2-lstm"
TESTS = Path("python") / "tests" / "l3-2-lstm" / "test_lstm.py"
LSTM = Path("python") / "tinyllm" / "rnn" / "lstm.py"

# What the implementation lacked before each feature was written: (old, new) edits of the final
# lstm.py. Stage k has the features of cycles 1..k and lacks the rest.
MISSING: dict[str, list[tuple[str, str]]] = {
    "cell": [('    x, h, c = _as_tensor(x, "x"), _as_tensor(h, "h"), _as_tensor(c, "c")\n',
              '    raise NotImplementedError("lstm_cell is not written yet")\n'
              '    x, h, c = _as_tensor(x, "x"), _as_tensor(h, "h"), _as_tensor(c, "c")\n')],
    # The recurrent bias forgotten: invisible while bias_hh = 0, as in the hand example.
    "bias_hh": [("        bias = b_ih[rows] + b_hh[rows]\n", "        bias = b_ih[rows]\n")],
    # The cell's own path on raw arrays: the forward pass right, no gradient back to c.
    "cell_gradient": [("    c_next = forget_gate * c + input_gate * candidate",
                       "    c_next = forget_gate * c.data + input_gate * candidate")],
    "layers": [('        super().__init__()\n        self.d_in = _positive_int(d_in, "d_in")\n'
                '        self.d_h = _positive_int(d_h, "d_h")\n        arrays',
                '        raise NotImplementedError("LSTMCell is not written yet")\n'
                '        super().__init__()\n        self.d_in = _positive_int(d_in, "d_in")\n'
                '        self.d_h = _positive_int(d_h, "d_h")\n        arrays'),
               ('        super().__init__()\n        self.d_in = _positive_int(d_in, "d_in")\n'
                '        self.d_h = _positive_int(d_h, "d_h")\n        self.num_layers',
                '        raise NotImplementedError("LSTM is not written yet")\n'
                '        super().__init__()\n        self.d_in = _positive_int(d_in, "d_in")\n'
                '        self.d_h = _positive_int(d_h, "d_h")\n        self.num_layers')],
    # No forget bias yet, and the recurrent blocks drawn like the input ones.
    "init": [('    bias_ih[GATES.index("f")] = FORGET_BIAS\n', ""),
             ("        u_blocks.append(orthogonal((hidden, hidden), rng))",
              "        u_blocks.append(xavier_uniform((hidden, hidden), rng))")],
    "forward": [('        x = _as_tensor(x, "x")\n        _expect_shape(x, "x", None, None, self.d_in)',
                 '        raise NotImplementedError("LSTM.forward is not written yet")\n'
                 '        x = _as_tensor(x, "x")\n        _expect_shape(x, "x", None, None, self.d_in)')],
    "lengths": [("        if lengths is not None:\n            mask =",
                 "        if lengths is not None:\n"
                 '            raise NotImplementedError("lengths are not supported yet")\n'
                 "            mask =")],
    "dropout_last": [("            if layer + 1 < self.num_layers:\n"
                      "                sequence = dropout(sequence, self.dropout, self._mask_rng, self.training)\n",
                      "            sequence = dropout(sequence, self.dropout, self._mask_rng, self.training)\n")],
    "dropout_eval": [("self._mask_rng, self.training)", "self._mask_rng, True)")],
    "validation": [('        self.dropout = check_probability(dropout, "dropout")',
                    "        self.dropout = float(dropout)"),
                   ("    if whole.min() < 1 or whole.max() > steps:", "    if False:")],
}

# The cycles: the tests each red introduces, and the feature its green adds.
CYCLES: list[tuple[list[str], str]] = [
    (["test_one_unit_worked_by_hand"], "cell"),
    (["test_cell_agrees_with_my_numpy_step_when_h_and_c_differ"], "bias_hh"),
    (["test_one_unit_gradients_worked_by_hand"], "cell_gradient"),
    (["test_parameter_names_shapes_and_a_loaded_cell"], "layers"),
    (["test_new_weights_have_a_forget_bias_of_one_and_orthogonal_blocks"], "init"),
    (["test_two_layers_from_their_own_states_follow_my_numpy_steps"], "forward"),
    (["test_short_sequences_stop_at_their_length"], "lengths"),
    (["test_dropout_is_ignored_by_a_one_layer_lstm"], "dropout_last"),
    (["test_evaluation_mode_switches_dropout_off"], "dropout_eval"),
    (["test_missing_state_is_zero_and_bad_arguments_raise"], "validation"),
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
                raise SystemExit(f"stage edit for {feature!r} does not fit the final lstm.py: {old[:60]!r}")
            source = source.replace(old, new)
    return source


def mutagrade(dest: Path, phase: str) -> None:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "tdd", phase, "--assignment", ASSIGNMENT, "--repo", str(dest)],
        capture_output=True, text=True, env=env,
    )
    print(f"  tdd {phase}: {(done.stdout or done.stderr).strip().splitlines()[0]}")
    if done.returncode != 0:
        raise SystemExit(f"`mutagrade tdd {phase} --assignment {ASSIGNMENT}` refused:\n{done.stdout}{done.stderr}")


def build(dest: Path) -> None:
    """Rebuild ``dest`` (a copy of the bundled LSTM student, or the bundled student itself)."""
    final_tests = (STUDENT / TESTS).read_text()
    final_lstm = (STUDENT / LSTM).read_text()
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
    try:
        for number, (names, feature) in enumerate(CYCLES, start=1):
            print(f"cycle {number}: {', '.join(names)}")
            written.update(names)
            (dest / TESTS).write_text(header + "".join(b for n, b in blocks.items() if n in written))
            (dest / LSTM).write_text(stage_source(final_lstm, features[number - 1 :]))
            mutagrade(dest, "red")
            (dest / LSTM).write_text(stage_source(final_lstm, features[number:]))
            mutagrade(dest, "green")
        if (dest / TESTS).read_text() != final_tests or (dest / LSTM).read_text() != final_lstm:
            raise SystemExit("the last green does not leave the final tests and implementation")
    finally:
        # Whatever happened, leave the student's final files in place, not a stage.
        (dest / TESTS).write_text(final_tests)
        (dest / LSTM).write_text(final_lstm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", default=str(STUDENT))
    build(Path(parser.parse_args().dest))


if __name__ == "__main__":
    main()
