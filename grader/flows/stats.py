"""``mutagrade stats REPORTS_DIR``: a class's statistics from the reports ``grade-batch`` wrote.

``grade-batch --reports DIR`` writes ``<student>.json`` for each student: the report
(``mutagrade.report/2``, or ``/1`` from before), or, for a submission that could not be graded,
its error (``mutagrade.not-graded/1``). :func:`load_reports` reads them back, naming each file
that is neither and going on without it; :func:`grader.core.classstats.class_stats` sums them up;
the figures are printed as text or JSON (:mod:`grader.report.classstats`) and, with ``--plots``,
drawn as SVG (:mod:`grader.report.plots`, which alone imports matplotlib).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

from pydantic import ValidationError

from grader.core.classstats import ClassStats, class_stats
from grader.core.exits import EXIT_OK
from grader.core.models import LEGACY_REPORT_SCHEMA, REPORT_SCHEMA, Report
from grader.flows.batch import NOT_GRADED_SCHEMA, NotGraded
from grader.report.classstats import render_stats_json, render_stats_text

__all__ = ["MAX_REPORT_BYTES", "PLOT_FILES", "STATS_FORMATS", "LoadedReports", "StatsInputError",
           "load_reports", "run_stats", "write_plots"]

STATS_FORMATS = ("text", "json")
PLOT_FILES = ("kill_rates.svg", "scores.svg", "validity.svg")
# A stored report is at most 8 MiB (grader.core.caps); a file far larger is none of ours.
MAX_REPORT_BYTES = 16 * 1024**2
_REPORT_SCHEMAS = (REPORT_SCHEMA, LEGACY_REPORT_SCHEMA)
_EXPECTED = f"{REPORT_SCHEMA}, {LEGACY_REPORT_SCHEMA} or {NOT_GRADED_SCHEMA}"


class StatsInputError(ValueError):
    """The reports folder, or the plots folder, cannot be used; the message names it."""


class LoadedReports(NamedTuple):
    """What a reports folder holds: the reports, how many students could not be graded, and
    one line per file that is neither (named, with what is wrong with it)."""

    reports: list[Report]
    errors: int
    problems: list[str]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _invalid(name: str, what: str, error: ValidationError) -> str:
    """``alice.json: not a mutagrade.report/2: field score.killed: Field required``, and how
    many more fields are wrong."""
    errors = error.errors()
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"]) or "(the document)"
    found = "" if first["type"] == "missing" else f", found {_short(first.get('input'))}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{name}: not a {what}: field {field}: {first['msg']}{found}{more}"


def _document(path: Path) -> dict | str:
    """The file's JSON object, or the problem line that says why it is none."""
    name = path.name
    size = path.stat().st_size
    if size > MAX_REPORT_BYTES:
        return f"{name}: expected a report of at most {MAX_REPORT_BYTES // 1024**2} MiB, found {size} bytes"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return f"{name}: expected UTF-8 JSON, found a byte that is not UTF-8 at offset {exc.start}"
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{name}:{exc.lineno}:{exc.colno}: expected JSON, found an error: {exc.msg}"
    if not isinstance(document, dict):
        return f"{name}: expected a JSON object with a schema of {_EXPECTED}, found a {type(document).__name__}"
    return document


def _read(path: Path) -> Report | NotGraded | str:
    """The report or error file at ``path``, or the problem line that says why it is neither."""
    name = path.name
    try:
        document = _document(path)
    except OSError as exc:
        return f"{name}: could not be read: {exc.strerror or exc}"
    if isinstance(document, str):
        return document
    schema = document.get("schema")
    try:
        if schema in _REPORT_SCHEMAS:
            return Report.model_validate(document)
        if schema == NOT_GRADED_SCHEMA:
            return NotGraded.model_validate(document)
    except ValidationError as exc:
        return _invalid(name, str(schema), exc)
    return f"{name}: schema: expected {_EXPECTED}, found {_short(schema)}"


def load_reports(reports_dir: Path) -> LoadedReports:
    """Read the reports ``grade-batch --reports`` wrote into ``reports_dir``.

    Every ``*.json`` file is read: a report counts, an error file (``mutagrade.not-graded/1``)
    is a student who could not be graded. A file that is neither, or any other file, is named
    in a problem line and left out; hidden files and folders (the plots, say) are passed over.

    Args:
        reports_dir: the folder ``grade-batch --reports`` wrote.

    Returns:
        The reports (in file name order), the number of error files, and the problem lines.

    Raises:
        StatsInputError: ``reports_dir`` is not a folder.
    """
    if not reports_dir.is_dir():
        found = "a file" if reports_dir.exists() else "nothing there"
        raise StatsInputError(f"{reports_dir}: expected the folder of reports `grade-batch --reports` writes, "
                              f"found {found}")
    reports: list[Report] = []
    errors = 0
    problems: list[str] = []
    for path in sorted(reports_dir.iterdir()):
        if path.name.startswith(".") or path.is_dir():
            continue
        if path.suffix != ".json":
            problems.append(f"{path.name}: not a report (expected a .json file of {_EXPECTED}); left out")
            continue
        read = _read(path)
        if isinstance(read, Report):
            reports.append(read)
        elif isinstance(read, NotGraded):
            errors += 1
        else:
            problems.append(read)
    return LoadedReports(reports, errors, problems)


def write_plots(stats: ClassStats, folder: Path) -> list[Path]:
    """Write the class's plots into ``folder`` (made if missing): :data:`PLOT_FILES`.

    Returns:
        The files written.

    Raises:
        StatsInputError: ``folder`` cannot be written, or matplotlib is not installed.
    """
    try:
        from grader.report.plots import kill_rate_plot, score_histogram, validity_plot

        plots: list[Callable[[ClassStats], str]] = [kill_rate_plot, score_histogram, validity_plot]
        drawn = [plot(stats) for plot in plots]
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib" and not (exc.name or "").startswith("matplotlib."):
            raise
        raise StatsInputError("--plots: expected matplotlib installed (pip install 'mutagrade[service]'), "
                              "found none") from None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, svg in zip(PLOT_FILES, drawn):
            path = folder / name
            path.write_text(svg, encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise StatsInputError(f"{folder}: expected a folder to write the plots into: {exc.strerror or exc}") from None
    return written


def run_stats(reports_dir: Path, *, fmt: str = "text", plots: Path | None = None) -> int:
    """``mutagrade stats``: print the class's statistics; the files that are no report are
    named on standard error.

    Args:
        reports_dir: the folder ``grade-batch --reports`` wrote.
        fmt: ``text`` or ``json`` (:data:`STATS_FORMATS`).
        plots: also write the SVG plots (:data:`PLOT_FILES`) into this folder.

    Returns:
        The exit code: 0.

    Raises:
        StatsInputError: the folder is missing, or holds no report and no error file; the
            plots cannot be written.
        ValueError: ``fmt`` is no format of :data:`STATS_FORMATS`.
    """
    if fmt not in STATS_FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(STATS_FORMATS)}, got {fmt!r}")
    reports, errors, problems = load_reports(reports_dir)
    for line in problems:
        print(f"mutagrade: {line}", file=sys.stderr)
    if not reports and not errors:
        raise StatsInputError(f"{reports_dir}: expected the JSON reports `grade-batch --reports` writes, "
                              f"found no report{' (see the files named above)' if problems else ''}")
    stats = class_stats(reports, errors=errors)
    if plots is not None:
        written = write_plots(stats, plots)
        print(f"mutagrade: plots written to {plots}: {', '.join(p.name for p in written)}", file=sys.stderr)
    print(render_stats_json(stats) if fmt == "json" else render_stats_text(stats), end="")
    return EXIT_OK
