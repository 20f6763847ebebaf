"""The admission of gradings: one per core at any time, more only while the cores sit idle,
never more than the machine holds."""

from __future__ import annotations

import threading
import time

from grader.run.admission import Admission, Capacity, capacity, idle_cores


def _fill(admission: Admission, count: int, hold: threading.Event) -> list[threading.Thread]:
    def grading() -> None:
        with admission.slot():
            hold.wait(10)

    threads = [threading.Thread(target=grading, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_busy_cores_let_in_one_grading_per_core() -> None:
    admission = Admission(Capacity(cores=2, most=8), interval=0.05, probe=lambda: 0.1)
    hold = threading.Event()
    threads = _fill(admission, 5, hold)
    time.sleep(0.5)
    assert admission.running == 2
    hold.set()
    for thread in threads:
        thread.join(5)
    assert admission.running == 0 and admission.most_at_once == 2


def test_idle_cores_let_in_more_up_to_the_most() -> None:
    admission = Admission(Capacity(cores=2, most=4), interval=0.05, probe=lambda: 1.5)
    hold = threading.Event()
    threads = _fill(admission, 7, hold)
    time.sleep(0.6)
    assert admission.running == 4
    hold.set()
    for thread in threads:
        thread.join(5)
    assert admission.most_at_once == 4


def test_a_waiting_grading_can_be_called_off() -> None:
    admission = Admission(Capacity(cores=1, most=1), interval=0.05, probe=lambda: 1.0)
    assert admission.enter()
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    assert admission.enter(stop) is False
    assert 0.15 < time.monotonic() - started < 2.0
    assert admission.running == 1


def test_sleeping_gradings_on_the_real_cores_let_others_in() -> None:
    # One core given, gradings that only sleep: the machine's idle time lets more in.
    admission = Admission(Capacity(cores=1, most=3), interval=0.1, idle_share=0.05)
    hold = threading.Event()
    threads = _fill(admission, 3, hold)
    deadline = time.monotonic() + 10
    while admission.running < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert admission.running == 3
    hold.set()
    for thread in threads:
        thread.join(5)


def test_the_idle_probe_reads_the_cores_given() -> None:
    probe = idle_cores([0])
    assert probe() is None
    time.sleep(0.3)
    idle = probe()
    assert idle is not None and 0.0 <= idle <= 1.5


def test_capacity_is_bounded_by_memory_and_sandbox_users() -> None:
    assert capacity(cores=2, memory_mb=100_000).most == 4
    assert capacity(cores=16, memory_mb=2000, per_grading_mb=400).most == 5
    assert capacity(cores=16, memory_mb=100_000, workers_free=10).most == 5
    assert capacity(cores=4, memory_mb=10).most == 1
    assert Capacity(cores=8, most=3).base == 3


def test_processes_sharing_slots_count_each_others_gradings(tmp_path) -> None:
    # Two admissions over one folder of slots, as two processes of one machine have: busy cores
    # let in one grading per core across both.
    first = Admission(Capacity(cores=1, most=3), interval=0.05, probe=lambda: 0.0, slots=tmp_path)
    second = Admission(Capacity(cores=1, most=3), interval=0.05, probe=lambda: 0.0, slots=tmp_path)
    assert first.enter()
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert second.enter(stop) is False
    first.leave()
    assert second.enter()
    second.leave()


def test_shared_slots_still_let_more_in_while_the_cores_are_idle(tmp_path) -> None:
    first = Admission(Capacity(cores=1, most=3), interval=0.05, probe=lambda: 2.0, slots=tmp_path)
    second = Admission(Capacity(cores=1, most=3), interval=0.05, probe=lambda: 2.0, slots=tmp_path)
    assert first.enter() and second.enter() and first.enter()
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert second.enter(stop) is False  # the machine's most: three


class _Cycle:
    """Garbage whose collection runs Python code: the collector, started while a tree is
    being built, lets another thread run in the middle of it."""

    def __del__(self) -> None:
        time.sleep(0)


def test_the_graders_parses_in_threads_never_trip_over_each_other() -> None:
    # CPython 3.11 counts a tree's depth per interpreter (python/cpython#106905): threads
    # parsing while the collector switches between them fail with SystemError (ast.parse in
    # place of parse below fails so, about one time in two) unless parsing is one at a time.
    from grader.core.parsing import parse

    source = "x = " + "(" * 60 + "1" + ")" * 60 + "\n" + "def f():\n    return [[[[[1]]]]]\n" * 200
    failures: list[BaseException] = []

    def many() -> None:
        try:
            for _ in range(25):
                for _ in range(300):
                    garbage = _Cycle()
                    garbage.me = garbage
                parse(source)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            failures.append(exc)

    threads = [threading.Thread(target=many) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
