"""One side of a similar pair as the page shows it: the suite's text line by line, each line
numbered as in its file, cut into pieces that are marked (the other side holds them too) or
not. The template writes each piece as text, escaped; control characters are spelled out."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from grader.core.similarity import MatchedRegion, SuiteText, line_starts
from grader.report._common import printable

__all__ = ["Piece", "SuiteLine", "marked_lines"]


class Piece(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    marked: bool


class SuiteLine(BaseModel):
    """A file's header line (``header`` set), or a line of a file: its number there, its pieces."""

    model_config = ConfigDict(frozen=True)

    number: int = 0
    header: str | None = None
    pieces: list[Piece] = []


def _pieces(text: str, begin: int, end: int, spans: Sequence[tuple[int, int]], at: int) -> list[Piece]:
    """``text[begin:end]`` cut at the spans from ``spans[at]`` on (sorted, not overlapping)."""
    pieces: list[Piece] = []
    cursor = begin
    for start, stop in spans[at:]:
        if start >= end:
            break
        start, stop = max(start, cursor), min(stop, end)
        if start > cursor:
            pieces.append(Piece(text=printable(text[cursor:start]), marked=False))
        if stop > start:
            pieces.append(Piece(text=printable(text[start:stop]), marked=True))
        cursor = max(cursor, stop)
    if cursor < end:
        pieces.append(Piece(text=printable(text[cursor:end]), marked=False))
    return pieces


def marked_lines(suite: SuiteText, regions: Sequence[MatchedRegion]) -> list[SuiteLine]:
    """``suite``'s lines, the characters of ``regions`` marked (a region over several lines is
    marked on each)."""
    text = suite.text
    starts = line_starts(text)
    headers = {f.line for f in suite.files}
    spans = sorted((r.start, r.end) for r in regions)
    lines: list[SuiteLine] = []
    at = 0  # the first span that may still reach the line
    for number, begin in enumerate(starts, 1):
        end = starts[number] - 1 if number < len(starts) else len(text)
        if begin == end == len(text) and number > 1:
            break  # nothing after the last newline
        if number in headers:
            lines.append(SuiteLine(header=printable(text[begin:end])))
            continue
        while at < len(spans) and spans[at][1] <= begin:
            at += 1
        lines.append(SuiteLine(number=suite.file_at(number)[1], pieces=_pieces(text, begin, end, spans, at)))
    return lines
