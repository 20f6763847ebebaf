"""The grade of record: per student on the roster and assignment, the submission that counts by the assignment's
rule (``grade_of_record``), its points, what lateness took off them, staff's override and the
final points; with the latest and the best graded submission beside it.

Previews never count, nor do submissions still in the queue or that could not be graded (one
staff gave points to by an override does). Points follow :func:`grader.core.points.points_of`
from the stored report's score; the late penalty is the share stamped on the submission when it
was stored (:mod:`api.web.deadlines`); an override replaces the final points.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from api.store.db import Submission, User
from grader.core.assignment import Assignment
from grader.core.models import Score
from grader.core.points import apply_penalty, points_of
from grader.core.states import JobStatus, Role, SubmissionKind, Timeliness

__all__ = ["RULE_WORDS", "GradeRecord", "grade_records"]

Rule = Literal["latest_on_time", "best"]
RULE_WORDS: dict[str, str] = {
    "latest_on_time": "the latest submission made on time (the latest late one where none was)",
    "best": "the submission with the most final points (the latest of equals)",
}


class _Points(BaseModel):
    model_config = ConfigDict(frozen=True)

    points: float | None  # None: not graded (only an override gave it points)
    penalty_points: float
    final_points: float


class GradeRecord(BaseModel):
    """One student's line of the gradebook.

    ``submission`` is the grade of record (None: nothing counts yet), ``submissions`` how many
    they made (previews not counted); ``points`` its grade before the late penalty,
    ``penalty_points`` what the penalty took off, ``final_points`` what the gradebook records
    (staff's override where there is one). ``latest`` and ``best`` are the latest graded
    submission and the best by verdict and kill rate, whatever the rule.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    user: User
    submission: Submission | None
    submissions: int
    rule: Rule
    points: float | None = None
    penalty_points: float = 0.0
    final_points: float | None = None
    latest: Submission | None = None
    best: Submission | None = None

    @property
    def overridden(self) -> bool:
        """Whether staff's override gave the final points."""
        return self.submission is not None and self.submission.override_points is not None


def _points(submission: Submission, assignment: Assignment) -> _Points:
    """The submission's points from its stored report, less its late penalty; its override."""
    points = None
    if submission.status == JobStatus.DONE and submission.report_json:
        document = json.loads(submission.report_json)
        score = Score.model_validate(document["score"])
        points = 0.0 if score.total < 1 else points_of(
            passed=bool(document["passed"]), killed=score.killed, mutants=score.total, assignment=assignment)
    after = apply_penalty(points, submission.penalty) if points is not None else 0.0
    penalty_points = round(points - after, 2) if points is not None else 0.0
    final = submission.override_points if submission.override_points is not None else after
    return _Points(points=points, penalty_points=penalty_points, final_points=final)


def _counts(submission: Submission) -> bool:
    """Graded, or given points by staff: a submission that may be the grade of record."""
    return submission.status == JobStatus.DONE or submission.override_points is not None


def _chosen(candidates: list[Submission], rule: Rule, assignment: Assignment) -> tuple[Submission | None, _Points | None]:
    """The grade of record among ``candidates`` (oldest first) by ``rule``, with its points."""
    if not candidates:
        return None, None
    if rule == "best":
        graded = [(s, _points(s, assignment)) for s in candidates]
        return max(graded, key=lambda pair: (pair[1].final_points, pair[0].id))
    on_time = [s for s in candidates if s.timeliness != Timeliness.LATE]  # None: there was no due date
    chosen = (on_time or candidates)[-1]
    return chosen, _points(chosen, assignment)


def _record(user: User, made: list[Submission], assignment: Assignment) -> GradeRecord:
    graded = [s for s in made if s.status == JobStatus.DONE]
    chosen, points = _chosen([s for s in made if _counts(s)], assignment.grade_of_record, assignment)
    return GradeRecord(
        user=user, submission=chosen, submissions=len(made), rule=assignment.grade_of_record,
        points=points.points if points else None, penalty_points=points.penalty_points if points else 0.0,
        final_points=points.final_points if points else None,
        latest=graded[-1] if graded else None,
        best=max(graded, key=lambda s: (bool(s.passed), s.kill_rate or 0.0, -s.id), default=None),
    )


def grade_records(session: Session, *, name: str, assignment: Assignment) -> list[GradeRecord]:
    """Every student on the roster (not removed), by login, with their grade of record for the
    hosted assignment ``name``.

    Args:
        session: the database.
        name: the assignment's name (its folder's): only submissions made for it count.
        assignment: its ``grade_of_record`` rule, and what points follow (``points``,
            ``gradescope_score``, ``gradescope_not_passed_share``).
    """
    students = sorted(
        session.scalars(select(User).where(User.role == Role.STUDENT, User.removed_at.is_(None))),
        key=lambda user: user.name,
    )
    made: dict[int, list[Submission]] = defaultdict(list)
    # Archives stay in the database; a report is read only for a submission that may count.
    query = (
        select(Submission)
        .options(defer(Submission.archive), defer(Submission.report_json))
        .join(User, User.id == Submission.user_id)
        .where(Submission.kind == SubmissionKind.SUBMISSION, Submission.assignment == name,
               User.role == Role.STUDENT, User.removed_at.is_(None))
        .order_by(Submission.id)
    )
    for submission in session.scalars(query):
        made[submission.user_id].append(submission)
    return [_record(user, made[user.id], assignment) for user in students]
