"""Accepting a submission and starting a regrade: what the REST routes and the pages' forms
both do, below either (api/web/routes/submissions.py, api/web/routes/pages.py)."""

from __future__ import annotations

import math
from pathlib import PurePosixPath

from fastapi import HTTPException, Request, UploadFile, status
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.store import crud
from api.config import archive_limits
from api.store.db import User
from api.web.deadlines import judge_upload, late_refusal
from api.web.hosting import Hosted, Hosting, of_submission
from api.web.schemas import SubmissionCreated
from api.web.views import links, owned_submission
from grader.core.states import SubmissionKind
from grader.flows.archive import ArchiveError, Member, check_archive

__all__ = ["accept_upload", "start_regrade"]


async def _read_capped(upload: UploadFile, limit: int) -> bytes:
    """The upload's bytes, refusing as soon as they pass ``limit``."""
    chunks, size = [], 0
    while chunk := await upload.read(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise ArchiveError(f"the archive is larger than {limit} bytes, the most accepted", 413)
        chunks.append(chunk)
    return b"".join(chunks)


def _refused(archive: UploadFile, exc: ArchiveError) -> HTTPException:
    return HTTPException(exc.status, f"archive {archive.filename!r}: {exc}")


# A grading takes seconds to a minute: asking again this often costs the service nothing.
_IN_FLIGHT_RETRY_S = 10


def _too_many_in_flight(in_flight: int, limit: int) -> HTTPException:
    which = "submission" if in_flight == 1 else "submissions"
    once = "once it is graded" if in_flight == 1 else "once one of them is graded"
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"you have {in_flight} {which} in flight (queued or being graded) and at most {limit} may be; "
        f"submit again {once}",
        headers={"Retry-After": str(_IN_FLIGHT_RETRY_S)},
    )


def _over_rate(request: Request, user: User, *, kind: SubmissionKind) -> HTTPException | None:
    """The 429 of an upload over its kind's rate limit (previews and submissions count apart)."""
    settings, preview = request.app.state.settings, kind == SubmissionKind.PREVIEW
    limiter = request.app.state.preview_limiter if preview else request.app.state.limiter
    wait = limiter.hit(user.id)
    if not wait:
        return None
    limit, window = ((settings.preview_rate_limit, settings.preview_rate_window_s) if preview
                     else (settings.rate_limit, settings.rate_window_s))
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"at most {limit} {kind}s per {window:g} s; try again in {math.ceil(wait)} s",
        headers={"Retry-After": str(math.ceil(wait))},
    )


async def accept_upload(
    request: Request, session: Session, user: User, archive: UploadFile, *, hosted: Hosted,
    kind: SubmissionKind = SubmissionKind.SUBMISSION,
) -> SubmissionCreated:
    """Check, store and queue ``user``'s uploaded ``archive`` as a submission or a preview
    (``kind``) for the ``hosted`` assignment: the REST uploads and the submissions page's form
    all come here. It is stamped with its time against the student's due date for that
    assignment (:mod:`api.web.deadlines`); a preview may be late whatever the assignment says.

    Raises:
        HTTPException: 403 a late submission where the assignment refuses late work (nothing
            is stored), 429 over the rate limit of its kind or the in-flight limit (with
            ``Retry-After``), 413 too large, 415 not an archive, 422 a member that breaks a rule.
    """
    settings = request.app.state.settings
    deadline = hosted.rules.deadline
    refuses_late = kind == SubmissionKind.SUBMISSION and deadline is not None and deadline.late == "refuse"
    if refuses_late:  # refused before it counts against the rate limit, and before its bytes are read
        upload = await run_in_threadpool(judge_upload, session, user=user, assignment=hosted.name, deadline=deadline)
        if upload.judged.status == "refused":
            raise late_refusal(upload, deadline)
    if (over := _over_rate(request, user, kind=kind)) is not None:
        raise over
    # Refused before the upload is read when already at the limit; counted again, under a
    # lock, when it is stored (posts sent at once).
    in_flight = await run_in_threadpool(crud.in_flight, session, user_id=user.id)
    if in_flight >= settings.max_in_flight:
        raise _too_many_in_flight(in_flight, settings.max_in_flight)
    try:
        data = await _read_capped(archive, settings.max_upload_bytes)
    except ArchiveError as exc:
        raise _refused(archive, exc) from None

    def store() -> SubmissionCreated:
        # Unpacking the archive and writing it to the database block: they run in the thread
        # pool, so a burst of uploads never holds up the event loop (and every other request).
        try:
            members = check_archive(data, archive_limits(settings), tests=hosted.layout.student_tests)
        except ArchiveError as exc:
            raise _refused(archive, exc) from None
        if (other := _made_for_another(members, hosted, request.app.state.hosting)) is not None:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                f"archive {archive.filename!r}: its tests are in {other.layout.student_tests}/, where {other.name}'s "
                f"repositories keep them, and none in {hosted.layout.student_tests}/: it was sent for {hosted.name}. "
                f"Send it for {other.name} (`mutagrade submit` names the module by the tests folder), or put the "
                f"tests for {hosted.name} in {hosted.layout.student_tests}/")
        # Its time: when the whole archive is here (a refusal may be due to a slow upload).
        upload = judge_upload(session, user=user, assignment=hosted.name, deadline=deadline)
        if upload.judged.status == "refused" and kind == SubmissionKind.SUBMISSION:
            raise late_refusal(upload, deadline)
        try:
            submission = crud.create_submission(session, user=user, assignment=hosted.name, archive=data,
                                                name=archive.filename or "archive",
                                                max_in_flight=settings.max_in_flight, kind=kind, at=upload.at,
                                                judged=upload.judged)
        except crud.InFlightLimit as exc:
            raise _too_many_in_flight(exc.in_flight, exc.limit) from None
        request.app.state.queue.enqueue(submission.id)
        return SubmissionCreated(id=submission.id, status=submission.status, links=links(submission.id))

    return await run_in_threadpool(store)


def _made_for_another(members: list[Member], hosted: Hosted, hosting: Hosting) -> Hosted | None:
    """The other hosted assignment an archive was made for: it has no file in ``hosted``'s
    tests folder and some in the other's (None: it is ``hosted``'s, or nobody's to tell)."""

    def within(folder: PurePosixPath) -> bool:
        return any(PurePosixPath(m.name).is_relative_to(folder) for m in members)

    if within(hosted.layout.student_tests):
        return None
    return next((other for other in hosting.by_name.values()
                 if other.name != hosted.name and within(other.layout.student_tests)), None)


def start_regrade(request: Request, session: Session, user: User, submission_id: int) -> SubmissionCreated:
    """Queue a submission to be graded again: the staff route and the submission page's button
    come here (their callers check the user is staff)."""
    submission = owned_submission(session, submission_id, user)
    of_submission(request, submission)  # a 409, the report kept, when its module is no longer hosted
    crud.regrade(session, submission=submission)
    request.app.state.queue.enqueue(submission.id)
    return SubmissionCreated(id=submission.id, status=submission.status, links=links(submission.id))
