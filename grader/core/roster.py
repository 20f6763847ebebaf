"""The course's roster, read from the LMS's own CSV export (Canvas or Moodle).

Staff download it as it comes: a Canvas gradebook or people export (``Student`` as "Last,
First", ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``; its "Points Possible" row and
its assignment columns are passed over), or a Moodle participants or grades export (``First
name``, ``Last name`` or ``Surname``, ``ID number``, ``Email address``, optionally
``Username``). The header says which. Each student's login is what a submission folder is
named after: Canvas's SIS Login ID (else the email, else the Canvas ID), Moodle's username
(else the email). Logins are matched whatever their case, so two rows whose logins differ only
in case are refused like two with the same login.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MAX_LOGIN", "RosterEntry", "RosterError", "read_roster"]

MAX_LOGIN = 100  # characters
_CANVAS_EXPECTED = "a Canvas export (Student, ID, SIS User ID, SIS Login ID, Section)"
_MOODLE_EXPECTED = "a Moodle export (First name, Last name or Surname, ID number, Email address, optionally Username)"
_EMAIL_COLUMNS = ("Email address", "Email", "E-mail")


class RosterError(ValueError):
    """The roster cannot be read; the message names the file, the line and the column."""


class RosterEntry(BaseModel):
    """One student of the course.

    ``name`` is "Last, First", as Canvas writes it (Moodle's first and last names are joined
    so), so that either LMS's format can be written back; ``lms_id`` is Canvas's own user ID.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    login: str = Field(min_length=1)
    name: str
    email: str | None
    sis_id: str | None
    lms_id: str | None
    section: str | None


def _delimiter(first_line: str) -> str:
    """The separator of an export saved by a spreadsheet in a comma-decimal locale too."""
    return max((",", ";", "\t"), key=first_line.count)


def _format(header: list[str]) -> Literal["canvas", "moodle"] | None:
    names = set(header)
    if {"Student", "ID"} <= names:
        return "canvas"
    if {"First name", "Email address"} <= names and names & {"Last name", "Surname"}:
        return "moodle"
    return None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise RosterError(f"{path}: no such roster file") from None
    except UnicodeDecodeError as exc:
        raise RosterError(
            f"{path}: expected UTF-8 text (export the CSV as UTF-8), found byte 0x{exc.object[exc.start]:02x} "
            f"at byte {exc.start}") from None
    except OSError as exc:
        raise RosterError(f"{path}: cannot be read: {exc.strerror or exc}") from None


class _NoLogin(Exception):
    """A row without a login: the column it was expected in, and the problem."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(problem)
        self.column = column
        self.problem = problem


class _Row:
    """One line of the export, its cells by column name."""

    def __init__(self, header: list[str], cells: list[str], line: int) -> None:
        self.cells = {name: cells[i].strip() for i, name in enumerate(header) if i < len(cells) and name}
        self.line = line

    def get(self, *columns: str) -> str | None:
        """The first of ``columns`` with a value in this row, or None."""
        return next((self.cells[c] for c in columns if self.cells.get(c)), None)

    def column(self, *columns: str) -> str:
        """The first of ``columns`` with a value, or the first named: where a login came from."""
        return next((c for c in columns if self.cells.get(c)), columns[0])


def _canvas_entry(row: _Row) -> tuple[RosterEntry, str] | None:
    student = row.get("Student") or ""
    if student.strip() == "Points Possible":
        return None
    email = row.get(*_EMAIL_COLUMNS)
    sources = ("SIS Login ID", *_EMAIL_COLUMNS, "ID")
    login = row.get(*sources)
    if login is None:
        raise _NoLogin("SIS Login ID", "no login: expected a SIS Login ID, an email or an ID, found none")
    entry = RosterEntry(login=login, name=student, email=email, sis_id=row.get("SIS User ID"), lms_id=row.get("ID"),
                        section=row.get("Section"))
    return entry, row.column(*sources)


def _moodle_entry(row: _Row) -> tuple[RosterEntry, str]:
    first, last = row.get("First name") or "", row.get("Last name", "Surname") or ""
    email = row.get(*_EMAIL_COLUMNS)
    sources = ("Username", "Email address")
    login = row.get(*sources)
    if login is None:
        column = "Username" if "Username" in row.cells else "Email address"
        raise _NoLogin(column, "no login: expected a Username or an email, found none")
    name = f"{last}, {first}" if first and last else last or first
    entry = RosterEntry(login=login, name=name, email=email, sis_id=row.get("ID number"), lms_id=None, section=None)
    return entry, row.column(*sources)


# The most characters a roster's field may hold: what the service stores of it.
FIELD_LIMITS = {"name": 200, "email": 254, "sis_id": 100, "lms_id": 100, "section": 100}


def _rows(reader, path: Path):
    """The reader's rows; a row the csv module cannot read is a RosterError naming its line."""
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise RosterError(f"{path}:{reader.line_num}: not a CSV row: {exc}") from None
        yield cells


def _check_cells(header: list[str], cells: list[str], path: Path, line: int) -> None:
    for index, cell in enumerate(cells):
        if "\x00" in cell:
            column = header[index] if index < len(header) else f"column {index + 1}"
            raise RosterError(f"{path}:{line}: column {column!r}: expected text, found a NUL character")


def _check_lengths(entry: "RosterEntry", path: Path, line: int) -> None:
    for field, limit in FIELD_LIMITS.items():
        value = getattr(entry, field)
        if value is not None and len(value) > limit:
            raise RosterError(f"{path}:{line}: {field}: expected at most {limit} characters, got {len(value)}")


def read_roster(path: Path) -> list[RosterEntry]:
    """The students of a Canvas or Moodle CSV export, in the file's order.

    A row with no name and no identifier (a blank line a spreadsheet left) is passed over.

    Raises:
        RosterError: the file is missing or not UTF-8, its header is neither LMS's, a row has
            no login, a login is longer than :data:`MAX_LOGIN` characters, or two rows have the
            same login (whatever its case); the message names file, line and column.
    """
    text = _read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text.split("\n", 1)[0]))
    header = [cell.strip() for cell in next(reader, [])]
    kind = _format(header)
    if kind is None:
        found = ", ".join(name for name in header if name) or "nothing"
        raise RosterError(f"{path}:1: not a roster: expected {_CANVAS_EXPECTED} or {_MOODLE_EXPECTED}; "
                          f"found: {found}")
    entries: list[RosterEntry] = []
    seen: dict[str, tuple[str, int]] = {}  # casefolded login -> (login, line)
    for cells in _rows(reader, path):
        _check_cells(header, cells, path, reader.line_num)
        row = _Row(header, cells, reader.line_num)
        if not any(row.cells.values()) or (kind == "canvas" and not row.get(
                "Student", "ID", "SIS User ID", "SIS Login ID", *_EMAIL_COLUMNS)):
            continue
        try:
            read = _canvas_entry(row) if kind == "canvas" else _moodle_entry(row)
        except _NoLogin as exc:
            raise RosterError(f"{path}:{row.line}: column {exc.column!r}: {exc.problem}") from None
        if read is None:
            continue
        entry, column = read
        _check_lengths(entry, path, row.line)
        if len(entry.login) > MAX_LOGIN:
            raise RosterError(f"{path}:{row.line}: column {column!r}: expected a login of at most {MAX_LOGIN} "
                              f"characters, got {len(entry.login)}")
        key = entry.login.casefold()
        if key in seen:
            prior, line = seen[key]
            raise RosterError(f"{path}:{row.line}: column {column!r}: login {entry.login!r} repeats line {line}'s "
                              f"{prior!r} (logins are matched whatever their case)")
        seen[key] = (entry.login, row.line)
        entries.append(entry)
    return entries
