"""The assignments one service hosts, as the routes use them: each one's layout, rules and
variants, built once when the app is created (:func:`host`).

A request names an assignment by its folder's name: the upload's ``assignment`` form field, the
``?assignment=`` of a staff page or export, a stored submission's own. Naming none means the
default assignment (``MUTAGRADE_ASSIGNMENT``, or the course's); naming one the service does not
host is a 422 that lists those it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Sequence

from fastapi import Depends, HTTPException, Query, Request, status

from api.config import Settings, UnknownAssignment, layouts_of
from api.store.db import Submission
from api.web.schemas import ASSIGNMENT_NAME
from grader.core.assignment import Assignment, load_assignment
from grader.core.paths import Layout
from grader.core.variants import Variant, build_variants

__all__ = ["Hosted", "HostedQuery", "Hosting", "NotHosted", "host", "hosted_by_form", "hosted_by_name", "of_submission"]

@dataclass(frozen=True)
class Hosted:
    """One hosted assignment: its name (its folder's), layout, rules and variants."""

    name: str
    layout: Layout
    rules: Assignment
    variants: list[Variant]


@dataclass(frozen=True)
class Hosting:
    """Every hosted assignment by name, the default first."""

    by_name: dict[str, Hosted]

    @property
    def default(self) -> Hosted:
        return next(iter(self.by_name.values()))

    @property
    def names(self) -> list[str]:
        return list(self.by_name)

    def get(self, name: str | None) -> Hosted:
        """The assignment named ``name`` (None or empty: the default).

        Raises:
            UnknownAssignment: the service hosts none of that name (the message names those it does).
        """
        if not name:
            return self.default
        if name not in self.by_name:
            raise UnknownAssignment(name, self.by_name)
        return self.by_name[name]


def host(settings: Settings) -> Hosting:
    """Every assignment the settings host, each with its rules and variants built."""
    return Hosting({
        name: Hosted(name=name, layout=layout, rules=load_assignment(layout.assignment),
                     variants=build_variants(layout))
        for name, layout in layouts_of(settings).items()
    })


class NotHosted(HTTPException):
    """A request named an assignment this service does not host: a 422 (JSON on the REST API,
    the refusal page on the pages; api/main.py)."""

    def __init__(self, message: str) -> None:
        super().__init__(status.HTTP_422_UNPROCESSABLE_ENTITY, message)


def hosted_by_name(request: Request, name: str | None) -> Hosted:
    """The hosted assignment ``name`` names (None: the default).

    Raises:
        NotHosted: the service hosts none of that name (the message lists those it does).
    """
    try:
        return request.app.state.hosting.get(name)
    except UnknownAssignment as exc:
        raise NotHosted(str(exc)) from None


def hosted_by_form(request: Request, values: Sequence[object]) -> Hosted:
    """The hosted assignment an upload's form names: every value of its ``assignment`` field
    (none: the default). Which of two values was meant cannot be told, so a field sent more than
    once is refused, as is one sent as a file.

    Raises:
        NotHosted: the field is sent more than once, or as a file, or names an assignment the
            service does not host (the message lists those it does).
    """
    if len(values) > 1:
        sent = ", ".join(repr(v)[:110] if isinstance(v, str) else "a file" for v in values[:5])
        raise NotHosted(f"assignment: the form sends it {len(values)} times ({sent}); send it once, "
                        f"naming one of {', '.join(request.app.state.hosting.names)}")
    if values and not isinstance(values[0], str):
        raise NotHosted("assignment: expected the assignment's name as a form field, found a file")
    return hosted_by_name(request, values[0] if values else None)


def of_submission(request: Request, submission: Submission) -> Hosted:
    """The assignment a stored submission was made for.

    Raises:
        HTTPException: 409 when the service no longer hosts it (it was started with other assignments).
    """
    try:
        return request.app.state.hosting.get(submission.assignment)
    except UnknownAssignment:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"submission {submission.id} is for the assignment {submission.assignment!r}, which this service no "
            f"longer hosts (it hosts {', '.join(request.app.state.hosting.names)})") from None


def _from_query(
    request: Request,
    assignment: Annotated[str | None, Query(
        max_length=100, pattern=ASSIGNMENT_NAME,
        description="which hosted assignment (its folder's name; default: the service's default)")] = None,
) -> Hosted:
    return hosted_by_name(request, assignment)


HostedQuery = Annotated[Hosted, Depends(_from_query)]
