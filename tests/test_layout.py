"""The house's rules, read from the code itself (ARCHITECTURE.md, "The packages, and what each
may import"): a rule broken here is a layer leaking into another, whatever the tests of
behaviour say."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600


def _modules(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts and "course" not in p.parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (inside functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("path", _modules("grader") + _modules("api"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_600_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines, more than {MAX_LINES}: split it by concern"


@pytest.mark.parametrize("path", _modules("grader/core"), ids=lambda p: p.name)
def test_the_core_starts_no_process_and_knows_no_layer_above_it(path: Path) -> None:
    above = ("grader.run", "grader.sandbox", "grader.worker", "grader.flows", "grader.report", "grader.cli",
             "grader.student_cli", "api", "subprocess")
    found = sorted(name for name in _imports(path) if any(_within(name, layer) for layer in above))
    assert not found, f"{path.relative_to(ROOT)} imports {found}"


def test_the_worker_protocol_needs_the_standard_library_alone() -> None:
    path = ROOT / "grader" / "core" / "protocol.py"
    outside = sorted(name for name in _imports(path)
                     if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__")
    assert not outside, f"{path.relative_to(ROOT)} imports {outside}: the worker loads it in its sandbox"


@pytest.mark.parametrize("path", _modules("grader"), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_grader_never_imports_the_service(path: Path) -> None:
    found = sorted(name for name in _imports(path) if _within(name, "api"))
    assert not found, f"{path.relative_to(ROOT)} imports {found}: the library must not depend on the service"


def test_the_sandbox_is_a_package_of_layers_that_hands_nothing_on() -> None:
    package = ROOT / "grader" / "sandbox"
    assert (package / "__init__.py").is_file() and not (ROOT / "grader" / "sandbox.py").exists()
    layers = {p.stem for p in package.glob("*.py")} - {"__init__"}
    assert {"base", "status", "users", "seccomp", "harden", "bubblewrap", "workdir", "process", "userns"} <= layers
    init = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
    assert not [n for n in init.body if isinstance(n, (ast.Import, ast.ImportFrom))], "no re-exports: import the layer"


@pytest.mark.parametrize("path", [p for p in _modules("grader") + _modules("api") if p.name != "assignment.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_command_builds_limits_of_its_own(path: Path) -> None:
    """Limits come from the assignment (``RunLimits.of(assignment)``; the assignment file's own
    defaults are in ``grader/core/assignment.py``): a hand-built ``RunLimits(...)`` or
    ``Limits(...)`` would drift from what grading and the replay use."""
    built = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("RunLimits", "Limits"):
            built.append(f"line {node.lineno}: {node.func.id}(...)")
    assert not built, f"{path.relative_to(ROOT)}: {built}"


def _private_imports(path: Path) -> list[str]:
    """Each ``_name`` this module takes from another module of the project: imported by name
    (``from grader.x import _y``), or reached as an attribute of an imported module
    (``import grader.x as x; x._y``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    modules: dict[str, str] = {}  # local name -> module of the project
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("grader", "api", "tinyllm"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path}:{node.lineno}: {node.module}.{alias.name}")
                elif not alias.name.startswith("_"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("grader", "api", "tinyllm"):
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append(f"{path}:{node.lineno}: {modules[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module() -> None:
    """A ``_name`` stays in its module: what another module needs is public (the sandbox's
    layers hand each other public functions)."""
    crossing = [line for folder in ("grader", "api") for path in _modules(folder) for line in _private_imports(path)]
    assert crossing == [], "\n".join(crossing)


# The service is laid out by what each part serves (ARCHITECTURE.md, "The service's parts").
SERVICE_PARTS = {
    # part: what of the service and the grader it may import
    "store": ({"api.store", "api.config"}, {"grader.core"}),
    "work": ({"api.store", "api.work", "api.config"}, {"grader.core", "grader.flows"}),
    "web": ({"api.store", "api.web", "api.work", "api.config"}, {"grader.core", "grader.flows", "grader.report"}),
}


def test_the_service_is_laid_out_as_web_work_and_store() -> None:
    top = {p.name for p in (ROOT / "api").iterdir() if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__")}
    assert {"web", "work", "store"} <= top
    assert top - {"web", "work", "store"} <= {"__init__.py", "cli.py", "config.py", "logs.py", "main.py"}, (
        f"api/ holds {sorted(top)}: each module belongs to web (routes, pages), work (jobs, queues) or store "
        "(models, queries, migrations)")


@pytest.mark.parametrize("part", sorted(SERVICE_PARTS))
def test_each_part_of_the_service_reaches_only_what_it_serves_with(part: str) -> None:
    service_ok, grader_ok = SERVICE_PARTS[part]
    broken = []
    for path in _modules(f"api/{part}"):
        for name in _imports(path):
            if _within(name, "api") and name != "api" and not any(_within(name, ok) for ok in service_ok):
                broken.append(f"{path.relative_to(ROOT)} imports {name}")
            if _within(name, "grader") and not any(_within(name, ok) for ok in grader_ok):
                broken.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not broken, "\n".join(broken)


def _module_names() -> set[str]:
    """The last part of every assignment's module (``gru``, ``lstm``), from its assignment.toml."""
    from grader.core.paths import layout_for

    root = ROOT
    names = {layout_for(root, name).module_under_test.rsplit(".", 1)[-1] for name in layout_for(root, None).available()}
    assert {"gru", "lstm"} <= names, names  # the words looked for below: never an empty list
    return names


def test_no_file_of_the_grader_or_the_service_names_a_module_of_the_course() -> None:
    """Adding a module is adding a folder under assignments/: nothing in grader/ or api/ (code,
    docstrings, messages, templates) names the module of any assignment; what an assignment
    grades is read from its folder."""
    words = _module_names()
    named = []
    for part in ("grader", "api"):
        for path in sorted((ROOT / part).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".png", ".ico"):
                continue
            text = path.read_text(encoding="utf-8", errors="replace").lower()
            named += [f"{path.relative_to(ROOT)}: {word}" for word in sorted(words) if word in text]
    assert not named, named


def test_every_parse_of_the_grader_goes_through_the_one_lock() -> None:
    """CPython 3.11 fails two parses in two threads at once (grader/core/parsing.py): no module
    of the grader or the service calls ast.parse or compile(..., ast.PyCF_ONLY_AST) itself."""
    found = []
    for part in ("grader", "api"):
        for path in sorted((ROOT / part).rglob("*.py")):
            if path == ROOT / "grader" / "core" / "parsing.py":
                continue
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(ROOT)}: {call}" for call in ("ast.parse(", "PyCF_ONLY_AST") if call in text]
    assert not found, found
