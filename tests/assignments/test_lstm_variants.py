"""The LSTM's variants (assignments/l3-2-lstm/manifest.toml) against its course tests.

Each variant's ``lstm.py`` is the reference (``reference/tinyllm/rnn/lstm.py``) with its patch
applied by ``grader.core.variants.apply_patch``, written over ``rnn/lstm.py`` in a copy of the
repository's ``tinyllm``. The course tests run against that copy in a pytest of their own, the
copy first on ``PYTHONPATH``, so ``tinyllm.rnn.lstm`` is the variant's and not the installed
reference. The runs go a few at a time. Every
mutant must fail at least one course test, its ``caught_by`` tests among them; the reference
and every wheat must pass them all.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.core.variants import VariantKind, VariantSpec, apply_patch, load_manifest

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = ROOT / "assignments" / "l3-2-lstm"
MANIFEST = ASSIGNMENT / "manifest.toml"
REFERENCE_LSTM = ROOT / "reference" / "tinyllm" / "rnn" / "lstm.py"  # in the shared tinyllm
COURSE_TESTS = ASSIGNMENT / "tests"
SHARED_TINYLLM = ROOT / "reference" / "tinyllm"

SPECS = load_manifest(MANIFEST)
RUN_TIMEOUT_S = 120.0
PARALLEL_RUNS = max(2, min(4, os.cpu_count() or 1))

# Loaded by each run with -p: records which file ``tinyllm.rnn.lstm`` came from, so a run
# that silently tested the reference instead of the variant cannot pass.
_ORIGIN_PLUGIN = "lstm_variant_origin"
_ORIGIN_SOURCE = '''\
import os
import sys


def pytest_sessionfinish(session, exitstatus):
    module = sys.modules.get("tinyllm.rnn.lstm")
    with open(os.environ["LSTM_VARIANT_ORIGIN"], "w", encoding="utf-8") as out:
        out.write(getattr(module, "__file__", None) or "")
'''


def _course_test_names() -> set[str]:
    """The names of the course tests: the ``test_*`` functions of the course test files."""
    names = set()
    for path in sorted(COURSE_TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names |= {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        }
    return names


def _source(spec: VariantSpec) -> str:
    """The variant's ``lstm.py``: the reference, patched unless this is the reference."""
    reference = REFERENCE_LSTM.read_text(encoding="utf-8")
    if spec.kind is VariantKind.REFERENCE:
        return reference
    patch = ASSIGNMENT / (spec.patch or f"patches/{spec.id}.patch")
    return apply_patch(reference, patch.read_text(encoding="utf-8"), name=spec.id)


@dataclass
class CourseRun:
    """What one pytest of the course tests against one variant found."""

    returncode: int | None  # None: the run timed out
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)  # failures and errors
    skipped: set[str] = field(default_factory=set)
    origin: str = ""  # the file tinyllm.rnn.lstm was imported from
    copy: Path = Path()  # the variant's tinyllm copy
    output: str = ""

    def describe(self) -> str:
        return (
            f"exit {self.returncode}, failed {sorted(self.failed)}, skipped {sorted(self.skipped)},"
            f" lstm from {self.origin!r}\n{self.output[-3000:]}"
        )


def _run_course_tests(spec: VariantSpec, workdir: Path) -> CourseRun:
    """Copy the shared tinyllm with the variant's lstm.py into ``workdir`` and run the course
    tests against it."""
    package = workdir / "tinyllm"
    shutil.copytree(SHARED_TINYLLM, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "rnn" / "lstm.py").write_text(_source(spec), encoding="utf-8")
    (workdir / f"{_ORIGIN_PLUGIN}.py").write_text(_ORIGIN_SOURCE, encoding="utf-8")
    report, origin = workdir / "junit.xml", workdir / "origin.txt"

    env = dict(os.environ)
    env.pop("MUTAGRADE_GOLDENS", None)  # the course tests' own goldens
    env.update(
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONDONTWRITEBYTECODE="1",  # no bytecode of the course tests shared between runs
        PYTHONPATH=os.pathsep.join(
            [str(workdir), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        LSTM_VARIANT_ORIGIN=str(origin),
    )
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", _ORIGIN_PLUGIN,
        f"--junitxml={report}", str(COURSE_TESTS),
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout if isinstance(exc.stdout, str) else ""
        return CourseRun(returncode=None, copy=package, output=output + "\n(timed out)")

    run = CourseRun(returncode=done.returncode, copy=package, output=done.stdout + done.stderr)
    if origin.exists():
        run.origin = origin.read_text(encoding="utf-8")
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            name = case.get("name", "").split("[")[0]
            if case.find("failure") is not None or case.find("error") is not None:
                run.failed.add(name)
            elif case.find("skipped") is not None:
                run.skipped.add(name)
            else:
                run.passed.add(name)
    return run


@pytest.fixture(scope="module")
def course_runs(request, tmp_path_factory) -> dict[str, CourseRun]:
    """The course tests' run against each variant this session selected, a few at a time."""
    here = Path(__file__).resolve()
    wanted = {
        item.callspec.params["spec"].id
        for item in request.session.items
        if Path(str(item.path)).resolve() == here
        and "spec" in getattr(getattr(item, "callspec", None), "params", {})
    }
    specs = [spec for spec in SPECS if spec.id in wanted]
    base = tmp_path_factory.mktemp("lstm_variants")
    with ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
        runs = pool.map(lambda spec: _run_course_tests(spec, base / spec.id), specs)
        return {spec.id: run for spec, run in zip(specs, runs, strict=True)}


def test_the_manifest_holds_ten_mutants_two_wheats_some_required_and_hidden():
    kinds = [spec.kind for spec in SPECS]
    assert kinds.count(VariantKind.REFERENCE) == 1
    assert kinds.count(VariantKind.WHEAT) >= 2
    mutants = [spec for spec in SPECS if spec.kind is VariantKind.MUTANT]
    assert len(mutants) >= 10
    assert 1 <= sum(spec.required for spec in mutants) <= 2
    assert 1 <= sum(spec.hidden for spec in mutants) <= len(mutants) // 3
    assert not any(spec.required and spec.hidden for spec in mutants)
    assert not any(spec.required or spec.hidden for spec in SPECS if spec not in mutants)
    course_tests = _course_test_names()
    for spec in mutants:
        assert spec.title and spec.pitfall, spec.id
        unknown = set(spec.caught_by) - course_tests
        assert not unknown, f"{spec.id}: caught_by names no course test {sorted(unknown)}"


def test_every_patch_applies_and_every_variant_differs_from_every_other():
    reference = REFERENCE_LSTM.read_text(encoding="utf-8")
    sources = {spec.id: _source(spec) for spec in SPECS}
    for spec_id, source in sources.items():
        compile(source, spec_id, "exec")
        assert (source == reference) == (spec_id == "reference"), spec_id
    assert len(set(sources.values())) == len(sources)
    patches = {path.stem for path in (ASSIGNMENT / "patches").glob("*.patch")}
    assert patches == {spec.id for spec in SPECS if spec.kind is not VariantKind.REFERENCE}


@pytest.mark.parametrize("spec", SPECS, ids=[spec.id for spec in SPECS])
def test_the_course_tests_kill_each_mutant_and_pass_the_rest(spec: VariantSpec, course_runs):
    run = course_runs[spec.id]
    origin = Path(run.origin).resolve() if run.origin else None
    assert origin == (run.copy / "rnn" / "lstm.py").resolve(), (
        f"{spec.id}: the course tests did not import the variant's copy: {run.describe()}"
    )
    assert run.returncode is not None, f"{spec.id}: the course tests timed out: {run.describe()}"
    course_tests = _course_test_names()
    assert run.passed | run.failed | run.skipped == course_tests, (
        f"{spec.id}: not every course test ran: {run.describe()}"
    )
    if spec.kind is VariantKind.MUTANT:
        assert run.failed, f"{spec.id} ({spec.title}) survives every course test"
        missed = set(spec.caught_by) - run.failed
        assert not missed, (
            f"{spec.id} ({spec.title}): its caught_by tests {sorted(missed)} pass: {run.describe()}"
        )
    else:
        assert run.returncode == 0 and not run.failed and not run.skipped, (
            f"{spec.id} ({spec.title}) fails the course tests: {run.describe()}"
        )
