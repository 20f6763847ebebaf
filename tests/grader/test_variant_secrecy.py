"""A run learns its own variant's behaviour and nothing else: no other variant's source, and no
hidden mutant's title, is in its memory or in the memory of the worker that forked it, even
with the policy check off (a test may then read any memory the kernel lets it read). The scan
runs over every assignment (the GRU's and the LSTM's), each with its own variants' needles; the
report and file checks below grade the default one's (the GRU's).

Needles are held as (prefix, length, sha256): neither the scanning test nor this module
keeps another variant's distinctive line whole, so the scan cannot find itself.
"""

from __future__ import annotations

import hashlib
import os
import py_compile
import signal
import string
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from grader.core.models import WorkerRun
from grader.core.paths import default_layout, layout_for
from grader.core.variants import Variant, VariantKind, build_variants
from grader.run.runner import WorkerProcess
from tests.limits import unbudgeted

LAYOUT = default_layout()
VARIANTS = build_variants(LAYOUT)
ASSIGNMENTS = ("l3-3-gru", "l3-2-lstm")
LAYOUTS = {name: LAYOUT if name == LAYOUT.assignment_name else layout_for(LAYOUT.root, name) for name in ASSIGNMENTS}
VARIANTS_OF = {name: VARIANTS if LAYOUTS[name] is LAYOUT else build_variants(LAYOUTS[name]) for name in ASSIGNMENTS}
PREFIX = 10

# The scanner, as source: the student's test runs it on its own process and on the worker, and
# this module runs it (as root) on the worker from outside.
SCANNER = '''
import ctypes, hashlib, os

def _reader(pid):
    """A function reading (start, size) of process ``pid``'s memory: through /proc/PID/mem,
    or, for this very process when that is closed to it (a non-dumpable process's /proc files
    are root's), straight from its own address space."""
    try:
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
    except PermissionError:
        if pid != "self":
            raise
        return lambda start, size, path: ctypes.string_at(start, size) if path in ("", "[heap]", "[stack]") else b""
    def read(start, size, path):
        try:
            return os.pread(mem.fileno(), size, start)
        except OSError:
            return b""
    return read

def scan(pid, needles):
    """The names of the needles found in the readable memory of process ``pid``."""
    found = set()
    longest = max((length for entries in needles.values() for _, length, _ in entries), default=0)
    with open(f"/proc/{pid}/maps") as maps:
        regions = [line.split() for line in maps]
    read = _reader(pid)
    for fields in regions:
        start, end = (int(x, 16) for x in fields[0].split("-"))
        path = fields[5] if len(fields) > 5 else ""
        if "r" not in fields[1] or path.startswith("[v") or end - start > 1 << 30:
            continue
        offset = start
        while offset < end:
            size = min(16 << 20, end - offset)
            chunk = read(offset, min(size + longest, end - offset), path)
            for name, entries in needles.items():
                if name in found:
                    continue
                for prefix, length, digest in entries:
                    at = chunk.find(prefix)
                    while at != -1 and at < size:
                        if hashlib.sha256(chunk[at:at + length]).hexdigest() == digest:
                            found.add(name)
                            break
                        at = chunk.find(prefix, at + 1)
                    if name in found:
                        break
            offset += size
    return found
'''
_scanner: dict = {}
exec(SCANNER, _scanner)  # noqa: S102 - this module's own code, shared with the suite it writes
scan = _scanner["scan"]


def _needle(text: str) -> list[tuple[bytes, int, str]]:
    """The entries of ``text``: its UTF-8 bytes (in a file, or read from one), and, unless it is
    ASCII (stored as those same bytes), its bytes as a Python ``str`` holds them (one, two or
    four bytes a character, by its widest): a non-ASCII line or title (the LSTM's ``σ``, ``ᵀ``)
    may be in memory in either form."""
    forms = [text.encode()]
    if not text.isascii():
        widest = max(map(ord, text))
        forms.append(text.encode("latin-1" if widest < 0x100 else "utf-16-le" if widest < 0x10000 else "utf-32-le"))
    return [(data[:PREFIX], len(data), hashlib.sha256(data).hexdigest()) for data in forms]


def _needles(variants: list[Variant]) -> dict[str, list[tuple[bytes, int, str]]]:
    """Variant id -> its distinctive lines (in no other variant, not even inside a longer line:
    the LSTM's s14 line ``s = x @ w_ih.T + b_ih + h @ w_hh.T`` begins the reference's); hidden
    titles as "title:ID"."""
    lines = {v.id: {ln.strip() for ln in v.source.splitlines() if len(ln.strip()) >= 16} for v in variants}
    needles: dict[str, list[tuple[bytes, int, str]]] = {}
    for variant in variants:
        others = [o for o in variants if o.id != variant.id]
        own = sorted(line for line in lines[variant.id] - set().union(*(lines[o.id] for o in others))
                     if not any(line in o.source for o in others))
        if own:
            needles[variant.id] = [entry for line in own for entry in _needle(line)]
        if variant.kind is VariantKind.MUTANT and variant.spec.hidden:
            needles[f"title:{variant.id}"] = _needle(variant.spec.title)
    return needles


NEEDLES_OF = {name: _needles(VARIANTS_OF[name]) for name in ASSIGNMENTS}
NEEDLES = NEEDLES_OF[LAYOUT.assignment_name]


def _in_a_source(text: str) -> list[tuple[bytes, int, str]]:
    """The entries of ``text``, a line of a module's source or a title, as a file holds it
    (UTF-8) and as a Python ``str`` of the whole source holds it: every source of the course
    has characters past Latin-1 and none past the first plane (``⊙``, ``σ``), so its ``str``
    keeps even an ASCII line two bytes a character."""
    forms = (text.encode("utf-8"), text.encode("utf-16-le"))
    return [(data[:PREFIX], len(data), hashlib.sha256(data).hexdigest()) for data in forms]


def _foreign_needles(assignment: str) -> dict[str, list[tuple[bytes, int, str]]]:
    """The other module's answer, as needles a run of ``assignment`` must not hold: the longest
    lines of its reference (in none of this module's variants, nor in any other file of the
    shared framework: its stubs, this module's reference) and its hidden mutants' titles."""
    other = next(name for name in ASSIGNMENTS if name != assignment)
    reference = next(v for v in VARIANTS_OF[other] if v.id == "reference")
    mine = "\n".join(v.source for v in VARIANTS_OF[assignment])
    framework = "\n".join(path.read_text(encoding="utf-8") for path in (LAYOUT.reference / "tinyllm").rglob("*")
                          if path.suffix in (".py", ".pyi") and path != LAYOUTS[other].module_source)
    lines = sorted({ln.strip() for ln in reference.source.splitlines() if len(ln.strip()) >= 24}
                   - {ln.strip() for ln in (mine + "\n" + framework).splitlines()}, key=lambda ln: (-len(ln), ln))[:6]
    needles = {f"{other}:line {i}": _in_a_source(line) for i, line in enumerate(lines)}
    needles.update({f"{other}:title:{v.id}": _in_a_source(v.spec.title) for v in VARIANTS_OF[other]
                    if v.kind is VariantKind.MUTANT and v.spec.hidden})
    return needles


# A run of one module holds nothing of the other's reference or hidden titles either.
FOREIGN_OF = {name: _foreign_needles(name) for name in ASSIGNMENTS}


def test_the_scan_covers_the_gru_and_the_lstm():
    assert LAYOUT.assignment_name == "l3-3-gru"
    assert {name: LAYOUTS[name].module_under_test for name in ASSIGNMENTS} == {
        "l3-3-gru": "tinyllm.rnn.gru", "l3-2-lstm": "tinyllm.rnn.lstm"
    }


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_needles_are_many_and_the_hidden_titles_among_them(assignment):
    needles, variants = NEEDLES_OF[assignment], VARIANTS_OF[assignment]
    assert sum(1 for name in needles if not name.startswith("title:")) >= 12
    assert {name for name in needles if name.startswith("title:")} == {
        f"title:{v.id}" for v in variants if v.kind is VariantKind.MUTANT and v.spec.hidden
    }
    assert {name for name in needles if name.startswith("title:")}, "no hidden mutant to keep secret"
    # The scan below holds a hidden mutant's own lines among its needles, not only its title.
    assert WAITING[assignment].chosen[-1] in needles


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_scanner_finds_what_is_there(assignment):
    # This process built every variant: each one's lines are in its memory.
    needles = {**NEEDLES_OF[assignment], **FOREIGN_OF[assignment]}
    assert sum(1 for name in FOREIGN_OF[assignment] if ":line " in name) == 6  # the other module's answer
    found = scan(os.getpid(), needles)
    assert found == set(needles)


class Waiting(NamedTuple):
    """What the scan runs per assignment: the variants, and the import and the call of the
    module under test that its one test makes before it waits."""

    chosen: tuple[str, ...]
    imports: str
    call: str


# The last variant chosen is a hidden mutant.
WAITING = {
    "l3-3-gru": Waiting(("reference", "w01", "s02", "s04"), "from tinyllm.rnn.gru import GRU",
                        "GRU(2, 3)(np.ones((2, 1, 2)))"),
    "l3-2-lstm": Waiting(("reference", "w01", "s02", "s13"), "from tinyllm.rnn.lstm import LSTM, lstm_cell",
                         "LSTM(2, 3)(np.ones((2, 1, 2)))\n"
                         "    lstm_cell(np.ones((1, 2)), np.ones((1, 3)), np.ones((1, 3)), np.ones((12, 2)),"
                         " np.ones((12, 3)), np.zeros(12), np.zeros(12))"),
}


def _waiting_suite(folder: Path, assignment: str) -> Path:
    """A suite whose one test uses the module under test, then waits while this module scans
    the processes: until this module sends it SIGUSR1 once it has scanned them all (a scan of a
    process takes seconds, a few more on a loaded machine), or 45 seconds at most."""
    waiting = WAITING[assignment]
    folder.mkdir()
    (folder / "test_wait.py").write_text(
        f"import signal\nimport time\n\nimport numpy as np\n{waiting.imports}\n\n"
        "_TOLD = []\nsignal.signal(signal.SIGUSR1, lambda *_: _TOLD.append(True))\n\n\n"
        f"def test_wait():\n    {waiting.call}\n"
        "    deadline = time.monotonic() + 45\n"
        "    while not _TOLD and time.monotonic() < deadline:\n        time.sleep(0.05)\n"
    )
    return folder


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def _worker_pid(worker: WorkerProcess) -> int:
    """The worker's Python process (under bubblewrap and setpriv, a descendant of the one
    started), once it has started."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        children = _children()
        todo = [worker.process.pid]
        while todo:
            pid = todo.pop()
            try:
                command = (Path("/proc") / str(pid) / "cmdline").read_bytes()
            except OSError:
                continue
            if b"grader.worker" in command and b"bwrap" not in command.split(b"\0")[0]:
                return pid
            todo.extend(children.get(pid, []))
        time.sleep(0.05)
    raise AssertionError("the worker's process was not found")


def _nesting(pid: int) -> int:
    """How many pid namespaces deep ``pid`` is (the entries of its NSpid line)."""
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return len(line.split()) - 1
    return 1


def _started(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19])


def _alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _runs_processes(worker: int) -> tuple[list[int], list[int]]:
    """The runs' test processes and implementation processes: all the worker's children (the
    zygote clones each test process as the worker's), less the zygote, its first. A test
    process is born in a pid namespace of its own, an implementation process is not (the
    zygote's warm-up, a process that exits at once, is left out once it has)."""
    mine = sorted(_children().get(worker, []), key=_started)[1:]
    mine = [pid for pid in mine if _alive(pid)]
    depth = _nesting(worker)
    tests = [pid for pid in mine if _nesting(pid) > depth]
    return tests, [pid for pid in mine if pid not in tests]


@pytest.mark.parametrize("sandbox", ["auto"])
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_test_process_holds_any_variant_and_each_implementation_only_its_own(tmp_path, assignment, sandbox):
    layout, needles = LAYOUTS[assignment], {**NEEDLES_OF[assignment], **FOREIGN_OF[assignment]}
    chosen = [v for v in VARIANTS_OF[assignment] if v.id in WAITING[assignment].chosen]
    assert [v.id for v in chosen] == list(WAITING[assignment].chosen)
    tests = _waiting_suite(tmp_path / "tests", assignment)
    limits = unbudgeted(sandbox=sandbox, test_timeout_s=60.0, run_timeout_s=120.0, jobs=len(chosen))
    worker = WorkerProcess(layout=layout, tests_dir=tests, hash_seed=1, limits=limits, hide_source=True)
    try:
        for variant in chosen:
            worker.submit(WorkerRun(variant=variant.id, source=variant.source))
        pid = _worker_pid(worker)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            test_processes, implementations = _runs_processes(pid)
            if len(test_processes) == len(implementations) == len(chosen):
                break
            time.sleep(0.1)
        time.sleep(1.0)  # every test process is in its test by now, having called the module
        found_in_tests = [scan(p, needles) for p in test_processes]
        found_in_implementations = [scan(p, needles) for p in implementations]
        for test_process in test_processes:  # scanned: their tests may end
            os.kill(test_process, signal.SIGUSR1)
        results = worker.collect(len(chosen), timeout=120)
        found_in_worker = scan(pid, needles)
    finally:
        worker.close()
    assert len(found_in_tests) == len(found_in_implementations) == len(chosen)
    assert found_in_tests == [set()] * len(chosen), f"test processes hold {found_in_tests}"
    assert all(len(found) <= 1 for found in found_in_implementations), found_in_implementations
    expected = {v.id for v in chosen if v.id in needles}
    assert set().union(*found_in_implementations) == expected
    assert found_in_worker == set(), f"the worker holds {sorted(found_in_worker)}"
    assert {r.variant: [t.outcome.value for t in r.results] for r in results} == {v.id: ["passed"] for v in chosen}


LEAKER = string.Template('''
import inspect, linecache, traceback

import numpy as np
import pytest
import $module as under_test
from $module import $cls


def _everything():
    found = ["".join(linecache.cache.get("$path", (0, 0, [], ""))[2])]
    for target in (under_test, under_test.$cls, under_test.$cell, under_test.$cls.forward):
        try:
            found.append(inspect.getsource(target))
        except (OSError, TypeError) as exc:
            found.append(repr(exc))
    try:
        $cls(3, 4)(np.zeros((5, 2, 2)))
    except Exception:
        found.append(traceback.format_exc())
    return "\\n".join(found)


@pytest.mark.parametrize("window", range(0, 30000, 1200))
def test_leak_in_the_message(window):
    assert False, _everything()[window:window + 1500]


def test_leak_as_an_error():
    raise RuntimeError(_everything()[-1500:])


def test_valid_so_that_the_mutants_run():
    assert len($cls(2, 3).state_dict()) == 4
''')
LEAK_AT_IMPORT = "".join(
    f"from test_leak import _everything\n\nraise RuntimeError(_everything()[{start}:{start + 1800}])\n"
    for start in (7800,)
)


def _leaker(assignment: str) -> str:
    """The leaking suite, written for ``assignment``'s module (``tinyllm.rnn.gru``: ``GRU``, ``gru_cell``)."""
    module = LAYOUTS[assignment].module_under_test
    stem = module.rsplit(".", 1)[1]
    return LEAKER.substitute(module=module, path=module.replace(".", "/") + ".py", cls=stem.upper(),
                             cell=f"{stem}_cell")


def _source_lines(variants: list[Variant]) -> dict[str, list[tuple[bytes, int, str]]]:
    """Every variant's lines, the reference's included, that are long enough to mean something
    and that the stand-in (which a test may read) does not share."""
    from grader.worker import standin

    shown = {line.strip() for line in Path(standin.__file__).read_text().splitlines()}
    return {
        # A report is searched as UTF-8 text: each line's UTF-8 form, its first entry, is enough.
        f"source:{v.id}": [_needle(line.strip())[0] for line in v.source.splitlines()
                           if len(line.strip()) >= 24 and line.strip() not in shown]
        for v in variants
    }


def _needles_in(text: str, assignment: str) -> set[str]:
    data = text.encode()
    found = set()
    for name, entries in {**NEEDLES_OF[assignment], **_source_lines(VARIANTS_OF[assignment])}.items():
        for prefix, length, digest in entries:
            at = data.find(prefix)
            while at != -1:
                if hashlib.sha256(data[at:at + length]).hexdigest() == digest:
                    found.add(name)
                    break
                at = data.find(prefix, at + 1)
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_report_holds_a_line_of_any_variant(tmp_path, assignment):
    """Whatever a test prints into its failure (linecache, inspect, a traceback through the
    module), the report, staff's included, holds no line of the reference or any variant."""
    from grader.core.assignment import load_assignment
    from grader.flows.grading import grade_suite
    from grader.report import render

    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_leak.py").write_text(_leaker(assignment))
    (tests / "test_leak_at_import.py").write_text(LEAK_AT_IMPORT)
    layout, variants = LAYOUTS[assignment], VARIANTS_OF[assignment]
    report = grade_suite(tests, layout=layout, assignment=load_assignment(layout.assignment), policy=False,
                         audience="staff", full_matrix=True)
    from grader.core.scoring import student_view

    assert any("test_leak_at_import" in str(p) for p in report.problems), report.problems
    staff = render(report, "json") + render(report, "text")
    student = render(student_view(report, variants), "json") + render(student_view(report, variants), "text")
    assert "test_leak.py::test_leak_in_the_message[0]" in staff and "test_leak.py::test_leak_in_the_message[0]" in student
    # Staff may read the hidden mutants' titles; nobody reads a line of any variant's source.
    leaked = {n for n in _needles_in(staff, assignment) if not n.startswith("title:")}
    assert leaked == set(), sorted(leaked)
    assert _needles_in(student, assignment) == set(), sorted(_needles_in(student, assignment))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_reference_source_cannot_be_read_while_variants_are_graded(tmp_path, assignment):
    # Its bytecode neither: `make` compiles the checkout ahead, and any import of the reference
    # outside the sandbox may leave a .pyc beside it.
    layout, variants = LAYOUTS[assignment], VARIANTS_OF[assignment]
    compiled = Path(py_compile.compile(str(layout.module_source), doraise=True))
    assert compiled.parent.name == "__pycache__" and compiled.stat().st_size > 0
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_peek.py").write_text(
        "import glob\n\n"
        "def test_peek():\n"
        f"    paths = [{str(layout.module_source)!r}, *glob.glob({str(compiled.parent / layout.module_source.stem)!r} + '.*')]\n"
        "    assert len(paths) >= 2\n"
        "    for path in paths:\n"
        "        try:\n            with open(path, 'rb') as f:\n                data = f.read()\n"
        "        except OSError:\n            data = b''\n"
        "        assert data == b'', path\n"
    )
    hidden = WorkerProcess(layout=layout, tests_dir=tests, hash_seed=1, limits=unbudgeted(), hide_source=True)
    [run] = hidden.run([WorkerRun(variant="s02", source=variants[0].source)])
    assert [(r.test_id, r.outcome.value) for r in run.results] == [("test_peek.py::test_peek", "passed")], run
    # Without hiding (a student's own package in `tdd`), the same file is there to read.
    shown = WorkerProcess(layout=layout, tests_dir=tests, hash_seed=1, limits=unbudgeted())
    [run] = shown.run([WorkerRun(variant="s02", source=variants[0].source)])
    assert [r.outcome.value for r in run.results] == ["failed"], run
