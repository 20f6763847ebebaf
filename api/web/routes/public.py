"""Routes anyone may call: the assignment as students see it, health and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from api.store import crud
from api.web.schemas import AssignmentPublic, Health, MutantPublic
from grader.core.models import Audience
from grader.core.scoring import shown_ids
from grader.core.variants import VariantKind

router = APIRouter(tags=["public"])


@router.get("/v1/assignment", response_model=AssignmentPublic)
def assignment(request: Request) -> AssignmentPublic:
    """The grading rules and the mutant table, hidden mutants hidden."""
    state = request.app.state
    variants = state.variants
    names = shown_ids(variants, Audience.STUDENT)
    mutants = [v for v in variants if v.kind is VariantKind.MUTANT]
    return AssignmentPublic(
        name=state.assignment.name,
        threshold=state.assignment.threshold,
        required=[names[m.id] for m in mutants if m.spec.required],
        allow_invalid_tests=state.assignment.allow_invalid_tests,
        require_journal=state.assignment.require_journal,
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
