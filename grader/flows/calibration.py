"""Calibration: proof that the variants are what the manifest says they are.

Runs the course tests against every variant (in the worker, like any suite) and checks:
the reference (twice, under two hash seeds) and every wheat pass every course test; every
mutant is killed, confirmed by a second run, by each course test of its ``caught_by``; and no
mutant is equivalent: the reference and the wheats match torch (the stored goldens, and live
torch where installed) and hold every contract property, while each mutant differs from
torch on at least one case or breaks the property its ``differs_on`` names. The comparison
with torch and the contract properties are the assignment's own: ``PROPERTIES``,
``golden_deviations`` and ``live_deviations`` of its ``goldens/compare.py``.
"""

from __future__ import annotations

import time
import types
from typing import Callable

from pydantic import BaseModel

from grader.flows.golden import CaseDeviation, load_comparison, load_goldens, load_implementation, torch_available
from grader.core.assignment import load_assignment
from grader.core.paths import Layout
from grader.core.matrix import Matrix
from grader.core.models import Outcome
from grader.run.scheduler import run_matrix
from grader.run.runner import RunLimits
from grader.core.variants import Variant, VariantKind, build_variants
from grader.sandbox.base import SandboxMode

__all__ = ["CalibrationReport", "VariantCalibration", "calibrate", "render_text"]


# ------------------------------------------------------------------------- results
class VariantCalibration(BaseModel):
    """What calibration found for one variant."""

    id: str
    kind: VariantKind
    title: str
    caught_by: list[str]
    killed_by: list[str]  # course tests whose failure was confirmed by a second run
    golden: list[CaseDeviation]
    live: list[CaseDeviation]
    properties: dict[str, bool]
    differs_on: str
    proof: str  # for a mutant: why it is not equivalent; empty if no proof was found


class CalibrationReport(BaseModel):
    """The tests × variants matrix and every deviation from what the manifest claims."""

    tests: list[str]
    matrix: dict[str, dict[str, str]]  # test -> variant -> pass | kill | fail | flaky | ...
    variants: list[VariantCalibration]
    problems: list[str]
    live_torch: bool
    duration_s: float

    @property
    def ok(self) -> bool:
        return not self.problems


def _cell(matrix: Matrix, test_id: str, variant: Variant) -> str:
    first = matrix.outcome(test_id, variant.id)
    if variant.kind is VariantKind.MUTANT:
        if matrix.confirmed_failure(test_id, variant.id):
            return "kill"
        return "flaky" if first.kills else first.value
    if variant.kind is VariantKind.REFERENCE:
        second = matrix.second[variant.id].outcome(test_id)
        if first is not second:
            return "flaky"
    return "pass" if first is Outcome.PASSED else first.value


def _name(test_id: str) -> str:
    """``file.py::test_x[param]`` -> ``test_x``: caught_by names course tests by function."""
    return test_id.split("::")[-1].split("[")[0]


def calibrate(layout: Layout, *, sandbox: SandboxMode = SandboxMode.AUTO, live: bool | None = None) -> CalibrationReport:
    """Run the whole calibration, under the limits of the layout's assignment.

    Args:
        layout: the checkout (reference, course tests, mutants, fixtures, assignment).
        sandbox: the sandbox the runs are made in.
        live: compare with live torch too; defaults to whether torch is installed.

    Returns:
        The report; ``report.ok`` is False when any claim of the manifest does not hold.

    Raises:
        ManifestError: if the manifest or a patch is invalid.
        AssignmentError: if the assignment is missing or invalid.
    """
    started = time.monotonic()
    # The course's own tests: their conftest is trusted.
    limits = RunLimits.of(load_assignment(layout.assignment), sandbox=sandbox, conftests=True)
    live = torch_available() if live is None else live
    variants = build_variants(layout)
    # Every cell run: the matrix is the point.
    matrix = run_matrix(layout=layout, tests_dir=layout.course_tests, variants=variants, limits=limits,
                        full_matrix=True)
    problems: list[str] = []
    if matrix.budget_stop is not None:  # the cells not run would read as claims that do not hold
        stop = matrix.budget_stop
        problems.append(
            f"the assignment's {stop.kind.value} budget ({stop.budget:g} s) ran out on variant {stop.variant or '?'} "
            f"in {stop.test}: the cells not run are not evidence; raise budget_{stop.kind.value}_s in "
            f"{layout.assignment} on this machine, or calibrate on a quieter one"
        )

    for variant in variants:
        for run in (matrix.first.get(variant.id), matrix.second.get(variant.id)):
            if run is not None and (run.crashed or run.collection_errors):
                detail = run.crashed or "; ".join(run.collection_errors)
                problems.append(f"variant {variant.id}: the course tests did not run cleanly: {detail}")

    tests = matrix.test_ids
    names = {_name(t) for t in tests}
    grid = {t: {v.id: _cell(matrix, t, v) for v in variants} for t in tests}
    for variant in variants:
        if variant.kind is VariantKind.MUTANT:
            for wanted in variant.spec.caught_by:
                if wanted not in names:
                    problems.append(f"variant {variant.id}: caught_by names {wanted!r}, which is no course test")
                for test_id in tests:
                    if _name(test_id) == wanted and grid[test_id][variant.id] != "kill":
                        problems.append(
                            f"cell ({test_id}, {variant.id}): expected a kill, got {grid[test_id][variant.id]}"
                        )
        else:
            for test_id in tests:
                if grid[test_id][variant.id] != "pass":
                    message = matrix.first[variant.id].results
                    why = next((r.message for r in message if r.test_id == test_id), "")
                    problems.append(
                        f"cell ({test_id}, {variant.id}): a {variant.kind.value} must pass, "
                        f"got {grid[test_id][variant.id]}" + (f": {why.splitlines()[0]}" if why else "")
                    )

    goldens = load_goldens(layout.goldens)
    compare = load_comparison(layout.golden_code)
    properties_of: dict[str, Callable[[types.ModuleType], bool]] = getattr(compare, "PROPERTIES", {})
    results = []
    for variant in variants:
        impl = load_implementation(variant.source, layout.reference, f"mutagrade_variant_{variant.id}")
        golden = compare.golden_deviations(impl, goldens)
        live_cases = compare.live_deviations(impl, seed=0, cases=4) if live else []
        properties = {}
        for prop, check in properties_of.items():
            try:
                properties[prop] = check(impl)
            except Exception:  # noqa: BLE001 - raising breaks the property as surely as failing
                properties[prop] = False
        proof = ""
        if variant.kind is VariantKind.MUTANT:
            if variant.spec.differs_on == "goldens":
                differing = [c for c in golden + live_cases if not c.matches]
                if differing:
                    c = differing[0]
                    proof = f"differs from torch on {len(differing)} case(s), first {c.case}: {c.worst} off by {c.deviation:.3g}"
                else:
                    problems.append(f"variant {variant.id}: equivalent? it matches torch on every golden case")
            elif variant.spec.differs_on not in properties_of:
                problems.append(
                    f"variant {variant.id}: field differs_on: expected 'goldens' or one of "
                    f"{sorted(properties_of)} (PROPERTIES of {layout.golden_code}), got {variant.spec.differs_on!r}"
                )
            elif properties[variant.spec.differs_on]:
                problems.append(f"variant {variant.id}: equivalent? the property {variant.spec.differs_on} still holds")
            else:
                proof = f"breaks the contract property {variant.spec.differs_on}"
        else:
            for c in golden + live_cases:
                if not c.matches:
                    problems.append(
                        f"variant {variant.id}: a {variant.kind.value} must match torch, "
                        f"but case {c.case} is off by {c.deviation:.3g} in {c.worst}"
                    )
            for prop, holds in properties.items():
                if not holds:
                    problems.append(f"variant {variant.id}: a {variant.kind.value} must hold {prop}, but breaks it")
        results.append(
            VariantCalibration(
                id=variant.id,
                kind=variant.kind,
                title=variant.spec.title,
                caught_by=list(variant.spec.caught_by),
                killed_by=[_name(t) for t in tests if grid[t][variant.id] == "kill"],
                golden=golden,
                live=live_cases,
                properties=properties,
                differs_on=variant.spec.differs_on,
                proof=proof,
            )
        )
    return CalibrationReport(
        tests=tests,
        matrix=grid,
        variants=results,
        problems=problems,
        live_torch=live,
        duration_s=round(time.monotonic() - started, 2),
    )


def _column(variant_id: str) -> str:
    return "ref" if variant_id == "reference" else variant_id[:4]


_SYMBOL = {"pass": ".", "kill": "K", "flaky": "?", "failed": "F", "error": "E", "timeout": "T", "missing": "M", "skipped": "S"}


def render_text(report: CalibrationReport) -> str:
    """The matrix as text: a row per course test, a column per variant, then the verdict."""
    ids = [v.id for v in report.variants]
    width = max(len(_name(t)) for t in report.tests) if report.tests else 10
    expected = {v.id: set(v.caught_by) for v in report.variants}
    lines = [
        "Course tests x variants   (. pass   K killed, as the manifest says   k killed, beyond it",
        "                           X expected kill missing   F/E/T/M fails on a correct variant   ? flaky)",
        "",
        " " * width + "  " + " ".join(f"{_column(i):>4}" for i in ids),
    ]
    for test in report.tests:
        cells = []
        for v in report.variants:
            status = report.matrix[test][v.id]
            if v.kind is VariantKind.MUTANT:
                listed = _name(test) in expected[v.id]
                symbol = ("K" if listed else "k") if status == "kill" else ("X" if listed else ".")
            else:
                symbol = _SYMBOL.get(status, "?")
            cells.append(f"{symbol:>4}")
        lines.append(f"{_name(test):<{width}}  " + " ".join(cells))
    lines.append("")
    lines.append("Not equivalent:")
    for v in report.variants:
        if v.kind is VariantKind.MUTANT:
            lines.append(f"  {v.id}: {v.proof or 'NO PROOF'}")
    lines.append("")
    worst = max((c.deviation for v in report.variants if v.kind is not VariantKind.MUTANT for c in v.golden + v.live), default=0.0)
    lines.append(
        f"Reference and wheats vs torch: worst deviation {worst:.3g} "
        f"({'stored goldens and live torch' if report.live_torch else 'stored goldens; torch not installed'})"
    )
    lines.append(f"Calibration took {report.duration_s:.1f} s.")
    if report.problems:
        lines.append("")
        lines.append(f"CALIBRATION FAILED: {len(report.problems)} problem(s)")
        lines.extend(f"  - {p}" for p in report.problems)
    else:
        lines.append("Calibration OK: every variant is what the manifest says.")
    return "\n".join(lines)
