"""The course's roster, read from the LMS's own export: a Canvas gradebook or people export, or a
Moodle participants or grades export; every refusal names the file, the line and the column."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from grader.core.roster import RosterEntry, RosterError, read_roster

CANVAS = (
    "Student,ID,SIS User ID,SIS Login ID,Section,L3.3 GRU (4711),Current Score\r\n"
    "    Points Possible,,,,,100.00,(read only)\r\n"
    '"Lovelace, Ada",101,S-001,ada ,Lab A,85,85\r\n'
    '"Hopper, Grace",102,S-002,ghopper,Lab B,,\r\n'
    '"Student, Test",103,,,Lab A,,\r\n'
    ",,,,,,\r\n"  # a blank line the spreadsheet left at the end
)

MOODLE = (
    "First name,Surname,ID number,Institution,Department,Email address,Assignment: L3.3 GRU (Real),"
    "Last downloaded from this course\n"
    "Ada,Lovelace,S-001,,,ada@uni.example,85.00,1765000000\n"
    "Mary Ann,van der Berg,,,,MAVDB@uni.example,-,1765000000\n"
)


def write(tmp_path: Path, text: str, name: str = "roster.csv", *, bom: bool = False) -> Path:
    path = tmp_path / name
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


# --------------------------------------------------------------------------- Canvas
def test_a_canvas_export_with_its_points_possible_row_and_a_bom(tmp_path: Path) -> None:
    roster = read_roster(write(tmp_path, CANVAS, bom=True))
    assert [e.login for e in roster] == ["ada", "ghopper", "103"]  # stripped; the test student by its ID
    ada = roster[0]
    assert ada == RosterEntry(login="ada", name="Lovelace, Ada", email=None, sis_id="S-001", lms_id="101",
                              section="Lab A")
    assert roster[1].section == "Lab B" and roster[2].sis_id is None


def test_a_canvas_export_falls_back_to_the_email_then_the_id(tmp_path: Path) -> None:
    text = ("Student,ID,SIS User ID,SIS Login ID,Email,Section\n"
            '"Lovelace, Ada",101,,,ada@uni.example,\n'
            '"Hopper, Grace",102,,,,\n')
    roster = read_roster(write(tmp_path, text))
    assert [(e.login, e.email) for e in roster] == [("ada@uni.example", "ada@uni.example"), ("102", None)]
    assert roster[0].section is None


def test_a_canvas_export_with_the_padded_points_possible_row_and_no_sis_columns(tmp_path: Path) -> None:
    text = 'Student,ID,Section,Quiz 1 (12)\n"    Points Possible",,,10\n"Lovelace, Ada",101,Lab A,7\n'
    [ada] = read_roster(write(tmp_path, text))
    assert (ada.login, ada.lms_id, ada.sis_id) == ("101", "101", None)


# --------------------------------------------------------------------------- Moodle
def test_a_moodle_grades_export(tmp_path: Path) -> None:
    roster = read_roster(write(tmp_path, MOODLE, bom=True))
    assert roster == [
        RosterEntry(login="ada@uni.example", name="Lovelace, Ada", email="ada@uni.example", sis_id="S-001",
                    lms_id=None, section=None),
        RosterEntry(login="MAVDB@uni.example", name="van der Berg, Mary Ann", email="MAVDB@uni.example",
                    sis_id=None, lms_id=None, section=None),
    ]


def test_a_moodle_participants_export_with_usernames(tmp_path: Path) -> None:
    text = ("First name,Last name,Username,ID number,Email address\n"
            "Ada,Lovelace, alovelace ,S-001,ada@uni.example\n"
            "Grace,Hopper,,S-002,grace@uni.example\n")
    roster = read_roster(write(tmp_path, text))
    assert [(e.login, e.email, e.sis_id) for e in roster] == [
        ("alovelace", "ada@uni.example", "S-001"), ("grace@uni.example", "grace@uni.example", "S-002")]


def test_a_semicolon_separated_export_is_read_too(tmp_path: Path) -> None:
    text = "First name;Last name;ID number;Email address\nAda;Lovelace;S-001;ada@uni.example\n"
    [ada] = read_roster(write(tmp_path, text))
    assert (ada.login, ada.name) == ("ada@uni.example", "Lovelace, Ada")


# ------------------------------------------------------------------------ refusals
def test_an_unknown_header_says_what_was_expected_and_what_was_found(tmp_path: Path) -> None:
    path = write(tmp_path, "name,login\nAda,ada\n")
    with pytest.raises(RosterError) as caught:
        read_roster(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:1: ")
    assert "Canvas" in text and "SIS Login ID" in text and "Moodle" in text and "Email address" in text
    assert "found: name, login" in text


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    with pytest.raises(RosterError, match=rf"{path}:1: .*found: nothing"):
        read_roster(path)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(RosterError, match=rf"{tmp_path / 'none.csv'}: no such roster file"):
        read_roster(tmp_path / "none.csv")


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "roster.csv"
    path.write_bytes("First name,Last name,ID number,Email address\nJos\xe9,M,1,j@x\n".encode("latin-1"))
    with pytest.raises(RosterError, match=rf"{path}: expected UTF-8 text"):
        read_roster(path)


def test_a_canvas_row_without_a_login_names_line_and_column(tmp_path: Path) -> None:
    text = 'Student,ID,SIS User ID,SIS Login ID,Section\n"Lovelace, Ada",101,,ada,\n"Hopper, Grace",,S-2,,Lab B\n'
    path = write(tmp_path, text)
    with pytest.raises(RosterError) as caught:
        read_roster(path)
    assert str(caught.value) == (
        f"{path}:3: column 'SIS Login ID': no login: expected a SIS Login ID, an email or an ID, found none")


def test_a_moodle_row_without_a_login_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "First name,Last name,ID number,Email address\nAda,Lovelace,S-001,\n")
    with pytest.raises(RosterError) as caught:
        read_roster(path)
    assert str(caught.value) == (
        f"{path}:2: column 'Email address': no login: expected a Username or an email, found none")


def test_two_rows_with_the_same_login_are_refused(tmp_path: Path) -> None:
    text = ("First name,Last name,Username,ID number,Email address\n"
            "Ada,Lovelace,ada,1,a@x\nGrace,Hopper,grace,2,g@x\nAda,King,ADA,3,k@x\n")
    path = write(tmp_path, text)
    with pytest.raises(RosterError) as caught:
        read_roster(path)
    assert str(caught.value) == (f"{path}:4: column 'Username': login 'ADA' repeats line 2's 'ada' "
                                 "(logins are matched whatever their case)")


def test_a_login_over_100_characters_is_refused(tmp_path: Path) -> None:
    login = "a" * 101
    path = write(tmp_path, f"Student,ID,SIS Login ID\n\"Lovelace, Ada\",1,{login}\n")
    with pytest.raises(RosterError) as caught:
        read_roster(path)
    assert str(caught.value) == (
        f"{path}:2: column 'SIS Login ID': expected a login of at most 100 characters, got 101")


def test_a_roster_entry_is_a_value() -> None:
    entry = RosterEntry(login="ada", name="Lovelace, Ada", email=None, sis_id=None, lms_id=None, section=None)
    with pytest.raises(ValidationError):
        entry.login = "grace"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        RosterEntry(login="", name="", email=None, sis_id=None, lms_id=None, section=None)


CANVAS_HEAD = "Student,ID,SIS User ID,SIS Login ID,Section\n"


@pytest.mark.parametrize(("row", "problem"), [
    ('"Lovelace, Ada",1,S1,ada,' + "Lab A and " * 20 + "\n", "roster.csv:2: section: expected at most 100 characters"),
    ('"' + "Lovelace" * 30 + ', Ada",1,S1,ada,Lab\n', "roster.csv:2: name: expected at most 200 characters"),
    ('"Lovelace, Ada",1,S1,ada,Lab\x00A\n', "roster.csv:2: column 'Section': expected text, found a NUL character"),
])
def test_a_cell_the_service_could_not_store_is_refused_naming_line_and_field(
        tmp_path: Path, row: str, problem: str) -> None:
    with pytest.raises(RosterError, match=problem.replace("(", r"\(")):
        read_roster(write(tmp_path, CANVAS_HEAD + row))


def test_a_row_the_csv_module_cannot_read_is_refused_naming_its_line(tmp_path: Path) -> None:
    import csv

    huge = "x" * (csv.field_size_limit() + 10)
    with pytest.raises(RosterError, match=r"roster.csv:\d+: not a CSV row"):
        read_roster(write(tmp_path, CANVAS_HEAD + f'"Lovelace, Ada",1,S1,ada,"{huge}"\n'))
