"""``mutagrade starter DIR``: the repository students start from, with nothing of the answer key.

It holds the course's framework (the reference's ``tinyllm`` without any reference module: no
``.py`` with a contract stub beside it), the assignment's module made from its contract stub
(``.pyi``) with every function raising ``NotImplementedError``, the assignment's hand-written
starter material (``starter/`` of its folder: the given test and the README), an empty journal
and the CI templates (``examples/ci/``). Everything is read from the checkout;
``examples/starter/`` is this command's output for the default assignment, committed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grader.core.paths import Layout
from grader.core.parsing import parse
from grader.flows.tdd import DEFAULT_IMPL

__all__ = ["CI_FILES", "JOURNAL", "StarterError", "starter_files", "stub_source", "write_starter"]

JOURNAL = ".tdd/journal.jsonl"  # empty: the first `mutagrade tdd red` writes its first entry
# Where each CI template goes in a repository (examples/ci/<name> -> path).
CI_FILES = {"github-classroom.yml": ".github/workflows/mutagrade.yml", "gitlab-ci.yml": ".gitlab-ci.yml"}
_HEADER = (
    "# Your {module}. Each function raises NotImplementedError until you write it: one test at a time,\n"
    "# red, then green (README.md). The docstrings below are the contract ({stub} is the same).\n"
)


class StarterError(Exception):
    """The starter could not be made: a file it needs is missing, or the target is in use."""


def stub_source(contract: str, module: str = "module", stub: str = "the .pyi") -> str:
    """The contract stub (a ``.pyi``) as a module: every function and method keeps its signature
    and docstring, and its body raises ``NotImplementedError`` naming it.

    Raises:
        StarterError: if a function's body is neither ``...`` nor a docstring alone.
    """
    lines = contract.splitlines(keepends=True)
    edits: list[tuple[int, str]] = []  # (0-based line, its new text), applied bottom up
    for function, qualname in _functions(parse(contract)):
        indent = " " * (function.col_offset + 4)
        body = function.body
        raised = f'{indent}raise NotImplementedError("{qualname} is not written yet")\n'
        if len(body) == 1 and _is_constant(body[0], type(...)):
            # The `...` becomes the raise (after the signature, when it ends the signature's line).
            number = body[0].lineno - 1
            head = lines[number][: body[0].col_offset].rstrip()
            edits.append((number, f"{head}\n{raised}" if head else raised))
        elif len(body) == 1 and _is_constant(body[0], str):
            number = body[0].end_lineno - 1
            edits.append((number, lines[number] + raised))
        else:
            raise StarterError(f"{qualname}: a stub's body must be `...` or a docstring alone")
    for number, text in sorted(edits, reverse=True):
        lines[number] = text
    return _HEADER.format(module=module, stub=stub) + "".join(lines)


def _functions(tree: ast.Module) -> list[tuple[ast.FunctionDef, str]]:
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found.append((node, node.name))
        elif isinstance(node, ast.ClassDef):
            found += [(item, f"{node.name}.{item.name}") for item in node.body if isinstance(item, ast.FunctionDef)]
    return found


def _is_constant(node: ast.stmt, kind: type) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, kind)


def starter_files(layout: Layout) -> dict[str, bytes]:
    """Every file of the starter repository: its path there -> its bytes.

    Raises:
        StarterError: if the checkout lacks the contract stub, the starter material or a CI
            template, or two sources would write the same path.
    """
    files: dict[str, bytes] = {}

    def add(path: str, data: bytes, source: Path) -> None:
        if path in files:
            raise StarterError(f"{source}: {path} is in the starter already; the starter makes it itself")
        files[path] = data

    package = layout.reference / "tinyllm"
    contract = layout.contract_stub
    for path, needed in ((contract, "the contract stub"), (layout.starter, "the starter material")):
        if not path.exists():
            raise StarterError(f"{path}: no such file or folder ({needed})")
    impl = DEFAULT_IMPL.as_posix()
    answers = set(layout.answer_files)
    for path in _tree(package):
        if path not in answers:  # a reference module: the one file students write, or another module's
            add(f"{impl}/tinyllm/{path.relative_to(package).as_posix()}", path.read_bytes(), path)
    name = layout.module_under_test.rsplit(".", 1)[-1]
    written = stub_source(contract.read_text(encoding="utf-8"), module=name.upper(), stub=contract.name)
    add(f"{impl}/{layout.module_file}", written.encode("utf-8"), contract)
    for path in _tree(layout.starter):
        add(path.relative_to(layout.starter).as_posix(), path.read_bytes(), path)
    add(JOURNAL, b"", layout.starter)
    for name, target in CI_FILES.items():
        template = layout.examples / "ci" / name
        if not template.is_file():
            raise StarterError(f"{template}: no such CI template")
        add(target, template.read_bytes(), template)
    return dict(sorted(files.items()))


def _tree(root: Path) -> list[Path]:
    """The files under ``root``, without caches of compiled code."""
    return sorted(
        p for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.relative_to(root).parts and p.suffix != ".pyc"
    )


def write_starter(layout: Layout, dest: Path) -> list[str]:
    """Write the starter repository into ``dest``, a new or empty folder; returns its paths.

    Raises:
        StarterError: if ``dest`` is a file or a folder with something in it, or the starter
            cannot be made (:func:`starter_files`).
    """
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise StarterError(f"{dest}: expected a new or empty folder to write the starter into")
    files = starter_files(layout)
    for path, data in files.items():
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return list(files)
