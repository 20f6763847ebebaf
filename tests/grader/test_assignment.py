"""The assignment file: thresholds and limits come from TOML, errors name the field."""

from __future__ import annotations

import pytest

from grader.core.assignment import AssignmentError, load_assignment
from grader.core.paths import default_layout
from grader.run.runner import RunLimits


def test_the_shipped_assignment_has_the_course_threshold():
    assignment = load_assignment(default_layout().assignment)
    assert assignment.threshold == 0.70
    assert assignment.allow_invalid_tests is False
    limits = RunLimits.of(assignment, jobs=1)
    assert limits.jobs == 1 and limits.limits == assignment.limits and limits.limits.test_timeout_s == 10.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('name = "x"\nthreshold = 1.5\n', "field threshold"),
        ('name = "x"\n', "field threshold"),
        ('name = "x"\nthreshold = 0.7\ncolour = 1\n', "field colour"),
        ('name = "x"\nthreshold = 0.7\n[limits]\ntest_timeout_s = -1\n', "field limits.test_timeout_s"),
        ("threshold = [", "not valid TOML"),
        ('name = "x"\nthreshold = 0.7\ncopy_similarity = 0\n', "field copy_similarity"),
        ('name = "x"\nthreshold = 0.7\ngiven_tests = ["test a"]\n', "field given_tests: .*test_x or test_file.py::test_x"),
    ],
)
def test_bad_assignments_name_the_file_and_field(tmp_path, text, expected):
    path = tmp_path / "assignment.toml"
    path.write_text(text)
    with pytest.raises(AssignmentError, match=expected) as info:
        load_assignment(path)
    assert str(path) in str(info.value)


def test_a_missing_assignment_file_is_named(tmp_path):
    with pytest.raises(AssignmentError, match="no such assignment file"):
        load_assignment(tmp_path / "none.toml")
