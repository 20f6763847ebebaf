"""Staff: live torch comparisons of every variant (and a submission's implementation)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Request, status
from pydantic import BaseModel, Field

from api import crud
from api.db import GoldenRun, Submission
from api.deps import ID_MAX, RowId, SessionDep, StaffUser
from api.golden_jobs import GoldenResult

router = APIRouter(prefix="/v1/golden", tags=["staff"])


class GoldenRequest(BaseModel):
    cases: int = Field(default=4, ge=1, le=1000, description="random cases per variant")
    submission_id: int | None = Field(
        default=None, ge=1, le=ID_MAX, description="also check this submission's python/tinyllm"
    )


class GoldenRunPublic(BaseModel):
    id: int
    status: str
    submission_id: int | None
    cases: int
    created_at: str
    finished_at: str
    result: GoldenResult | None
    error: str | None


def _public(run: GoldenRun) -> GoldenRunPublic:
    return GoldenRunPublic(
        id=run.id, status=run.status, submission_id=run.submission_id, cases=run.cases,
        created_at=crud.as_utc(run.created_at), finished_at=crud.as_utc(run.finished_at),
        result=GoldenResult.model_validate_json(run.result_json) if run.result_json else None, error=run.error,
    )


_ERRORS = {401: {"description": "missing token"}, 403: {"description": "staff only"}}


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=GoldenRunPublic,
             responses={**_ERRORS, 404: {"description": "no such submission"}})
def start_golden(
    request: Request, session: SessionDep, user: StaffUser, body: Annotated[GoldenRequest, Body()] = GoldenRequest()
) -> GoldenRunPublic:
    """Compare every variant with live torch on a (GPU) worker; poll the run for the result."""
    if body.submission_id is not None and session.get(Submission, body.submission_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"submission {body.submission_id}: no such submission")
    run = GoldenRun(status="queued", submission_id=body.submission_id, cases=body.cases)
    session.add(run)
    session.commit()
    request.app.state.queue.enqueue_golden(run.id)
    return _public(run)


@router.get("/{run_id}", response_model=GoldenRunPublic, responses={**_ERRORS, 404: {"description": "no such run"}})
def get_golden(session: SessionDep, user: StaffUser, run_id: RowId) -> GoldenRunPublic:
    run = session.get(GoldenRun, run_id)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"golden run {run_id}: no such run")
    session.refresh(run)
    return _public(run)
