"""The bytecode of what a worker imports is compiled before the workers start, where it is
missing or stale: a worker runs as a sandbox user who cannot write it, so without it every
worker of every grading compiles the grader's and the reference's modules from source."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

import grader.bytecode as bytecode
import grader.launch as launch
from grader.paths import Layout, default_layout
from tests.calls import record_calls

LAYOUT = default_layout()


def _package(tmp_path):
    folder = tmp_path / "pkg"
    (folder / "sub").mkdir(parents=True)
    (folder / "__init__.py").write_text("VALUE = 1\n")
    (folder / "sub" / "__init__.py").write_text("")
    (folder / "sub" / "mod.py").write_text("def f():\n    return 2\n")
    (folder / "secret.py").write_text("HIDDEN = True\n")
    return folder


def _cached(source):
    return importlib.util.cache_from_source(str(source))


@pytest.fixture
def writes_bytecode(monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def test_missing_bytecode_is_compiled_and_a_skipped_file_never_is(tmp_path, writes_bytecode):
    folder = _package(tmp_path)
    compiled = bytecode.compile_stale([folder], skip=[folder / "secret.py"])
    assert sorted(p.name for p in compiled) == ["__init__.py", "__init__.py", "mod.py"]
    for source in (folder / "__init__.py", folder / "sub" / "mod.py"):
        assert os.path.isfile(_cached(source))
    assert not os.path.exists(_cached(folder / "secret.py"))
    assert bytecode.stale_sources([folder], skip=[folder / "secret.py"]) == []


def test_the_compiled_bytecode_is_what_the_import_system_loads(tmp_path, writes_bytecode):
    folder = _package(tmp_path)
    bytecode.compile_stale([folder])
    # As a worker imports: told never to write bytecode (-B); -v says where each module came from.
    done = subprocess.run([sys.executable, "-B", "-v", "-c", "import pkg.sub.mod"], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"code object from '{_cached(folder / 'sub' / 'mod.py')}'" in done.stderr


def test_a_changed_source_is_compiled_again(tmp_path, writes_bytecode):
    folder = _package(tmp_path)
    bytecode.compile_stale([folder])
    source = folder / "sub" / "mod.py"
    source.write_text("def f():\n    return 3  # changed\n")
    stamp = os.stat(source).st_mtime + 5
    os.utime(source, (stamp, stamp))
    assert bytecode.stale_sources([folder]) == [source]
    assert bytecode.compile_stale([folder]) == [source]
    assert bytecode.stale_sources([folder]) == []


def test_nothing_is_written_where_python_is_told_not_to(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    folder = _package(tmp_path)
    assert bytecode.compile_stale([folder]) == []
    assert not (folder / "__pycache__").exists()


def test_a_folder_that_cannot_take_bytecode_is_left_as_it_is(tmp_path, writes_bytecode):
    folder = _package(tmp_path)
    (folder / "__pycache__").write_text("a file where the folder would go\n")
    compiled = bytecode.compile_stale([folder])
    assert folder / "__init__.py" not in compiled  # could not be written: no error, just slower
    assert (folder / "__pycache__").read_text() == "a file where the folder would go\n"
    assert folder / "sub" / "mod.py" in compiled


def test_the_worker_sources_are_the_grader_and_the_shipped_reference_but_its_gru(tmp_path):
    folders, skip = bytecode.worker_sources(LAYOUT)
    names = {p.relative_to(LAYOUT.root).as_posix() for folder in folders for p in folder.rglob("*.py")}
    assert {"grader/worker.py", "grader/wire.py", "grader/sandbox.py", "grader/__init__.py"} <= names
    assert "reference/tinyllm/nn/module.py" in names
    assert LAYOUT.gru_source in skip
    # A student's own package is theirs: nothing is written into it.
    student = tmp_path / "student" / "tinyllm"
    student.mkdir(parents=True)
    folders, _ = bytecode.worker_sources(Layout(LAYOUT.root, implementation=student.parent))
    assert all(student not in (f, *f.parents) and student.parent not in (f, *f.parents) for f in folders)


def test_workers_are_started_after_their_bytecode_is_checked(monkeypatch, tmp_path):
    monkeypatch.setattr(bytecode, "_checked", set())
    order: list[str] = []
    record_calls(monkeypatch, order, compile=(bytecode, "compile_stale"))

    def start_worker(**kwargs):
        order.append("start")
        raise RuntimeError("stop here")

    monkeypatch.setattr(launch, "start_worker", start_worker)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="stop here"):
            launch.launch_worker(layout=LAYOUT, tests_dir=tmp_path, hash_seed=1, mode="none")
    assert order == ["compile", "start", "start"]  # checked once a process
