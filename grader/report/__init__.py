"""Reporters: each renders the report model in one format, and this is the one list of them.

Adding a format is adding a module with a ``render_<format>(report) -> str`` and one line in
:data:`RENDERERS`.
"""

from __future__ import annotations

from typing import Callable

from grader.core.models import Report
from grader.report.github import render_github
from grader.report.gradescope import render_gradescope
from grader.report.html import render_html
from grader.report.json import render_json
from grader.report.junit import render_junit
from grader.report.text import render_text

__all__ = ["RENDERERS", "render"]

RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": render_text,
    "json": render_json,
    "junit": render_junit,
    "gradescope": render_gradescope,
    "github": render_github,
    "html": render_html,
}


def render(report: Report, fmt: str) -> str:
    """Render ``report`` in the format named ``fmt``.

    Args:
        report: the graded suite.
        fmt: a key of :data:`RENDERERS`.

    Returns:
        The rendered document.

    Raises:
        TypeError: ``report`` is not a :class:`~grader.core.models.Report`.
        ValueError: ``fmt`` names no format.
    """
    if not isinstance(report, Report):
        raise TypeError(f"report must be a Report, got {type(report).__name__}")
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"format must be one of {', '.join(RENDERERS)}, got {fmt!r}")
    return renderer(report)
