"""Live torch comparisons as a job: every variant (and a submission's own implementation,
when its archive holds one) against ``torch.nn.GRU`` on this worker's device."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy import and_, or_, update
from sqlalchemy.orm import sessionmaker

from grader.core.archive import unpack
from api.config import Settings
from api.db import GoldenRun, Submission, utcnow
from api.jobs import archive_limits, layout_of
from grader.core.assignment import load_assignment
from grader.flows.golden import device_in_use, golden_throughput, live_deviations, load_implementation
from grader.core.variants import build_variants

__all__ = ["GoldenResult", "VariantGolden", "compare_variants", "run_golden"]


class VariantGolden(BaseModel):
    id: str
    kind: str
    matches: bool
    max_deviation: float
    worst: str


class GoldenResult(BaseModel):
    device: str
    dtype: str
    cases: int
    variants: list[VariantGolden]
    cases_per_s: float
    implementation_ok: bool | None = None  # a submission's own package, where one was given
    implementation_problems: list[str] = []


def compare_variants(settings: Settings, *, cases: int, seed: int = 0) -> GoldenResult:
    """Every variant against live torch on this machine's device (trusted code, in-process)."""
    layout = layout_of(settings)
    device, dtype = device_in_use()
    rows = []
    reference_impl = None
    for variant in build_variants(layout):
        impl = load_implementation(variant.source, layout.reference, f"mutagrade_golden_{variant.id}")
        reference_impl = reference_impl or impl
        found = live_deviations(impl, seed=seed, cases=cases, device=device, dtype=dtype)
        worst = max(found, key=lambda c: c.deviation)
        rows.append(VariantGolden(
            id=variant.id, kind=variant.kind.value, matches=all(c.matches for c in found),
            max_deviation=worst.deviation, worst=f"{worst.case}: {worst.worst}",
        ))
    speed = golden_throughput(reference_impl, device=device, dtype=dtype, cases=128, batch=64, seed=seed)
    return GoldenResult(device=device, dtype=dtype, cases=cases, variants=rows, cases_per_s=speed.cases_per_s)


def _claim(make_session: sessionmaker, run_id: int, worker: str, stale_after_s: float) -> GoldenRun | None:
    """Take a queued run, or one whose claim is older than ``stale_after_s`` (its worker died
    and the broker handed the job on); None otherwise."""
    stale = utcnow() - timedelta(seconds=stale_after_s)
    with make_session() as session:
        claimed = session.execute(
            update(GoldenRun)
            .where(
                GoldenRun.id == run_id,
                or_(GoldenRun.status == "queued", and_(GoldenRun.status == "running", GoldenRun.started_at < stale)),
            )
            .values(status="running", claimed_by=worker, started_at=utcnow())
        )
        session.commit()
        return session.get(GoldenRun, run_id) if claimed.rowcount == 1 else None


def run_golden(run_id: int, *, settings: Settings, make_session: sessionmaker) -> str:
    """Run one golden job by id (idempotent: only a queued run, or one whose worker died, is
    taken) and store its result."""
    worker = f"{socket.gethostname()[:50]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    run = _claim(make_session, run_id, worker, settings.claim_lease_s)
    if run is None:
        return "skipped"
    try:
        result = compare_variants(settings, cases=run.cases)
        if run.submission_id is not None:
            from grader.flows.check import check_implementation

            with make_session() as session:
                archive = session.get(Submission, run.submission_id).archive
            layout = layout_of(settings)
            with tempfile.TemporaryDirectory(prefix="mutagrade-golden-") as tmp:
                files = unpack(archive, Path(tmp), archive_limits(settings))
                if files.implementation is None:
                    result.implementation_problems = ["the submission holds no python/tinyllm package"]
                    result.implementation_ok = False
                else:
                    limits = load_assignment(layout.assignment).run_limits()
                    check = check_implementation(files.implementation, layout=layout, limits=limits)
                    result.implementation_ok = check.ok
                    result.implementation_problems = [
                        f"{t.id}: {t.outcome.value}" for t in check.tests if t.outcome.value != "passed"
                    ] + check.problems
        values = {"status": "done", "result_json": result.model_dump_json()}
    except Exception as exc:  # noqa: BLE001 - stored with the run, the worker goes on
        values = {"status": "error", "error": f"{exc!r}"[:2000]}
    with make_session() as session:
        session.execute(
            update(GoldenRun).where(GoldenRun.id == run_id, GoldenRun.claimed_by == worker)
            .values(finished_at=utcnow(), **values)
        )
        session.commit()
    return values["status"]
