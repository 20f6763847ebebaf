"""Gradebook exports: Canvas's and Moodle's import formats and a plain CSV, read back with the
csv module; a cell a spreadsheet would compute is written as text."""

from __future__ import annotations

import csv
import io

import pytest
from pydantic import ValidationError

from grader.core.roster import RosterEntry
from grader.report.gradebook import GradeRow, render_gradebook

ADA = RosterEntry(login="ada", name="Lovelace, Ada", email="ada@uni.example", sis_id="S-001", lms_id="101",
                  section="Lab A")
GRACE = RosterEntry(login="ghopper", name="Hopper, Grace", email="grace@uni.example", sis_id="S-002", lms_id="102",
                    section="Lab B")
MALLORY = RosterEntry(login="mallory", name='=HYPERLINK("http://evil.example","x")', email=None, sis_id=None,
                      lms_id="103", section=None)
LONER = RosterEntry(login="loner", name="", email=None, sis_id=None, lms_id=None, section=None)

ROWS = [
    GradeRow(entry=ADA, points=41.666666, penalty_points=0.0, final_points=41.666666, submission="ada",
             status="not passed"),
    GradeRow(entry=GRACE, points=100.0, penalty_points=20.0, final_points=80.0, submission="ghopper",
             status="passed, late, 2 days"),
    GradeRow(entry=MALLORY, points=None, final_points=None, status="no submission"),
    GradeRow(entry=LONER, points=12.5, final_points=12.5, submission="loner", status="not passed"),
]


def parse(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_canvas_has_its_header_the_points_possible_row_and_the_final_points() -> None:
    text = render_gradebook(ROWS, fmt="canvas", assignment_title="L3.3 GRU", points_possible=100)
    rows = parse(text)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "L3.3 GRU"]
    assert rows[1] == ["Points Possible", "", "", "", "", "100"]
    assert rows[2] == ["Lovelace, Ada", "101", "S-001", "ada", "Lab A", "41.67"]
    assert rows[3] == ["Hopper, Grace", "102", "S-002", "ghopper", "Lab B", "80"]
    assert rows[4] == ["'=HYPERLINK(\"http://evil.example\",\"x\")", "103", "", "mallory", "", ""]  # text, no grade
    assert rows[5] == ["", "", "", "loner", "", "12.5"]
    assert len(rows) == 6


def test_moodle_has_names_email_id_number_grade_and_feedback() -> None:
    text = render_gradebook(ROWS, fmt="moodle", assignment_title="L3.3 GRU", points_possible=100)
    rows = parse(text)
    assert rows[0] == ["First name", "Last name", "Email address", "ID number", "L3.3 GRU", "Feedback"]
    assert rows[1] == ["Ada", "Lovelace", "ada@uni.example", "S-001", "41.67", "not passed"]
    assert rows[2] == ["Grace", "Hopper", "grace@uni.example", "S-002", "80",
                       "passed, late, 2 days; late penalty: 20 of 100 points"]
    assert rows[3][2:] == ["", "", "", "no submission"]
    assert rows[3][0].startswith("'=")  # a name that would be a formula stays text
    assert rows[4][:2] == ["", ""]


def test_the_plain_csv_has_every_column() -> None:
    text = render_gradebook(ROWS, fmt="csv", assignment_title="L3.3 GRU", points_possible=100)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert list(rows[0]) == ["student", "name", "email", "submission", "status", "points", "late_penalty",
                             "final_points"]
    assert rows[1] == {"student": "ghopper", "name": "Hopper, Grace", "email": "grace@uni.example",
                       "submission": "ghopper", "status": "passed, late, 2 days", "points": "100",
                       "late_penalty": "20", "final_points": "80"}
    assert rows[0]["points"] == "41.67" and rows[0]["late_penalty"] == "0"
    assert (rows[2]["submission"], rows[2]["points"], rows[2]["final_points"]) == ("", "", "")


def test_numbers_have_at_most_two_decimals_and_points_possible_too() -> None:
    row = GradeRow(entry=ADA, points=33.3333, penalty_points=3.3333, final_points=30.0, submission="ada",
                   status="passed, late, 1 day")
    rows = parse(render_gradebook([row], fmt="canvas", assignment_title="T", points_possible=12.345))
    assert rows[1][-1] == "12.35" and rows[2][-1] == "30"
    plain = list(csv.DictReader(io.StringIO(render_gradebook([row], fmt="csv", assignment_title="T",
                                                             points_possible=12.345), newline="")))
    assert (plain[0]["points"], plain[0]["late_penalty"]) == ("33.33", "3.33")


def test_a_title_that_would_be_a_formula_is_text() -> None:
    rows = parse(render_gradebook(ROWS[:1], fmt="canvas", assignment_title="=1+2", points_possible=100))
    assert rows[0][-1] == "'=1+2"


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="fmt: expected 'csv', 'canvas' or 'moodle', got 'xlsx'"):
        render_gradebook(ROWS, fmt="xlsx", assignment_title="T", points_possible=100)  # type: ignore[arg-type]


def test_a_grade_row_is_a_value_and_refuses_negative_points() -> None:
    with pytest.raises(ValidationError):
        ROWS[0].status = "passed"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="points"):
        GradeRow(entry=ADA, points=-1.0, final_points=0.0, status="not passed")
