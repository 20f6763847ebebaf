"""A module's contract, read from its stub: what a graded run's stand-in offers and what an
implementation process serves.

The stub (a ``.pyi``, the course's statement of the module, beside its reference in the shared
``tinyllm``: ``reference/tinyllm/rnn/<name>.pyi``) declares the module's public functions and its ``Module`` classes. Nothing of the
grader is written for one module: the stand-in (:mod:`grader.worker.standin`) and the
implementation process (:mod:`grader.worker.impl`) take their names from here, so a module's
contract is its folder's stub and nothing else.
"""

from __future__ import annotations

import ast
from pathlib import Path

from grader.core.parsing import parse
from grader.core.protocol import Contract

__all__ = ["ContractError", "read_contract", "stub_imports"]


class ContractError(ValueError):
    """A stub that declares nothing a run could call, or that Python cannot read."""


def _is_module_class(node: ast.ClassDef) -> bool:
    """Whether a class of the stub derives from ``Module`` (by that name, or ``x.Module``)."""
    return any((isinstance(base, ast.Name) and base.id == "Module")
               or (isinstance(base, ast.Attribute) and base.attr == "Module") for base in node.bases)


def read_contract(stub: Path, module: str) -> Contract:
    """The contract ``stub`` declares for the module named ``module`` (its dotted name): its
    public functions, its public ``Module`` classes and its public constants (``NAME: type``),
    in the stub's order (``__all__``, where
    the stub has one, decides what is public).

    Raises:
        ContractError: naming the file (and line) when it cannot be read, or declares neither a
            function nor a ``Module`` class.
    """
    tree = _stub_tree(stub)
    listed = _all(tree)
    public = (lambda name: name in listed) if listed is not None else (lambda name: not name.startswith("_"))
    functions = tuple(n.name for n in tree.body if isinstance(n, ast.FunctionDef) and public(n.name))
    classes = tuple(n.name for n in tree.body
                    if isinstance(n, ast.ClassDef) and public(n.name) and _is_module_class(n))
    constants = tuple(n.target.id for n in tree.body
                      if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and public(n.target.id))
    names = [*functions, *classes, *constants]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ContractError(f"{stub}: the contract stub declares {', '.join(twice)} more than once "
                            f"(as a function, a class or a constant): expected each name once")
    if not functions and not classes:
        raise ContractError(f"{stub}: the contract stub declares no public function and no Module class: "
                            f"expected at least one `def name(...)` or `class Name(Module)` at its top level")
    return Contract(module=module, functions=functions, classes=classes, constants=constants)


def stub_imports(stub: Path) -> tuple[str, ...]:
    """The modules a contract stub imports at its top level (``from tinyllm.nn.module import
    Module``: ``tinyllm.nn.module``), in its order: the modules of the types it names.

    Raises:
        ContractError: naming the file when it cannot be read or parsed.
    """
    tree = _stub_tree(stub)
    found: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module != "__future__":
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return tuple(dict.fromkeys(found))


def _stub_tree(stub: Path) -> ast.Module:
    """The stub's syntax tree (parsed as every parse of the grader is: one at a time).

    Raises:
        ContractError: naming the file (and line) when it cannot be read or parsed.
    """
    try:
        return parse(stub.read_text(encoding="utf-8"), filename=str(stub))
    except OSError as exc:
        raise ContractError(f"{stub}: the contract stub cannot be read: {exc.strerror or exc}") from None
    except SyntaxError as exc:
        raise ContractError(f"{stub}, line {exc.lineno}: the contract stub is not valid Python: {exc.msg}") from None


def _all(tree: ast.Module) -> set[str] | None:
    """The names of the stub's ``__all__``, if it lists them as plain strings."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                and isinstance(node.value, (ast.List, ast.Tuple))):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return None
