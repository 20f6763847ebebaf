"""Live torch comparisons as a job: every variant (and a submission's own implementation,
when its archive holds one) against torch on this worker's device, as the assignment's
``goldens/compare.py`` compares them."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from pathlib import Path

from sqlalchemy.orm import sessionmaker

from api.store import crud
from api.config import Settings, archive_limits, layout_of
from api.store.records import GoldenResult, VariantGolden
from grader.flows.archive import unpack
from grader.core.assignment import load_assignment
from grader.core.models import Outcome
from grader.core.variants import build_variants
from grader.flows.golden import device_in_use, load_comparison, load_implementation

__all__ = ["compare_variants", "run_golden"]


def compare_variants(settings: Settings, *, cases: int, seed: int = 0, assignment: str | None = None) -> GoldenResult:
    """Every variant of the hosted ``assignment`` (None: the default) against live torch on
    this machine's device (trusted code, in-process)."""
    layout = layout_of(settings, assignment)
    device, dtype = device_in_use()
    compare = load_comparison(layout.golden_code)
    rows = []
    reference_impl = None
    for variant in build_variants(layout):
        impl = load_implementation(variant.source, layout.reference, f"mutagrade_golden_{variant.id}")
        reference_impl = reference_impl or impl
        found = compare.live_deviations(impl, seed=seed, cases=cases, device=device, dtype=dtype)
        worst = max(found, key=lambda c: c.deviation)
        rows.append(VariantGolden(
            id=variant.id, kind=variant.kind.value, matches=all(c.matches for c in found),
            max_deviation=worst.deviation, worst=f"{worst.case}: {worst.worst}",
        ))
    speed = compare.golden_throughput(reference_impl, device=device, dtype=dtype, cases=128, batch=64, seed=seed)
    return GoldenResult(device=device, dtype=dtype, cases=cases, variants=rows, cases_per_s=speed.cases_per_s)


def run_golden(run_id: int, *, settings: Settings, make_session: sessionmaker) -> str:
    """Run one golden job by id (idempotent: only a queued run, or one whose worker died, is
    taken) and store its result."""
    worker = f"{socket.gethostname()[:50]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    with make_session() as session:
        run = crud.claim_golden_run(session, run_id, worker=worker, stale_after_s=settings.claim_lease_s)
    if run is None:
        return "skipped"
    try:
        result = compare_variants(settings, cases=run.cases, assignment=run.assignment)
        if run.submission_id is not None:
            from grader.flows.check import check_implementation
            from grader.flows.serving import RunLimits

            with make_session() as session:
                archive = crud.get_submission(session, run.submission_id).archive
            layout = layout_of(settings, run.assignment)
            with tempfile.TemporaryDirectory(prefix="mutagrade-golden-") as tmp:
                files = unpack(archive, Path(tmp), archive_limits(settings), tests=layout.student_tests)
                if files.implementation is None:
                    result.implementation_problems = ["the submission holds no python/tinyllm package"]
                    result.implementation_ok = False
                else:
                    limits = RunLimits.of(load_assignment(layout.assignment))
                    check = check_implementation(files.implementation, layout=layout, limits=limits)
                    result.implementation_ok = check.ok
                    result.implementation_problems = [
                        f"{t.id}: {t.outcome.value}" for t in check.tests if t.outcome != Outcome.PASSED
                    ] + check.problems
        outcome = {"result_json": result.model_dump_json()}
    except Exception as exc:  # noqa: BLE001 - stored with the run, the worker goes on
        outcome = {"error": f"{exc!r}"[:2000]}
    with make_session() as session:
        return crud.finish_golden_run(session, run_id, worker=worker, **outcome)
