"""Chance earns nothing: tests that draw chance and state no expected value kill no mutant."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.core.assignment import Assignment, Limits
from grader.flows.grading import grade_suite
from grader.core.paths import default_layout

LAYOUT = default_layout()
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
    header = "import os\nimport random\nimport secrets\nimport uuid\n\nimport numpy as np\n"
    (folder / "test_luck.py").write_text(header + tests)
    return folder


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_a_suite_of_luck_kills_no_mutant(tmp_path, source):
    """Forty tests that each pass with a chance of 0.92 and call no GRU: before, about 60 % of
    them passed every validity run, and every mutant's run stopped at the first unlucky one."""
    report = grade_suite(_suite(tmp_path / "tests", SOURCES[source], 40), layout=LAYOUT, assignment=FAST,
                         policy=False, audience="staff")
    valid = [t for t in report.tests if t.status.value == "valid"]
    assert valid, "no test passed the reference and the wheats: the probe proves nothing"
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
