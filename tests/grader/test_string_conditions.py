"""A run evaluates no string condition of ``skipif`` or ``xfail`` (pytest would ``eval`` it, with
``os``, ``sys`` and its configuration at hand, out of the policy check's sight): with
``grader.worker.child.refuse_string_conditions`` applied, as the worker applies it before any
run, such a test errors in its set-up saying so, and boolean conditions work as ever.

Each case runs pytest in a process of its own, so that this session's pytest stays as it is.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SESSION = '''
import json
import sys

import pytest

from grader.worker.child import refuse_string_conditions


class Outcomes:
    """Each test's first report that did not pass, else its call's: (outcome, text)."""

    def __init__(self):
        self.seen = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self.seen.setdefault(report.nodeid.rsplit("::", 1)[1], [report.outcome, report.longreprtext])


if sys.argv[2] == "refused":
    refuse_string_conditions()
    refuse_string_conditions()  # the next job's configuration: the same single check
outcomes = Outcomes()
pytest.main([sys.argv[1], "-p", "no:cacheprovider", "-q"], plugins=[outcomes])
print(json.dumps(outcomes.seen))
'''

SUITE = '''
import pytest

WITNESS = {witness!r}


@pytest.mark.skipif("open(WITNESS, 'a').write('skipif ') and False", reason="r")
def test_skipif_string():
    pass


@pytest.mark.xfail(condition="open(WITNESS, 'a').write('xfail ') and False")
def test_xfail_string():
    pass


@pytest.mark.skipif(True, reason="a boolean")
def test_skipif_boolean():
    pass


@pytest.mark.xfail(False, reason="a boolean")
def test_xfail_boolean():
    pass
'''


def _session(folder: Path, how: str) -> tuple[dict[str, list[str]], Path]:
    witness = folder / "evaluated"
    suite = folder / "test_conditions.py"
    suite.write_text(SUITE.format(witness=str(witness)))
    done = subprocess.run([sys.executable, "-c", SESSION, str(suite), how], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), witness


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, list[str]], Path]:
    return _session(tmp_path_factory.mktemp("refused"), "refused")


def test_pytest_evaluates_a_string_condition_unless_told_not_to(tmp_path: Path) -> None:
    """The control: pytest itself runs the string, as code."""
    seen, witness = _session(tmp_path, "evaluated")
    assert set(witness.read_text().split()) == {"skipif", "xfail"}
    assert seen["test_skipif_string"][0] == seen["test_xfail_string"][0] == "passed"


@pytest.mark.parametrize("test", ["test_skipif_string", "test_xfail_string"])
def test_a_string_condition_is_refused_not_run(refused: tuple[dict[str, list[str]], Path], test: str) -> None:
    seen, witness = refused
    assert not witness.exists(), witness.read_text()
    outcome, text = seen[test]
    mark = test.split("_")[1]
    assert outcome == "failed" and f"the string condition of {mark!r} is not evaluated" in text, seen
    assert "pass a boolean instead" in text


def test_boolean_conditions_work_as_ever(refused: tuple[dict[str, list[str]], Path]) -> None:
    seen, _ = refused
    assert seen["test_skipif_boolean"][0] == "skipped"
    assert seen["test_xfail_boolean"][0] == "passed"
