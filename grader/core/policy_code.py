"""The policy's rules for a test file's code: what it may import, name and reach.

A student test may import only the modules the policy's configuration allows (exact names:
``numpy`` does not allow ``numpy.lib``), and may not use names or attributes that reach behind
the tinyllm interface (SPEC §5 step 1). The check walks the file's syntax tree (:mod:`ast`);
nothing is imported or run. It refuses no ordinary code: a variable or parameter named
``input`` and a class's own private attributes (``self._w``) pass.

Besides the builtins that turn a string into an attribute look-up or into code (``getattr``,
``eval``, ...), the helpers of the allowed modules that do the same (``operator.attrgetter``,
``typing.get_type_hints``, ``pytest.importorskip``, ...) and the attributes through which an
allowed module exposes another module (``dataclasses.builtins``, ``typing.types``) are refused
too, as is a string condition of a ``skipif`` or ``xfail`` mark, which pytest evaluates as
code. The suite's walk and the rules about its files are :mod:`grader.core.policy`.
"""

from __future__ import annotations

import ast
import sys
from typing import Callable

__all__ = ["AddViolation", "check_tree"]

# Where a finding goes: line (1-based), column (0-based, in characters), what, why.
AddViolation = Callable[[int, int, str, str], None]

# ---------------------------------------------------------------------------- the reasons
_WHY_DYNAMIC = (
    "it runs code from a string or looks names up at run time, so it could reach anything "
    "behind the tinyllm interface"
)
_WHY_INTERNALS = (
    "it reaches the interpreter, the operating system or the debugger; test only what "
    "the tinyllm interface offers"
)
_WHY_IO = "student tests may not read or write files or the console"
_WHY_PLUGINS = "a test file may not load pytest plugins"
_WHY_DUNDER_NAME = (
    "dunder names other than __name__ (like __file__ or __builtins__) reach into the "
    "interpreter; test only what the tinyllm interface offers"
)
_WHY_DUNDER_ATTRIBUTE = (
    "dunder attributes (like __class__, __code__ or __globals__) reach behind the tinyllm "
    "interface; test only what it offers"
)
_WHY_PRIVATE = (
    "attributes and names starting with '_' are private to their module; test only the "
    "public interface (a class of your own may use its own through self)"
)
_WHY_OTHER_MODULE = (
    "it is another module reached through an attribute, and student tests may use only the "
    "modules they may import"
)
_WHY_FILES = (
    "student tests may not read or write files or call foreign code (numpy's load, save, "
    "fromfile, memmap, lib, ctypeslib, ..., tofile and file methods such as read_text)"
)
_WHY_RUNNERS = "it runs pytest, a test suite or code from a string inside a test"
_WHY_PYTEST_INTERNALS = (
    "it reaches pytest's configuration, session or plugins, which a test must not change"
)
_WHY_FRAMES = (
    "frames, tracebacks and their printouts expose the implementation's source and "
    "variables; check the exception's type and message instead"
)
_WHY_FIXTURE = (
    "this fixture reaches files, the pytest configuration or other modules, which a module's tests "
    "never need"
)
_WHY_HOOK = (
    "a test file may not define pytest hooks (functions named pytest_*): they change how "
    "pytest runs the grading"
)
_WHY_STRING_CONDITION = (
    "pytest evaluates a string condition as Python code, which this check cannot read; "
    "pass a boolean instead, such as skipif(H > 3, reason=...)"
)
_WHY_RELATIVE = "relative imports load other files; keep each test file self-contained"
_WHY_STAR = "a star import hides which names a test uses; import the names you need"
# Names that are rejected in any role: read, assigned, deleted or imported.
_NAME_RULES: tuple[tuple[frozenset[str], str], ...] = (
    (
        frozenset(
            {
                "eval", "exec", "compile", "getattr", "setattr", "delattr", "globals",
                "locals", "vars", "__import__", "__builtins__",
            }
        ),
        _WHY_DYNAMIC,
    ),
    (
        frozenset(
            {"inspect", "sys", "os", "importlib", "breakpoint", "help", "memoryview"}
        ),
        _WHY_INTERNALS,
    ),
    (frozenset({"open"}), _WHY_IO),
    (frozenset({"pytest_plugins"}), _WHY_PLUGINS),
)

# Names rejected only where they mean the builtin: a file that binds the name itself (a
# variable or a parameter, `input = np.ones(3)`) may use it. The whole file counts, not each
# scope: a missed message costs nothing, since reading the console fails at run time anyway.
_BUILTIN_NAME_RULES: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"input"}), _WHY_IO),
)

# `eval` is fine after a dot: `module.eval()` is part of the contract, and it does not reach
# the builtin through an attribute without `builtins`, which is rejected.
_ATTRIBUTE_NAMES_ALLOWED = frozenset({"eval"})

# The modules that an allowed module (numpy's public submodules included) holds as public
# attributes, found by walking them (the walk also finds `abc` and `numbers`, which hold
# abstract base classes only and stay allowed); tests/grader/test_policy.py repeats the walk,
# so a new numpy or Python that exposes another module fails a test until it is listed here.
# The rest are the obvious gateways, listed before anything exposes them.
_MODULE_ATTRIBUTES = frozenset(
    {
        # found by the walk
        "bltns", "builtins", "contextlib", "extbuild", "hashlib", "keyword", "pathlib", "re",
        "stdlib_re", "subprocess", "sysconfig", "textwrap", "types", "warnings",
        # gateways, in case a later version exposes them
        "ast", "ctypes", "cffi", "gc", "io", "linecache", "marshal", "pickle", "runpy",
        "shutil", "socket", "tempfile", "threading",
    }
)

_ATTRIBUTE_RULES: tuple[tuple[frozenset[str], str], ...] = (
    (_MODULE_ATTRIBUTES, _WHY_OTHER_MODULE),
    (
        frozenset(
            {
                # numpy's file and foreign-function entry points
                "load", "save", "savez", "savez_compressed", "savetxt", "fromfile", "memmap",
                "loadtxt", "genfromtxt", "fromregex", "ctypeslib", "lib", "f2py", "DataSource",
                "tofile", "dump", "temppath", "tempdir",
                # what a pathlib.Path (from a fixture) reads and writes with
                "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob",
                "rglob", "mkdir", "rmdir", "unlink", "touch", "rename", "chmod",
                "symlink_to", "hardlink_to",
            }
        ),
        _WHY_FILES,
    ),
    (
        frozenset(
            {
                # attribute look-ups and annotation evaluation by string, in allowed modules
                "attrgetter", "methodcaller", "Formatter", "get_type_hints", "singledispatch",
                "singledispatchmethod", "wraps", "update_wrapper",
            }
        ),
        _WHY_DYNAMIC,
    ),
    (
        frozenset(
            {
                # pytest's and numpy's runners: they import modules or run code by name
                "main", "console_main", "cmdline", "importorskip", "register_assert_rewrite",
                "freeze_includes", "set_trace", "test", "runstring", "measure", "rundocs",
                "Pytester", "Testdir", "MonkeyPatch", "TempPathFactory", "TempdirFactory",
                "Cache",
            }
        ),
        _WHY_RUNNERS,
    ),
    (
        frozenset(
            {"Config", "PytestPluginManager", "config", "pluginmanager", "session", "node",
             "getfixturevalue", "fspath"}
        ),
        _WHY_PYTEST_INTERNALS,
    ),
    (
        frozenset(
            {
                "getrepr", "traceback", "tb", "frame", "f_back", "f_builtins", "f_code",
                "f_globals", "f_locals", "gi_code", "gi_frame", "cr_code", "cr_frame",
                "ag_code", "ag_frame", "tb_frame", "tb_next",
            }
        ),
        _WHY_FRAMES,
    ),
)

# Fixtures a test function or fixture may not request (`def test_x(tmp_path): ...`).
_FIXTURES = frozenset(
    {
        "pytestconfig", "monkeypatch", "pytester", "testdir", "tmp_path", "tmp_path_factory",
        "tmpdir", "tmpdir_factory", "cache", "record_property", "record_xml_attribute",
        "record_testsuite_property",
    }
)

_HOOK_PREFIX = "pytest_"

# Marks whose conditions pytest evaluates when one is a string (``skipif("sys.platform")``),
# and the keyword that may hold the condition instead of the first argument.
_CONDITION_MARKS = frozenset({"skipif", "xfail"})
_CONDITION_KEYWORD = "condition"


# ---------------------------------------------------------------------------- public API
def check_tree(
    tree: ast.Module, *, lines: list[str], allowed_imports: tuple[str, ...], add: AddViolation
) -> None:
    """Check one parsed test file against the rules of its code.

    Args:
        tree: the file's syntax tree.
        lines: the file's lines, split where Python's tokenizer splits them (to turn ast's
            byte columns into character columns).
        allowed_imports: the exact modules the file may import.
        add: called with each violation found.

    Raises:
        RecursionError: if the tree nests deeper than the walk can follow.
    """
    _Checker(lines=lines, allowed_imports=allowed_imports, add=add).check(tree)


# ---------------------------------------------------------------------------- the rules
def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _rule_why(name: str, rules: tuple[tuple[frozenset[str], str], ...]) -> str | None:
    return next((why for names, why in rules if name in names), None)


def _name_why(name: str, ctx: ast.expr_context) -> str | None:
    """Why a bare name may not be used here, or None."""
    why = _rule_why(name, _NAME_RULES)
    if why is None and _is_dunder(name) and name != "__name__" and not isinstance(ctx, ast.Store):
        # Assigning a dunder (`__slots__ = ...` in a class) reveals nothing; reading one does.
        why = _WHY_DUNDER_NAME
    return why


def _attribute_why(name: str) -> str | None:
    """Why ``x.<name>`` (or ``from m import <name>``) is not allowed, or None."""
    if _is_dunder(name):
        return _WHY_DUNDER_ATTRIBUTE
    if name.startswith("_"):
        return _WHY_PRIVATE
    if name not in _ATTRIBUTE_NAMES_ALLOWED:
        why = _rule_why(name, _NAME_RULES)
        if why is not None:
            return why
    return _rule_why(name, _ATTRIBUTE_RULES)


def _bound_names(tree: ast.Module) -> frozenset[str]:
    """Every name the file binds anywhere: variables, parameters, definitions, imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.partition(".")[0])
        elif isinstance(
            node,
            (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs,
             ast.MatchStar),
        ) and node.name:
            names.add(node.name)
    return frozenset(names)


def _method_instances(tree: ast.Module) -> dict[ast.AST, str]:
    """The first parameter (``self``, ``cls``) of each method of the classes the file defines;
    a static method has none."""
    instances: dict[ast.AST, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            static = any(isinstance(d, ast.Name) and d.id == "staticmethod"
                         for d in item.decorator_list)
            params = [*item.args.posonlyargs, *item.args.args]
            if params and not static:
                instances[item] = params[0].arg
    return instances


def _import_why(allowed: tuple[str, ...]) -> str:
    """The reason for a rejected import, naming what the configuration allows."""
    # numpy.random is implied by numpy: list only the modules whose parent is not listed.
    tops = [m for m in allowed if m.rpartition(".")[0] not in allowed]
    standard = [m for m in tops if m.partition(".")[0] in sys.stdlib_module_names]
    others = [m for m in tops if m not in standard]
    parts = [", ".join(others)] if others else []
    if standard:
        parts.append(f"the standard modules {', '.join(standard)}")
    return f"student tests may import only {' and '.join(parts)}"


def _bindings(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """Each name the file binds to a value it can see, with that value: assignments, walrus,
    loop and comprehension targets (the iterable), parameters with a default."""
    pairs: list[tuple[str, ast.AST]] = []

    def names(target: ast.AST) -> list[str]:
        return [n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs += [(name, node.value) for target in node.targets for name in names(target)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            pairs += [(name, node.value) for name in names(node.target)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            pairs += [(name, node.iter) for name in names(node.target)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs += [(name, node.context_expr) for name in names(node.optional_vars)]
        elif isinstance(node, ast.arguments):
            positional = [*node.posonlyargs, *node.args]
            pairs += [(arg.arg, default) for arg, default in zip(positional[len(positional) - len(node.defaults):],
                                                                  node.defaults)]
            pairs += [(arg.arg, default) for arg, default in zip(node.kwonlyargs, node.kw_defaults)
                      if default is not None]
    return pairs


def _text_parts(node: ast.AST) -> tuple[bool, list[str]]:
    """Where ``node``'s value may come from a string: whether a string literal is there (``"a"``,
    an f-string, ``"a" + b``, ``"{}".format(x)``, ``str(x)``), and the names there (``b``)."""
    literal = False
    names: list[str] = []
    todo = [node]
    while todo:
        part = todo.pop()
        if isinstance(part, ast.Constant):
            literal = literal or isinstance(part.value, str)
        elif isinstance(part, ast.JoinedStr) or (isinstance(part, ast.Name) and part.id == "str"):
            literal = True
        elif isinstance(part, ast.Name):
            names.append(part.id)
        elif isinstance(part, ast.BinOp):
            todo += [part.left, part.right]
        elif isinstance(part, ast.IfExp):
            todo += [part.body, part.orelse]
        elif isinstance(part, ast.Call):
            todo.append(part.func)
        elif isinstance(part, (ast.Subscript, ast.Attribute, ast.Starred)):
            todo.append(part.value)
        elif isinstance(part, (ast.List, ast.Tuple, ast.Set)):  # what a ``*`` spreads
            todo += part.elts
    return literal, names


def _mark_parts(node: ast.AST) -> tuple[str | None, list[str]]:
    """The condition mark (``skipif``, ``xfail``) ``node`` holds as an attribute anywhere in it
    (``pytest.mark.skipif``, ``mark.xfail.with_args``), and every name in it."""
    mark = None
    names: list[str] = []
    for part in ast.walk(node):
        if isinstance(part, ast.Attribute) and part.attr in _CONDITION_MARKS and mark is None:
            mark = part.attr
        elif isinstance(part, ast.Name):
            names.append(part.id)
    return mark, names


def _spread(bindings: list[tuple[str, str | None, list[str]]]) -> dict[str, str]:
    """Each name bound to a labelled value -> the label: the value's own, or that of a name the
    value holds (``B = A``), followed along any chain once."""
    labels: dict[str, str] = {}
    users: dict[str, list[str]] = {}
    todo: list[tuple[str, str]] = []
    for name, label, names in bindings:
        if label is not None:
            todo.append((name, label))
        for used in names:
            users.setdefault(used, []).append(name)
    while todo:
        name, label = todo.pop()
        if name not in labels:
            labels[name] = label
            todo += [(user, label) for user in users.get(name, ())]
    return labels


class _Checker(ast.NodeVisitor):
    """Collects the violations of one parsed file."""

    def __init__(self, *, lines: list[str], allowed_imports: tuple[str, ...], add: AddViolation) -> None:
        self._lines = lines
        self._allowed = allowed_imports
        self._why_import = _import_why(allowed_imports)
        self._found = add
        # `import tinyllm.rnn.x` binds `tinyllm`, whose other attributes are off limits.
        self._partial_roots: frozenset[str] = frozenset()
        self._parents: dict[ast.AST, ast.AST] = {}
        # `input` is the builtin only where the file does not bind the name itself.
        self._bound: frozenset[str] = frozenset()
        # A class of the file's own may use its private attributes through its methods' first
        # parameter: these are the methods, then the parameters of those being visited.
        self._methods: dict[ast.AST, str] = {}
        self._instances: list[str] = []
        # Names bound to a string, and to a condition mark (its name), anywhere in the file.
        self._texts: frozenset[str] = frozenset()
        self._marks: dict[str, str] = {}

    def check(self, tree: ast.Module) -> None:
        self._partial_roots = self._find_partial_roots(tree)
        self._bound = _bound_names(tree)
        self._methods = _method_instances(tree)
        bindings = _bindings(tree)
        texts = [(name, literal, names) for name, value in bindings for literal, names in [_text_parts(value)]]
        self._texts = frozenset(_spread([(name, "str" if literal else None, names) for name, literal, names in texts]))
        self._marks = _spread([(name, *_mark_parts(value)) for name, value in bindings])
        if self._partial_roots:
            self._parents = {
                child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
            }
        self.visit(tree)

    # -- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in self._allowed:
                self._add(node, f"import of {alias.name!r}", self._rejected_why(alias.name))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            prefix = "." * node.level + (f"{module}." if module else "")
            for alias in node.names:
                self._add(node, f"relative import of {prefix + alias.name!r}", _WHY_RELATIVE)
            return
        if module == "__future__":  # compiler directives, not a module the test can use
            return
        for alias in node.names:
            self._check_imported_name(node, module, alias.name)

    def _check_imported_name(self, node: ast.ImportFrom, module: str, name: str) -> None:
        if name == "*":
            self._add(node, f"star import from {module!r}", _WHY_STAR)
        elif f"{module}.{name}" in self._allowed:  # from tinyllm.rnn import x
            return
        elif module not in self._allowed:
            self._add(node, f"import of '{module}.{name}'", self._rejected_why(module))
        elif (why := _attribute_why(name)) is not None:
            self._add(node, f"import of {name!r} from {module!r}", why)

    def _rejected_why(self, module: str) -> str:
        """The most telling reason: `numpy.lib` is about files, `os` about the allowlist."""
        parts = module.split(".")
        if parts[0] in self._allowed:
            for part in parts[1:]:
                if (why := _attribute_why(part)) is not None:
                    return why
        return self._why_import

    def _find_partial_roots(self, tree: ast.Module) -> frozenset[str]:
        roots = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.partition(".")[0]
                    # A rejected import is reported once, at the import; no need to chase it.
                    bound_root = alias.asname is None and top not in self._allowed
                    if bound_root and alias.name in self._allowed:
                        roots.add(top)
        return frozenset(roots)

    # -- names and attributes
    def visit_Name(self, node: ast.Name) -> None:
        why = _name_why(node.id, node.ctx)
        if why is None and node.id not in self._bound:
            why = _rule_why(node.id, _BUILTIN_NAME_RULES)
        if why is not None:
            self._add(node, f"use of {node.id!r}", why)
        elif node.id in self._partial_roots and isinstance(node.ctx, ast.Load):
            self._check_partial_root(node)

    def _check_partial_root(self, node: ast.Name) -> None:
        """`tinyllm.rnn.x.Cell` is fine after `import tinyllm.rnn.x`; `tinyllm.nn` is not."""
        parts = [node.id]
        current: ast.AST = node
        while isinstance(parent := self._parents.get(current), ast.Attribute):
            parts.append(parent.attr)
            current = parent
        under = [m for m in self._allowed if m.startswith(f"{node.id}.")]
        for end in range(1, len(parts) + 1):
            dotted = ".".join(parts[:end])
            if dotted in under:
                return
            if not any(m.startswith(f"{dotted}.") for m in under) or end == len(parts):
                why = f"student tests may use only {', '.join(under)} of {node.id}"
                self._add(node, f"use of {dotted!r}", why)
                return

    def visit_Attribute(self, node: ast.Attribute) -> None:
        why = _attribute_why(node.attr)
        own = isinstance(node.value, ast.Name) and node.value.id in self._instances
        if why == _WHY_PRIVATE and own:
            why = None
        if why is not None:
            self._add_attribute(node, why)
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        # `case object(load=f)` reads the attribute `load`, as `getattr` would.
        for name in node.kwd_attrs:
            why = _attribute_why(name)
            if why is not None:
                self._add(node, f"attribute {name!r} in a class pattern", why)
        self.generic_visit(node)

    # -- pytest
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if node.name.startswith(_HOOK_PREFIX):
            self._add(node, f"pytest hook {node.name!r}", _WHY_HOOK)
        instance = self._methods.get(node)
        if instance is None:
            self.generic_visit(node)
            return
        self._instances.append(instance)
        self.generic_visit(node)
        self._instances.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        # `pytest.mark.skipif("...")`, `xfail(condition="...")`, `mark.skipif.with_args("...")`:
        # every positional argument of such a mark is a condition, and pytest evals a string one.
        mark, names = _mark_parts(node.func)
        mark = mark or next((self._marks[name] for name in names if name in self._marks), None)
        if mark is not None:
            conditions = [a.value if isinstance(a, ast.Starred) else a for a in node.args]
            for keyword in node.keywords:
                if keyword.arg == _CONDITION_KEYWORD:
                    conditions.append(keyword.value)
                elif keyword.arg is None and isinstance(keyword.value, ast.Dict):  # **{"condition": ...}
                    conditions += [value for key, value in zip(keyword.value.keys, keyword.value.values)
                                   if not (isinstance(key, ast.Constant) and key.value != _CONDITION_KEYWORD)]
            for condition in conditions:
                literal, names = _text_parts(condition)
                if literal or not self._texts.isdisjoint(names):
                    self._add(condition, f"string condition of {mark!r}", _WHY_STRING_CONDITION)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        if node.arg in _FIXTURES:
            self._add(node, f"pytest fixture {node.arg!r}", _WHY_FIXTURE)
        self.generic_visit(node)

    # -- positions
    def _add(self, node: ast.stmt | ast.expr | ast.arg | ast.pattern, what: str, why: str) -> None:
        self._append(node.lineno, self._char_col(node.lineno, node.col_offset), what, why)

    def _add_attribute(self, node: ast.Attribute, why: str) -> None:
        # Point at the attribute's name, which ends the node, not at the start of `a.b.c`.
        line, end = node.end_lineno or node.lineno, node.end_col_offset or node.col_offset
        start = max(end - len(node.attr.encode("utf-8")), 0)
        self._append(line, self._char_col(line, start), f"attribute {node.attr!r}", why)

    def _append(self, line: int, col: int, what: str, why: str) -> None:
        self._found(line, col, what, why)

    def _char_col(self, line: int, byte_col: int) -> int:
        """ast counts columns in UTF-8 bytes; people count characters."""
        text = self._lines[line - 1] if 0 < line <= len(self._lines) else ""
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))
