"""Routes anyone may call: the assignment as students see it, health and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from api.store import crud
from api.web.hosting import Hosted, HostedQuery
from api.web.schemas import AssignmentPublic, Health, MutantPublic
from grader.core.models import Audience
from grader.core.scoring import shown_ids
from grader.core.variants import VariantKind

router = APIRouter(tags=["public"])


def _public(hosted: Hosted, *, default: bool) -> AssignmentPublic:
    variants = hosted.variants
    names = shown_ids(variants, Audience.STUDENT)
    mutants = [v for v in variants if v.kind is VariantKind.MUTANT]
    rules = hosted.rules
    return AssignmentPublic(
        assignment=hosted.name,
        default=default,
        name=rules.name,
        threshold=rules.threshold,
        required=[names[m.id] for m in mutants if m.spec.required],
        allow_invalid_tests=rules.allow_invalid_tests,
        require_journal=rules.require_journal,
        mutants=[
            MutantPublic(
                id=names[m.id],
                title=names[m.id] if m.spec.hidden else m.spec.title,
                required=m.spec.required,
                hidden=m.spec.hidden,
            )
            for m in mutants
        ],
    )


@router.get("/v1/assignment", response_model=AssignmentPublic,
            responses={422: {"description": "an assignment this service does not host"}})
def assignment(request: Request, hosted: HostedQuery) -> AssignmentPublic:
    """An assignment's grading rules and mutant table, hidden mutants hidden (``?assignment=``
    names it; the default one otherwise)."""
    return _public(hosted, default=hosted.name == request.app.state.hosting.default.name)


@router.get("/v1/assignments", response_model=list[AssignmentPublic])
def assignments(request: Request) -> list[AssignmentPublic]:
    """Every assignment this service hosts, the default first: what a submission may name."""
    hosting = request.app.state.hosting
    return [_public(hosted, default=hosted.name == hosting.default.name) for hosted in hosting.by_name.values()]


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process answers (no database round trip: cheap enough to poll)."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"description": "not ready"}})
def readyz(request: Request, response: Response) -> Health:
    """The database answers and the grading queue runs."""
    database, queue = "ok", "ok"
    try:
        with request.app.state.make_session() as session:
            crud.ping(session)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: this is the health check
        database = f"unavailable: {exc.__class__.__name__}"
    if not request.app.state.queue.healthy():
        queue = "not running"
    ok = database == "ok" and queue == "ok"
    if not ok:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return Health(status="ok" if ok else "unavailable", database=database, queue=queue)
