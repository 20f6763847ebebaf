"""Chance earns nothing: tests that draw chance and state no expected value kill no mutant."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.core.assignment import Assignment, Limits
from grader.flows.grading import grade_suite
from grader.core.paths import default_layout, layout_for

LAYOUT = default_layout()
MODULES = {name: layout_for(LAYOUT.root, name) for name in LAYOUT.available()}  # the GRU's, the LSTM's
# allow_invalid_tests: the draws that fail on the reference are not valid, and whatever the
# others killed would still count.
FAST = Assignment(name="test", threshold=0.70, allow_invalid_tests=True,
                  limits=Limits(test_timeout_s=5.0, run_timeout_s=60.0))

# Each source of chance a test process can draw from, as an expression in [0, 1).
SOURCES = {
    "random": "random.random()",
    "random_instance": "random.Random().random()",
    "system_random": "random.SystemRandom().random()",
    "urandom": "os.urandom(4)[0] / 256",
    "secrets": "secrets.randbelow(1000) / 1000",
    "uuid4": "uuid.uuid4().bytes[0] / 256",
    "numpy_global": "float(np.random.rand())",
    "numpy_default_rng": "float(np.random.default_rng().random())",
    "hash_seed": "(hash('x' + str(i)) % 1000) / 1000",
}


def _suite(folder: Path, expression: str, count: int) -> Path:
    folder.mkdir(parents=True)
    tests = "".join(f'''

def test_luck_{i}():
    i = {i}
    assert {expression} > 0.08
''' for i in range(count))
    header = "import os\nimport random\nimport secrets\nimport time\nimport uuid\n\nimport numpy as np\n"
    (folder / "test_luck.py").write_text(header + tests)
    return folder


@pytest.mark.parametrize("module", sorted(MODULES))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_suite_of_luck_kills_no_mutant(tmp_path, source, module):
    """Forty tests that each pass with a chance of 0.92 and call no GRU: before, about 60 % of
    them passed every validity run, and every mutant's run stopped at the first unlucky one.
    The same for every module of the course."""
    report = grade_suite(_suite(tmp_path / "tests", SOURCES[source], 40), layout=MODULES[module], assignment=FAST,
                         policy=False, audience="staff")
    valid = [t for t in report.tests if t.status.value == "valid"]
    assert valid, "no test passed the reference and the wheats: the probe proves nothing"
    assert report.score.killed == 0, [(m.id, m.killed_by) for m in report.mutants if m.killed]


# Sources no seed governs: the clocks (the microseconds of a read differ from run to run).
CLOCKS = {
    "perf_counter": "(time.perf_counter_ns() // 1000) % 1000 / 1000",
    "monotonic": "(time.monotonic_ns() // 1000) % 991 / 991",
    "thread_time": "(time.thread_time_ns() // 1000) % 983 / 983",
    "time": "(time.time_ns() // 1000) % 997 / 997",
}


@pytest.mark.parametrize("module", sorted(MODULES))
@pytest.mark.parametrize("clock", sorted(CLOCKS))
def test_a_suite_of_clock_luck_kills_no_mutant(tmp_path, clock, module):
    """The same forty tests drawing from a clock instead: no seed makes a clock read the same in
    two runs, so each test passes or fails at random on every variant. Before, about a quarter
    of the mutants were killed so (3 or 4 of 12); now a test seen to pass and fail on one variant
    is flaky, and once one is seen every kill must hold in three confirming runs."""
    report = grade_suite(_suite(tmp_path / "tests", CLOCKS[clock], 40), layout=MODULES[module], assignment=FAST,
                         policy=False, audience="staff")
    assert any(t.status.value == "flaky" for t in report.tests), "no test was seen to depend on chance"
    assert report.score.killed == 0, [(m.id, m.killed_by) for m in report.mutants if m.killed]


# Time-outs cheap enough for a test: a test sleeping past its limit on the reference costs 0.5 s,
# on a mutant 0.2 s.
SLEEPY = Assignment(name="test", threshold=0.70, allow_invalid_tests=True,
                    limits=Limits(test_timeout_s=0.5, timeout_floor_s=0.2, run_timeout_s=60.0, budget_wall_s=110.0))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_suite_that_sleeps_past_its_limit_by_the_clock_kills_no_mutant(tmp_path, module):
    """A time-out kills too, and a time limit is the machine's verdict, so a test that passed and
    then ran past its limit on one variant is not called flaky for it. But such a test shows
    chance as surely as one that fails by the clock: the grading asks three confirming runs of
    every kill, and a suite sleeping at random earns nothing."""
    folder = tmp_path / "tests"
    folder.mkdir()
    folder.joinpath("test_sleepy.py").write_text("import time\n" + "".join(
        f"\n\ndef test_sleepy_{i}():\n    if {CLOCKS['perf_counter']} < 0.08:\n        time.sleep(5)\n"
        for i in range(40)))
    report = grade_suite(folder, layout=MODULES[module], assignment=SLEEPY, policy=False, audience="staff")
    assert report.timing.runs > 40, report.timing  # it ran to its confirmations, within the budget
    assert report.score.killed == 0, [(m.id, m.killed_by) for m in report.mutants if m.killed]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_suite_whose_runs_end_themselves_at_a_random_test_kills_no_mutant(tmp_path, module):
    """A run whose process dies reports every test it had not finished as raised, a kill on a
    mutant. Fifty tests, one clock draw per run naming the test that ends the process
    (``os._exit(0)``): a mutant whose first and confirming runs both died early enough was
    killed, since a run that died was left out of the chance rules (before: 2 to 4 of the LSTM's
    15 mutants in each grading, 5 kills in 11 gradings of the GRU). A run that died counts now."""
    folder = tmp_path / "tests"
    folder.mkdir()
    draw = "(time.perf_counter_ns() // 1000) * 2654435761 % 2**32 * 51 // 2**32"
    folder.joinpath("test_ends.py").write_text(f"import os\nimport time\n\nAT = {draw}\n" + "".join(
        f"\n\ndef test_ends_{i:03d}():\n    if AT == {i}:\n        os._exit(0)\n" for i in range(50)))
    for _ in range(3):  # a grading takes a second or two: three of them, for three chances to be lucky
        report = grade_suite(folder, layout=MODULES[module], assignment=FAST, policy=False, audience="staff")
        assert any(t.status.value == "flaky" for t in report.tests), [(t.id, t.status.value) for t in report.tests]
        assert report.score.killed == 0, [(m.id, m.killed_by) for m in report.mutants if m.killed]


def test_draws_are_the_same_under_one_seed_and_differ_between_seeds():
    import os
    import random

    import numpy as np

    from grader.worker import chance

    saved = (os.urandom, getattr(os, "getrandom", None), random._urandom, random.Random.seed, random.getstate())
    try:
        def draws():
            return (random.random(), random.SystemRandom().random(), os.urandom(8), float(np.random.rand()))

        chance.install(1)
        chance.begin("t.py::a")
        first = draws()
        chance.begin("t.py::a")
        again = draws()
        chance.begin("t.py::b")
        other_test = draws()
        chance.install(2)
        chance.begin("t.py::a")
        other_seed = draws()
    finally:
        os.urandom, random._urandom, random.Random.seed = saved[0], saved[2], saved[3]
        if saved[1] is not None:
            os.getrandom = saved[1]
        random.setstate(saved[4])
    assert first == again
    assert first != other_test and first != other_seed


# One generator for the whole file, drawn without a seed. The first test is brittle for real
# (w03 words its error otherwise) and stops there on w03, before it draws its two numbers; so on
# w03 the second test draws the file's first number, on every other implementation its third.
# Under the first seed the first number is 0.72, under the second 0.46, and the third 0.38 and
# 0.61: the second test passes on the reference under both seeds, and on w03 fails under the
# first seed only. Its verdict is chance's (how much an earlier test drew), not w03's doing.
SHARED_GENERATOR = '''import numpy as np
import pytest
from tinyllm.rnn.gru import GRU

RNG = np.random.default_rng()


def test_error_wording():
    with pytest.raises(ValueError, match="must be a positive int"):
        GRU(3, 0)
    RNG.random(2)


def test_luck():
    assert RNG.random() < 0.7
'''


def test_a_test_whose_verdict_on_a_wheat_is_chance_is_flaky_every_time_never_brittle(tmp_path):
    """Graded six times, it was brittle against w03 in some gradings and valid in the others (w03
    ran under whichever seed's worker was free). Now each wheat runs under the first seed and a
    rejection is run again under the second: one that does not hold there is chance's."""
    folder = tmp_path / "tests"
    folder.mkdir()
    (folder / "test_gru.py").write_text(SHARED_GENERATOR)
    for _ in range(6):
        report = grade_suite(folder, layout=LAYOUT, assignment=FAST, audience="staff")
        statuses = {t.id.split("::")[-1]: t for t in report.tests}
        luck, wording = statuses["test_luck"], statuses["test_error_wording"]
        assert luck.status.value == "flaky", (luck.status, luck.reason)
        assert "chance" in luck.reason and "brittle" not in luck.reason, luck.reason
        assert "w03" in luck.reason and "under one seed" in luck.reason, luck.reason
        # The test that w03 rejects whatever the seed is still brittle against it.
        assert wording.status.value == "brittle" and "w03" in wording.reason, wording.reason
