"""``mutagrade starter``: the repository students start from. The committed ``examples/starter/``
is the command's output; its ``gru.py`` is the contract stub, every function raising
``NotImplementedError``; its given test goes red on it and green on a written GRU."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.paths import default_layout
from grader.flows.starter import JOURNAL, StarterError, starter_files, stub_source, write_starter
from grader.flows.tdd import DEFAULT_IMPL

LAYOUT = default_layout()
GRU_FILE = LAYOUT.module_file  # tinyllm/rnn/gru.py
DEFAULT_TESTS = LAYOUT.student_tests  # python/tests/l3-3-gru
STARTER = LAYOUT.examples / "starter"
CONTRACT = LAYOUT.reference / "tinyllm" / "rnn" / "gru.pyi"
STUB = f"{DEFAULT_IMPL.as_posix()}/{GRU_FILE}"
GIVEN = f"{DEFAULT_TESTS.as_posix()}/test_gru.py"


def _committed() -> dict[str, bytes]:
    return {
        p.relative_to(STARTER).as_posix(): p.read_bytes()
        for p in sorted(STARTER.rglob("*")) if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _mutagrade(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader.cli", *args], capture_output=True, text=True, timeout=300,
                          cwd=LAYOUT.root, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})


def _pytest(repo: Path) -> subprocess.CompletedProcess:
    """The student's tests on the student's tinyllm, with plain pytest."""
    env = {**os.environ, "PYTHONPATH": str(repo / DEFAULT_IMPL), "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(repo / DEFAULT_TESTS)],
                          capture_output=True, text=True, timeout=300, cwd=repo, env=env)


def test_examples_starter_is_the_commands_output() -> None:
    made, committed = starter_files(LAYOUT), _committed()
    differ = sorted(p for p in made.keys() | committed.keys() if made.get(p) != committed.get(p))
    assert not differ, f"examples/starter/ is out of date in {differ}: rm -rf examples/starter && mutagrade starter examples/starter"


def test_the_starter_holds_the_framework_the_stub_the_given_test_the_journal_and_the_ci() -> None:
    files = starter_files(LAYOUT)
    package = LAYOUT.reference / "tinyllm"
    framework = {
        f"{DEFAULT_IMPL.as_posix()}/tinyllm/{p.relative_to(package).as_posix()}"
        for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p not in LAYOUT.answer_files
    }
    assert framework <= set(files) and f"{DEFAULT_IMPL.as_posix()}/tinyllm/rnn/gru.pyi" in framework
    # Another assignment's reference module (the shared tinyllm's lstm.py) is an answer too: not handed out.
    others = {f"{DEFAULT_IMPL.as_posix()}/tinyllm/{p.relative_to(package).as_posix()}"
              for p in LAYOUT.answer_files if p != LAYOUT.module_source}
    assert others and not others & set(files)
    assert files[STUB] != LAYOUT.module_source.read_bytes() and files[JOURNAL] == b""
    assert {".github/workflows/mutagrade.yml", ".gitlab-ci.yml", "README.md", GIVEN} <= set(files)
    tests = [n.name for n in ast.parse(files[GIVEN]).body if isinstance(n, ast.FunctionDef)]
    assert tests == ["test_hand_example_gru_cell"]
    readme = files["README.md"].decode()
    assert "mutagrade tdd red" in readme and "mutagrade tdd green" in readme and "NotImplementedError" in readme


def _signatures(tree: ast.Module) -> dict[str, tuple[str, str | None]]:
    """Every function's signature and docstring, by its qualified name."""
    found = {}
    for node in tree.body:
        members = [(node, node.name)] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            found[node.name] = ("class", ast.get_docstring(node))
            members = [(item, f"{node.name}.{item.name}") for item in node.body if isinstance(item, ast.FunctionDef)]
        for function, name in members:
            returns = ast.unparse(function.returns) if function.returns else ""
            found[name] = (f"({ast.unparse(function.args)}) -> {returns}", ast.get_docstring(function))
    return found


def test_the_stub_is_the_contract_with_every_function_raising_not_implemented(tmp_path: Path) -> None:
    contract = CONTRACT.read_text(encoding="utf-8")
    stub = stub_source(contract)
    assert _signatures(ast.parse(stub)) == _signatures(ast.parse(contract))
    assert ast.get_docstring(ast.parse(stub)) == ast.get_docstring(ast.parse(contract))
    shutil.copytree(LAYOUT.reference / "tinyllm", tmp_path / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / GRU_FILE).write_text(stub, encoding="utf-8")
    probe = """
import numpy as np
from tinyllm.rnn import gru
from tinyllm.autograd.tensor import Tensor
calls = {
    "gru_cell": lambda: gru.gru_cell(np.zeros((1, 1)), np.zeros((1, 1)), *[np.zeros((3, 1))] * 2, *[np.zeros(3)] * 2),
    "GRUCell.__init__": lambda: gru.GRUCell(1, 1),
    "GRUCell.forward": lambda: gru.GRUCell.forward(None, Tensor([[0.0]])),
    "GRU.__init__": lambda: gru.GRU(1, 1),
    "GRU.forward": lambda: gru.GRU.forward(None, Tensor([[[0.0]]])),
}
for name, call in calls.items():
    try:
        call()
    except NotImplementedError as exc:
        assert str(exc) == f"{name} is not written yet", exc
    else:
        raise SystemExit(f"{name} did not raise")
print(sorted(gru.__all__))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['GRU', 'GRUCell', 'gru_cell']"


def test_a_stub_whose_function_has_code_is_refused() -> None:
    with pytest.raises(StarterError, match="f: a stub's body must be"):
        stub_source("def f(x):\n    return x\n")
    assert "raise NotImplementedError(\"f is not written yet\")" in stub_source("def f(x):\n    ...\n")


def test_the_given_test_is_red_on_the_stub_and_green_on_a_written_gru(tmp_path: Path) -> None:
    repo = tmp_path / "starter"
    write_starter(LAYOUT, repo)
    red = _pytest(repo)
    assert red.returncode == 1 and "NotImplementedError: gru_cell is not written yet" in red.stdout, red.stdout
    shutil.copyfile(LAYOUT.module_source, repo / STUB)
    green = _pytest(repo)
    assert green.returncode == 0 and "1 passed" in green.stdout, green.stdout


def test_the_command_writes_a_new_folder_and_refuses_one_in_use(tmp_path: Path) -> None:
    dest = tmp_path / "hw3"
    done = _mutagrade("starter", str(dest))
    assert done.returncode == 0, done.stderr
    assert "nothing of the answer key" in done.stdout
    written = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert written == starter_files(LAYOUT)
    again = _mutagrade("starter", str(dest))
    assert again.returncode == 2 and "expected a new or empty folder" in again.stderr, again.stderr
    (tmp_path / "file").write_text("x")
    refused = _mutagrade("starter", str(tmp_path / "file"))
    assert refused.returncode == 2 and "expected a new or empty folder" in refused.stderr, refused.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _mutagrade("starter", str(empty)).returncode == 0
