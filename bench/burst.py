"""Burst throughput: N submissions posted at once to a fresh ``mutagrade serve``, graded by its
in-process workers, with ``GET /healthz`` timed all along.

Prints submissions graded per second, and p50/p99 latency of ``/healthz`` (while grading) and of
the POSTs. The server gets a temporary SQLite database unless ``--database-url`` names another
(e.g. the PostgreSQL of ``tests/services.py``). Each student may post ``ceil(N / students)``
times a minute and have as many in flight, so neither limit refuses anything.

With ``--sleeper`` it runs the burst twice, each on a fresh server: as it is, then with a hostile
student among the others who posts a suite whose test blocks in a fixture (``sleeper_archive``
in ``tests/api/burst.py``: no CPU, all the wall time its limit allows) just before the burst and
again every second while it lasts. It prints how long the burst's submissions waited in the
queue (stored to taken; median and max) and to their report, both times, and what the service
answered the sleeper.

    .venv/bin/python bench/burst.py [--submissions 100] [--students 10] [--workers 2] [--grade-jobs 1]
    .venv/bin/python bench/burst.py --sleeper --submissions 20 --students 10
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.api.burst import BurstResult, percentile, run_burst, small_archive  # noqa: E402
from tests.api.conftest import make_server  # noqa: E402


def burst(args: argparse.Namespace, *, sleeper: bool) -> BurstResult:
    """One burst on a fresh server (with the sleeper among the students when ``sleeper``)."""
    per_student = math.ceil(args.submissions / args.students)
    with tempfile.TemporaryDirectory(prefix="mutagrade-burst-") as tmp:
        server = make_server(
            Path(tmp), database_url=args.database_url, workers=str(args.workers), grade_jobs=str(args.grade_jobs),
            # The sleeper posts every second: only the limit on submissions in flight holds it back.
            rate_limit=str(1000 if sleeper else per_student), max_in_flight=str(max(2, per_student)),
        )
        server.start()
        try:
            return run_burst(
                server.url,
                student_tokens=[server.token(f"bench-{n:03d}") for n in range(args.students)],
                staff_token=server.token("bench-staff", "staff"),
                archive=small_archive(),
                count=args.submissions,
                threads=args.threads,
                timeout_s=args.timeout,
                min_health_samples=50 if args.sleeper else 300,
                sleeper_token=server.token("bench-sleeper") if sleeper else None,
            )
        finally:
            server.stop()


def figures(result: BurstResult, args: argparse.Namespace) -> dict[str, object]:
    graded = sum(status == "done" for status in result.final.values())
    return {
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


def waits(result: BurstResult) -> dict[str, float]:
    waited, turnaround = result.waited(), result.turnaround()
    return {
        "waited_median_s": round(statistics.median(waited), 1),
        "waited_max_s": round(max(waited), 1),
        "report_median_s": round(statistics.median(turnaround), 1),
        "report_max_s": round(max(turnaround), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--students", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="MUTAGRADE_WORKERS: grading threads")
    parser.add_argument("--grade-jobs", type=int, default=1, help="MUTAGRADE_GRADE_JOBS: children per grading run")
    parser.add_argument("--threads", type=int, default=16, help="client threads posting at once")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the grading")
    parser.add_argument("--sleeper", action="store_true",
                        help="also run the burst with a hostile sleeper among the students, and compare the waits")
    args = parser.parse_args()

    plain = burst(args, sleeper=False)
    print(f"burst: {plain.summary()}")
    print(json.dumps(figures(plain, args), indent=2))
    complete = sum(status == "done" for status in plain.final.values()) == args.submissions == len(plain.ids)
    if args.sleeper:
        hostile = burst(args, sleeper=True)
        print(f"burst with the sleeper: {hostile.summary()}")
        comparison = {
            "max_in_flight": max(2, math.ceil(args.submissions / args.students)),
            "without_sleeper": waits(plain),
            "with_sleeper": waits(hostile),
            "sleeper_answers": dict(Counter(hostile.sleeper_status)),
        }
        print(json.dumps(comparison, indent=2))
        complete &= sum(status == "done" for status in hostile.final.values()) == args.submissions == len(hostile.ids)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
