"""The JSON report (``schema: "mutagrade.report/2"``): the report model itself, serialised.

Nothing is reshaped here: the model's field order puts ``schema`` first and the fields SPEC §5
step 6 asks for (passed, score, tests, mutants, journal, policy, timing) are the model's own,
so ``Report.model_validate_json`` reads the output back into an equal report.
"""

from __future__ import annotations

from grader.core.models import Report

__all__ = ["render_json"]


def render_json(report: Report) -> str:
    """Render the report as indented JSON.

    Args:
        report: the graded suite.

    Returns:
        The JSON document, ending with a newline.
    """
    return report.model_dump_json(indent=2, by_alias=True) + "\n"
