"""Where the two cores go during one ``mutagrade grade``: busy time by process, idle time by phase.

``grade_speed.py`` gives the totals; this script takes one grading apart with the kernel's
scheduler trace (``perf record`` of the ``sched`` tracepoints, system-wide, started before the
grading and stopped after it). For each grading it prints:

* CPU time of the command (its threads included), of bubblewrap and ``setpriv``, of the two
  workers, of the runs' children (forked by the workers) and of the machine's other processes,
  and the cores' idle time;
* the idle time by phase: before the workers are launched, while they start, while runs are
  going (split by how many children were alive) and after the last run;
* when the workers were launched and when the first and last runs began and ended;
* the gap between one child's end and its worker's next child (the exit, the result's way to
  the command and back, the next fork), median over the grading.

Then the medians over all gradings. The trace lacks some switches onto a CPU (most often from
the idle task): a CPU's time between two switches goes to the task the second one takes off it,
and the count of such switches is printed. Needs ``perf`` and the right to trace the scheduler
(root, or ``kernel.perf_event_paranoid`` at -1); it says so and stops otherwise.

    .venv/bin/python bench/grade_timeline.py [--gradings 5]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ab_grade import ENV, TESTS  # beside this script: the suite and environment grade_speed.py uses

ROOT = Path(__file__).resolve().parents[1]
EVENTS = "sched:sched_switch,sched:sched_process_exec,sched:sched_process_fork,sched:sched_process_exit"
_LINE = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<ts>[\d.]+):\s+(?P<event>\S+):\s+(?P<rest>.*)$")
_FIELD = re.compile(r"\b(\w+)=(\S+)")


@dataclass
class Timeline:
    """One grading, in milliseconds from the command's start."""

    wall: float
    cpu: Counter = field(default_factory=Counter)  # kind -> busy ms
    idle: Counter = field(default_factory=Counter)  # phase -> idle core-ms
    launched: float = 0.0  # the first worker's interpreter starts
    first_run: float = 0.0
    last_run: float = 0.0
    gaps: list[float] = field(default_factory=list)
    untraced: int = 0  # switches that took off a task the trace never showed put on


def record(data: Path) -> tuple[float, int]:
    """Trace one grading into ``data``; returns the grading's wall time in ms and its pid."""
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-e", EVENTS, "-o", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # recording before the grading starts
    if perf.poll() is not None:  # refused (no right to trace the scheduler) or broken
        raise SystemExit(f"perf record failed: {perf.communicate()[1].decode().strip()[-500:]}")
    started = time.perf_counter()
    done = subprocess.Popen([sys.executable, "-m", "grader.cli", "grade", str(TESTS), "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    _, stderr = done.communicate()
    wall = (time.perf_counter() - started) * 1000
    time.sleep(0.2)
    perf.send_signal(signal.SIGINT)
    _, err = perf.communicate(timeout=30)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mutagrade grade failed ({done.returncode}): {stderr.decode()[-2000:]}")
    if perf.returncode not in (0, -signal.SIGINT) or not data.exists():
        raise SystemExit(f"perf record failed: {err.decode().strip()[-500:]}")
    return wall, done.pid


def events(data: Path) -> list[tuple[float, int, int, str, dict[str, str]]]:
    """The events traced into ``data`` (see :func:`parse`)."""
    return parse(subprocess.run(["perf", "script", "-i", str(data)], capture_output=True, text=True).stdout)


def parse(text: str) -> list[tuple[float, int, int, str, dict[str, str]]]:
    """(time in s, pid, cpu, event, fields) of each event ``perf script`` printed, in order."""
    found = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            fields = dict(_FIELD.findall(match["rest"]))
            found.append((float(match["ts"]), int(match["pid"]), int(match["cpu"]), match["event"], fields))
    return found


def timeline(found: list[tuple[float, int, int, str, dict[str, str]]], wall: float, root: int) -> Timeline:
    """The grading's processes (``root`` and its descendants) and the cores' time, accounted."""
    parent: dict[int, int] = {}
    forked: dict[int, float] = {}
    exited: dict[int, float] = {}
    executed: dict[int, list[str]] = {}
    start = None
    for ts, pid, _, event, fields in found:
        if event == "sched:sched_process_exec":
            executed.setdefault(pid, []).append(fields.get("filename", ""))
            if pid == root and start is None:
                start = ts
        elif event == "sched:sched_process_fork" and start is not None:
            child = int(fields["child_pid"])
            parent[child], forked[child] = pid, ts
        elif event == "sched:sched_process_exit":
            exited.setdefault(pid, ts)
    if start is None:
        raise SystemExit(f"the trace does not hold the grading's start (pid {root})")
    end = exited.get(root, start + wall / 1000)

    def line_of(pid: int) -> list[int]:
        chain = [pid]
        while chain[-1] in parent and parent[chain[-1]] not in chain:
            chain.append(parent[chain[-1]])
        return chain

    workers = {pid for pid, files in executed.items() if pid != root and root in line_of(pid)
               and any("python" in f for f in files)}

    def kind(pid: int) -> str:
        if pid == 0:
            return "idle"
        chain = line_of(pid)
        if root not in chain:
            return "other"
        if pid in workers:
            return "workers"
        if any(p in workers for p in chain[1:]):
            return "children"
        if pid == root or (parent.get(pid) == root and pid not in executed):
            return "command"  # the command, or one of its threads
        return "bubblewrap, setpriv"

    children = [(forked[c], exited.get(c, end), parent[c]) for c in forked
                if parent[c] in workers and c not in executed]
    launched = min((forked.get(w, start) for w in workers), default=start)
    first = min((s for s, _, _ in children), default=end)
    last = max((e for _, e, _ in children), default=end)
    result = Timeline(wall=wall, launched=(launched - start) * 1000,
                      first_run=(first - start) * 1000, last_run=(last - start) * 1000)
    for worker in workers:
        own = sorted((s, e) for s, e, w in children if w == worker)
        result.gaps += [(s - e) * 1000 for (_, e), (s, _) in zip(own, own[1:])]

    def phase(t: float) -> str:
        if t < launched:
            return "before the workers are launched"
        if t < first:
            return "while the workers start"
        if t > last:
            return "after the last run"
        alive = sum(1 for s, e, _ in children if s <= t < e)
        return f"during the runs, {alive} child{'ren' if alive != 1 else ''} alive"

    # Each stretch of a CPU's time, from one switch to the next, goes to the task the second
    # switch takes off the CPU: the trace does not always hold the switch that put it there
    # (about one switch in twenty, most often from the idle task), and the stretch would
    # otherwise go to whatever that earlier switch put on, the idle task as often as not.
    switched: dict[int, tuple[int, float]] = {}  # cpu -> (the task its last switch put on, when)
    for ts, _, cpu, event, fields in found:
        if event != "sched:sched_switch":
            continue
        pid = int(fields["prev_pid"])
        if cpu in switched:
            put_on, since = switched[cpu]
            result.untraced += put_on != pid
            a, b = max(since, start), min(ts, end)
            if b > a:
                which = kind(pid)
                result.cpu[which] += (b - a) * 1000
                if which == "idle":
                    _split(result.idle, a, b, phase)
        switched[cpu] = (int(fields["next_pid"]), ts)
    return result


def _split(idle: Counter, a: float, b: float, phase) -> None:
    """Add the idle interval [a, b) to ``idle``, by phase, in steps of 0.1 ms."""
    t = a
    while t < b:
        step = min(b, t + 0.0001)
        idle[phase(t)] += (step - t) * 1000
        t = step


def show(line: Timeline) -> str:
    busy = "  ".join(f"{k} {v:.0f}" for k, v in sorted(line.cpu.items(), key=lambda kv: -kv[1]) if k != "idle")
    gaps = f"{statistics.median(line.gaps):.1f}" if line.gaps else "-"
    return (f"wall {line.wall:.0f} ms; busy ms: {busy}; idle {line.cpu['idle']:.0f} "
            f"({line.untraced} switches onto a CPU missing from the trace)\n"
            f"    workers launched at {line.launched:.0f} ms, runs from {line.first_run:.0f} to {line.last_run:.0f} ms, "
            f"a worker's gap between two children: median {gaps} ms\n"
            + "\n".join(f"    idle {v:5.1f} core-ms {k}" for k, v in sorted(line.idle.items(), key=lambda kv: -kv[1])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradings", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (linux-perf or linux-tools): nothing to trace with")
    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp) / "warm.data")  # untimed: the files a grading reads come into the page cache
        lines = []
        for n in range(args.gradings):
            data = Path(tmp) / f"grading{n}.data"
            wall, pid = record(data)
            lines.append(timeline(events(data), wall, pid))
            print(f"grading {n + 1}: {show(lines[-1])}")
    kinds = sorted({k for line in lines for k in line.cpu})
    phases = sorted({k for line in lines for k in line.idle})
    print(f"\nmedians of {len(lines)} gradings on {os.cpu_count()} cores:")
    print(f"  wall {statistics.median(x.wall for x in lines):.0f} ms; workers launched at "
          f"{statistics.median(x.launched for x in lines):.0f} ms; runs from "
          f"{statistics.median(x.first_run for x in lines):.0f} to {statistics.median(x.last_run for x in lines):.0f} ms; "
          f"gap between two children of a worker {statistics.median(g for x in lines for g in x.gaps):.1f} ms")
    for k in kinds:
        print(f"  {'idle' if k == 'idle' else 'busy'} {statistics.median(x.cpu[k] for x in lines):6.0f} ms  {k}")
    for k in phases:
        print(f"  idle {statistics.median(x.idle[k] for x in lines):6.1f} core-ms  {k}")


if __name__ == "__main__":
    main()
