"""Copies of the course tests: a test's likeness to the closest course test, read statically."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.core.assignment import AssignmentError, load_assignment
from grader.core.copies import (
    MAX_SUITE_BYTES,
    CopyCheck,
    CourseTestsError,
    Likeness,
    find_copies,
    read_tests,
    similarity,
)
from grader.core.paths import default_layout
from tests.disguise import disguise

LAYOUT = default_layout()
ASSIGNMENT = load_assignment(LAYOUT.assignment)
PROPERTIES = LAYOUT.course_tests / "test_gru_properties.py"
HONEST = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
HAND = "test_hand_example_gru_cell"


def check(folder: Path, *, given: tuple[str, ...] = ASSIGNMENT.given_tests) -> CopyCheck:
    return find_copies(folder, course_tests=LAYOUT.course_tests, label="assignments/l3-3-gru/tests",
                       threshold=ASSIGNMENT.copy_similarity, given=given)


def suite(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "tests"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def course_test_names() -> list[str]:
    return [t.split("::")[-1] for t in read_tests(LAYOUT.course_tests, limit=None)
            if t.startswith(PROPERTIES.name)]


def test_the_assignment_sets_the_threshold_and_the_given_test():
    assert ASSIGNMENT.copy_similarity == 0.8
    assert ASSIGNMENT.given_tests == (HAND,)


def test_an_unchanged_copy_of_the_course_tests_is_a_copy_of_each(tmp_path):
    folder = suite(tmp_path, {"test_gru.py": PROPERTIES.read_text()})
    found = {like.test: like for like in check(folder).tests}
    for name in course_test_names():
        like = found[f"test_gru.py::{name}"]
        if name == HAND:  # handed out: not compared with itself
            assert not like.copied and not like.course_test.endswith(f"::{HAND}")
            continue
        assert like.similarity == 1.0 and like.copied
        assert like.course_test == f"assignments/l3-3-gru/tests/test_gru_properties.py::{name}"
        assert like.reason == (f"copied from the course tests: assignments/l3-3-gru/tests/test_gru_properties.py::{name} "
                               "(similarity 1.00)")


def test_a_copy_renamed_reformatted_and_reordered_reads_as_the_same_test(tmp_path):
    disguised = disguise(PROPERTIES.read_text(), reverse=True)
    assert "def test_lengths_keep_padding_out" not in disguised and "_random_state_dict" not in disguised
    folder = suite(tmp_path, {"test_mine.py": disguised})
    likes = check(folder, given=()).tests
    assert len(likes) == len(course_test_names())
    assert all(like.similarity == 1.0 and like.copied for like in likes), likes
    assert {like.course_test.rsplit("::", 1)[-1] for like in likes} == set(course_test_names())


def test_a_copy_of_a_golden_test_with_its_fixtures_in_a_helper_file_is_found(tmp_path):
    """The course's golden tests take fixtures from its conftest; a copy that moves them (and
    the helpers) into a file of its own, imported, is the same test."""
    golden = (LAYOUT.course_tests / "test_gru_golden.py").read_text()
    conftest = (LAYOUT.course_tests / "conftest.py").read_text()
    helpers, _, tests = golden.partition("def test_matches_torch_cell")
    body = "def test_matches_torch_cell" + tests.split("\ndef test_", 1)[0]
    folder = suite(tmp_path, {
        "helpers.py": helpers + conftest,
        "test_cell.py": "from helpers import *\n\n" + body.replace("def test_matches_torch_cell", "def test_it"),
    })
    (like,) = check(folder).tests
    assert like.copied and like.similarity >= 0.9, like
    assert like.course_test == "assignments/l3-3-gru/tests/test_gru_golden.py::test_matches_torch_cell"


def test_a_copy_whose_body_moved_into_a_helper_is_still_a_copy(tmp_path):
    source = PROPERTIES.read_text()
    moved = source.replace("def test_update_gate_near_one_keeps_the_state():",
                           "def test_keeps():\n    check_gate()\n\n\ndef check_gate():")
    folder = suite(tmp_path, {"test_moved.py": moved})
    like = next(t for t in check(folder).tests if t.test == "test_moved.py::test_keeps")
    assert like.copied and like.course_test.endswith("::test_update_gate_near_one_keeps_the_state")


def test_the_bundled_students_own_tests_are_no_copies():
    likes = check(HONEST).tests
    assert len(likes) == 10
    assert max(like.similarity for like in likes) < 0.7 < ASSIGNMENT.copy_similarity, likes
    assert not any(like.copied for like in likes)


def test_the_given_hand_example_is_allowed_and_other_course_tests_are_not(tmp_path):
    """The handed-out first test as the chapter prints it, and the course's own hand example:
    both allowed as given; without given_tests the course's own is a copy."""
    handout = (HONEST / "test_gru.py").read_text().split("\ndef test_hand_example_gradient", 1)[0]
    folder = suite(tmp_path, {"test_handout.py": handout, "test_course.py": PROPERTIES.read_text()})
    found = {like.test: like for like in check(folder).tests}
    assert not found[f"test_handout.py::{HAND}"].copied
    assert not found[f"test_course.py::{HAND}"].copied
    assert found["test_course.py::test_gradcheck_gru_cell"].copied
    ungiven = {like.test: like for like in check(folder, given=()).tests}
    assert ungiven[f"test_course.py::{HAND}"].copied


def test_a_given_test_must_be_a_course_test():
    with pytest.raises(CourseTestsError, match="given_tests: 'test_no_such_thing' names no test") as info:
        check(HONEST, given=("test_no_such_thing",))
    assert isinstance(info.value, AssignmentError)
    assert not check(HONEST, given=(f"test_gru_properties.py::{HAND}",)).tests[0].copied


def test_tests_in_classes_and_parametrized_ids_are_found(tmp_path):
    source = PROPERTIES.read_text().replace(
        "def test_dropout_between_layers_only():",
        "class TestGru:\n    def test_dropout(self):\n        dropout_body()\n\n\ndef dropout_body():",
    )
    folder = suite(tmp_path, {"test_cls.py": source})
    found = check(folder)
    like = found.likeness("test_cls.py::TestGru::test_dropout[case-1]")
    assert like is not None and like.copied and like.course_test.endswith("::test_dropout_between_layers_only")
    assert found.not_run("test_cls.py::TestGru::test_dropout") == "not run: copied from the course tests"
    assert found.likeness("test_other.py::test_x") is None and found.not_run("test_other.py::test_x") is None


def test_the_similarity_ignores_names_strings_and_formatting_not_numbers(tmp_path):
    texts = {
        "one": "import numpy as np\n\ndef test_a():\n    x = np.ones(3)  # ones\n    assert x.sum() == 3, 'three'\n",
        "two": 'import numpy\n\ndef test_b():\n    """Doc."""\n    y   = numpy.ones( 3 )\n    assert y.sum() == 3.0\n',
        "three": "import numpy as np\n\ndef test_a():\n    x = np.ones(4)\n    assert x.sum() == 4\n",
    }
    read = {}
    for name, text in texts.items():
        (read[name],) = read_tests(suite(tmp_path / name, {"test_x.py": text})).values()
    assert read["one"] == read["two"]
    assert similarity(read["one"], read["two"]) == 1.0
    assert similarity(read["one"], read["three"]) < 1.0


def test_a_suite_too_large_to_read_whole_is_compared_as_far_as_it_was_read(tmp_path):
    filler = "def test_filler_{n}():\n    assert [{n}] * 3 == [{n}, {n}, {n}]\n\n"
    one_file = "".join(filler.format(n=n) for n in range(200 * 1024 // len(filler)))
    files = {f"test_filler_{k}.py": one_file for k in range(MAX_SUITE_BYTES // len(one_file) + 1)}
    folder = suite(tmp_path, {**files, "test_copy.py": PROPERTIES.read_text()})
    found = check(folder)
    assert any(like.copied for like in found.tests)  # the smaller files are read first
    read = {like.test.split("::")[0] for like in found.tests}
    assert "test_copy.py" in read and not set(files) <= read


def test_a_likeness_is_data():
    like = Likeness(test="test_a.py::test_b", similarity=0.9, course_test="reference/tests/x.py::test_y", copied=True)
    assert CopyCheck.model_validate_json(CopyCheck(threshold=0.8, tests=[like]).model_dump_json()).tests == [like]


def test_the_compiled_matcher_gives_difflibs_ratio_on_every_pair_of_real_tests():
    """The comparison runs on cydifflib (difflib's algorithm, compiled): each figure is the one
    ``difflib.SequenceMatcher`` gives, for every pair of the bundled student's and the course's tests."""
    import difflib

    import grader.core.copies as copies

    assert copies.SequenceMatcher.__module__.startswith("cydifflib")
    course = read_tests(LAYOUT.course_tests, limit=None)
    mine = read_tests(HONEST)
    pairs = [(a, b) for a in mine.values() for b in course.values()] + [(a, b) for a in course.values()
                                                                        for b in course.values()]
    assert len(pairs) >= 100
    for a, b in pairs:
        assert similarity(a, b) == difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def test_the_course_tests_are_read_once_and_again_when_a_file_changes(tmp_path):
    from grader.core.copies import course_tokens

    course = suite(tmp_path / "course", {"test_c.py": "def test_a():\n    assert abs(-1) == 1\n"})
    first = course_tokens(course)
    assert course_tokens(course) is first  # read once per process
    (course / "test_c.py").write_text("def test_a():\n    assert abs(-2) == 2\n\n\ndef test_b():\n    assert 1\n")
    again = course_tokens(course)
    assert again is not first and set(again) == {"test_c.py::test_a", "test_c.py::test_b"}
    mine = suite(tmp_path / "mine", {"test_m.py": "def test_b():\n    assert 1\n"})
    check = find_copies(mine, course_tests=course, label="course", threshold=0.8)
    assert [(like.course_test, like.copied) for like in check.tests] == [("course/test_c.py::test_b", True)]


def test_odd_tokens_compare_as_difflib_compares_them_and_a_disguised_copy_is_still_found(tmp_path):
    """A hostile suite's tokens (names outside the BMP and in other scripts, infinite and huge
    numbers, long names, deep nesting) go through the compiled matcher as they go through
    difflib's, and a course test disguised beside them is still a copy."""
    import difflib

    import grader.core.copies as copies

    names = ["𝔵𝔵", "переменная", "x" * 5000, "ℌ"]
    odd = "\n".join([
        "import numpy as np",
        "",
        "def test_odd():",
        *(f"    {name} = {value}" for name, value in zip(names, ("1e999", "-1e999", "10**400", "0x" + "f" * 200))),
        "    assert " + "(" * 40 + "1" + ")" * 40 + " == 1",
        f"    assert np.isfinite({names[2]}) or {names[0]} > {names[1]}",
        "",
    ])
    copied = disguise(PROPERTIES.read_text(), comment="# 𝔣𝔬𝔬 переменная", reverse=True)
    folder = suite(tmp_path, {"test_odd.py": odd, "test_copied.py": copied})
    course = read_tests(LAYOUT.course_tests, limit=None)
    for tokens in read_tests(folder).values():
        for theirs in course.values():
            assert copies.similarity(tokens, theirs) == difflib.SequenceMatcher(None, tokens, theirs, autojunk=False).ratio()
    found = {like.test: like for like in check(folder, given=()).tests}
    assert not found["test_odd.py::test_odd"].copied
    disguised = [like for test_id, like in found.items() if test_id.startswith("test_copied.py::")]
    assert len(disguised) == len(course_test_names())
    assert all(like.similarity == 1.0 and like.copied for like in disguised), disguised
