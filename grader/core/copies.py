"""Copies of the course tests: how like a course test each submitted test is, read from the
syntax trees of both (nothing is imported or run).

A course test (shipped to students) handed in as one's own earns nothing: a submitted test whose
similarity to a course test reaches the assignment's ``copy_similarity`` is not valid (scoring
marks it ``copied``), and the report names the course test. The course tests the assignment
lists as ``given_tests`` (handed out as the first test to start from) may be submitted as they
are: they are not compared.

Each test is read as a sequence of tokens that holds what it checks and drops what a copy
changes freely: the test's own name, docstrings, comments, formatting, annotations and the
messages of its asserts are not in it; every local name (variables, arguments, helpers) reads
as one placeholder, so that renaming them changes nothing; an imported name reads as what it
imports (``np.tanh`` and ``numpy.tanh`` alike); every string reads as one token, numbers as
their value (``1`` as ``1.0``). The helpers a test reaches (functions, classes and values of its
module or of another file of the suite, fixtures named by its arguments, methods of its class)
follow its own tokens, each once, so a test whose body moved into a helper reads as before.
Two tests are as similar as the ratio of :class:`difflib.SequenceMatcher` over their tokens: 1.0
for a copy with its names, formatting and order changed. The comparison runs on ``cydifflib``,
difflib's algorithm compiled (the same figures, about eight times faster), where it is installed.
The course tests are read once per process, and again when one of their files changes.
"""

from __future__ import annotations

import ast
import builtins
import os
from collections import Counter, deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path, PurePath

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

try:
    from cydifflib import SequenceMatcher  # difflib's algorithm, compiled: the same ratios
except ImportError:  # the student package (no cydifflib): the same figures, more slowly
    from difflib import SequenceMatcher

from grader.core.assignment import AssignmentError
from grader.core.caps import MAX_TEST_FILE_BYTES, MAX_TESTS
from grader.core.parsing import parse

__all__ = [
    "MAX_SUITE_BYTES",
    "MAX_SUITE_TOKENS",
    "MAX_TOKENS",
    "MAX_WORK",
    "TEST_FILE_PATTERNS",
    "CopyCheck",
    "CourseTestsError",
    "Likeness",
    "course_tokens",
    "find_copies",
    "read_tests",
    "similarity",
]

# The files pytest collects tests from (its default ``python_files``, the only one a run uses).
TEST_FILE_PATTERNS = ("test_*.py", "*_test.py")
# What one check may cost, whatever the suite (a hostile one holds MAX_TESTS tests in files of
# 256 KiB): the tokens of one course test read (its helpers included; the course's are 150 to
# 500), the bytes of submitted source parsed (about 1 s a MiB; the course's own files are 7 and
# 11 KiB), the tokens of all the submitted tests together, and the work of the exact
# comparisons, in pairs of tokens (about 30 ns each). A real suite uses a tenth of each at most.
MAX_TOKENS = 20_000
MAX_SUITE_BYTES = 1024 * 1024
MAX_SUITE_TOKENS = 100_000
MAX_WORK = 50_000_000
# A submitted test is read up to this many times the longest course test: beyond it, no test
# can be more than half like any course test (a ratio is at most 2 min / (len + len)).
_LONGER = 3

_LOCAL = "_"  # every local name, argument or helper
_STRING = "<str>"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SKIPPED_FIELDS = frozenset({"ctx", "type_comment", "kind", "returns", "annotation", "type_params"})


class CourseTestsError(AssignmentError):
    """The assignment's ``given_tests`` names a test that is not among the course tests."""


class Likeness(BaseModel):
    """One submitted test, and the course test it is most like."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test: str  # "file.py::name" or "file.py::TestClass::name", as pytest names it (no parameters)
    similarity: float = Field(ge=0.0, le=1.0)  # to the closest course test
    course_test: str  # that course test, "reference/tests/test_x.py::test_y"
    copied: bool = False  # the similarity reaches the assignment's copy_similarity

    @property
    def reason(self) -> str:
        """Why a copied test does not count, naming the course test."""
        return f"copied from the course tests: {self.course_test} (similarity {self.similarity:.2f})"


class CopyCheck(BaseModel):
    """Every submitted test's likeness to the course tests, and the threshold of a copy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(ge=0.0, le=1.0)
    tests: list[Likeness] = []
    # Asked for every test on every variant: looked up, not searched.
    _by_test: dict[str, Likeness] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: object) -> None:
        self._by_test = {t.test: t for t in self.tests}

    def likeness(self, test_id: str) -> Likeness | None:
        """The likeness of the test a run names ``test_id`` (a pytest node id, parameters and
        all); None for a test this check did not read."""
        found = self._by_test
        if test_id in found:
            return found[test_id]
        # A parametrized test's id ends "[...]" after its name (a file's name may hold "[" too).
        for at in (i for i, char in enumerate(test_id) if char == "["):
            if test_id[:at] in found:
                return found[test_id[:at]]
        return None

    def not_run(self, test_id: str) -> str | None:
        """Why a copy (by its node id) is run on no variant but the reference, as its cells
        say; None for a test that is no copy."""
        like = self.likeness(test_id)
        return "not run: copied from the course tests" if like is not None and like.copied else None


# --------------------------------------------------------------------------------- reading
@dataclass
class _Module:
    path: str  # relative to its suite, as pytest names it
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)  # local name -> what it imports
    definitions: dict[str, ast.stmt] = field(default_factory=dict)  # module-level name -> its statement

    @property
    def dotted(self) -> str:
        """The name an import of this file gives (``helpers`` for ``helpers.py``)."""
        return self.path.removesuffix(".py").replace("/", ".")


@dataclass(frozen=True)
class _Suite:
    modules: dict[str, _Module]  # by dotted name
    definitions: dict[str, tuple[ast.stmt, _Module]]  # module-level name -> its first statement

    @classmethod
    def of(cls, modules: list[_Module]) -> _Suite:
        definitions: dict[str, tuple[ast.stmt, _Module]] = {}
        for module in modules:
            for name, statement in module.definitions.items():
                definitions.setdefault(name, (statement, module))
        by_name = {m.dotted: m for m in modules}
        # pytest puts a test file's folder on sys.path: `import helpers` finds sub/helpers.py.
        for module in modules:
            by_name.setdefault(module.dotted.rsplit(".", 1)[-1], module)
        return cls(by_name, definitions)


@dataclass(frozen=True)
class _Test:
    id: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    module: _Module
    classes: tuple[ast.ClassDef, ...]  # the Test* classes around it, outermost first


def _modules(folder: Path, budget: int | None) -> list[_Module]:
    """The readable ``.py`` files under ``folder`` (no link followed, no ``__pycache__``, none
    over MAX_TEST_FILE_BYTES), parsed, smallest first, while their bytes together stay within
    ``budget`` (None: all); one that cannot be read or parsed is passed over (the policy check
    reports it)."""
    found: list[tuple[int, str, Path]] = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d.lower() != "__pycache__" and not (Path(top) / d).is_symlink()]
        for name in files:
            path = Path(top) / name
            if name.endswith(".py") and not path.is_symlink() and path.is_file():
                size = path.stat().st_size
                if size <= MAX_TEST_FILE_BYTES:
                    found.append((size, path.relative_to(folder).as_posix(), path))
    modules = []
    spent = 0
    for size, relative, path in sorted(found):
        spent += size
        if budget is not None and spent > budget:
            break
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_TEST_FILE_BYTES + 1)  # never more, even of a file that grew
            if len(data) > MAX_TEST_FILE_BYTES:
                continue
            tree = parse(data.decode("utf-8-sig"), filename=path.name)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        modules.append(_module(relative, tree))
    return modules


def _module(path: str, tree: ast.Module) -> _Module:
    module = _Module(path, tree)
    for statement in tree.body:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    module.imports[alias.asname] = alias.name
                else:
                    top = alias.name.split(".", 1)[0]
                    module.imports[top] = top
        elif isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                if alias.name != "*":
                    module.imports[alias.asname or alias.name] = f"{statement.module or ''}.{alias.name}"
        else:
            for name in _bound(statement):
                module.definitions[name] = statement
    return module


def _bound(statement: ast.stmt) -> list[str]:
    """The module-level names ``statement`` defines."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [statement.name]
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)) and statement.value is not None:
        targets = [statement.target]
    return [n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]


def _is_test_file(path: str) -> bool:
    return any(fnmatch(PurePath(path).name, pattern) for pattern in TEST_FILE_PATTERNS)


def _tests(module: _Module) -> list[_Test]:
    """The tests pytest would collect from ``module`` (by its default rules): ``test*``
    functions at module level and ``test*`` methods of ``Test*`` classes (nested ones too);
    of two of the same name, the later."""
    found: dict[str, _Test] = {}

    def visit(body: list[ast.stmt], prefix: str, classes: tuple[ast.ClassDef, ...]) -> None:
        for statement in body:
            if isinstance(statement, _FUNCTIONS) and statement.name.startswith("test"):
                test_id = f"{prefix}::{statement.name}"
                found.pop(test_id, None)
                found[test_id] = _Test(test_id, statement, module, classes)
            elif isinstance(statement, ast.ClassDef) and statement.name.startswith("Test"):
                visit(statement.body, f"{prefix}::{statement.name}", (*classes, statement))

    visit(module.tree.body, module.path, ())
    return list(found.values())


class _Reader:
    """The tokens of one test, then of each helper it reaches, each once (see the module's
    docstring)."""

    def __init__(self, test: _Test, suite: _Suite, cap: int) -> None:
        self.suite = suite
        self.cap = cap
        self.module = test.module  # the module of what is being read: a helper's may be another
        self.methods = {s.name: s for c in test.classes for s in c.body
                        if isinstance(s, _FUNCTIONS) and not s.name.startswith("test")}
        self.tokens: list[str] = []
        self.pending: deque[tuple[ast.AST, _Module]] = deque()
        self.read: set[int] = set()

    def read_test(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
        self.read.add(id(node))
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            self._reach_name(arg.arg)  # a fixture
        self._function(node)
        while self.pending and len(self.tokens) < self.cap:
            statement, self.module = self.pending.popleft()
            self._statement(statement)
        return self.tokens[:self.cap]

    # --------------------------------------------------------------- what a name reaches
    def _reach(self, node: ast.AST, module: _Module) -> None:
        if id(node) not in self.read:
            self.read.add(id(node))
            self.pending.append((node, module))

    def _reach_name(self, name: str) -> bool:
        """Reach the definition ``name`` names in the module being read, else in the suite."""
        if name in self.module.definitions:
            self._reach(self.module.definitions[name], self.module)
            return True
        if name in self.suite.definitions:
            self._reach(*self.suite.definitions[name])
            return True
        return False

    def _reach_imported(self, target: str) -> bool:
        """Reach a definition of another file of the suite, imported as ``target``
        (``helpers.make``); True also for the import of such a file itself."""
        if target in self.suite.modules:
            return True
        where, _, name = target.rpartition(".")
        module = self.suite.modules.get(where)
        if module is not None and name in module.definitions:
            self._reach(module.definitions[name], module)
            return True
        return False

    def _name(self, name: str) -> str:
        if name in self.module.imports:
            target = self.module.imports[name]
            return _LOCAL if self._reach_imported(target) else target
        if self._reach_name(name):
            return _LOCAL
        return name if hasattr(builtins, name) else _LOCAL

    # ------------------------------------------------------------------------- the walk
    def _emit(self, token: str) -> None:
        self.tokens.append(token)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._emit(type(node).__name__)
        self._walk(node.args)
        if isinstance(node, ast.Lambda):
            self._walk(node.body)
            return
        for decorator in node.decorator_list:
            self._walk(decorator)
        self._body(node.body)

    def _body(self, body: list[ast.stmt]) -> None:
        for statement in body:
            self._statement(statement)

    def _statement(self, node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(node)
        elif isinstance(node, ast.ClassDef):
            self._emit("ClassDef")
            for part in [*node.bases, *node.keywords, *node.decorator_list]:
                self._walk(part)
            self._body(node.body)
        else:
            self._walk(node)

    def _walk(self, node: ast.AST) -> None:
        if len(self.tokens) >= self.cap:
            return
        if isinstance(node, ast.Expr) and _is_string(node.value):
            return  # a docstring, or a string standing alone: a comment
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._statement(node)
        elif isinstance(node, ast.Lambda):
            self._function(node)
        elif isinstance(node, ast.Name):
            self._emit(self._name(node.id))
        elif isinstance(node, ast.Constant):
            self._emit(_constant(node.value))
        elif isinstance(node, ast.JoinedStr):
            self._emit(_STRING)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
        elif isinstance(node, ast.arg):
            self._emit(_LOCAL)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.keyword):
            self._emit(f"{node.arg or '**'}=")
            self._walk(node.value)
        elif isinstance(node, ast.Assert):
            self._emit("Assert")
            self._walk(node.test)  # its message says nothing of what it checks
        elif isinstance(node, ast.AnnAssign):
            self._emit("Assign")  # `x: float = 1` is `x = 1`
            self._walk(node.target)
            if node.value is not None:
                self._walk(node.value)
        elif isinstance(node, ast.alias):
            self._emit(node.name)
        else:
            self._emit(type(node).__name__)
            for name, value in ast.iter_fields(node):
                if name in _SKIPPED_FIELDS:
                    continue
                for child in value if isinstance(value, list) else [value]:
                    if isinstance(child, ast.AST):
                        self._walk(child)
                    elif isinstance(child, str) and name == "module":
                        self._emit(child)

    def _call(self, node: ast.Call) -> None:
        self._emit("Call")
        self._walk(node.func)
        # A helper's keywords are its parameters' names, local ones; a library's are its API.
        local = isinstance(node.func, ast.Name) and self.tokens[-1:] == [_LOCAL]
        for arg in node.args:
            self._walk(arg)
        for keyword in node.keywords:
            if local and keyword.arg is not None:
                self._emit(f"{_LOCAL}=")
                self._walk(keyword.value)
            else:
                self._walk(keyword)

    def _attribute(self, node: ast.Attribute) -> None:
        self._walk(node.value)
        self._emit("." + node.attr)
        if not isinstance(node.value, ast.Name):
            return
        if node.attr in self.methods:
            self._reach(self.methods[node.attr], self.module)  # self.helper(): its class's method
        target = self.module.imports.get(node.value.id)
        if target is not None and target in self.suite.modules:
            self._reach_imported(f"{target}.{node.attr}")  # helpers.make(): a helper of another file


def _is_string(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _constant(value: object) -> str:
    if isinstance(value, (str, bytes)):
        return _STRING
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return repr(float(value))
        except OverflowError:
            return repr(value)
    return repr(value)


def read_tests(
    folder: Path, *, limit: int | None = MAX_TESTS, cap: int = MAX_TOKENS, total: int | None = None,
    files_bytes: int | None = None,
) -> dict[str, list[str]]:
    """The tests of the suite in ``folder`` as token sequences, by id (``file.py::name``).

    Args:
        folder: the suite (submitted tests, or the course's).
        limit: how many tests to read at most (the smallest files first, each in its order).
        cap: how many tokens of each test to read at most.
        total: how many tokens of all of them together (None: no bound); the tests after are
            left out.
        files_bytes: how many bytes of source to parse (None: no bound), the smallest files
            first; the tests of the files after are left out.

    Returns:
        Test id -> its tokens, its helpers' after its own (see the module's docstring).
    """
    modules = _modules(folder, files_bytes)
    suite = _Suite.of(modules)
    tests = [test for module in modules if _is_test_file(module.path) for test in _tests(module)]
    read: dict[str, list[str]] = {}
    count = 0
    for test in tests[:limit]:
        if total is not None and count >= total:
            break
        reader = _Reader(test, suite, cap)
        try:
            read[test.id] = reader.read_test(test.node)
        except RecursionError:  # nested deeper than a walk can follow: compared as far as it got
            read[test.id] = reader.tokens[:cap]
        count += len(read[test.id])
    return read


_COURSE: dict[Path, tuple[tuple[tuple[str, int, int], ...], dict[str, list[str]]]] = {}


def course_tokens(folder: Path) -> dict[str, list[str]]:
    """The course tests in ``folder`` as :func:`read_tests` reads them, read once per process
    (every grading compares with them) and again when a file there changes. Do not modify it."""
    stamp = tuple(sorted((path.relative_to(folder).as_posix(), info.st_mtime_ns, info.st_size)
                         for path in folder.rglob("*.py") for info in [path.stat()]))
    known = _COURSE.get(folder)
    if known is None or known[0] != stamp:
        known = _COURSE[folder] = (stamp, read_tests(folder, limit=None))
    return known[1]


# ------------------------------------------------------------------------------ comparing
def similarity(a: Sequence[str], b: Sequence[str]) -> float:
    """How alike two token sequences are: the ratio of :class:`difflib.SequenceMatcher`, 1.0
    when they are equal, 0.0 when they have nothing in common."""
    if list(a) == list(b):
        return 1.0
    return SequenceMatcher(None, a, b, autojunk=False).ratio()


def _upper_bound(a: Counter[str], b: Counter[str]) -> float:
    """An upper bound of :func:`similarity` from the tokens alone, whatever their order
    (``SequenceMatcher.quick_ratio``)."""
    total = a.total() + b.total()
    return 2 * (a & b).total() / total if total else 1.0


def _given(course_id: str, given: Collection[str]) -> bool:
    return course_id in given or course_id.rsplit("::", 1)[-1] in given


def find_copies(
    tests_dir: Path,
    *,
    course_tests: Path,
    label: str,
    threshold: float,
    given: Collection[str] = (),
) -> CopyCheck:
    """Compare every test of the suite in ``tests_dir`` with every course test.

    The pairs are compared most alike first (by an upper bound of their similarity), each
    test's only while it may still find a closer course test, and within :data:`MAX_WORK`: a
    pair left uncompared counts as unlike, and a test none of whose pairs was compared has no
    likeness. The files past :data:`MAX_SUITE_BYTES` and the tests past
    :data:`MAX_SUITE_TOKENS` (the smallest files read first) are not compared, nor those of a
    file this check cannot read: the check holds no likeness for them.

    Args:
        tests_dir: the submitted suite.
        course_tests: the folder of the course tests (a missing one holds none).
        label: how a report names that folder (``reference/tests``).
        threshold: the similarity from which a test is a copy (the assignment's ``copy_similarity``).
        given: course tests that may be submitted as they are, by name (``test_x``) or id
            (``test_file.py::test_x``): not compared.

    Returns:
        Each submitted test's closest course test and their similarity.

    Raises:
        CourseTestsError: if an entry of ``given`` names no course test.
    """
    course = course_tokens(course_tests) if course_tests.is_dir() else {}
    unknown = [name for name in given if not any(_given(c, [name]) for c in course)]
    if unknown:
        named = ", ".join(map(repr, unknown))
        raise CourseTestsError(f"given_tests: {named} names no test in {course_tests}")
    compared = {test_id: tokens for test_id, tokens in course.items() if not _given(test_id, given)}
    longest = max((len(tokens) for tokens in compared.values()), default=0)
    submitted = read_tests(tests_dir, cap=max(_LONGER * longest, 1), total=MAX_SUITE_TOKENS,
                           files_bytes=MAX_SUITE_BYTES)

    counts = {course_id: Counter(tokens) for course_id, tokens in compared.items()}
    pairs: list[tuple[float, int, str, str]] = []
    for order, (test_id, tokens) in enumerate(submitted.items()):
        mine = Counter(tokens)
        pairs += [(-_upper_bound(mine, theirs), order, test_id, course_id)
                  for course_id, theirs in counts.items()]
    pairs.sort()

    best: dict[str, tuple[float, str]] = {}
    work = 0
    for negative, _, test_id, course_id in pairs:
        if test_id in best and -negative <= best[test_id][0]:
            continue  # it cannot come closer than the course test it is like already
        a, b = submitted[test_id], compared[course_id]
        work += len(a) * len(b)
        if work > MAX_WORK:
            break
        ratio = similarity(a, b)
        if test_id not in best or ratio > best[test_id][0]:
            best[test_id] = (ratio, course_id)

    likenesses = []
    for test_id in submitted:
        if test_id not in best:
            continue
        ratio, course_id = round(best[test_id][0], 3), best[test_id][1]
        likenesses.append(Likeness(test=test_id, similarity=ratio, course_test=f"{label}/{course_id}",
                                   copied=ratio >= threshold))
    return CopyCheck(threshold=threshold, tests=likenesses)
