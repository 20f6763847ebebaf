"""How alike the class's suites are, for staff: ``GET /staff/similarity`` (the page, pairs at or
above a threshold, most similar first), ``GET /v1/similarity.json`` and one pair side by side,
``GET /staff/similarity/pair?a=A&b=B``, the matched regions marked.

The suites are those of each student's grade of record
(:func:`api.store.course_stats.recorded_submissions`, by :func:`api.store.grades.grade_records`),
each archive opened as the grading opens it and read by
:func:`grader.flows.similarity.read_suite`, then compared by
:func:`grader.flows.similarity.compare_suites` with the course's own code as boilerplate. The
suites are kept per set of submissions, and the comparisons in the app's cache (see
:func:`class_similarity`); the routes are sync, so reading and comparing two hundred suites
(about 15 to 20 s) runs in the thread pool, never on the event loop.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from api.config import archive_limits
from api.store.course_stats import recorded_submissions, stored_archives
from api.store.db import User
from api.web.course_cache import Computed, computed_cache
from api.web.course_schemas import SimilarityAnswer
from api.web.deps import SessionDep, StaffUser
from api.web.forms import PageUser, page, staff_only
from api.web.hosting import Hosted, HostedQuery
from api.web.similarity_sides import marked_lines
from grader.core.errors import GradingInputError
from grader.core.similarity import SimilarPair, SimilarityResult, SkippedStudent, SuiteText
from grader.flows.archive import ArchiveLimits
from grader.flows.intake import Upload, open_tests
from grader.flows.similarity import DEFAULT_THRESHOLD, compare_suites, course_boilerplate, read_suite
from grader.report._common import percent

__all__ = ["COMPARED_FROM", "ClassSuites", "class_similarity", "class_suites", "pair_link", "router"]

router = APIRouter(tags=["staff"])
STAFF_ONLY = "the similarity of the class's suites is for course staff only"
BAD_THRESHOLD = "threshold: expected a share from 0 to 1, such as 0.5; got {!r}"
COMPARED_FROM = 0.3  # the least threshold of the comparison every higher one is read from


@dataclass(frozen=True)
class ClassSuites:
    """Every student's suite as one text, those that could not be read, and what was read."""

    suites: list[SuiteText]
    skipped: list[SkippedStudent]
    submissions: dict[str, int]  # student -> the submission whose suite was read
    key: Hashable  # what they were read from


def _suite_of(student: str, upload: Upload, tests: PurePosixPath, limits: ArchiveLimits) -> SuiteText | SkippedStudent:
    try:
        with open_tests(upload, tests=tests, label=upload.name, archive_limits=limits) as opened:
            suite = read_suite(opened.where.tests, student=student)
    except (GradingInputError, OSError) as exc:
        return SkippedStudent(student=student, reason=str(exc))
    if not suite.files:
        return SkippedStudent(student=student, reason=f"{upload.name}: no test file to compare")
    return suite


def class_suites(request: Request, session: Session, hosted: Hosted) -> ClassSuites:
    """The suites of the class's graded submissions for one assignment now, read unless the
    same ones are kept."""
    records = {r.id: r for r in recorded_submissions(session, name=hosted.name, assignment=hosted.rules)}
    key = ("suites", hosted.name, frozenset(records))

    def compute() -> ClassSuites:
        limits = archive_limits(request.app.state.settings)
        suites: list[SuiteText] = []
        skipped: list[SkippedStudent] = []
        for submission_id, name, data in stored_archives(session, records):
            read = _suite_of(records[submission_id].student, Upload(name=name, data=data),
                             hosted.layout.student_tests, limits)
            (suites if isinstance(read, SuiteText) else skipped).append(read)
        return ClassSuites(suites=sorted(suites, key=lambda s: s.student),
                           skipped=sorted(skipped, key=lambda s: s.student),
                           submissions={r.student: r.id for r in records.values()}, key=key)

    return computed_cache(request.app).get(key, compute).value


def class_similarity(request: Request, session: Session, hosted: Hosted, *,
                     threshold: float) -> tuple[Computed[SimilarityResult], ClassSuites]:
    """The pairs of the class's suites at or above ``threshold``, and the suites compared.

    Every threshold from :data:`COMPARED_FROM` up is read from one comparison (the pairs at or
    above it, kept), so that trying another threshold on the page costs nothing: what a
    comparison costs is comparing every pair, whatever the threshold.
    """
    suites = class_suites(request, session, hosted)
    floor = min(threshold, COMPARED_FROM)

    def compute() -> SimilarityResult:
        return compare_suites(suites.suites, boilerplate=course_boilerplate(hosted.layout),
                              threshold=floor, skipped=suites.skipped)

    computed = computed_cache(request.app).get(("similarity", suites.key, floor), compute)
    if threshold == floor:
        return computed, suites
    result = computed.value.model_copy(update={
        "threshold": threshold, "pairs": [p for p in computed.value.pairs if p.similarity >= threshold]})
    return Computed(value=result, at=computed.at), suites


def pair_link(pair: SimilarPair, assignment: str) -> str:
    """The address of a pair's side-by-side page for ``assignment``: the logins as query
    values, so that any login (one holding ``/``, or ``..``) reaches the page as it is."""
    return f"/staff/similarity/pair?{urlencode({'a': pair.a, 'b': pair.b, 'assignment': assignment})}"


@router.get("/v1/similarity.json", response_model=SimilarityAnswer,
            responses={401: {"description": "missing token"}, 403: {"description": "staff only"}})
def similarity_json(
    request: Request, session: SessionDep, user: StaffUser, hosted: HostedQuery,
    threshold: Annotated[float, Query(ge=0.0, le=1.0, description="the least similarity of a pair listed")]
    = DEFAULT_THRESHOLD,
) -> SimilarityAnswer:
    """Every pair of the class's suites at least ``threshold`` alike (the larger share of either
    suite found in the other), most similar first, with the regions matched on each side."""
    computed, suites = class_similarity(request, session, hosted, threshold=threshold)
    return SimilarityAnswer(computed_at=computed.at, submissions=suites.submissions, result=computed.value,
                            links=[pair_link(p, hosted.name) for p in computed.value.pairs])


def _threshold(sent: str | None) -> float | None:
    """The page's threshold (the default when none is sent), or None when it is not a share."""
    if sent is None or not sent.strip():
        return DEFAULT_THRESHOLD
    try:
        value = float(sent)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


@router.get("/staff/similarity", response_class=HTMLResponse, include_in_schema=False)
def similarity_page(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery,
                    threshold: str | None = None) -> Response:
    if (refusal := staff_only(request, user, STAFF_ONLY)) is not None:
        return refusal
    value = _threshold(threshold)
    context = {"user": user, "hosted": hosted, "percent": percent, "threshold": threshold or DEFAULT_THRESHOLD}
    if value is None:
        return page(request, "similarity.html", {**context, "error": BAD_THRESHOLD.format(threshold)},
                    status.HTTP_422_UNPROCESSABLE_CONTENT)
    computed, suites = class_similarity(request, session, hosted, threshold=value)
    result = computed.value
    return page(request, "similarity.html", {
        **context, "threshold": value, "result": result, "computed_at": computed.at, "error": None,
        "rows": [(p, pair_link(p, hosted.name)) for p in result.pairs],
    })


def _no_suite(request: Request, user: User, names: list[str]) -> Response:
    return page(request, "refused.html", {
        "user": user, "title": "No such suite",
        "message": f"no graded suite of {' or '.join(names)} to compare: the students compared are listed "
                   "on the similarity page",
    }, status.HTTP_404_NOT_FOUND)


@router.get("/staff/similarity/pair", response_class=HTMLResponse, include_in_schema=False)
def pair_page(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery, a: str = "",
              b: str = "") -> Response:
    """Two students' suites side by side, what each holds of the other marked."""
    if (refusal := staff_only(request, user, STAFF_ONLY)) is not None:
        return refusal
    suites = class_suites(request, session, hosted)
    texts = {s.student: s for s in suites.suites}
    missing = [name for name in dict.fromkeys((a, b)) if name not in texts]
    if missing:
        return _no_suite(request, user, missing)
    if a == b:
        return page(request, "refused.html", {"user": user, "title": "Not a pair",
                                              "message": f"{a} and {b} are one student: a pair is two"},
                    status.HTTP_404_NOT_FOUND)
    first, second = sorted((a, b))

    def compute() -> SimilarPair | None:
        found = compare_suites([texts[first], texts[second]], threshold=0.0,
                               boilerplate=course_boilerplate(hosted.layout))
        return found.pairs[0] if found.pairs else None

    computed = computed_cache(request.app).get(("pair", suites.key, first, second), compute)
    pair = computed.value
    sides = [(name, texts[name], (pair.regions_a if name == first else pair.regions_b) if pair else [])
             for name in (first, second)]
    return page(request, "similarity_pair.html", {
        "user": user, "hosted": hosted, "percent": percent, "pair": pair, "a": first, "b": second,
        "computed_at": computed.at,
        "submissions": suites.submissions,
        "sides": [{"student": name, "regions": regions, "lines": marked_lines(suite, regions)}
                  for name, suite, regions in sides],
    })
