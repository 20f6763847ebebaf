"""``mutagrade similarity``: students' suites compared pair by pair (winnowed fingerprints, as
MOSS does), the course tests left out as boilerplate, every submission opened as an intake does."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli import main
from grader.core.similarity import FILE_HEADER, SimilarityResult, SuiteText, join_suite
from grader.core.paths import default_layout
from grader.flows.similarity import compare_suites, course_boilerplate, read_suite, read_suites
from grader.report.similarity_html import render_similarity_html
from tests.disguise import disguise

LAYOUT = default_layout()
STUDENT = (LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru" / "test_gru.py").read_text(encoding="utf-8")
PROPERTIES = (LAYOUT.course_tests / "test_gru_properties.py").read_text(encoding="utf-8")
SCRIPT = "</script><script>alert(1)</script>"
THRESHOLD = 0.5

CAROL = '''"""Shapes and batches, my own."""

import numpy as np

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU, GRUCell


def test_sequence_output_has_one_row_per_step():
    net = GRU(2, 3)
    seq = Tensor(np.ones((5, 4, 2)))
    outputs, last = net(seq)
    assert outputs.data.shape == (5, 4, 3)
    assert last.data.shape == (1, 4, 3)


def test_rows_of_a_batch_do_not_mix():
    cell = GRUCell(2, 2)
    pair = np.array([[1.0, 2.0], [3.0, -1.0]])
    together = cell(Tensor(pair)).data
    alone = cell(Tensor(pair[1:])).data
    assert np.allclose(together[1:], alone)


def test_the_last_output_is_the_final_state():
    net = GRU(4, 2, num_layers=1)
    seq = Tensor(np.linspace(-1.0, 1.0, 24).reshape(3, 2, 4))
    outputs, last = net(seq)
    assert np.allclose(outputs.data[-1], last.data[0])


def test_a_longer_run_stays_bounded():
    net = GRU(1, 1)
    seq = Tensor(np.full((50, 1, 1), 100.0))
    outputs, _ = net(seq)
    assert np.all(np.abs(outputs.data) <= 1.0)
'''

DAVE = '''import math

import numpy as np
import pytest

from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def finite_difference(f, value, eps=1e-6):
    grad = np.zeros_like(value)
    for index in np.ndindex(*value.shape):
        bumped = value.copy()
        bumped[index] += eps
        lowered = value.copy()
        lowered[index] -= eps
        grad[index] = (f(bumped) - f(lowered)) / (2 * eps)
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


def student(folder: Path, files: dict[str, str]) -> None:
    tests = folder / "tests"
    tests.mkdir(parents=True)
    for name, text in files.items():
        (tests / name).write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def submissions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six students: alice's honest suite and bob's disguised copy of it (holding a script in
    a comment), carol's and dave's honest suites, erin and frank handing in a course test file
    each, and gina's broken archive."""
    root = tmp_path_factory.mktemp("submissions")
    student(root / "alice", {"test_gru.py": STUDENT})
    student(root / "bob", {"test_cells.py": disguise(STUDENT, comment=SCRIPT)})
    student(root / "carol", {"test_shapes.py": CAROL})
    student(root / "dave", {"test_gradients.py": DAVE})
    student(root / "erin", {"test_gru_properties.py": PROPERTIES})
    student(root / "frank", {"test_mine.py": "# my tests\n" + PROPERTIES.replace("    ", "  ")})
    (root / "gina.zip").write_bytes(b"PK\x03\x04 this is no zip at all")
    return root


@pytest.fixture(scope="module")
def command(submissions: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[SimilarityResult, str]:
    """``mutagrade similarity --format json --html``, run once as a command of its own."""
    page = tmp_path_factory.mktemp("page") / "similar.html"
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "similarity", str(submissions), "--threshold", str(THRESHOLD),
         "--format", "json", "--html", str(page)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return SimilarityResult.model_validate_json(done.stdout), page.read_text(encoding="utf-8")


def pair(result: SimilarityResult, a: str, b: str):
    return next((p for p in result.pairs if {p.a, p.b} == {a, b}), None)


def test_a_renamed_and_reformatted_copy_is_found_with_both_names(command) -> None:
    result, _ = command
    found = pair(result, "alice", "bob")
    assert found is not None, [(p.a, p.b, p.similarity) for p in result.pairs]
    assert (found.a, found.b) == ("alice", "bob")
    assert found.similarity >= 0.8
    assert found.similarity == pytest.approx(max(found.similarity_a, found.similarity_b), abs=1e-9)
    assert found.overlap > 500
    assert found.regions_a and found.regions_b
    assert {r.file for r in found.regions_a} == {"test_gru.py"}
    assert {r.file for r in found.regions_b} == {"test_cells.py"}
    assert all(1 <= r.first_line <= r.last_line and r.start < r.end for r in found.regions_a + found.regions_b)
    assert result.pairs[0] == found  # the most similar first


def test_honest_distinct_suites_stay_below_the_threshold(command) -> None:
    result, _ = command
    assert result.threshold == pytest.approx(THRESHOLD)
    assert sorted(result.students) == ["alice", "bob", "carol", "dave", "erin", "frank"]
    flagged = {frozenset((p.a, p.b)) for p in result.pairs}
    assert flagged == {frozenset(("alice", "bob"))}
    assert all(p.similarity >= THRESHOLD for p in result.pairs)


def test_suites_repeating_the_course_tests_are_not_flagged_against_each_other(submissions: Path) -> None:
    suites, _ = read_suites(submissions, tests=LAYOUT.student_tests)
    erin_frank = [s for s in suites if s.student in ("erin", "frank")]
    with_course = compare_suites(erin_frank, boilerplate=course_boilerplate(LAYOUT), threshold=0.0)
    without = compare_suites(erin_frank, boilerplate=[], threshold=0.0)
    assert without.pairs and without.pairs[0].similarity > 0.9  # alike indeed ...
    assert not with_course.pairs or with_course.pairs[0].similarity < 0.1  # ... but only in the course's code


def test_a_broken_archive_is_skipped_and_named_with_its_reason(command) -> None:
    result, _ = command
    [skipped] = result.skipped
    assert skipped.student == "gina"
    assert "gina.zip" in skipped.reason and "zip" in skipped.reason.lower()
    assert "gina" not in result.students


def test_the_page_escapes_what_a_student_wrote(command) -> None:
    _, page = command
    assert "<script" not in page.lower()
    unmarked = re.sub(r"</?mark[^>]*>", "", page)
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in unmarked
    assert "alice" in page and "bob" in page and "<mark" in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", page)  # nothing loaded from elsewhere


def test_the_suite_text_joins_files_in_name_order(tmp_path: Path) -> None:
    student(tmp_path / "zoe", {"test_b.py": "def test_b():\n    assert 2\n", "test_a.py": "def test_a():\n    assert 1\n",
                                "helpers.py": "X = 1\n"})
    suite = read_suite(tmp_path / "zoe" / "tests", student="zoe")
    assert isinstance(suite, SuiteText) and suite.student == "zoe"
    headers = [line for line in suite.text.splitlines() if line.startswith(FILE_HEADER)]
    assert headers == [f"{FILE_HEADER}helpers.py", f"{FILE_HEADER}test_a.py", f"{FILE_HEADER}test_b.py"]
    assert suite.text.index("def test_a") < suite.text.index("def test_b")


def test_regions_name_the_file_and_its_own_lines() -> None:
    alice = join_suite("alice", [("test_gru.py", STUDENT), ("test_a_shapes.py", CAROL)])
    bob = join_suite("bob", [("test_mine.py", STUDENT)])
    [found] = compare_suites([bob, alice], boilerplate=course_boilerplate(LAYOUT), threshold=THRESHOLD).pairs
    assert (found.a, found.b) == ("alice", "bob")
    assert found.similarity_b > 0.95 > found.similarity_a  # all of bob's suite is in alice's, not the reverse
    own = STUDENT.splitlines()
    for region in found.regions_a:
        assert region.file == "test_gru.py"
        first = alice.text[region.start:region.end].splitlines()[0]
        assert first in own[region.first_line - 1]  # the line the file itself numbers so
        assert region.last_line <= len(own)


def test_the_text_format_is_a_table_naming_both_and_the_skipped(submissions: Path, capsys) -> None:
    assert main(["similarity", str(submissions), "--threshold", str(THRESHOLD)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "alice" in line and "bob" in line)
    assert re.search(r"\b\d{2,3}(\.\d)?%", row)
    assert "gina" in out and "skipped" in out


def test_the_page_renders_without_pairs_too() -> None:
    empty = SimilarityResult(threshold=0.5, students=["a"], pairs=[], skipped=[])
    page = render_similarity_html(empty, [SuiteText(student="a", text="x = 1\n")])
    assert page.startswith("<!DOCTYPE html>") and "no pair" in page.lower()


def test_a_missing_folder_is_exit_2(tmp_path: Path) -> None:
    assert main(["similarity", str(tmp_path / "nowhere")]) == 2
