"""``bench/grade_timeline.py``'s accounting, on a scheduler trace written out by hand: every
millisecond of both cores lands with the right process and, when idle, in the right phase."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "grade_timeline.py"


@pytest.fixture(scope="module")
def timeline_module():
    sys.path.insert(0, str(SCRIPT.parent))  # the script imports ab_grade from beside itself
    spec = importlib.util.spec_from_file_location("grade_timeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being made
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]
        sys.path.remove(str(SCRIPT.parent))


def _switch(ms: float, cpu: int, prev: int, nxt: int) -> str:
    return (f"          python {prev:5d} [{cpu:03d}] {100 + ms / 1000:.6f}: sched:sched_switch: prev_comm=python "
            f"prev_pid={prev} prev_prio=120 prev_state=S ==> next_comm=python next_pid={nxt} next_prio=120")


def _exec(ms: float, pid: int, filename: str) -> str:
    return f"          python {pid:5d} [000] {100 + ms / 1000:.6f}: sched:sched_process_exec: filename={filename} pid={pid} old_pid={pid}"


def _fork(ms: float, parent: int, child: int) -> str:
    return (f"          python {parent:5d} [000] {100 + ms / 1000:.6f}: sched:sched_process_fork: comm=python "
            f"pid={parent} child_comm=python child_pid={child}")


def _exit(ms: float, pid: int) -> str:
    return f"          python {pid:5d} [000] {100 + ms / 1000:.6f}: sched:sched_process_exit: comm=python pid={pid} prio=120 group_dead=true"


# The command (10, with a thread 11) starts bubblewrap (20), whose child (21) becomes the worker;
# the worker forks two runs' children (30, then 31); 99 is some other process of the machine.
# cpu0: command 0-50, idle 50-100, child 30 100-120, worker 120-125, child 31 125-150, command 150-200.
# cpu1: idle 0-11, bubblewrap 11-14, worker 14-100, idle 100-150, other 150-160, idle 160-200.
TRACE = "\n".join([
    _switch(-1, 0, 0, 10), _switch(-1, 1, 99, 0),
    _exec(0, 10, ".venv/bin/python"), _fork(1, 10, 11), _fork(10, 10, 20), _exec(10.5, 20, "/usr/bin/bwrap"),
    _switch(11, 1, 0, 20), _fork(12, 20, 21), _exec(13, 21, "/usr/bin/setpriv"), _switch(14, 1, 20, 21),
    _exec(14, 21, "/opt/venv/bin/python"), _switch(50, 0, 10, 0),
    _fork(100, 21, 30), _switch(100, 0, 0, 30), _switch(100, 1, 21, 0), _exit(120, 30), _switch(120, 0, 30, 21),
    _fork(125, 21, 31), _switch(125, 0, 21, 31), _exit(150, 31), _switch(150, 0, 31, 10), _switch(150, 1, 0, 99),
    _switch(160, 1, 99, 0), _exit(200, 10), _switch(200, 0, 10, 0), _switch(200, 1, 0, 0),
    "a line perf prints that is not an event",
])


def test_each_core_millisecond_goes_to_its_process_and_each_idle_one_to_its_phase(timeline_module) -> None:
    found = timeline_module.parse(TRACE)
    assert len(found) == 26  # every event line read, the stray line passed over
    line = timeline_module.timeline(found, wall=205.0, root=10)
    cpu = {k: round(v, 3) for k, v in line.cpu.items()}
    assert cpu == {"command": 100.0, "bubblewrap, setpriv": 3.0, "workers": 91.0, "children": 45.0,
                   "other": 10.0, "idle": 151.0}
    idle = {k: round(v, 3) for k, v in line.idle.items()}
    assert idle == {
        "before the workers are launched": 11.0,
        "while the workers start": 50.0,
        "during the runs, 1 child alive": 45.0,
        "during the runs, 0 children alive": 5.0,
        "after the last run": 40.0,
    }
    assert (round(line.launched, 3), round(line.first_run, 3), round(line.last_run, 3)) == (12.0, 100.0, 150.0)
    assert [round(g, 3) for g in line.gaps] == [5.0]
    assert line.wall == 205.0
    assert line.untraced == 0


def test_a_stretch_whose_start_the_trace_lost_goes_to_the_task_taken_off_the_cpu(timeline_module) -> None:
    # The switch that put child 31 on cpu1 at 130 ms is missing (the kernel's trace loses such
    # switches, most often from the idle task): cpu1 seems idle from 100 ms until child 31 is
    # taken off it at 150 ms. The stretch goes to the child, not to the idle task.
    lost = TRACE.replace(_switch(125, 0, 21, 31), _switch(125, 0, 21, 0)).replace(
        _switch(150, 0, 31, 10), _switch(150, 0, 0, 10)).replace(
        _switch(150, 1, 0, 99), _switch(150, 1, 31, 99))
    line = timeline_module.timeline(timeline_module.parse(lost), wall=205.0, root=10)
    assert line.untraced == 1
    assert round(line.cpu["children"], 3) == 20.0 + 50.0  # child 30 on cpu0; child 31 on cpu1 from 100 ms
    assert round(line.cpu["idle"], 3) == 11.0 + 50.0 + 25.0 + 40.0  # cpu0 now idle 125-150 ms
    assert round(line.idle["during the runs, 1 child alive"], 3) == 25.0  # cpu0 while child 31 ran on cpu1


def test_a_trace_without_the_grading_start_is_refused(timeline_module) -> None:
    with pytest.raises(SystemExit, match="pid 12345"):
        timeline_module.timeline(timeline_module.parse(TRACE), wall=205.0, root=12345)


def test_without_perf_it_says_so_and_stops(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--gradings", "1"], capture_output=True, text=True,
                          env={"PATH": str(tmp_path)}, timeout=60)  # a PATH with no perf on it
    assert done.returncode == 1
    assert "perf is not installed" in done.stderr
