"""The class's statistics, for staff: ``GET /staff/stats`` (the page), ``GET /v1/stats.json``
and the page's plots, ``GET /staff/stats/{name}.svg``.

Built from the staff reports of each student's grade of record
(:func:`api.store.course_stats.recorded_submissions`, by :func:`api.store.grades.grade_records`)
by :func:`grader.core.classstats.class_stats`, the plots drawn by :mod:`grader.report.plots`;
both kept per set of submissions (and their grading times: a regrade changes a report) in the
app's cache. The routes are sync: reading two
hundred reports and drawing runs in the thread pool, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from sqlalchemy.orm import Session

from api.store.course_stats import recorded_submissions, stored_reports, ungraded_students
from api.web.course_cache import Computed, computed_cache
from api.web.course_schemas import StatsAnswer
from api.web.deps import SessionDep, StaffUser
from api.web.hosting import Hosted, HostedQuery
from api.web.forms import PAGE_HEADERS, PageUser, page, staff_only
from grader.core.classstats import ClassStats, class_stats
from grader.core.models import Report
from grader.report._common import percent
from grader.report.plots import kill_rate_plot, score_histogram, validity_plot

__all__ = ["PLOTS", "ClassFigures", "class_figures", "router"]

router = APIRouter(tags=["staff"])
PLOTS: dict[str, Callable[[ClassStats], str]] = {
    "kill_rates": kill_rate_plot, "scores": score_histogram, "validity": validity_plot,
}
STAFF_ONLY = "the class statistics are for course staff only"


@dataclass(frozen=True)
class ClassFigures:
    """The class's statistics and the submissions they were computed from."""

    stats: ClassStats
    submissions: list[int]
    key: Hashable  # what they were computed from, for the plots drawn from them


def class_figures(request: Request, session: Session, hosted: Hosted) -> Computed[ClassFigures]:
    """The class's figures for one assignment now, computed unless the same submissions' are kept."""
    records = recorded_submissions(session, name=hosted.name, assignment=hosted.rules)
    graded = [r for r in records if r.graded]
    # Not graded: a grade of record staff gave points to, and those who have none, their
    # submissions having failed.
    errors = len(records) - len(graded) + ungraded_students(session, name=hosted.name,
                                                             recorded=[r.student for r in records])
    key = ("stats", hosted.name, frozenset((r.id, r.finished_at) for r in graded), errors)

    def compute() -> ClassFigures:
        reports = []
        for _, text in stored_reports(session, [r.id for r in graded]):
            try:
                reports.append(Report.model_validate_json(text))
            except ValidationError:  # stored by a grader of another report schema: counted as not graded
                continue
        stats = class_stats(reports, errors=errors + len(graded) - len(reports))
        return ClassFigures(stats=stats, submissions=[r.id for r in graded], key=key)

    return computed_cache(request.app).get(key, compute)


@router.get("/v1/stats.json", response_model=StatsAnswer,
            responses={401: {"description": "missing token"}, 403: {"description": "staff only"}})
def stats_json(request: Request, session: SessionDep, user: StaffUser, hosted: HostedQuery) -> StatsAnswer:
    """The class's statistics: students graded and passed, each mutant's kill rate (the most
    missed first), the kill rates' histogram, the tests by validity."""
    figures = class_figures(request, session, hosted)
    return StatsAnswer(computed_at=figures.at, submissions=figures.value.submissions, stats=figures.value.stats)


def _alt(name: str, stats: ClassStats) -> str:
    """What each plot shows, in words; its figures are in the table beside it."""
    words = {
        "kill_rates": f"Bar chart: the kill rate of each of {len(stats.mutants)} mutants across the "
                      f"{stats.graded} graded suites, the most missed first.",
        "scores": f"Histogram: how many of the {stats.graded} graded suites reached each tenth of the kill rate.",
        "validity": "Bar chart: the class's tests by validity (valid, wrong, flaky, brittle, copied).",
    }
    return words[name] + " The figures are in the table beside it."


@router.get("/staff/stats", response_class=HTMLResponse, include_in_schema=False)
def stats_page(request: Request, session: SessionDep, user: PageUser, hosted: HostedQuery) -> Response:
    if (refusal := staff_only(request, user, STAFF_ONLY)) is not None:
        return refusal
    figures = class_figures(request, session, hosted)
    stats = figures.value.stats
    return page(request, "stats.html", {
        "user": user, "hosted": hosted, "stats": stats, "computed_at": figures.at,
        "alt": {name: _alt(name, stats) for name in PLOTS}, "percent": percent,
    })


@router.get("/staff/stats/{name}.svg", include_in_schema=False)
def stats_plot(request: Request, session: SessionDep, user: PageUser, name: str, hosted: HostedQuery) -> Response:
    """One of the page's plots, drawn from the figures the page shows (and kept with them)."""
    if (refusal := staff_only(request, user, STAFF_ONLY)) is not None:
        return refusal
    draw = PLOTS.get(name)
    if draw is None:
        return page(request, "refused.html", {
            "user": user, "title": "No such plot",
            "message": f"no plot {name!r}: the plots are {', '.join(f'{n}.svg' for n in PLOTS)}",
        }, status.HTTP_404_NOT_FOUND)
    figures = class_figures(request, session, hosted).value
    cache = computed_cache(request.app)

    def drawn() -> str:
        with cache.drawing:
            return draw(figures.stats)

    svg = cache.get(("plot", name, figures.key), drawn).value
    return Response(svg, media_type="image/svg+xml", headers={**PAGE_HEADERS, "Cache-Control": "private, no-cache"})
