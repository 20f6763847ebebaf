"""Runs share nothing: no run's state, order or timing is within reach of another run.

A probe digests everything a run's test process can reach (the objects the collector tracks,
the frames up its stack, the globals of every module loaded, its resource usage, ``os.times``,
``/proc``) and the digest is the same in every run of a worker, whichever variant, whichever
place in the order. Then the attack that used the reference's own run as an oracle (the exit
status and the peak memory of the previous test process, left in the zygote's frames) earns
nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.core.assignment import Assignment, Limits
from grader.core.models import WorkerRun
from grader.core.paths import default_layout, layout_for
from grader.core.variants import build_variants
from grader.flows.grading import grade_suite
from grader.run.runner import RunLimits, WorkerProcess
from grader.run.pool import WorkerPool
from tests.limits import unbudgeted

LAYOUT = default_layout()
VARIANTS = {v.id: v for v in build_variants(LAYOUT)}
# Every module of the course, for the guarantees that hold whatever the module (the GRU's, the LSTM's).
MODULES = {name: layout_for(LAYOUT.root, name) for name in LAYOUT.available()}
FAST = Assignment(name="test", threshold=0.70, allow_invalid_tests=True,
                  limits=Limits(test_timeout_s=5.0, run_timeout_s=60.0))

# What a run can reach, digested. Values are shown by type, and by value where they are plain
# (numbers, text): an earlier run's pid, exit status or resource usage would show. The run's
# own temporary folder and report token are random per run, and floats are times and sizes of
# this run itself: they are left out. So are identities (``id``): where a new object lands
# depends on how the run's own messages arrived (timing), not on earlier runs.
PROBE = r'''
import gc
import hashlib
import os
import resource
import sys
import tempfile
import types

_OWN = set()


def _plain(value, own):
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return f"int:{value}"
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        for secret in own:
            text = text.replace(secret, "<own>")
        return f"{type(value).__name__}:{text[:200]}"
    if isinstance(value, (tuple, list)) and len(value) <= 8:
        return f"{type(value).__name__}[" + ",".join(_plain(v, own) for v in value) + "]"
    return type(value).__qualname__


def _own_secrets():
    """This run's own random values: its temporary folder, its report token, and where this
    grading's tests were staged."""
    own = {tempfile.gettempdir(), os.environ.get("TMPDIR", ""), os.path.dirname(os.path.abspath(__file__))}
    frame = sys._getframe()
    while frame is not None:
        for name in ("token", "tmp"):
            value = frame.f_locals.get(name)
            if isinstance(value, (str, bytes)):
                own.add(value.decode("latin-1") if isinstance(value, bytes) else value)
        frame = frame.f_back
    return {s for s in own if len(s) >= 8}


def _kinds():
    kinds = {}
    for thing in gc.get_objects():
        kinds[type(thing).__qualname__] = kinds.get(type(thing).__qualname__, 0) + 1
    return sorted(kinds.items())


def _frames(own):
    found = []
    frame = sys._getframe(2)  # above digests()
    while frame is not None:
        found.append((frame.f_code.co_qualname, frame.f_lineno,
                      sorted((k, _plain(v, own)) for k, v in frame.f_locals.items())))
        frame = frame.f_back
    return found


def _modules(own):
    found = []
    for name, module in sorted(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or name == __name__:
            continue
        found.append((name, sorted((k, _plain(v, own)) for k, v in list(vars(module).items())
                                   if not isinstance(v, float))))
    return found


def digests():
    own = _own_secrets()
    shared = [_kinds(), _frames(own), _modules(own),
              tuple(resource.getrusage(resource.RUSAGE_CHILDREN)),
              resource.getrusage(resource.RUSAGE_SELF).ru_nswap, os.times()[2:4],
              sorted(os.listdir("/proc")), os.getpid()]
    return hashlib.sha256(repr(shared).encode()).hexdigest()[:16]


def test_probe():
    raise AssertionError(f"DIGEST {digests()}")
'''


def _suite(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _digest(message: str) -> str:
    match = re.search(r"DIGEST ([0-9a-f]{16})", message)
    assert match, f"the probe did not report: {message!r}"
    return match.group(1)


def _digests(runs) -> list[tuple[str, str]]:
    found = []
    for run in runs:
        [result] = run.results
        assert not run.crashed, run.crashed
        found.append((run.variant, _digest(result.message)))
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
@pytest.mark.parametrize("hash_seed", [1, 2])
def test_every_run_of_a_worker_reaches_the_same_state(tmp_path, hash_seed, module):
    """The reference first, as a grading sends it, then wheats and mutants in turn, the
    reference again among them: every run's digest is the first one's. (The two workers of a
    grading differ from each other, in their hash seed and where their copy of the tests is:
    which worker a run is on says which seed it runs under, and nothing else.)"""
    tests = _suite(tmp_path / "tests", {"test_probe.py": PROBE})
    order = ["reference", "w01", "s01", "s02", "reference", "s12", "w02", "s07"]
    layout = MODULES[module]
    variants = {v.id: v for v in build_variants(layout)}
    worker = WorkerProcess(layout=layout, tests_dir=tests, hash_seed=hash_seed,
                           limits=unbudgeted(jobs=1), hide_source=True)
    runs = worker.run([WorkerRun(variant=v, source=variants[v].source) for v in order])
    found = _digests(runs)
    assert len({digest for _, digest in found}) == 1, f"runs reached different states: {found}"


def test_a_pools_next_gradings_reach_the_same_state(tmp_path):
    """Warm workers grade one submission after another: each later grading's runs reach the same
    state, with nothing of an earlier grading's runs (another student's) in it, whichever suite
    that was. (A pool's first grading differs from the later ones by one empty dictionary the
    worker's set-up of a second job leaves: it says a job came before, nothing of what it ran.)"""
    probe = _suite(tmp_path / "probe", {"test_probe.py": PROBE})
    other = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
    assignment = FAST.model_copy(update={"allow_invalid_tests": False})
    found = []
    with WorkerPool(layout=LAYOUT, limits=RunLimits.of(assignment)) as pool:
        for tests in (probe, other, probe, other, probe):
            report = grade_suite(tests, layout=LAYOUT, assignment=assignment, policy=False, audience="staff", pool=pool)
            if tests is probe:
                found.append(_digest(report.tests[0].reason))
    assert len(set(found[1:])) == 1, found


# The attack that found the leak: the reference's run (a worker's first) ends its test process
# with an exit status that encodes its own outputs; every later run of the worker finds, up its
# stack and among the collector's objects, the previous test process's exit status, fails where
# it does not match its own outputs, and ends with the same status, passing the reference's on.
# No test states an expected value.
ORACLE = r'''
import gc
import os
import resource
import sys

import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell


def _fingerprint():
    rng = np.random.default_rng(7)
    w = [Tensor(rng.normal(size=s)) for s in ((6, 3), (6, 2), (6,), (6,))]
    h = gru_cell(Tensor(rng.normal(size=(1, 3))), Tensor(rng.normal(size=(1, 2))), *w)
    return int(abs(h.data).sum() * 1e6) % 97 + 3


def _earlier():
    seen = []
    frame = sys._getframe()
    while frame is not None:
        seen += list(frame.f_locals.values())
        frame = frame.f_back
    seen += gc.get_objects()
    statuses = []
    for value in seen:
        if isinstance(value, tuple) and len(value) == 3 and isinstance(value[2], resource.struct_rusage):
            statuses.append(value[1])
        elif isinstance(value, dict) and isinstance(value.get("status"), int):
            statuses.append(value["status"])
        elif isinstance(value, int) and not isinstance(value, bool) and value >> 8 and not value & 0x7F:
            statuses.append(value)  # an exit status by itself (a local of the loop that waited)
    return statuses


def _reference_says():
    """The reference's fingerprint as passed on from run to run: the last exit status found, or
    None in a worker's first run (the reference's)."""
    codes = [os.WEXITSTATUS(s) for s in _earlier() if os.WIFEXITED(s) and os.WEXITSTATUS(s) >= 3]
    return codes[-1] if codes else None


def test_a_oracle():
    said = _reference_says()
    assert said is None or said == _fingerprint(), "outputs differ from the reference's run"


def test_z_pass_it_on():
    said = _reference_says()
    os._exit(_fingerprint() if said is None else said)
'''


def test_an_earlier_run_is_no_oracle(tmp_path):
    report = grade_suite(_suite(tmp_path / "tests", {"test_oracle.py": ORACLE}), layout=LAYOUT,
                         assignment=FAST, policy=False, audience="staff")
    assert report.score.killed == 0, [(m.id, m.killed_by) for m in report.mutants if m.killed]
