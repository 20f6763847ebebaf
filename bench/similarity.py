"""How well, and how fast, ways of comparing two students' suites tell a copy from honest work.

Planted cases, all made from the bundled student's suite (``examples/student``): an unchanged
copy; every name of its own renamed (formatting kept); reformatted (``ast.unparse``: line
breaks, spacing, quotes, comments gone); its definitions in reverse order; a comment added
before each statement of every function; all of these at once; and half its tests copied into
another student's honest suite. Unrelated pairs: the bundled suite against each course test
file (two honest suites of the same functions, with their asserts) and against two small
honest suites written here, and those two against each other.

Methods, each giving a pair one figure from 0 to 1:

- ``copydetect``: :func:`grader.flows.similarity.compare_suites` as ``mutagrade similarity``
  runs it (k-grams of 25 filtered tokens, every one kept; the larger of the two shares), with no
  boilerplate, so that it sees what the others see; ``+course``: the course's code as
  boilerplate, as the command does (a pair with a course file in it then reads 0, rightly);
  ``w=6``: winnowed with a window of 6 (a match of 30 tokens guaranteed; its figures change
  from run to run, as Python salts its string hashes per process);
- ``ast``: :mod:`grader.core.copies`' reading of each test (names, formatting, docstrings,
  comments and assert messages left out; helpers after the test), compared by
  ``difflib.SequenceMatcher.ratio``: ``joined``, a suite's tests joined in file order;
  ``per test``, each test against the other suite's closest test (as a test is compared with
  the course tests), their mean weighted by tokens, the larger direction;
- ``difflib``: ``SequenceMatcher.ratio`` over the raw text's lines;
- ``pycode_similar`` (1.4, if installed: ``pip install pycode_similar``): each function's
  normalised AST lines against the other suite's closest function, the larger of the two
  directions.

The separation is the lowest planted copy minus the highest unrelated pair (above 0: a
threshold between them tells every case apart). Then each method's time for 200 suites
(19,900 pairs), made by drawing tests from the bundled suite, the honest suites and the course
tests, renamed: copydetect's is measured whole (every suite fingerprinted once, every pair
compared); the others' pairs are timed on ``--sample`` pairs and scaled to 19,900. Last, the
whole ``mutagrade similarity`` command on 200 students' folders and archives.

    .venv/bin/python bench/similarity.py [--suites 200] [--sample 300]
"""

from __future__ import annotations

import argparse
import ast
import builtins
import io
import json
import math
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import zipfile
from difflib import SequenceMatcher
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grader.flows.similarity as flow  # noqa: E402
from grader.core.copies import read_tests, similarity  # noqa: E402
from grader.core.paths import default_layout  # noqa: E402
from grader.core.similarity import join_suite  # noqa: E402

LAYOUT = default_layout()
REPEAT = 3  # the measurements run whole: the best of them (the machine's other work only adds)
STUDENT = (LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru" / "test_gru.py").read_text(encoding="utf-8")
COURSE = {p.name: p.read_text(encoding="utf-8") for p in sorted(LAYOUT.course_tests.glob("test_*.py"))}

HONEST_A = '''import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, GRUCell


def test_sequence_output_has_one_row_per_step():
    net = GRU(2, 3)
    outputs, last = net(Tensor(np.ones((5, 4, 2))))
    assert outputs.data.shape == (5, 4, 3)
    assert last.data.shape == (1, 4, 3)


def test_rows_of_a_batch_do_not_mix():
    cell = GRUCell(2, 2)
    pair = np.array([[1.0, 2.0], [3.0, -1.0]])
    assert np.allclose(cell(Tensor(pair)).data[1:], cell(Tensor(pair[1:])).data)


def test_the_last_output_is_the_final_state():
    net = GRU(4, 2)
    outputs, last = net(Tensor(np.linspace(-1.0, 1.0, 24).reshape(3, 2, 4)))
    assert np.allclose(outputs.data[-1], last.data[0])


def test_a_long_run_stays_bounded():
    outputs, _ = GRU(1, 1)(Tensor(np.full((50, 1, 1), 100.0)))
    assert np.all(np.abs(outputs.data) <= 1.0)


def test_two_layers_have_their_own_weights():
    keys = set(GRU(2, 2, num_layers=2).state_dict())
    assert {"weight_ih_l1", "bias_hh_l1"} <= keys
'''

HONEST_B = '''import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def finite_difference(f, value, eps=1e-6):
    grad = np.zeros_like(value)
    for index in np.ndindex(*value.shape):
        up, down = value.copy(), value.copy()
        up[index] += eps
        down[index] -= eps
        grad[index] = (f(up) - f(down)) / (2 * eps)
    return grad


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_input_gradient_against_finite_differences(seed):
    gen = np.random.default_rng(seed)
    weights = [gen.normal(size=s) for s in ((6, 3), (6, 2), (6,), (6,))]
    state = gen.normal(size=(1, 2))

    def loss(inp):
        return float(gru_cell(Tensor(inp), Tensor(state), *map(Tensor, weights)).data.sum())

    start = gen.normal(size=(1, 3))
    inp = Tensor(start, requires_grad=True)
    gru_cell(inp, Tensor(state), *map(Tensor, weights)).sum().backward()
    assert np.allclose(inp.grad, finite_difference(loss, start), atol=1e-6)


def test_zero_weights_give_half_the_state():
    zeros = [Tensor(np.zeros(s)) for s in ((3, 1), (3, 1), (3,), (3,))]
    out = gru_cell(Tensor([[2.0]]), Tensor([[4.0]]), *zeros)
    assert math.isclose(float(out.data[0, 0]), 2.0)
'''


# ------------------------------------------------------------------------- planted copies
def _own_names(source: str) -> list[str]:
    """The names a suite defines itself: functions, arguments, assigned variables."""
    tree = ast.parse(source)
    imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            found[node.name] = None
        elif isinstance(node, ast.arg):
            found[node.arg] = None
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found[node.id] = None
    return [n for n in found if n not in imported and not hasattr(builtins, n)]


def renamed(source: str, seed: int = 0) -> str:
    """Every name of its own renamed where the code names it (not an attribute, not inside a
    string); the formatting kept."""
    rng = random.Random(seed)
    new = {n: ("test_" if n.startswith("test") else "") + f"{rng.choice('abcdefgh')}{i}_{n[::-1][:4]}"
           for i, n in enumerate(_own_names(source))}
    lines = source.splitlines(keepends=True)
    edits, previous = [], ""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in new and previous != ".":
            edits.append(token)
        previous = token.string
    for token in reversed(edits):  # right to left: the columns of a line's earlier names hold
        row, col = token.start
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new[token.string] + line[col + len(token.string):]
    return "".join(lines)


def reformatted(source: str) -> str:
    return ast.unparse(ast.parse(source)) + "\n"


def _segments(source: str) -> tuple[str, list[str]]:
    """The text before the first definition, and each top-level statement after it with the
    lines above it (decorators, blank lines)."""
    lines = source.splitlines(keepends=True)
    body = ast.parse(source).body
    first = next(i for i, n in enumerate(body) if isinstance(n, ast.FunctionDef))
    starts = [min([n.lineno, *(d.lineno for d in n.decorator_list)]) - 1 if isinstance(n, ast.FunctionDef)
              else n.lineno - 1 for n in body[first:]]
    head = "".join(lines[:starts[0]])
    ends = [*starts[1:], len(lines)]
    return head, ["".join(lines[s:e]).rstrip("\n") + "\n\n\n" for s, e in zip(starts, ends)]


def reordered(source: str) -> str:
    head, parts = _segments(source)
    return head + "".join(reversed(parts))


def commented(source: str) -> str:
    """A comment line before every statement inside a function."""
    out = []
    for line in source.splitlines(keepends=True):
        indent = re.match(r"( {4,})\S", line)
        if indent and not line.lstrip().startswith(("#", ")", "]", "}", '"', "'")):
            out.append(f"{indent.group(1)}# next we check this step carefully\n")
        out.append(line)
    return "".join(out)


def half_into(source: str, other: str) -> str:
    """Every other test and helper of ``source`` copied into the suite ``other``."""
    _, parts = _segments(source)
    return other.rstrip("\n") + "\n\n\n" + "".join(parts[::2])


PLANTED: dict[str, Callable[[], str]] = {
    "unchanged copy": lambda: STUDENT,
    "renamed": lambda: renamed(STUDENT),
    "reformatted": lambda: reformatted(STUDENT),
    "reordered": lambda: reordered(STUDENT),
    "comments added": lambda: commented(STUDENT),
    "all of them": lambda: commented(reformatted(reordered(renamed(STUDENT)))),
    "half copied into another suite": lambda: half_into(STUDENT, HONEST_A),
}
UNRELATED: dict[str, tuple[str, str]] = {
    **{f"student vs course {name}": (STUDENT, text) for name, text in COURSE.items()},
    "student vs honest A": (STUDENT, HONEST_A),
    "student vs honest B": (STUDENT, HONEST_B),
    "honest A vs honest B": (HONEST_A, HONEST_B),
}


# ------------------------------------------------------------------------------- methods
def _copydetect(boilerplate: list[str], guarantee: int = flow.NOISE) -> Callable[[str, str], float]:
    def compare(a: str, b: str) -> float:
        flow.GUARANTEE = guarantee
        try:
            result = flow.compare_suites([join_suite("a", [("test_a.py", a)]), join_suite("b", [("test_b.py", b)])],
                                         boilerplate=boilerplate, threshold=0.0)
        finally:
            flow.GUARANTEE = flow.NOISE
        return result.pairs[0].similarity if result.pairs else 0.0
    return compare


def _ast_tests(text: str, folder: Path) -> list[list[str]]:
    """Each test of the suite ``text`` as :func:`grader.core.copies.read_tests` reads it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_suite.py").write_text(text, encoding="utf-8")
    return list(read_tests(folder, limit=None).values())


def _joined(a: list[list[str]], b: list[list[str]]) -> float:
    return similarity([t for test in a for t in test], [t for test in b for t in test])


def _per_test(a: list[list[str]], b: list[list[str]]) -> float:
    """Each test's closest test on the other side, as :func:`grader.core.copies.find_copies`
    finds the closest course test; their mean weighted by tokens, the larger direction."""
    def one_way(mine: list[list[str]], theirs: list[list[str]]) -> float:
        total = sum(len(t) for t in mine)
        best = sum(len(t) * max((similarity(t, u) for u in theirs), default=0.0) for t in mine)
        return best / total if total else 0.0
    return max(one_way(a, b), one_way(b, a))


def _ast(how: Callable[[list[list[str]], list[list[str]]], float]) -> Callable[[str, str], float]:
    def compare(a: str, b: str) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            return how(_ast_tests(a, Path(tmp, "a")), _ast_tests(b, Path(tmp, "b")))
    return compare


def _difflib(a: str, b: str) -> float:
    return SequenceMatcher(None, a.splitlines(), b.splitlines()).ratio()


def _pycode_similar() -> Callable[[str, str], float] | None:
    try:
        import pycode_similar
    except ImportError:
        return None

    def one_way(ref: str, candidate: str) -> float:
        [(_, diffs)] = pycode_similar.detect([ref, candidate], diff_method=pycode_similar.UnifiedDiff)
        return pycode_similar.summarize(diffs)[0]

    return lambda a, b: max(one_way(a, b), one_way(b, a))


def methods() -> dict[str, Callable[[str, str], float]]:
    found = {
        "copydetect": _copydetect([]),
        "copydetect+course": _copydetect(flow.course_boilerplate(LAYOUT)),
        "copydetect w=6": _copydetect([], guarantee=flow.NOISE + 5),
        "ast joined": _ast(_joined),
        "ast per test": _ast(_per_test),
        "difflib": _difflib,
    }
    pcs = _pycode_similar()
    if pcs is not None:
        found["pycode_similar"] = pcs
    return found


def quality(compare: dict[str, Callable[[str, str], float]]) -> None:
    names = list(compare)
    cases = [(f"copy: {case}", STUDENT, make(), True) for case, make in PLANTED.items()]
    cases += [(f"unrelated: {case}", a, b, False) for case, (a, b) in UNRELATED.items()]
    width = max(len(label) for label, *_ in cases)
    print(f"{'case':<{width}}  " + "  ".join(f"{n:>17}" for n in names))
    lowest = {n: 1.0 for n in names}
    highest = {n: 0.0 for n in names}
    for label, a, b, planted in cases:
        row = {n: f(a, b) for n, f in compare.items()}
        for n in names:
            if planted:
                lowest[n] = min(lowest[n], row[n])
            else:
                highest[n] = max(highest[n], row[n])
        print(f"{label:<{width}}  " + "  ".join(f"{row[n]:>17.3f}" for n in names))
    print(f"{'separation':<{width}}  " + "  ".join(f"{lowest[n] - highest[n]:>+17.3f}" for n in names))


# ---------------------------------------------------------------------------------- speed
def _functions(source: str) -> list[str]:
    return _segments(source)[1]


def class_of(count: int, seed: int = 1) -> list[str]:
    """``count`` suites, each 8 to 14 definitions drawn from the bundled, honest and course
    suites, renamed and shuffled (some pairs share tests: more work than a class of honest suites)."""
    pool = [f for text in (STUDENT, HONEST_A, HONEST_B, *COURSE.values()) for f in _functions(text)]
    header = "import math\n\nimport numpy as np\nimport pytest\n\nfrom tinyllm.autograd.tensor import Tensor\n\n\n"
    rng = random.Random(seed)
    suites = []
    for n in range(count):
        parts = rng.sample(pool, rng.randint(8, 14))
        suites.append(renamed(header + "".join(parts), seed=n))
    return suites


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def speed(count: int, sample: int, compare: dict[str, Callable[[str, str], float]]) -> None:
    suites = class_of(count)
    pairs_total = count * (count - 1) // 2
    texts = [join_suite(f"s{n:03}", [("test_suite.py", s)]) for n, s in enumerate(suites)]
    boilerplate = flow.course_boilerplate(LAYOUT)
    flagged = len(flow.compare_suites(texts, boilerplate=boilerplate, threshold=0.5).pairs)
    print(f"\n{count} suites ({pairs_total} pairs, {flagged} at or above 0.5), "
          f"{sum(len(s) for s in suites) // count} characters each on average")
    print(f"{'method':<20} {'time':>9}  how")
    whole = min(_timed(lambda: flow.compare_suites(texts, boilerplate=boilerplate, threshold=0.5))
                for _ in range(REPEAT))
    print(f"{'copydetect':<20} {whole:>8.1f}s  measured whole (best of {REPEAT}): fingerprints once, every pair, "
          "course boilerplate")
    flow.GUARANTEE = flow.NOISE + 5
    try:
        winnowed = min(_timed(lambda: flow.compare_suites(texts, boilerplate=boilerplate, threshold=0.5))
                       for _ in range(REPEAT))
    finally:
        flow.GUARANTEE = flow.NOISE
    print(f"{'copydetect w=6':<20} {winnowed:>8.1f}s  measured whole (best of {REPEAT})")
    rng = random.Random(2)
    chosen = [tuple(rng.sample(range(count), 2)) for _ in range(sample)]
    with tempfile.TemporaryDirectory() as tmp:
        read = _timed(lambda: [_ast_tests(s, Path(tmp, str(n))) for n, s in enumerate(suites)])
        tests = [_ast_tests(s, Path(tmp, f"t{n}")) for n, s in enumerate(suites)]
    for name, how in (("ast joined", _joined), ("ast per test", _per_test)):
        paired = _timed(lambda: [how(tests[i], tests[j]) for i, j in chosen])
        print(f"{name:<20} {read + paired * pairs_total / sample:>8.1f}s  read whole ({read:.1f} s), "
              f"pairs scaled from {sample}")
    for name in ("difflib", "pycode_similar"):
        if name in compare:
            paired = _timed(lambda: [compare[name](suites[i], suites[j]) for i, j in chosen])
            print(f"{name:<20} {paired * pairs_total / sample:>8.1f}s  pairs scaled from {sample}")


def command(count: int) -> None:
    """``mutagrade similarity`` on ``count`` students, every fourth an archive."""
    suites = class_of(count)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, "submissions")
        for n, text in enumerate(suites):
            folder = Path(tmp, "work", f"student{n:03}", "tests")
            folder.mkdir(parents=True)
            (folder / "test_gru.py").write_text(text, encoding="utf-8")
            root.mkdir(exist_ok=True)
            if n % 4 == 0:
                with zipfile.ZipFile(root / f"student{n:03}.zip", "w") as archive:
                    archive.write(folder / "test_gru.py", "tests/test_gru.py")
            else:
                shutil.copytree(folder.parent, root / f"student{n:03}")
        took = math.inf
        for _ in range(REPEAT):
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "grader.cli", "similarity", str(root), "--format", "json",
                                   "--html", str(Path(tmp, "page.html"))], capture_output=True, text=True, cwd=ROOT)
            took = min(took, time.perf_counter() - start)
            assert done.returncode == 0, done.stderr
    flagged = len(json.loads(done.stdout)["pairs"])
    print(f"\nmutagrade similarity, {count} students ({count // 4 + (count % 4 > 0)} of them archives), "
          f"JSON and the page: {took:.1f} s, best of {REPEAT} ({flagged} pairs at or above 0.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", type=int, default=200)
    parser.add_argument("--sample", type=int, default=300, help="pairs timed for the methods that are not run whole")
    args = parser.parse_args()
    compare = methods()
    if "pycode_similar" not in compare:
        print("pycode_similar is not installed: its column is left out (pip install pycode_similar)\n")
    quality(compare)
    speed(args.suites, args.sample, compare)
    command(args.suites)


if __name__ == "__main__":
    main()
