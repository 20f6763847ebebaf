"""Burst throughput: N submissions posted at once to a fresh ``mutagrade serve``, graded by its
in-process workers, with ``GET /healthz`` timed all along.

Prints submissions graded per second, and p50/p99 latency of ``/healthz`` (while grading) and of
the POSTs. The server gets a temporary SQLite database unless ``--database-url`` names another
(e.g. the PostgreSQL of ``tests/services.py``). Each student may post ``ceil(N / students)``
times a minute, so the rate limit refuses nothing.

    .venv/bin/python bench/burst.py [--submissions 100] [--students 10] [--workers 2] [--grade-jobs 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.api.burst import percentile, run_burst, small_archive  # noqa: E402
from tests.api.conftest import make_server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--students", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="MUTAGRADE_WORKERS: grading threads")
    parser.add_argument("--grade-jobs", type=int, default=1, help="MUTAGRADE_GRADE_JOBS: children per grading run")
    parser.add_argument("--threads", type=int, default=16, help="client threads posting at once")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the grading")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mutagrade-burst-") as tmp:
        server = make_server(
            Path(tmp), database_url=args.database_url, workers=str(args.workers), grade_jobs=str(args.grade_jobs),
            rate_limit=str(math.ceil(args.submissions / args.students)),
        )
        server.start()
        try:
            result = run_burst(
                server.url,
                student_tokens=[server.token(f"bench-{n:03d}") for n in range(args.students)],
                staff_token=server.token("bench-staff", "staff"),
                archive=small_archive(),
                count=args.submissions,
                threads=args.threads,
                timeout_s=args.timeout,
            )
        finally:
            server.stop()

    graded = sum(status == "done" for status in result.final.values())
    figures = {
        "submissions": args.submissions,
        "accepted": len(result.ids),
        "graded": graded,
        "workers": args.workers,
        "grade_jobs": args.grade_jobs,
        "cores": len(os.sched_getaffinity(0)),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "posted_s": round(result.posted_s, 2),
        "graded_s": round(result.graded_s, 1),
        "submissions_per_s": round(result.graded_per_s, 3),
        "healthz_requests": len(result.health_latency),
        "healthz_retried": len(result.health_retried),
        "healthz_unanswered": len(result.health_errors),
        "healthz_p50_ms": round(percentile(result.health_latency, 50) * 1e3, 1),
        "healthz_p99_ms": round(percentile(result.health_latency, 99) * 1e3, 1),
        "post_p50_ms": round(percentile(result.post_latency, 50) * 1e3, 1),
        "post_p99_ms": round(percentile(result.post_latency, 99) * 1e3, 1),
    }
    print(result.summary())
    print(json.dumps(figures, indent=2))
    return 0 if graded == args.submissions == len(result.ids) else 1


if __name__ == "__main__":
    sys.exit(main())
