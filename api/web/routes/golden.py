"""Staff: live torch comparisons of every variant (and a submission's implementation)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, HTTPException, Request, status

from api.store import crud
from api.store.db import GoldenRun
from api.web.deps import RowId, SessionDep, StaffUser
from api.web.hosting import hosted_by_name, of_submission
from api.store.records import GoldenResult
from api.web.schemas import GoldenRequest, GoldenRunPublic

router = APIRouter(prefix="/v1/golden", tags=["staff"])


def _public(run: GoldenRun) -> GoldenRunPublic:
    return GoldenRunPublic(
        id=run.id, assignment=run.assignment or "", status=run.status, submission_id=run.submission_id, cases=run.cases,
        created_at=crud.as_utc(run.created_at), finished_at=crud.as_utc(run.finished_at),
        result=GoldenResult.model_validate_json(run.result_json) if run.result_json else None, error=run.error,
    )


_ERRORS = {401: {"description": "missing token"}, 403: {"description": "staff only"}}


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=GoldenRunPublic,
             responses={**_ERRORS, 404: {"description": "no such submission"},
                        409: {"description": "the submission's assignment is no longer hosted"},
                        422: {"description": "an assignment not hosted, or not the submission's"}})
def start_golden(
    request: Request, session: SessionDep, user: StaffUser, body: Annotated[GoldenRequest, Body()] = GoldenRequest()
) -> GoldenRunPublic:
    """Compare every variant of an assignment with live torch on a (GPU) worker; poll the run
    for the result. With a submission, its assignment's variants and its implementation."""
    hosted = hosted_by_name(request, body.assignment)
    if body.submission_id is not None:
        submission = crud.get_submission(session, body.submission_id)
        if submission is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"submission {body.submission_id}: no such submission")
        hosted = of_submission(request, submission)
        if body.assignment is not None and body.assignment != hosted.name:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                f"assignment: submission {submission.id} is for {hosted.name!r}, not {body.assignment!r}")
    run = crud.create_golden_run(session, assignment=hosted.name, submission_id=body.submission_id,
                                 cases=body.cases)
    request.app.state.queue.enqueue_golden(run.id)
    return _public(run)


@router.get("/{run_id}", response_model=GoldenRunPublic, responses={**_ERRORS, 404: {"description": "no such run"}})
def get_golden(session: SessionDep, user: StaffUser, run_id: RowId) -> GoldenRunPublic:
    run = crud.get_golden_run(session, run_id)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"golden run {run_id}: no such run")
    return _public(run)
