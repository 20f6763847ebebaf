"""Where one ``mutagrade grade`` of the bundled suite spends its time, part by part.

Each part is measured on its own, in this one run:

* the command's start-up: importing the command line, then the grading path (``-X importtime``);
* a worker's start-up: its imports, then pytest's configuration and the one-time assert
  rewriting (cProfile of :func:`grader.worker.setup.prepare_job`, the top entries printed);
* each child's phases in a real grading (lock-down and installing the variant, collecting the
  test files, running them, and of that the tests' own time), from the runs' own reports;
* what a fork costs: a worker set up as for a grading forks children, empty ones and ones that
  run the suite against the reference; each child's CPU (and of that the kernel's), its page
  faults by phase, and the faults the worker itself takes for each fork (:func:`fork_cost`);
* confirmation runs, and rendering the report in every format;
* the CPU budget of one whole ``mutagrade grade`` (a fresh process each time): the command's
  own CPU, its workers' (their imports and set-up) and their children's (the suite runs, and
  of that the tests' own time), against the wall time. On a machine whose cores are all busy
  for the whole grading, the wall time cannot drop below the CPU spent divided by the cores.

    .venv/bin/python bench/profile_grade.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from grader.core.assignment import load_assignment  # noqa: E402
from grader.flows.grading import grade_suite  # noqa: E402
from grader.core.paths import default_layout  # noqa: E402
from grader.core.models import Purpose  # noqa: E402
from grader.report import RENDERERS, render  # noqa: E402
from grader.run.scheduler import run_matrix  # noqa: E402
from grader.core.variants import build_variants  # noqa: E402
from grader.core.contract import read_contract  # noqa: E402
from grader.core.protocol import JobSettings  # noqa: E402
from grader.run.runner import RunLimits, job_settings  # noqa: E402

from ab_grade import TESTS, busy_seconds  # noqa: E402 - beside this script


def import_ms(statement: str) -> float:
    """Median over three fresh interpreters of the cumulative import time of ``statement``'s modules."""
    times = []
    for _ in range(3):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", statement],
                              capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        total = 0
        for line in done.stderr.splitlines():
            parts = line.split("|")
            # Top-level imports only (no leading spaces before the name): their cumulative times add up.
            if len(parts) == 3 and parts[2].startswith(" ") and not parts[2].startswith("  "):
                try:
                    total += int(parts[1])
                except ValueError:
                    pass
        times.append(total / 1000)
    return statistics.median(times)


def interpreter_ms() -> float:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _job(tests: str) -> JobSettings:
    """A worker's job for ``tests`` on the reference, under the assignment's limits."""
    layout = default_layout()
    limits = RunLimits.of(load_assignment(layout.assignment), jobs=1)  # one child at a time, as measured
    return job_settings(limits, reference=str(layout.package_dir), tests=tests, hash_seed=1,
                        contract=read_contract(layout.contract_stub, layout.module_under_test))


def worker_setup_profile() -> tuple[float, str]:
    """cProfile of a worker's one-time set-up, in a fresh interpreter (imports are cold there)."""
    job = _job(str(TESTS))
    script = (
        "import cProfile, pstats, io, sys, time, json\n"
        "from grader.core.protocol import JobSettings\n"
        f"job = JobSettings.from_message(json.loads({job.to_frame()[4:].decode()!r}))\n"
        "profile = cProfile.Profile(); started = time.perf_counter(); profile.enable()\n"
        "import grader.worker.setup as w; w.prepare_job(job); w.job_session(job)\n"
        "profile.disable(); took = time.perf_counter() - started\n"
        "out = io.StringIO(); pstats.Stats(profile, stream=out).sort_stats('cumulative').print_stats(12)\n"
        "print(took); print(out.getvalue())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    took, _, table = done.stdout.partition("\n")
    return float(took), table


# A worker set up in a fresh interpreter (no sandbox: only the costs of forking and running are
# measured), forking children one at a time. An empty child exits at once; a running child
# installs the reference as its variant, collects and runs the suite (results to /dev/null), and
# writes its figures on a pipe. Each phase's page faults are the child's minor faults meanwhile;
# "kernel" is its system time (the copying on write, mapping, and exit).
_FORK_SCRIPT = """
import gc, json, os, resource, statistics, sys, time
from grader.run.codecache import variant_code
from grader.core.paths import default_layout
from grader.core.protocol import JobSettings
import grader.worker.setup as worker
from grader.worker.child import install_variant

layout = default_layout()
job = JobSettings.from_message(json.loads(sys.argv[3]))
worker.prepare_job(job)
session = worker.job_session(job)
source = layout.module_source.read_text()
code = variant_code(source, job.contract.filename) or b""
gc.freeze()
gc.enable()


def child(empty):
    usage = resource.getrusage(resource.RUSAGE_SELF)
    faults, clock, row = [usage.ru_minflt], [time.perf_counter()], {}
    if not empty:
        def mark():
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
            clock.append(time.perf_counter())

        install_variant(source, code, job.contract)
        mark()
        reporter = session.reporter
        # /dev/zero takes the events and answers every wait for the go-ahead at once.
        reporter.fd, reporter.token = os.open("/dev/zero", os.O_RDWR), b"-"
        hook = session.config.hook
        hook.pytest_collection(session=session.session)
        mark()
        hook.pytest_runtestloop(session=session.session)
        mark()
        for n, name in enumerate(("install", "collect", "run")):
            row[name + "_ms"] = (clock[n + 1] - clock[n]) * 1000
            row[name + "_faults"] = faults[n + 1] - faults[n]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    row["faults"] = usage.ru_minflt
    return row


rows = {"empty": [], "reference": []}
for n in range(int(sys.argv[2])):
    for kind in rows:
        read, write = os.pipe()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            os.write(write, json.dumps(child(kind == "empty")).encode())
            os._exit(0)
        forked = time.perf_counter() - started
        worker_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        os.close(write)
        data = b""
        while chunk := os.read(read, 65536):
            data += chunk
        os.close(read)
        _, _, usage = os.wait4(pid, 0)
        row = json.loads(data)
        row.update(fork_ms=forked * 1000, worker_faults=worker_faults,
                   cpu_ms=(usage.ru_utime + usage.ru_stime) * 1000, kernel_ms=usage.ru_stime * 1000)
        rows[kind].append(row)
print(json.dumps({kind: {key: statistics.median(r[key] for r in found) for key in found[0]} for kind, found in rows.items()}))
os._exit(0)
"""


def fork_cost(children: int = 12) -> dict[str, dict[str, float]]:
    """Medians over ``children`` forks of each kind (empty, running the reference), from a worker
    set up in a fresh interpreter: see :data:`_FORK_SCRIPT`."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT, str(TESTS), str(children), _job(str(TESTS)).to_frame()[4:].decode()],
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"the fork measurement failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


_BUDGET_SCRIPT = """
import json, os, resource, sys, time
started = time.perf_counter()
from grader.cli import main, start_process
start_process()  # as the mutagrade command does (its run() ends the process: nothing printed after)
code = main(sys.argv[1:])
wall = time.perf_counter() - started
own = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"code": code, "wall": wall, "own": own.ru_utime + own.ru_stime}))
os._exit(0)
"""


def cpu_budget(rounds: int = 5) -> dict[str, float]:
    """Medians over ``rounds`` whole gradings, each in a fresh process: wall seconds and CPU
    seconds of the command itself, of its workers (the machine's busy time over the grading,
    less the command and the runs: the sandbox's own processes are counted here), of the runs
    (the workers' children) and of the tests inside them. Run it on an otherwise idle machine."""
    rows: dict[str, list[float]] = {k: [] for k in ("wall", "command", "workers", "runs", "tests")}
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "report.json"
        for _ in range(rounds):
            busy = busy_seconds()
            done = subprocess.run(
                [sys.executable, "-c", _BUDGET_SCRIPT, "grade", str(TESTS), "--format", "json", "--output", str(output)],
                capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            if done.returncode != 0 or not done.stdout.strip():
                raise SystemExit(f"grading failed ({done.returncode}):\n{done.stderr[-2000:]}")
            spent = busy_seconds() - busy
            usage = json.loads(done.stdout.strip().splitlines()[-1])
            timing = json.loads(output.read_text())["timing"]
            rows["wall"].append(usage["wall"])
            rows["command"].append(usage["own"])
            rows["workers"].append(spent - usage["own"] - timing["cpu_s"])
            rows["runs"].append(timing["cpu_s"])
            rows["tests"].append(timing["tests_s"])
    return {k: statistics.median(v) for k, v in rows.items()}


def main() -> None:
    layout = default_layout()
    assignment = load_assignment(layout.assignment)
    print(f"cores: {os.cpu_count()}; load average at start: {os.getloadavg()[0]:.2f}")
    print(f"python -c pass                                {interpreter_ms():7.1f} ms")
    print(f"import grader.cli (what runs before the workers start)  {import_ms('import grader.cli'):7.1f} ms")
    print(f"import the grading path (grading, report)     {import_ms('import grader.flows.grading, grader.report'):7.1f} ms")
    print(f"a worker's imports (pytest, numpy, worker)    "
          f"{import_ms('import _pytest.config, _pytest.main, _pytest.python, numpy, grader.worker'):7.1f} ms")
    took, table = worker_setup_profile()
    print(f"a worker's set-up (prepare_job and job_session: imports, pytest configured, asserts rewritten)  {took * 1000:7.1f} ms")
    print("  cProfile, top entries by cumulative time:")
    print("\n".join("    " + line for line in table.strip().splitlines()[:24]))

    variants = build_variants(layout)
    started = time.perf_counter()
    matrix = run_matrix(layout=layout, tests_dir=TESTS, variants=variants, limits=RunLimits.of(assignment))
    wall = time.perf_counter() - started
    runs = [*matrix.first.values(), *matrix.second.values()]
    ran = [r for r in runs if r.phases]
    phases = {name: [r.phases.get(name, 0.0) * 1000 for r in ran] for name in ("setup", "collect", "run")}
    tests = [sum(t.duration for t in r.results) * 1000 for r in ran]
    print(f"run_matrix on the bundled suite: {wall * 1000:.0f} ms wall, {matrix.runs} suite runs "
          f"({sum(1 for r in runs if r.purpose is Purpose.CONFIRMING)} confirmations), {matrix.cpu_s * 1000:.0f} ms CPU")
    for name, values in phases.items():
        print(f"  per child, {name:<8} median {statistics.median(values):6.1f} ms   total {sum(values):7.1f} ms")
    print(f"  per child, of run: the tests themselves  median {statistics.median(tests):6.1f} ms   "
          f"total {sum(tests):7.1f} ms")

    forks = fork_cost()
    empty, reference = forks["empty"], forks["reference"]
    print(f"forking a set-up worker (medians of 12 each): fork() {reference['fork_ms']:.2f} ms in the worker, "
          f"which then takes {reference['worker_faults']:.0f} page faults of its own")
    print(f"  an empty child       {empty['cpu_ms']:5.1f} ms CPU (kernel {empty['kernel_ms']:.1f}), {empty['faults']:.0f} faults")
    print(f"  a child running the reference  {reference['cpu_ms']:5.1f} ms CPU (kernel {reference['kernel_ms']:.1f}), "
          f"{reference['faults']:.0f} faults: " + ", ".join(
              f"{name} {reference[name + '_ms']:.1f} ms / {reference[name + '_faults']:.0f} faults"
              for name in ("install", "collect", "run")))

    report = grade_suite(TESTS, layout=layout, assignment=assignment)
    for fmt in RENDERERS:
        started = time.perf_counter()
        for _ in range(20):
            render(report, fmt)
        print(f"render {fmt:<11} {(time.perf_counter() - started) / 20 * 1000:6.2f} ms")
    print(f"whole grading (grade_suite, in this process): {report.timing.total_s * 1000:.0f} ms")

    budget = cpu_budget()
    total = budget["command"] + budget["workers"] + budget["runs"]
    cores = len(os.sched_getaffinity(0))
    print(f"CPU budget of one whole `mutagrade grade` (median of 5 fresh processes; wall {budget['wall']:.3f} s):")
    for name, what in (("command", "the command (start-up, imports, policy, results, report)"),
                       ("workers", "its two workers (imports, pytest set-up; sandbox start-up)"),
                       ("runs", "the suite runs (the workers' children)"),
                       ("tests", "  of which the tests themselves")):
        print(f"  {what:<60} {budget[name]:6.3f} CPU-s")
    print(f"  all together {total:.3f} CPU-s on {cores} cores: the wall time cannot go below "
          f"{total / cores:.3f} s while every core is busy")


if __name__ == "__main__":
    main()
