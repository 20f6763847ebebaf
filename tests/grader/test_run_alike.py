"""Hostile suites that tell variants apart by anything but the module's outputs: each must kill
nothing. Every attack runs against each assignment of the course, the GRU's and the LSTM's; what
a suite writes differently for each (the module, its file, the calls it makes) is in TARGETS."""

from __future__ import annotations

import contextlib
import linecache
import py_compile
import re
import sys
import types
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from grader.core.assignment import Assignment, Limits
from grader.flows.grading import grade_suite
from grader.core.models import Report
from grader.core.paths import Layout, default_layout, layout_for
from grader.core.variants import Variant, VariantKind, build_variants

LAYOUT = default_layout()
ASSIGNMENTS = ("l3-3-gru", "l3-2-lstm")
# allow_invalid_tests: several suites fail a test on purpose, and what the others kill still counts.
FAST = Assignment(name="test", threshold=0.70, allow_invalid_tests=True,
                  limits=Limits(test_timeout_s=5.0, run_timeout_s=60.0))

# Suite text names the module under test by these tokens; Target.render fills them in.
TOKENS = re.compile(r"@(MODULE|FILE|LAYER|CELL|REFUSED|BRITTLE)@")


@dataclass(frozen=True)
class Target:
    """An assignment, and what a suite of it writes that depends on its module."""

    assignment: str
    layer: str  # the sequence module's class
    cell: str  # the one-step function
    refused: tuple[str, ...]  # calls of ``module`` that every correct implementation refuses
    hand: str  # the control: a test of the cell's outputs on weights worked out by hand
    hand_kills: frozenset[str]  # mutants the control kills, at least
    brittle: str  # test_a_brittle: passes on the reference, fails on brittle_wheat
    brittle_wheat: str

    @cached_property
    def layout(self) -> Layout:
        return LAYOUT if self.assignment == LAYOUT.assignment_name else layout_for(LAYOUT.root, self.assignment)

    @property
    def module(self) -> str:
        return self.layout.module_under_test

    @property
    def file(self) -> str:
        """The one file name every variant is compiled under."""
        return self.layout.module_file

    def render(self, text: str) -> str:
        text = text.replace("@BRITTLE@", self.brittle)
        refused = "".join(f"        lambda: {call},\n" for call in self.refused)
        for token, value in (("@MODULE@", self.module), ("@FILE@", self.file), ("@LAYER@", self.layer),
                             ("@CELL@", self.cell), ("@REFUSED@\n", refused)):
            text = text.replace(token, value)
        assert not TOKENS.search(text), f"a token left in a suite: {TOKENS.search(text)}"
        return text


TARGETS = {target.assignment: target for target in (
    Target(
        assignment="l3-3-gru", layer="GRU", cell="gru_cell",
        refused=(
            "module.GRU(0, 3)",
            "module.gru_cell(np.ones((1, 1)), np.ones((1, 1)), np.ones((2, 1)), np.ones((3, 1)), np.ones(3), np.ones(3))",
            "module.GRU(1, 1)(np.ones((2, 1, 1)), lengths=[9])",
        ),
        hand='''
def test_hand():
    weights = ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])
    w = [Tensor(a, dtype=np.float64) for a in weights]
    h = gru_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[0.5]], dtype=np.float64), *w)
    assert np.allclose(h.data, [[0.25 * np.tanh(0.75) + 0.375]])
''',
        hand_kills=frozenset({"s01", "s02", "s03", "s05"}),
        # w03 words its errors its own way.
        brittle='''
def test_a_brittle():
    with pytest.raises(ValueError, match="must be a positive int"):
        GRU(0, 3)
''',
        brittle_wheat="w03",
    ),
    Target(
        assignment="l3-2-lstm", layer="LSTM", cell="lstm_cell",
        refused=(
            "module.LSTM(0, 3)",
            "module.lstm_cell(np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1)), np.ones((3, 1)), np.ones((4, 1)), "
            "np.ones(4), np.ones(4))",
            "module.LSTM(1, 1)(np.ones((2, 1, 1)), lengths=[9])",
            # No LSTM mutant moves a line, so the frames of the calls above are the reference's in
            # every one: this call is refused at h0's check, and where the pair is read as
            # (c0, h0) (s15), at c0's.
            "module.LSTM(1, 1)(np.ones((2, 1, 1)), state=(np.ones((2, 1, 1)), np.ones((1, 1, 1))))",
        ),
        # i = 0.5, f = 0.75, g = tanh(0.75), o = 0.8 from x = 1, h = 0.5, c = 0.4.
        hand='''
def test_hand():
    weights = ([[0.0]] * 4, [[0.0], [0.0], [1.0], [0.0]], [0, math.log(3), 0, math.log(4)], [0, 0, 0.25, 0])
    w = [Tensor(a, dtype=np.float64) for a in weights]
    h, c = lstm_cell(Tensor([[1.0]], dtype=np.float64), Tensor([[0.5]], dtype=np.float64),
                     Tensor([[0.4]], dtype=np.float64), *w)
    cell = 0.3 + 0.5 * np.tanh(0.75)
    assert np.allclose(c.data, [[cell]]) and np.allclose(h.data, [[0.8 * np.tanh(cell)]])
''',
        hand_kills=frozenset({"s01", "s02", "s03", "s05", "s06", "s07", "s14"}),
        # w04 squashes the cell by 2σ(2c) − 1, which is 0 for a cell of 1e-20: so is its state.
        brittle='''
def test_a_brittle():
    zeros = [Tensor(np.zeros(shape), dtype=np.float64) for shape in ((1, 1), (1, 1), (1, 1), (4, 1), (4, 1))]
    h, c = lstm_cell(*zeros, Tensor([0.0, 0.0, 2e-20, 0.0], dtype=np.float64), Tensor(np.zeros(4), dtype=np.float64))
    assert h.data[0, 0] == 0.5 * np.tanh(c.data[0, 0]) > 0.0
''',
        brittle_wheat="w04",
    ),
)}


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def target(request) -> Target:
    """Each test runs once per assignment."""
    return TARGETS[request.param]


HEADER = '''
import math
import os
import signal
import sys
import time

import numpy as np
import pytest
from tinyllm.autograd.tensor import Tensor
from @MODULE@ import @LAYER@, @CELL@
'''

# What a suite can fingerprint in its own process, as functions of the module under test. The
# same text runs here, on the reference and each wheat installed as a run installs them, and in
# the suites: an attacker gets these values from two recon submissions.
FINGERPRINTS = '''
import hashlib
import inspect
import linecache
import traceback
import types


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _const(value):
    if isinstance(value, types.CodeType):
        return _code(value)
    if isinstance(value, frozenset):  # its order follows the hash seed
        return repr(sorted(map(repr, value)))
    return repr(value)


def _code(code):
    return repr((code.co_name, code.co_firstlineno, code.co_code, [_const(c) for c in code.co_consts],
                 code.co_names, code.co_varnames))


def source_lines(module):
    return _digest("".join(linecache.getlines(module.__file__)))


def source_by_format(module):
    lines = "{0.__globals__[sys].modules[linecache].cache[@FILE@][2]}"
    return _digest(lines.format(pytest.raises))


def source_by_inspect(module):
    return _digest(inspect.getsource(module))


def bytecode(module):
    parts = []
    for name, value in sorted(vars(module).items()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            parts.append((name, _code(value.__code__)))
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr, member in sorted(vars(value).items()):
                if isinstance(member, types.FunctionType):
                    parts.append((name, attr, _code(member.__code__)))
    return _digest(repr(parts))


def bytecode_by_format(module):
    code = "{0.__globals__[sys].modules[@MODULE@].@CELL@.__code__.co_code}"
    return _digest(code.format(pytest.raises))


def metadata(module):
    return _digest(repr((module.__file__, module.__name__, module.__package__, sorted(vars(module)))))


def _tracebacks(module):
    """The tracebacks of calls that every correct implementation refuses."""
    calls = (
@REFUSED@
    )
    found = []
    for call in calls:
        try:
            call()
        except Exception as exc:  # noqa: BLE001
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename != module.__file__:
                tb = tb.tb_next
            found.append(tb)
    return found


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def frames(module):
    return _digest(repr([[(t.tb_frame.f_code.co_name, t.tb_lineno, t.tb_frame.f_code.co_filename,
                           t.tb_frame.f_code.co_firstlineno) for t in _frames(tb)]
                         for tb in _tracebacks(module)]))


def frame_namespaces(module):
    return _digest(repr([[(sorted(t.tb_frame.f_globals), sorted(t.tb_frame.f_locals)) for t in _frames(tb)]
                         for tb in _tracebacks(module)]))


def code_by_frame(module):
    """Every function of the module, reached from the globals of a frame in a traceback."""
    namespace = types.SimpleNamespace(**_tracebacks(module)[0].tb_frame.f_globals)
    return bytecode(namespace)


def traceback_text(module):
    return _digest("\\n".join("".join(traceback.format_tb(tb)) for tb in _tracebacks(module)))
'''


# ------------------------------------------------------------------------------ helpers
def _suite(folder: Path, files: dict[str, str], target: Target) -> Path:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(target.render(text))
    return folder


def _grade(folder: Path, target: Target) -> Report:
    return grade_suite(folder, layout=target.layout, assignment=FAST, policy=False, audience="staff")


def _grade_probe(folder: Path, text: str, target: Target) -> Report:
    """A suite of one file, test_probe.py, graded."""
    return _grade(_suite(folder, {"test_probe.py": text}, target), target)


def _told_apart(report: Report) -> str:
    """What the suite killed and with which test, and the status of each of its tests."""
    kills = [f"{m.id} by {', '.join(m.killed_by)}" for m in report.mutants if m.killed]
    tests = [f"{t.id}: {t.status.value}" + (f" ({t.reason[:160]})" if t.reason else "")
             for t in report.tests]
    return (f"the suite told {report.score.killed} mutant(s) from the reference without their outputs: "
            + "; ".join(kills) + "\n  its tests: " + "; ".join(tests)
            + ("\n  problems: " + "; ".join(map(str, report.problems)) if report.problems else ""))


def _assert_kills_nothing(report: Report) -> None:
    # The probe's validity is not asserted: a run that makes it fail on the reference too (or
    # on a wheat) tells it nothing, which is as good as making it pass on the mutants.
    killed = report.score.killed
    assert killed == 0, _told_apart(report)


@contextlib.contextmanager
def _installed(target: Target, source: str):
    """``source`` as the module under test (``tinyllm.rnn.gru``, ``tinyllm.rnn.lstm``), its text
    in linecache, as a run installs it (for the length of the block; what was there before is
    put back)."""
    name, filename = target.module, target.file
    module = types.ModuleType(name)
    module.__file__ = filename
    module.__package__ = name.rpartition(".")[0]
    saved_module, saved_lines = sys.modules.get(name), linecache.cache.get(filename)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sys.modules[name] = module
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)  # noqa: S102
        yield module
    finally:
        if saved_module is not None:
            sys.modules[name] = saved_module
        else:
            sys.modules.pop(name, None)
        if saved_lines is not None:
            linecache.cache[filename] = saved_lines
        else:
            linecache.cache.pop(filename, None)


@pytest.fixture(scope="module")
def variant_fingerprints(target) -> list[tuple[Variant, dict[str, str]]]:
    """Each variant, and each fingerprint of :data:`FINGERPRINTS` of it, in this process."""
    import numpy as np

    namespace: dict[str, object] = {"np": np, "pytest": pytest}
    exec(target.render(FINGERPRINTS), namespace)  # noqa: S102
    names = [n for n, v in namespace.items() if isinstance(v, types.FunctionType) and not n.startswith("_")]
    found = []
    for variant in build_variants(target.layout):
        with _installed(target, variant.source) as module:
            if variant.kind is not VariantKind.MUTANT:
                # The frames' fingerprints read a traceback of each refused call.
                refused = namespace["_tracebacks"](module)
                assert len(refused) == len(target.refused) and None not in refused, \
                    f"{variant.id} does not refuse every call of _tracebacks inside {target.file}"
            found.append((variant, {name: namespace[name](module) for name in names}))
    return found


@pytest.fixture(scope="module")
def correct_fingerprints(variant_fingerprints) -> dict[str, set[str]]:
    """Each fingerprint of :data:`FINGERPRINTS`, over the reference and every wheat."""
    found: dict[str, set[str]] = {}
    for variant, fingerprints in variant_fingerprints:
        if variant.kind is not VariantKind.MUTANT:
            for name, value in fingerprints.items():
                found.setdefault(name, set()).add(value)
    return found


RECON = '''
import hashlib
import resource


def _digest(text):
    return hashlib.sha256(repr(text).encode()).hexdigest()[:16]


def options(request):
    root = str(request.config.rootpath)
    return _digest({k: str(v).replace(root, "<tests>")
                    for k, v in sorted(vars(request.config.option).items())})


def arguments(request):
    root = str(request.config.rootpath)
    return _digest([str(a).replace(root, "<tests>") for a in request.config.args])


def environment(request):
    volatile = {"PYTHONHASHSEED", "TMPDIR", "PYTEST_CURRENT_TEST"}
    root = str(request.config.rootpath)
    return _digest(sorted((k, v.replace(root, "<tests>"))
                          for k, v in os.environ.items() if k not in volatile))


def limits(request):
    return _digest(sorted((n, resource.getrlimit(getattr(resource, n)))
                          for n in dir(resource) if n.startswith("RLIMIT_")))


def _open_descriptors():
    # /proc is empty in a run's own view: ask each descriptor number instead.
    found = []
    for fd in range(256):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    return found


def process(request):
    root = str(request.config.rootpath)
    handlers = {s.name: getattr(signal.getsignal(s), "__qualname__", repr(signal.getsignal(s)))
                for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)}
    # Not the uid: each worker runs as a sandbox user of its own, a hash seed by another name.
    return _digest((sys.argv, os.getcwd().replace(root, "<tests>"), str(sys.flags), os.nice(0),
                    sorted(os.sched_getaffinity(0)), _open_descriptors(),
                    sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])), handlers))
'''
RECONNED = ("options", "arguments", "environment", "limits", "process")


@pytest.fixture(scope="module")
def reference_state(tmp_path_factory, target) -> dict[str, str]:
    """What a recon submission learns of the reference's runs: each :data:`RECON` fingerprint,
    from the message of a test that fails on purpose."""
    body = "".join(f'''

def test_recon_{name}(request):
    raise AssertionError("FP {name} " + {name}(request))
''' for name in RECONNED)
    folder = _suite(tmp_path_factory.mktemp("recon") / "tests", {"test_recon.py": HEADER + RECON + body}, target)
    report = _grade(folder, target)
    found = {}
    for test in report.tests:
        match = re.search(r"FP (\w+) ([0-9a-f]{16})", test.reason)
        if match:
            found[match.group(1)] = match.group(2)
    assert set(found) == set(RECONNED), f"the recon suite's messages did not all come back: {report.tests}"
    return found


# ---------------------------------------------------------------------------- control
def test_the_targets_are_the_gru_and_the_lstm():
    assert LAYOUT.assignment_name == "l3-3-gru" and TARGETS["l3-3-gru"].layout is LAYOUT
    assert {name: (t.module, t.file) for name, t in TARGETS.items()} == {
        "l3-3-gru": ("tinyllm.rnn.gru", "tinyllm/rnn/gru.py"),
        "l3-2-lstm": ("tinyllm.rnn.lstm", "tinyllm/rnn/lstm.py"),
    }


def test_a_behavioural_test_still_kills(target, tmp_path):
    """The control: a real test of the outputs kills as before, so a suite's zero below is the
    grader's doing, not a grading that kills nothing."""
    report = _grade(_suite(tmp_path / "tests", {"test_hand.py": HEADER + target.hand}, target), target)
    killed = {m.id for m in report.mutants if m.killed}
    assert target.hand_kills <= killed, _told_apart(report)
    assert [t.status.value for t in report.tests] == ["valid"]


# ------------------------------------------------------------------ pytest's configuration
CONFIGURATION = {
    # Mutant runs report their failures in one line.
    "traceback_style": {"test_probe.py": HEADER + '''
def test_probe(request):
    assert "{0.config.option.tbstyle}".format(request) != "line"
'''},
    "every_option_as_on_the_reference": {"test_probe.py": HEADER + RECON + '''
def test_probe(request):
    assert options(request) == "{options}"
'''},
    "arguments_as_on_the_reference": {"test_probe.py": HEADER + RECON + '''
def test_probe(request):
    assert arguments(request) == "{arguments}"
'''},
    # test_a passes on the reference and fails on a wheat (the target's brittle_wheat), so it
    # is run on the wheats but not on the mutants: the probe looks for it among the session's items.
    "the_session_items": {"test_probe.py": HEADER + '''@BRITTLE@

def test_b_probe(request):
    assert [item.name for item in request.session.items] == ["test_a_brittle", "test_b_probe"]
'''},
}


def test_the_brittle_test_passes_on_the_reference_and_fails_on_a_wheat(target):
    """The premise of the_session_items, checked in this process."""
    passes = {}
    for variant in build_variants(target.layout):
        if variant.kind is VariantKind.MUTANT:
            continue
        with _installed(target, variant.source):
            namespace: dict[str, object] = {}
            exec(target.render(HEADER + target.brittle), namespace)  # noqa: S102
            try:
                namespace["test_a_brittle"]()
                passes[variant.id] = True
            except (AssertionError, pytest.fail.Exception):
                passes[variant.id] = False
    assert passes["reference"] and not passes[target.brittle_wheat], passes


@pytest.mark.parametrize("probe", sorted(CONFIGURATION))
def test_pytest_configuration_tells_no_variant_apart(probe, target, tmp_path, reference_state):
    files = {name: text.replace('"{options}"', repr(reference_state["options"]))
             .replace('"{arguments}"', repr(reference_state["arguments"]))
             for name, text in CONFIGURATION[probe].items()}
    _assert_kills_nothing(_grade(_suite(tmp_path / "tests", files, target), target))


# -------------------------------------------------------------------- string conditions
CONDITIONS = {
    # A strict xfail whose condition holds on the mutants only: the test passes, so it XPASSes.
    "xfail_on_the_traceback_style": '''
@pytest.mark.xfail("config.option.tbstyle == 'line'", strict=True)
def test_probe():
    pass
''',
    # A condition that raises on the mutants only: an error in set-up.
    "skipif_on_the_traceback_style": '''
@pytest.mark.skipif("config.option.tbstyle == 'line' and 1 / 0")
def test_probe():
    pass
''',
    "skipif_on_the_run_in_memory": '''
@pytest.mark.skipif("[o for o in sys.modules['gc'].get_objects() "
                    "if getattr(type(o), '__name__', '') == 'RunHeader' and o.brief] and 1 / 0")
def test_probe():
    pass
''',
}


@pytest.mark.parametrize("probe", sorted(CONDITIONS))
def test_string_conditions_tell_no_variant_apart(probe, target, tmp_path):
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", HEADER + CONDITIONS[probe], target))


# ---------------------------------------------------------------------- sourceless code
SOURCELESS = {
    # A helper beside the tests, compiled and its source removed.
    "helper": ("helper", '''
def check(request):
    assert "{0.config.option.tbstyle}".format(request) != "line"
''', '''
from helper import check


def test_probe(request):
    check(request)
'''),
    # A standard library module shadowed by bytecode: the test itself is innocent.
    "statistics": ("statistics", '''
import sys


def _brief():
    frame = sys._getframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            option = getattr(getattr(value, "config", None), "option", None)
            if getattr(option, "tbstyle", None) == "line":
                return True
        frame = frame.f_back
    return False


def mean(data):
    data = list(data)
    return float("nan") if _brief() else sum(data) / len(data)
''', '''
import statistics


def test_mean():
    assert statistics.mean([1.0, 2.0, 3.0]) == 2.0
'''),
}


@pytest.mark.parametrize("probe", sorted(SOURCELESS))
def test_sourceless_modules_tell_no_variant_apart(probe, target, tmp_path):
    name, module, test = SOURCELESS[probe]
    folder = _suite(tmp_path / "tests", {f"{name}.py": module, "test_probe.py": HEADER + test}, target)
    # A sourceless module is found only as NAME.pyc beside where its source would be.
    py_compile.compile(str(folder / f"{name}.py"), cfile=str(folder / f"{name}.pyc"), doraise=True)
    (folder / f"{name}.py").unlink()
    _assert_kills_nothing(_grade(folder, target))


# ------------------------------------------- linecache, code objects, frames and tracebacks
# Each probe passes iff what it reads of the module under test is what it would read of the
# reference or of a wheat (the frames: those of errors raised inside the module).
SOURCE_AND_CODE = ("source_lines", "source_by_format", "source_by_inspect", "bytecode", "bytecode_by_format",
                   "metadata")
FRAMES = ("frames", "frame_namespaces", "code_by_frame", "traceback_text")


def _fingerprint_probe(name: str, expected: set[str], target: Target) -> str:
    alias = target.module.rpartition(".")[2]
    probe = f'''
import {target.module} as {alias}

CORRECT = {sorted(expected)!r}


def test_probe():
    assert {name}({alias}) in CORRECT
'''
    return HEADER + FINGERPRINTS + probe


# What no mutant of either module changes: a module-level name, or the names in a refusing frame.
TELLS_NO_MUTANT_APART = ("metadata", "frame_namespaces")


def test_the_fingerprints_tell_mutants_apart_in_this_process(target, variant_fingerprints, correct_fingerprints):
    """The attacks below are armed: read of each variant installed as a run installs it, each
    fingerprint (but those of TELLS_NO_MUTANT_APART) is a wrong one for some mutant."""
    assert set(correct_fingerprints) == set(SOURCE_AND_CODE + FRAMES)
    for name in SOURCE_AND_CODE + FRAMES:
        told = sorted(v.id for v, found in variant_fingerprints
                      if v.kind is VariantKind.MUTANT and found[name] not in correct_fingerprints[name])
        if name not in TELLS_NO_MUTANT_APART:
            assert told, f"{name} tells no mutant of {target.assignment} apart, even here"


@pytest.mark.parametrize("probe", SOURCE_AND_CODE)
def test_source_and_code_tell_no_variant_apart(probe, target, tmp_path, correct_fingerprints):
    text = _fingerprint_probe(probe, correct_fingerprints[probe], target)
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", text, target))


@pytest.mark.parametrize("probe", FRAMES)
def test_frames_and_tracebacks_tell_no_variant_apart(probe, target, tmp_path, correct_fingerprints):
    text = _fingerprint_probe(probe, correct_fingerprints[probe], target)
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", text, target))


# ----------------------------------------------------------- the environment and limits
ENVIRONMENT = {
    # A test's time limit: 5 s on the reference; on the wheats ten times its time on the first
    # reference run in, at least 1 s; on the mutants ten times its slower time on either. The
    # reference's run under hash seed 2 sleeps 0.4 s (so it also comes in second): the wheats get
    # the 1 s floor, the mutants 4 s.
    "time_left_in_the_test": '''
def test_probe():
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    if left > 4.5 and os.environ.get("PYTHONHASHSEED") == "2":
        time.sleep(0.4)
    assert left > 4.5 or left < 1.5
''',
    # The grading's CPU budget left (300 s by default), which each run is sent with: every run
    # burns 0.3 s (and a little more to start), and is charged when it comes back. With two
    # runs at a time the last wheat is sent once four runs are charged, the mutants once six
    # are; with more at a time every wheat is sent once one is. The threshold: five runs.
    "cpu_budget_left": '''
def test_a_probe():
    assert signal.getitimer(signal.ITIMER_PROF)[0] > 300.0 - 1.6


def test_b_burn():
    start = time.process_time()
    while time.process_time() - start < 0.3:
        pass
''',
}


@pytest.mark.parametrize("probe", sorted(ENVIRONMENT))
def test_limits_tell_no_variant_apart(probe, target, tmp_path):
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", HEADER + ENVIRONMENT[probe], target))


def test_the_process_state_tells_no_variant_apart(target, tmp_path, reference_state):
    """The environment, the rlimits, argv, the working folder, flags, descriptors, signal
    handlers: each as on the reference (as a recon submission saw it), and the hash seed."""
    body = "".join(f'''

def test_{name}(request):
    assert {name}(request) == {reference_state[name]!r}
''' for name in ("environment", "limits", "process")) + '''

def test_hash_seed():
    assert hash("x") % 2 == 0
'''
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", HEADER + RECON + body, target))


# ---------------------------------------------------- objects that carry the run's settings
RUN_SETTINGS = '''
def _mutant_settings(objects):
    for value in objects:
        try:
            fields = getattr(value, "__dict__", None)
        except Exception:  # noqa: BLE001
            continue
        if not isinstance(fields, dict):
            continue
        if fields.get("stop_at_first_kill") is True or fields.get("brief") is True:
            return type(value).__name__
    return None
'''
SETTINGS = {
    "through_the_garbage_collector": '''
def test_probe():
    import gc

    assert _mutant_settings(gc.get_objects()) is None
''',
    "through_the_plugin_manager": '''
def test_probe(request):
    assert _mutant_settings(request.config.pluginmanager.get_plugins()) is None
''',
    "up_the_call_stack": '''
def test_probe():
    frame, seen = sys._getframe(), []
    while frame is not None:
        seen += list(frame.f_locals.values())
        frame = frame.f_back
    assert _mutant_settings(seen) is None
''',
}


@pytest.mark.parametrize("probe", sorted(SETTINGS))
def test_run_settings_in_memory_tell_no_variant_apart(probe, target, tmp_path):
    body = HEADER + RUN_SETTINGS + SETTINGS[probe]
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", body, target))


# ----------------------------------------------------------------------------- process ids
# Each worker forks its runs in sequence, the reference first. test_a fails on purpose (so it
# runs on the reference only) and slows the reference's first-seed run: the wheats then all go
# to the second-seed worker, as its children 2 to 5; every mutant comes after them there, or
# after the reference in the other worker.
STEER = '''
def test_a_steer():
    if os.environ.get("PYTHONHASHSEED") == "1":
        time.sleep(0.5)
    raise AssertionError("fails on purpose")
'''


def test_process_ids_tell_no_variant_apart(target, tmp_path):
    probe = STEER + '''

def test_b_probe():
    nth = os.getpid() - os.getppid()  # this run's place among its worker's children
    assert nth == 1 or (os.environ.get("PYTHONHASHSEED") == "2" and nth <= 5)
'''
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", HEADER + probe, target))


def test_what_earlier_runs_left_behind_tells_no_variant_apart(target, tmp_path):
    """The same count as above, from marks the earlier runs of a worker left in its
    temporary folder."""
    probe = STEER + '''

def test_b_probe():
    marks = "/tmp/.runs"
    os.makedirs(marks, exist_ok=True)
    earlier = len(os.listdir(marks))
    open(os.path.join(marks, str(time.time())), "w").close()
    assert earlier == 0 or (os.environ.get("PYTHONHASHSEED") == "2" and earlier <= 4)
'''
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", HEADER + probe, target))


# ---------------------------------------------------------------- time since the staging
def test_time_since_staging_tells_no_variant_apart(target, tmp_path):
    """The mutants run after the reference and every wheat. The probe reads how long ago its
    file was staged; test_b sleeps 1 s after it in every run (a mutant's run stops at the
    probe). Measured on two cores (two runs at a time): the reference read 0.2 to 1.0 s, the
    last wheat 2.1 to 2.2 s later than the reference, the first mutant 3.2 s later. So the
    threshold tells them apart while the reference reads under about 1 s; past that
    the wheats fail too, the probe is brittle and the attack earns nothing (it is about timing,
    not a flaw to rely on). With four or more runs at a time only the mutants that wait for a
    slot are told apart."""
    probe = '''
def test_a_probe():
    assert time.time() - os.stat(__file__).st_ctime < 3.2


def test_b_sleep():
    time.sleep(1.0)
'''
    _assert_kills_nothing(_grade_probe(tmp_path / "tests", HEADER + probe, target))
