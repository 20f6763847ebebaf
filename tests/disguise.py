"""A suite handed in as one's own: the planted copy of the copy and similarity checks' tests."""

from __future__ import annotations

import ast
import builtins
import re

__all__ = ["disguise"]


def disguise(source: str, *, comment: str = "", reverse: bool = False) -> str:
    """``source`` as one would hand it in as one's own: every name of its own renamed (tests,
    helpers, variables, arguments, and keywords naming a helper's parameters), docstrings and
    comments gone, formatted anew; ``comment`` added at the top of each function, and the
    definitions in the reverse order with ``reverse``."""
    tree = ast.parse(source)
    imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    # The helpers' parameters, which calls may name (`seed=5`); other keywords are the library's.
    parameters = {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for a in n.args.args}
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        if name in imported or hasattr(builtins, name):
            return name
        prefix = "test_mine_" if name.startswith("test") else "my_"
        return names.setdefault(name, f"{prefix}{len(names)}")

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            node.id = rename(node.id)
            return node

        def visit_arg(self, node: ast.arg) -> ast.arg:
            node.arg = rename(node.arg)
            return node

        def visit_keyword(self, node: ast.keyword) -> ast.keyword:
            if node.arg in parameters:
                node.arg = rename(node.arg)
            self.generic_visit(node)
            return node

        def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
            node.name = rename(node.name)
            if ast.get_docstring(node) is not None:
                node.body = node.body[1:] or [ast.Pass()]
            self.generic_visit(node)
            return node

    Rename().visit(tree)
    imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    rest = [s for s in tree.body if s not in imports and not isinstance(s, ast.Expr)]
    tree.body = imports + (rest[::-1] if reverse else rest)
    text = ast.unparse(tree)
    if comment:
        text = re.sub(r"^(\s*def .*:)$", lambda m: f"{m.group(1)}\n    # {comment}", text, flags=re.MULTILINE)
    return text + "\n"
