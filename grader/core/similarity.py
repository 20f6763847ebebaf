"""Similarity between students' suites: what is compared (each student's tests as one text),
what a pair found alike holds (its shares, its overlap, the regions matched on each side),
and the whole comparison's result.

The comparison itself (winnowed fingerprints, as MOSS takes them) is
:mod:`grader.flows.similarity`; this module holds the values it hands on, to the command's
renderers and to the service's page, and the rule that joins a suite's files into one text.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FILE_HEADER",
    "SIMILARITY_SCHEMA",
    "MatchedRegion",
    "SimilarPair",
    "SimilarityResult",
    "SkippedStudent",
    "SuiteFile",
    "SuiteText",
    "join_suite",
    "line_starts",
]

SIMILARITY_SCHEMA = "mutagrade.similarity/1"
# The line between two files of a suite's text: a comment, so that it is no code to compare.
FILE_HEADER = "# file: "

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class SuiteFile(BaseModel):
    """One file of a suite's text: its name in the suite and the line of its header."""

    model_config = _FROZEN

    name: str  # relative to the suite's folder, "/" between folders
    line: int = Field(ge=1)  # the header's line in the text; the file's first line is the next


class SuiteText(BaseModel):
    """A student's suite as one text: each file after a ``# file: name`` line, in name order."""

    model_config = _FROZEN

    student: str
    text: str
    files: list[SuiteFile] = []

    def file_at(self, line: int) -> tuple[str, int]:
        """The file that line ``line`` of the text belongs to, and its line in that file
        (``("", line)`` before the first header, or for a text built without any)."""
        starts = [f.line for f in self.files]
        at = bisect_right(starts, line) - 1
        if at < 0:
            return "", line
        file = self.files[at]
        return file.name, max(1, line - file.line)


def join_suite(student: str, files: Iterable[tuple[str, str]]) -> SuiteText:
    """One text of ``files`` (name, source): sorted by name, each after its header line.

    A name is written on one line whatever it holds (a newline in it is shown as ``\\n``),
    so that the headers this text holds are the ones its files list.
    """
    parts: list[str] = []
    listed: list[SuiteFile] = []
    line = 1
    for name, source in sorted(files):
        shown = name.replace("\n", "\\n").replace("\r", "\\r")
        body = source if source.endswith("\n") or not source else source + "\n"
        listed.append(SuiteFile(name=shown, line=line))
        parts.append(f"{FILE_HEADER}{shown}\n{body}")
        line += 1 + body.count("\n")
    return SuiteText(student=student, text="".join(parts), files=listed)


class MatchedRegion(BaseModel):
    """A stretch of one side's text that is found in the other side's."""

    model_config = _FROZEN

    file: str  # the file it begins in ("" before any header)
    first_line: int = Field(ge=1)  # lines in that file, 1-based, both included
    last_line: int = Field(ge=1)
    start: int = Field(ge=0)  # characters of the suite's text, the end excluded: what a page marks
    end: int = Field(ge=0)

    @classmethod
    def within(cls, suite: SuiteText, *, start: int, end: int, starts: list[int]) -> MatchedRegion:
        """The region of ``suite``'s text from ``start`` to ``end`` (characters), where
        ``starts`` holds the offset of each of the text's lines (:func:`line_starts`)."""
        first = bisect_right(starts, start)
        last = bisect_right(starts, max(start, end - 1))
        file, first_line = suite.file_at(first)
        last_file, last_line = suite.file_at(last)
        if last_file != file:  # it runs over a header: its lines are counted in the first file
            last_line = first_line + (last - first)
        return cls(file=file, first_line=first_line, last_line=max(first_line, last_line), start=start, end=end)


def line_starts(text: str) -> list[int]:
    """The offset of each line of ``text`` (0 first)."""
    starts = [0]
    at = text.find("\n")
    while at != -1:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts



class SimilarPair(BaseModel):
    """Two students whose suites are alike, ``a`` before ``b`` by name."""

    model_config = _FROZEN

    a: str
    b: str
    similarity_a: float = Field(ge=0.0, le=1.0)  # the share of a's tokens found in b
    similarity_b: float = Field(ge=0.0, le=1.0)  # the share of b's tokens found in a
    similarity: float = Field(ge=0.0, le=1.0)  # the larger of the two: a small suite copied into a large one counts
    overlap: int = Field(ge=0)  # tokens of a's suite matched in b's
    regions_a: list[MatchedRegion] = []
    regions_b: list[MatchedRegion] = []


class SkippedStudent(BaseModel):
    """A student whose suite was not compared, and why."""

    model_config = _FROZEN

    student: str
    reason: str


class SimilarityResult(BaseModel):
    """Every pair at or above the threshold, most similar first; who was compared, who not."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True)

    schema_: str = Field(default=SIMILARITY_SCHEMA, alias="schema")
    threshold: float = Field(ge=0.0, le=1.0)
    students: list[str]  # those compared, by name
    pairs: list[SimilarPair]
    skipped: list[SkippedStudent] = []
