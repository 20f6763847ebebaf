"""Grading throughput under Celery: submissions/s with one worker process and with two, side by
side in one run, and the scaling ratio.

Everything is real and on this machine: Redis, PostgreSQL (or SQLite), ``mutagrade serve``
with the celery queue, and ``mutagrade worker --queues cpu`` processes, each grading one job at
a time with one child (``MUTAGRADE_GRADE_JOBS=1``) and limited to one core: a grading run also
starts its second-hash-seed worker alongside the first (``grader/run/runner.py``), so an unpinned
job keeps about 1.5 cores busy, and one worker alone would already take most of a 2-core
machine. By default each worker process is therefore pinned to a core of its own
(``sched_setaffinity``, inherited by every process it starts), as ``taskset -c N mutagrade
worker`` or a container's cpuset would; ``--no-pin`` measures without.

Each round posts the same batch of N submissions of a small suite through the API, as fast as
it accepts them, and times from the first post to the last report. The 1-worker and 2-worker configurations alternate round by
round (so a change in the machine's load hits both), and the medians are compared.

    .venv/bin/python bench/throughput.py [--submissions 30] [--rounds 1] [--database postgres|sqlite] [--no-pin]

Besides the rates it prints, per configuration, the mean time a job spent graded (claim to
result, from the database), the CPU the workers and their grading processes used (a cgroup of
our own, where the machine allows) and the whole machine's, which tell contention (jobs get
slower when two run at once) from idle time (workers waiting for work) and from other load.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from sqlalchemy import create_engine, select, text  # noqa: E402

from api.store.db import Submission  # noqa: E402

from tests.services import (  # noqa: E402
    ApiProcess,
    WorkerProcess,
    free_port,
    postgres_server,
    redis_server,
    service_env,
)

# A small suite a student might hand in early: three valid tests, kills some mutants.
SUITE = {
    "test_small.py": '''import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import GRU


def test_shapes():
    out, h_n = GRU(3, 4, num_layers=2)(Tensor(np.ones((5, 2, 3))))
    assert out.data.shape == (5, 2, 4) and h_n.data.shape == (2, 2, 4)


def test_torch_names():
    keys = set(GRU(2, 3).state_dict())
    assert {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"} <= keys


def test_zero_input_zero_weights_keeps_zero_state():
    gru = GRU(2, 3)
    gru.load_state_dict({k: np.zeros_like(v) for k, v in gru.state_dict().items()})
    out, _ = gru(Tensor(np.zeros((4, 1, 2))))
    assert np.allclose(out.data, 0.0)
''',
}


def archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in SUITE.items():
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class Round:
    """One batch graded by one configuration."""

    workers: int
    count: int
    seconds: float
    mean_job_s: float
    cpu_s: float  # the whole machine's
    worker_cpu_s: float  # the workers' and their grading processes' (nan when not measurable)

    @property
    def rate(self) -> float:
        return self.count / self.seconds


def machine_cpu() -> float:
    """CPU seconds used by the whole machine so far (all processes): /proc/stat, in clock ticks."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4))  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


class CpuGroup:
    """CPU seconds used by some processes and everything they start (for the workers: the
    sandboxed grading processes included), through a cgroup v1 ``cpuacct`` group of our own.
    Other load on the machine does not count here, unlike :func:`machine_cpu`. Needs root and
    cgroup v1 ``cpuacct``; elsewhere :attr:`available` is false and nothing is measured."""

    def __init__(self, name: str) -> None:
        self.path = Path(f"/sys/fs/cgroup/cpuacct/mutagrade-bench-{os.getpid()}-{name}")
        try:
            self.path.mkdir()
            self.available = True
        except OSError:
            self.available = False

    def add(self, pid: int) -> None:
        # For a worker: right after it starts, before Celery forks its pool (it loads for a
        # second first), so every process it starts from then on is counted.
        if self.available:
            (self.path / "cgroup.procs").write_text(str(pid))

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9 if self.available else float("nan")

    def close(self) -> None:
        if self.available:
            # The group can go only when empty: move what is left (nothing, normally) to the root.
            root = self.path.parent / "tasks"
            for pid in (self.path / "tasks").read_text().split():
                try:
                    root.write_text(pid)
                except OSError:
                    pass
            try:
                self.path.rmdir()
            except OSError:
                pass


def run_batch(client: httpx.Client, database_url: str, count: int, payload: bytes, timeout: float) -> tuple[float, float]:
    """Post ``count`` submissions, wait for all; (wall seconds, mean seconds a job was graded)."""
    started = time.perf_counter()
    ids = []
    for number in range(count):
        answer = client.post("/v1/submissions", files={"archive": (f"small{number}.tar.gz", payload)})
        if answer.status_code != 202:
            raise SystemExit(f"POST refused ({answer.status_code}): {answer.text}")
        ids.append(answer.json()["id"])
    engine = create_engine(database_url)
    try:
        deadline = time.monotonic() + timeout
        query = text("SELECT count(*) FROM submissions WHERE id >= :lo AND id <= :hi AND status IN ('done', 'error')")
        while True:
            with engine.connect() as connection:
                finished = connection.scalar(query, {"lo": ids[0], "hi": ids[-1]})
            if finished == count:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {finished} of {count} graded within {timeout} s")
            time.sleep(0.05)
        wall = time.perf_counter() - started
        with engine.connect() as connection:
            # Through the model's columns: SQLite hands back text, the model's types parse it.
            rows = connection.execute(
                select(Submission.status, Submission.error, Submission.started_at, Submission.finished_at)
                .where(Submission.id.between(ids[0], ids[-1]))
            ).all()
    finally:
        engine.dispose()
    errors = [row.error for row in rows if row.status != "done"]
    if errors:
        raise SystemExit(f"{len(errors)} submission(s) ended in error, e.g. {errors[0]}")
    durations = [(row.finished_at - row.started_at).total_seconds() for row in rows]
    return wall, statistics.mean(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=30, help="submissions per batch (default 30)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each configuration (default 1)")
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a batch may take")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="limit each worker, and the grading processes it starts, to a core of "
                             "its own (default; --no-pin: MUTAGRADE_GRADE_JOBS=1 alone)")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))

    payload = archive()
    load_before = os.getloadavg()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mutagrade-bench-")))
        redis = stack.enter_context(redis_server())
        postmaster = None
        if args.database == "postgres":
            postgres = stack.enter_context(postgres_server())
            database_url = postgres.url
            postmaster = int((postgres.root / "data" / "postmaster.pid").read_text().split()[0])
        else:
            database_url = f"sqlite:///{tmp / 'bench.db'}"
        env = service_env(
            database_url=database_url, queue="celery", broker_url=redis.url, grade_jobs="1",
            rate_limit="1000000",  # the benchmark is one student posting a whole batch at once
        )
        api = ApiProcess(port=free_port(), env=env, log=tmp / "api.log")
        api.start()
        stack.callback(api.stop)
        made = subprocess.run([sys.executable, "-m", "api.cli", "admin", "token", "create", "--user", "bench",
                               "--role", "student"], env=env, capture_output=True, text=True, check=True)
        client = stack.enter_context(httpx.Client(base_url=api.url, timeout=60,
                                                  headers={"Authorization": f"Bearer {made.stdout.strip()}"}))
        accounting, service = CpuGroup("workers"), CpuGroup("service")
        stack.callback(accounting.close)
        stack.callback(service.close)
        # The rest of the service: the api, Redis and PostgreSQL's server (its backends, forked
        # for each connection from then on, are counted with it).
        for pid in (api.process.pid, redis.process.pid, postmaster):
            if pid is not None:
                service.add(pid)
        results: dict[int, list[Round]] = {1: [], 2: []}
        for round_number in range(args.rounds):
            for workers in (1, 2):
                pool = [WorkerProcess(name=f"bench{round_number}-{workers}-{n}@bench", env=env,
                                      log=tmp / f"worker-{round_number}-{workers}-{n}.log") for n in range(workers)]
                for number, worker in enumerate(pool):
                    worker.start(wait=False)
                    accounting.add(worker.process.pid)
                    if args.pin:
                        # Before Celery forks its pool (it loads for a second first): the pool
                        # and the grading processes it starts inherit the one core.
                        os.sched_setaffinity(worker.process.pid, {cpus[number % len(cpus)]})
                for number, worker in enumerate(pool):
                    worker.wait_ready()
                    if args.pin:
                        pinned = {os.sched_getaffinity(pid) == {cpus[number % len(cpus)]} for pid in worker.pids()}
                        if pinned != {True}:
                            raise SystemExit(f"worker {worker.name}: a process escaped its core")
                cpu_before, ours_before, service_before = machine_cpu(), accounting.seconds(), service.seconds()
                wall, mean_job = run_batch(client, database_url, args.submissions, payload, args.timeout)
                cpu, ours = machine_cpu() - cpu_before, accounting.seconds() - ours_before
                served = service.seconds() - service_before
                for worker in pool:
                    worker.stop()
                results[workers].append(Round(workers=workers, count=args.submissions, seconds=wall,
                                              mean_job_s=mean_job, cpu_s=cpu, worker_cpu_s=ours))
                print(f"round {round_number + 1}, {workers} worker(s): {args.submissions} in {wall:.1f} s = "
                      f"{args.submissions / wall:.2f}/s, a job {mean_job:.2f} s on average; workers' CPU "
                      f"{ours:.1f} s ({ours / args.submissions:.2f} s a job, {ours / wall:.2f} cores); api, redis "
                      f"and database {served / args.submissions:.3f} s a job; machine {cpu / wall:.2f} cores busy",
                      flush=True)

    def median(workers: int, what: str) -> float:
        return statistics.median(getattr(r, what) for r in results[workers])

    one, two = median(1, "rate"), median(2, "rate")
    cores = len(os.sched_getaffinity(0))
    print()
    print(f"database {args.database}, {args.submissions} submissions of a {len(SUITE)}-file suite per batch, "
          f"{args.rounds} round(s), {cores} cores, MUTAGRADE_GRADE_JOBS=1, "
          f"{'each worker pinned to one core' if args.pin else 'workers not pinned'}")
    print(f"load average before: {load_before[0]:.2f} (1 min), after: {os.getloadavg()[0]:.2f}")
    for workers, rate in ((1, one), (2, two)):
        busy = statistics.median(r.worker_cpu_s / r.seconds for r in results[workers])
        print(f"{workers} worker{'s' if workers > 1 else ' '}: {rate:.2f} submissions/s (a job "
              f"{median(workers, 'mean_job_s'):.2f} s, the workers keep {busy:.2f} of {cores} cores busy)")
    print(f"scaling_ratio: {two / one:.2f}x (target >= 1.7x on 2 cores)")


if __name__ == "__main__":
    main()
