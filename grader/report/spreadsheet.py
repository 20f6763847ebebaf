"""CSV for spreadsheets: the gradebooks (``grade-batch`` and the service's ``/v1/gradebook.csv``).

Student names, folder names and problem messages reach these cells, and a spreadsheet computes
a cell that starts with ``=``, ``+``, ``-`` or ``@`` (or with a tab or a carriage return before
one): ``=HYPERLINK(...)`` in a student name would become a live link in the staff's gradebook.
Every cell is written through :func:`spreadsheet_cell`, which makes such a cell text with a
leading ``'``, as OWASP's advice on CSV injection has it; the csv module quotes the rest.
"""

from __future__ import annotations

import csv
from typing import Iterable, Sequence, TextIO

__all__ = ["spreadsheet_cell", "write_rows"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: object) -> str:
    """``value`` as a cell a spreadsheet shows as text: ``"=1+2"`` -> ``"'=1+2"``."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def write_rows(handle: TextIO, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """Write ``header`` and ``rows`` as CSV to ``handle``, every cell through :func:`spreadsheet_cell`."""
    writer = csv.writer(handle)
    writer.writerow(header)
    writer.writerows([spreadsheet_cell(cell) for cell in row] for row in rows)
