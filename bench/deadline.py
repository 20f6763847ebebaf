"""Deadline night, side by side in one run: ``grade-batch`` of N copies of the bundled suite,
and the same N with 5 % sleeping suites and 1 % looping suites mixed in (their throughputs and
the ratio between them); the plain batch on 1 core and on 2 (``taskset``); and, with
``--burst``, the service under a burst of the same mix (``bench/burst.py``'s measurement).

A sleeping suite blocks in a fixture until its time limit (no CPU: ``tests/api/burst.py``'s
sleeper); a looping suite holds a module that raises at import on every mutant whose hand
example differs (``tests/grader/test_structure_loops.py``), which once held a grading for its
whole wall budget.

    .venv/bin/python bench/deadline.py [--n 40] [--cores 0 0,1] [--rounds 1]
    .venv/bin/python bench/deadline.py --burst [--submissions 200] [--students 100] [--queues local celery]
    .venv/bin/python bench/deadline.py --floor [--n 20]

``--floor`` asks what a grading cannot go below on this machine: ``grade-batch`` of N copies of
three suites side by side, one test that calls nothing (no mutant killed: the fewest runs any
grading makes, two of the reference, one of each wheat and mutant), the hand example alone (it
kills 5 of 12: each kill confirmed) and the bundled suite, each with the machine's CPU time per
grading and per suite run, and the throughput the CPU alone allows (the cores over the CPU a
grading takes) against a target of ``--target`` submissions a second.

Each batch figure is one ``mutagrade grade-batch`` process, the real command line, timed from
start to exit; submissions per second is N over that time. A burst posts the mix over real HTTP
to a real ``mutagrade serve`` (the embedded queue on SQLite, or the Celery queue with two
``mutagrade worker`` processes, Redis and PostgreSQL) and reads, from the service's own
timestamps, how long each ordinary submission waited in the queue, in gradings' worth: its wait
over the median time an ordinary submission took to grade in that burst.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.api.burst import SLEEPER_SUITE, BurstResult, percentile, run_burst, sleeper_archive  # noqa: E402
from tests.api.conftest import make_server, tar_gz  # noqa: E402
from tests.services import ApiProcess, WorkerProcess, free_port, postgres_server, redis_server, service_env  # noqa: E402
from tests.grader.test_structure_loops import RAISES  # noqa: E402
from ab_grade import busy_seconds  # noqa: E402

BUNDLED = ROOT / "examples" / "student" / "python" / "tests" / "l3-3-gru"
MUTAGRADE = [sys.executable, "-m", "grader.cli"]


def make_batch(folder: Path, n: int, *, sleepers: int = 0, loopers: int = 0) -> Path:
    """N students: the bundled suite, with ``sleepers`` and ``loopers`` among them, spread out."""
    folder.mkdir(parents=True)
    hostile = {}
    for k in range(sleepers):
        hostile[(k * n) // max(1, sleepers) + 1] = ("test_sleeper.py", SLEEPER_SUITE.format(timeout=""))
    for k in range(loopers):
        hostile[(k * n) // max(1, loopers) + n // (2 * max(1, loopers))] = ("test_loop.py", RAISES)
    for i in range(n):
        student = folder / f"student-{i:04d}"
        if i in hostile:
            student.mkdir()
            name, text = hostile[i]
            (student / name).write_text(text)
        else:
            shutil.copytree(BUNDLED, student)
    return folder


def grade_batch(batch: Path, out: Path, cores: str | None, reports: Path | None = None) -> float:
    """Seconds one ``mutagrade grade-batch`` of ``batch`` takes (under ``taskset -c cores``)."""
    command = [*MUTAGRADE, "grade-batch", str(batch), "--output", str(out)]
    if reports is not None:
        command += ["--reports", str(reports)]
    if cores is not None:
        command = ["taskset", "-c", cores, *command]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"grade-batch failed ({done.returncode}): {done.stderr[-2000:]}")
    return took


FLOOR_SUITES = {
    "one test, no call": "def test_nothing_is_called():\n    assert 1 + 1 == 2\n",
    "the hand example alone": (BUNDLED / "test_gru.py").read_text().split("\ndef test_hand_example_gradient")[0],
    "the bundled suite": (BUNDLED / "test_gru.py").read_text(),
}


def floor(base: Path, n: int, target: float) -> None:
    """Each of :data:`FLOOR_SUITES` graded N times in one batch: what a grading costs, by its runs."""
    cores = len(os.sched_getaffinity(0))
    print(f"load average at the start: {os.getloadavg()[0]:.2f}; cores: {cores}; {n} submissions a batch; "
          f"the target, {target}/s, leaves {cores / target:.2f} CPU-s a grading")
    for k, (name, text) in enumerate(FLOOR_SUITES.items()):
        batch, reports = base / f"floor-{k}", base / f"floor-{k}-reports"
        for i in range(n):
            (batch / f"student-{i:04d}").mkdir(parents=True)
            (batch / f"student-{i:04d}" / "test_gru.py").write_text(text)
        before = busy_seconds()
        took = grade_batch(batch, base / f"floor-{k}.csv", None, reports)
        cpu = busy_seconds() - before
        timings = [json.loads(p.read_text())["timing"] for p in reports.glob("*.json")]
        runs = statistics.mean(t["runs"] for t in timings)
        children = statistics.mean(t["cpu_s"] for t in timings)
        print(f"{name}: {n / took:.2f}/s; {cpu / n:.3f} CPU-s a grading ({children:.3f} in its runs' processes), "
              f"{runs:.1f} runs, {1000 * cpu / n / runs:.1f} ms of CPU a run all told; the CPU allows "
              f"{cores * n / cpu:.2f}/s, {cores * n / cpu / target:.2f} of the target", flush=True)


def mix(n: int, hostile: bool = True) -> Callable[[int], tuple[str, bytes]]:
    """The burst's i-th suite: 5 % sleeping, 1 % looping, spread out (none unless ``hostile``);
    the rest the bundled one."""
    ordinary = tar_gz({p.name: p.read_bytes() for p in BUNDLED.glob("*.py")})
    sleeper, looper = sleeper_archive(), tar_gz({"test_loop.py": RAISES})
    sleepers, loopers = (max(1, round(0.05 * n)), max(1, round(0.01 * n))) if hostile else (0, 0)
    kinds = {(k * n) // sleepers: ("sleeping", sleeper) for k in range(sleepers)}
    kinds.update({(k * n) // loopers + n // (2 * loopers) + 1: ("looping", looper) for k in range(loopers)})
    kinds = {i: kind for i, kind in kinds.items() if i < n}
    return lambda i: kinds.get(i, ("ordinary", ordinary))


def burst_figures(plain: BurstResult, mixed: BurstResult) -> str:
    """Each ordinary submission's wait, with the mix and without, and what the mix added, in
    gradings' worth (the median time an ordinary submission took to grade in the plain burst)."""
    one = statistics.median(plain.graded_by_kind("ordinary") or [float("nan")])
    lines = []
    for name, result in (("plain", plain), ("with the mix", mixed)):
        waits = result.waited_by_kind("ordinary")
        lines.append(f"  {name}: {len(waits)} ordinary graded in {result.graded_s:.1f} s, statuses "
                     f"{dict(Counter(result.final.values()))}; wait median {statistics.median(waits):.1f} s, "
                     f"95th percentile {percentile(waits, 95):.1f} s")
    added = [statistics.median(mixed.waited_by_kind("ordinary")) - statistics.median(plain.waited_by_kind("ordinary")),
             percentile(mixed.waited_by_kind("ordinary"), 95) - percentile(plain.waited_by_kind("ordinary"), 95)]
    lines.append(f"  one grading {one:.2f} s; the mix added to an ordinary submission's wait: median "
                 f"{added[0] / one:.2f} gradings' worth, 95th percentile {added[1] / one:.2f}")
    return "\n".join(lines)


def burst_local(tmp: Path, args: argparse.Namespace, hostile: bool) -> BurstResult:
    server = make_server(tmp, rate_limit="100000", max_in_flight="100000")
    server.start()
    try:
        return _burst(server.url, lambda user, role: server.token(user, role), args, hostile)
    finally:
        server.stop()


def burst_celery(tmp: Path, args: argparse.Namespace, hostile: bool) -> BurstResult:
    with ExitStack() as stack:
        redis = stack.enter_context(redis_server())
        postgres = stack.enter_context(postgres_server())
        env = service_env(database_url=postgres.url, queue="celery", broker_url=redis.url,
                          rate_limit="100000", max_in_flight="100000")
        api = ApiProcess(port=free_port(), env=env, log=tmp / "api.log")
        api.start()
        stack.callback(api.stop)
        for n in range(2):
            worker = WorkerProcess(name=f"deadline-{n}@bench", env=env, log=tmp / f"worker-{n}.log",
                                   args=["worker", "--queues", "cpu", "--hostname", f"deadline-{n}@bench"])
            worker.start()
            stack.callback(worker.stop)

        def token(user: str, role: str) -> str:
            made = subprocess.run([sys.executable, "-m", "api.cli", "admin", "token", "create", "--user", user,
                                   "--role", role], env=env, capture_output=True, text=True, check=True)
            return made.stdout.strip()

        return _burst(api.url, token, args, hostile)


def _burst(url: str, token: Callable[[str, str], str], args: argparse.Namespace, hostile: bool) -> BurstResult:
    return run_burst(
        url,
        student_tokens=[token(f"deadline-{n:03d}", "student") for n in range(args.students)],
        staff_token=token("deadline-staff", "staff"),
        archive=mix(args.submissions, hostile),
        count=args.submissions,
        threads=16,
        min_health_samples=50,
        timeout_s=1800,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="submissions per batch")
    parser.add_argument("--cores", nargs="*", default=["0", "0,1"], help="taskset core lists to compare")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--burst", action="store_true", help="the service under a burst of the mix instead")
    parser.add_argument("--submissions", type=int, default=200)
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--queues", nargs="*", default=["local", "celery"])
    parser.add_argument("--floor", action="store_true", help="what a grading costs by its runs, three suites")
    parser.add_argument("--target", type=float, default=3.3, help="submissions a second --floor compares with")
    args = parser.parse_args()
    if args.floor:
        with tempfile.TemporaryDirectory(prefix="mutagrade-floor-") as tmp:
            floor(Path(tmp), args.n, args.target)
        return
    if args.burst:
        print(f"load average at the start: {os.getloadavg()[0]:.2f}; cores: {len(os.sched_getaffinity(0))}; "
              f"{args.submissions} submissions from {args.students} students, 5 % sleeping, 1 % looping")
        for queue in args.queues:
            results = []
            for hostile in (False, True):
                with tempfile.TemporaryDirectory(prefix="mutagrade-burst-") as tmp:
                    results.append((burst_celery if queue == "celery" else burst_local)(Path(tmp), args, hostile))
            print(f"{queue} queue:\n{burst_figures(*results)}", flush=True)
        return
    n = args.n
    sleepers, loopers = max(1, round(0.05 * n)), max(1, round(0.01 * n))
    with tempfile.TemporaryDirectory(prefix="mutagrade-deadline-") as tmp:
        base = Path(tmp)
        plain = make_batch(base / "plain", n)
        mixed = make_batch(base / "mixed", n, sleepers=sleepers, loopers=loopers)
        print(f"load average at the start: {os.getloadavg()[0]:.2f}; cores: {len(os.sched_getaffinity(0))}")
        print(f"{n} submissions; the mix: {sleepers} sleeping, {loopers} looping")
        for round_ in range(args.rounds):
            t_plain = grade_batch(plain, base / "plain.csv", None)
            t_mixed = grade_batch(mixed, base / "mixed.csv", None)
            print(f"round {round_ + 1}: plain {t_plain:.1f} s ({n / t_plain:.2f}/s), with the mix {t_mixed:.1f} s "
                  f"({n / t_mixed:.2f}/s): mixed / plain throughput {t_plain / t_mixed:.2f}")
            if not args.cores:
                continue
            by_cores = {cores: grade_batch(plain, base / f"cores-{cores}.csv", cores) for cores in args.cores}
            line = ", ".join(f"cores {c}: {t:.1f} s ({n / t:.2f}/s)" for c, t in by_cores.items())
            first = next(iter(by_cores.values()))
            ratios = ", ".join(f"{c} / {args.cores[0]}: {first / t:.2f}" for c, t in list(by_cores.items())[1:])
            print(f"round {round_ + 1}: {line}; throughput {ratios}")


if __name__ == "__main__":
    main()
