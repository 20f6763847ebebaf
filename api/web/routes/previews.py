"""Previews: an upload graded as a submission is, that never becomes the grade of record
(``mutagrade check`` with a server sends one)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Request, Response, UploadFile, status

from api.web.deps import CurrentUser, SessionDep
from api.web.hosting import hosted_by_form
from api.web.routes.submissions import AssignmentField
from api.web.schemas import SubmissionCreated
from api.web.submitting import accept_upload
from grader.core.states import SubmissionKind

router = APIRouter(prefix="/v1/previews", tags=["submissions"])


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SubmissionCreated,
    responses={401: {"description": "missing or unknown token"}, 413: {"description": "too large"},
               415: {"description": "not an archive"},
               422: {"description": "a member breaks a rule, or an assignment this service does not host"},
               429: {"description": "too many previews in the window, or submissions in flight at once"}},
)
async def create_preview(
    request: Request,
    response: Response,
    session: SessionDep,
    user: CurrentUser,
    archive: Annotated[UploadFile, File(description="a .tar.gz or .zip of your tests (and .tdd/)")],
    assignment: AssignmentField = None,
) -> SubmissionCreated:
    """Upload a preview: checked, stored and graded as a submission is, and read back at the
    same addresses, but shown as a preview, never the grade of record nor in the gradebook.
    A late preview is accepted; previews have a rate limit of their own."""
    # Every value the form sends (the parameter above is its last, validated): sent twice is refused.
    hosted = hosted_by_form(request, (await request.form()).getlist("assignment"))
    created = await accept_upload(request, session, user, archive, hosted=hosted,
                                  kind=SubmissionKind.PREVIEW)
    response.headers["Location"] = f"/v1/submissions/{created.id}"
    return created
