"""A run learns its own variant's behaviour and nothing else: no other variant's source, and no
hidden mutant's title, is in its memory or in the memory of the worker that forked it, even
with the policy check off (a test may then read any memory the kernel lets it read).

Needles are held as (prefix, length, sha256): neither the scanning test nor this module
keeps another variant's distinctive line whole, so the scan cannot find itself.
"""

from __future__ import annotations

import hashlib
import os
import py_compile
import re
from pathlib import Path

import pytest

from grader.models import WorkerRun
from grader.paths import default_layout
from grader.runner import RunLimits, WorkerProcess
from grader.variants import VariantKind, build_variants

LAYOUT = default_layout()
VARIANTS = build_variants(LAYOUT)
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


def _needle(text: str) -> tuple[bytes, int, str]:
    data = text.encode()
    return data[:PREFIX], len(data), hashlib.sha256(data).hexdigest()


def _needles() -> dict[str, list[tuple[bytes, int, str]]]:
    """Variant id -> its distinctive lines (in no other variant); hidden titles as "title:ID"."""
    lines = {v.id: {ln.strip() for ln in v.source.splitlines() if len(ln.strip()) >= 16} for v in VARIANTS}
    needles: dict[str, list[tuple[bytes, int, str]]] = {}
    for variant in VARIANTS:
        others = set().union(*(lines[o.id] for o in VARIANTS if o.id != variant.id))
        own = sorted(lines[variant.id] - others)
        if own:
            needles[variant.id] = [_needle(line) for line in own]
        if variant.kind is VariantKind.MUTANT and variant.spec.hidden:
            needles[f"title:{variant.id}"] = [_needle(variant.spec.title)]
    return needles


NEEDLES = _needles()


def test_the_needles_are_many_and_the_hidden_titles_among_them():
    assert sum(1 for name in NEEDLES if not name.startswith("title:")) >= 12
    assert {name for name in NEEDLES if name.startswith("title:")} == {
        f"title:{v.id}" for v in VARIANTS if v.kind is VariantKind.MUTANT and v.spec.hidden
    }


def test_the_scanner_finds_what_is_there():
    # This process built every variant: each one's lines are in its memory.
    found = scan(os.getpid(), NEEDLES)
    assert found == set(NEEDLES)


def _scanning_suite(folder: Path) -> Path:
    folder.mkdir()
    (folder / "test_scan.py").write_text(
        SCANNER
        + f"\nNEEDLES = {NEEDLES!r}\n"
        + '''

def test_scan_memory():
    found = sorted(scan("self", NEEDLES))
    try:
        worker = sorted(scan(os.getppid(), NEEDLES))
    except OSError as exc:
        worker = f"unreadable (errno {exc.errno})"
    assert False, f"found={found} worker={worker}"
'''
    )
    return folder


def _worker_pid(worker: WorkerProcess) -> int:
    """The worker's Python process (under bubblewrap and setpriv, a descendant of the one started)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
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
    raise AssertionError("the worker's process was not found")


@pytest.mark.parametrize("sandbox", ["auto"])
def test_a_run_finds_only_its_own_variant_in_memory(tmp_path, sandbox):
    tests = _scanning_suite(tmp_path / "tests")
    limits = RunLimits(sandbox=sandbox, test_timeout=60.0, run_timeout=120.0)
    worker = WorkerProcess(layout=LAYOUT, tests_dir=tests, hash_seed=1, limits=limits)
    try:
        for variant in VARIANTS:
            worker.submit(WorkerRun(variant=variant.id, source=variant.source))
        results = worker.collect(len(VARIANTS), timeout=300)
        # Every run has ended; the worker still waits for more. Read its memory from outside.
        found_in_worker = scan(_worker_pid(worker), NEEDLES)
    finally:
        worker.close()
    assert found_in_worker == set(), f"the worker holds {sorted(found_in_worker)}"
    by_variant = {run.variant: run for run in results}
    assert set(by_variant) == {v.id for v in VARIANTS}
    for variant in VARIANTS:
        run = by_variant[variant.id]
        [result] = run.results
        match = re.search(r"found=\[(.*?)\] worker=(.*)$", result.message, re.MULTILINE)
        assert match, f"{variant.id}: {run.crashed or result.message}"
        found = {name.strip("' ") for name in match.group(1).split(",") if name.strip()}
        expected = {variant.id} if variant.id in NEEDLES else set()
        assert found == expected, f"{variant.id}'s run found {sorted(found)} in its own memory"
        assert match.group(2).startswith("unreadable"), f"{variant.id}'s run read the worker: {match.group(2)}"


def test_the_reference_source_cannot_be_read_while_variants_are_graded(tmp_path):
    # Its bytecode neither: `make` compiles the checkout ahead, and any import of the reference
    # outside the sandbox may leave a .pyc beside it.
    compiled = Path(py_compile.compile(str(LAYOUT.gru_source), doraise=True))
    assert compiled.parent.name == "__pycache__" and compiled.stat().st_size > 0
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_peek.py").write_text(
        "import glob\n\n"
        "def test_peek():\n"
        f"    paths = [{str(LAYOUT.gru_source)!r}, *glob.glob({str(compiled.parent)!r} + '/gru.*')]\n"
        "    assert len(paths) >= 2\n"
        "    for path in paths:\n"
        "        try:\n            with open(path, 'rb') as f:\n                data = f.read()\n"
        "        except OSError:\n            data = b''\n"
        "        assert data == b'', path\n"
    )
    hidden = WorkerProcess(layout=LAYOUT, tests_dir=tests, hash_seed=1, limits=RunLimits(), hide_source=True)
    [run] = hidden.run([WorkerRun(variant="s02", source=VARIANTS[0].source)])
    assert [(r.test_id, r.outcome.value) for r in run.results] == [("test_peek.py::test_peek", "passed")], run
    # Without hiding (a student's own package in `tdd`), the same file is there to read.
    shown = WorkerProcess(layout=LAYOUT, tests_dir=tests, hash_seed=1, limits=RunLimits())
    [run] = shown.run([WorkerRun(variant="s02", source=VARIANTS[0].source)])
    assert [r.outcome.value for r in run.results] == ["failed"], run
