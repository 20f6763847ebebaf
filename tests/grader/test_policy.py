"""Policy: each rule rejects its snippets at the exact place, and ordinary code passes."""

from __future__ import annotations

import importlib
import os
import types
from pathlib import Path

import pytest
from pydantic import ValidationError

from grader.core.paths import default_layout, layout_for
from grader.core.policy import (
    STANDARD_IMPORTS,
    PolicyConfig,
    Violation,
    check_source,
    check_suite,
    policy_for,
)

GRU = policy_for(default_layout())  # what the GRU's suites may import

# A case: a snippet, then each violation it must give as (line, col, a word `what` holds).
Case = tuple[str, list[tuple[int, int, str]]]


def _assert_finds(source: str, expected: list[tuple[int, int, str]]) -> None:
    violations = check_source(source, "test_gru.py", GRU)
    assert [(v.line, v.col) for v in violations] == [(line, col) for line, col, _ in expected], (
        [str(v) for v in violations]
    )
    for violation, (line, col, thing) in zip(violations, expected):
        assert thing in violation.what, str(violation)
        assert str(violation).startswith(f"test_gru.py:{line}:{col}: {violation.what}, ")
        assert violation.why


IMPORTS: list[Case] = [
    ("import os", [(1, 0, "'os'")]),
    ("from os import path", [(1, 0, "os.path")]),
    ("import subprocess", [(1, 0, "subprocess")]),
    ("import inspect", [(1, 0, "inspect")]),
    ("import importlib", [(1, 0, "importlib")]),
    ("import sys", [(1, 0, "sys")]),
    ("import math, os", [(1, 0, "'os'")]),
    ("def f():\n    import pickle", [(2, 4, "pickle")]),
    ("from tinyllm.autograd import functional", [(1, 0, "tinyllm.autograd.functional")]),
    ("import tinyllm.nn.init", [(1, 0, "tinyllm.nn.init")]),
    ("import tinyllm.nn", [(1, 0, "'tinyllm.nn'")]),
    ("from tinyllm.random import _MASK64", [(1, 0, "_MASK64")]),
    ("import tinyllm", [(1, 0, "'tinyllm'")]),
    ("import tinyllm.rnn", [(1, 0, "'tinyllm.rnn'")]),
    ("from tinyllm import rnn", [(1, 0, "tinyllm.rnn")]),
    ("from tinyllm.rnn.gru import _tensor", [(1, 0, "_tensor")]),
    ("from . import helpers", [(1, 0, "helpers")]),
    ("from ..lib import x, y", [(1, 0, "..lib.x"), (1, 0, "..lib.y")]),
    ("from numpy import load as l", [(1, 0, "'load'")]),
    ("from numpy import *", [(1, 0, "star")]),
    ("import numpy.ctypeslib", [(1, 0, "numpy.ctypeslib")]),
    ("import numpy.lib", [(1, 0, "numpy.lib")]),
    ("from numpy.lib import format", [(1, 0, "numpy.lib.format")]),
    ("import numpy.f2py as f", [(1, 0, "numpy.f2py")]),
    ("from pytest import importorskip", [(1, 0, "importorskip")]),
    ("from operator import attrgetter", [(1, 0, "attrgetter")]),
    ("from typing import get_type_hints", [(1, 0, "get_type_hints")]),
    ("from functools import wraps", [(1, 0, "wraps")]),
    ("from dataclasses import builtins", [(1, 0, "builtins")]),
    # `import tinyllm.rnn.gru` binds `tinyllm`: only the interface modules may follow it.
    (
        "import tinyllm.rnn.gru\ntinyllm.autograd.functional.sigmoid",
        [(2, 0, "tinyllm.autograd.functional")],
    ),
    ("import tinyllm.rnn.gru\nx = tinyllm.nn", [(2, 4, "'tinyllm.nn'")]),
    ("import tinyllm.rnn.gru\nf(tinyllm)", [(2, 2, "'tinyllm'")]),
]


@pytest.mark.parametrize(("source", "expected"), IMPORTS, ids=[case[0] for case in IMPORTS])
def test_imports_outside_the_interface_are_rejected(source, expected):
    _assert_finds(source, expected)


NAMES: list[Case] = [
    ('__import__("os")', [(1, 0, "__import__")]),
    ('getattr(np, "lo" + "ad")', [(1, 0, "getattr")]),
    ('setattr(gru, "x", 1)', [(1, 0, "setattr")]),
    ('delattr(gru, "x")', [(1, 0, "delattr")]),
    ('open("/etc/passwd")', [(1, 0, "open")]),
    ('eval("1")', [(1, 0, "eval")]),
    ('exec("x=1")', [(1, 0, "exec")]),
    ('compile("1", "f", "exec")', [(1, 0, "compile")]),
    ("globals()", [(1, 0, "globals")]),
    ("x = locals()", [(1, 4, "locals")]),
    ("vars()", [(1, 0, "vars")]),
    ("breakpoint()", [(1, 0, "breakpoint")]),
    ("name = input()", [(1, 7, "input")]),
    ('memoryview(b"")', [(1, 0, "memoryview")]),
    ("help(gru_cell)", [(1, 0, "help")]),
    ("def test_x():\n    return sys.path", [(2, 11, "'sys'")]),
    ("os.system('ls')", [(1, 0, "'os'")]),
    ("inspect.getsource(gru_cell)", [(1, 0, "inspect")]),
    ("open = print", [(1, 0, "open")]),
    ("b = __builtins__", [(1, 4, "__builtins__")]),
    ("path = __file__", [(1, 7, "__file__")]),
    ("print(__spec__)", [(1, 6, "__spec__")]),
    ('pytest_plugins = ["x"]', [(1, 0, "pytest_plugins")]),
]


@pytest.mark.parametrize(("source", "expected"), NAMES, ids=[case[0] for case in NAMES])
def test_names_that_reach_behind_the_interface_are_rejected(source, expected):
    _assert_finds(source, expected)


ATTRIBUTES: list[Case] = [
    # dunders, pointed at by the attribute's own column
    ("(lambda: 0).__code__", [(1, 12, "__code__")]),
    ("gru_cell.__globals__", [(1, 9, "__globals__")]),
    ("().__class__.__bases__", [(1, 3, "__class__"), (1, 13, "__bases__")]),
    ("m.__dict__", [(1, 2, "__dict__")]),
    ("super().__init__()", [(1, 8, "__init__")]),
    ("t.__class__ = Other", [(1, 2, "__class__")]),
    ("é = t\né.__class__", [(2, 2, "__class__")]),  # columns count characters, not bytes
    ("f(\n    t.\n    __class__)", [(3, 4, "__class__")]),
    ("match t:\n    case object(__class__=c):\n        pass", [(2, 9, "__class__")]),
    # private names and other modules held by allowed ones
    ("random._os.system('ls')", [(1, 7, "_os")]),
    ("t._backward()", [(1, 2, "_backward")]),
    # a class of the file's own may use its private attributes through self, and only so
    ("class Net:\n    def f(self, t):\n        return t._w", [(3, 17, "_w")]),
    ("def f(self):\n    return self._w", [(2, 16, "_w")]),
    ("class Net:\n    self._w = 1", [(2, 9, "_w")]),
    ("class Net:\n    @staticmethod\n    def f(t):\n        return t._w", [(4, 17, "_w")]),
    ("class Net:\n    def f(self):\n        return self.__dict__", [(3, 20, "__dict__")]),
    ("dataclasses.builtins.eval('1')", [(1, 12, "builtins")]),
    ("typing.types.CodeType", [(1, 7, "types")]),
    ("enum.bltns", [(1, 5, "bltns")]),
    ("dataclasses.sys.modules", [(1, 12, "sys")]),
    ("np.testing.extbuild", [(1, 11, "extbuild")]),
    # look-ups and evaluation by string in allowed modules
    ("operator.attrgetter('load')(np)", [(1, 9, "attrgetter")]),
    ("operator.methodcaller('load', 'x')(np)", [(1, 9, "methodcaller")]),
    ("string.Formatter().get_field('0.x', [np], {})", [(1, 7, "Formatter")]),
    ("typing.get_type_hints(f)", [(1, 7, "get_type_hints")]),
    ("functools.singledispatch(f)", [(1, 10, "singledispatch")]),
    ("functools.wraps(np)(c)", [(1, 10, "wraps")]),
    ("pytest.importorskip('os')", [(1, 7, "importorskip")]),
    ("pytest.main(['-p', 'os'])", [(1, 7, "main")]),
    ("np.test()", [(1, 3, "test")]),
    ("np.testing.runstring('x', {})", [(1, 11, "runstring")]),
    # frames, tracebacks and pytest's internals
    (
        "excinfo.traceback[0].frame.f_globals",
        [(1, 8, "traceback"), (1, 21, "frame"), (1, 27, "f_globals")],
    ),
    ("str(excinfo.getrepr())", [(1, 12, "getrepr")]),
    ("gen.gi_frame", [(1, 4, "gi_frame")]),
    ("request.config.pluginmanager", [(1, 8, "config"), (1, 15, "pluginmanager")]),
    ("request.getfixturevalue('tmp_path')", [(1, 8, "getfixturevalue")]),
    # numpy's file and foreign-function entry points, on any object
    ('np.load("x")', [(1, 3, "load")]),
    ("import numpy as whatever\nwhatever.save('x', a)", [(2, 9, "save")]),
    ("m = np\nm.load('x')", [(2, 2, "load")]),
    ("numpy.lib.format", [(1, 6, "lib")]),
    ('x.tofile("f")', [(1, 2, "tofile")]),
    ("a.dump('f')", [(1, 2, "dump")]),
    ("np.memmap('f')", [(1, 3, "memmap")]),
    ("np.fromfile('f')", [(1, 3, "fromfile")]),
    ("np.savez_compressed('f', a)", [(1, 3, "savez_compressed")]),
    ("np.loadtxt('f')", [(1, 3, "loadtxt")]),
    ("np.genfromtxt('f')", [(1, 3, "genfromtxt")]),
    ("np.DataSource()", [(1, 3, "DataSource")]),
    ("np.ctypeslib.as_array(p)", [(1, 3, "ctypeslib")]),
    ("a.ctypes.data", [(1, 2, "ctypes")]),
    ("path.read_text()", [(1, 5, "read_text")]),
    ("match np:\n    case object(load=f):\n        pass", [(2, 9, "load")]),
]


@pytest.mark.parametrize(("source", "expected"), ATTRIBUTES, ids=[case[0] for case in ATTRIBUTES])
def test_attributes_that_reach_behind_the_interface_are_rejected(source, expected):
    _assert_finds(source, expected)


PYTEST: list[Case] = [
    ('pytest_plugins = ["x"]', [(1, 0, "pytest_plugins")]),
    ("def pytest_configure(config):\n    pass", [(1, 0, "pytest_configure")]),
    (
        "@pytest.hookimpl\ndef pytest_collection_modifyitems(items):\n    pass",
        [(2, 0, "pytest_collection_modifyitems")],
    ),
    (
        "class TestX:\n    def pytest_generate_tests(self, metafunc):\n        pass",
        [(2, 4, "pytest_generate_tests")],
    ),
    ("async def pytest_runtest_call(item):\n    pass", [(1, 0, "pytest_runtest_call")]),
    ("def test_x(tmp_path):\n    pass", [(1, 11, "tmp_path")]),
    ("def test_x(gru, monkeypatch):\n    pass", [(1, 16, "monkeypatch")]),
    ("@pytest.fixture\ndef f(pytestconfig):\n    pass", [(2, 6, "pytestconfig")]),
    ("def test_x(\n    cache,\n):\n    pass", [(2, 4, "cache")]),
    ("def test_x(tmpdir_factory):\n    pass", [(1, 11, "tmpdir_factory")]),
]


@pytest.mark.parametrize(("source", "expected"), PYTEST, ids=[case[0] for case in PYTEST])
def test_pytest_hooks_plugins_and_outside_fixtures_are_rejected(source, expected):
    _assert_finds(source, expected)


# pytest evaluates a string condition of skipif and xfail as code: the check cannot read it.
CONDITIONS: list[Case] = [
    ('@pytest.mark.skipif("sys.platform")\ndef test_x():\n    pass', [(1, 20, "string condition of 'skipif'")]),
    ('@pytest.mark.xfail("1", strict=True)\ndef test_x():\n    pass', [(1, 19, "'xfail'")]),
    ('@pytest.mark.skipif(condition="x", reason="r")\ndef test_x():\n    pass', [(1, 30, "'skipif'")]),
    ('@pytest.mark.xfail(condition=f"{H}")\ndef test_x():\n    pass', [(1, 29, "'xfail'")]),
    ('@pytest.mark.skipif(False, "x", reason="r")\ndef test_x():\n    pass', [(1, 27, "'skipif'")]),
    ('@pytest.mark.skipif(*["x"], reason="r")\ndef test_x():\n    pass', [(1, 21, "'skipif'")]),
    ('@pytest.mark.skipif(**{"condition": "x", "reason": "r"})\ndef test_x():\n    pass', [(1, 36, "'skipif'")]),
    ('pytestmark = pytest.mark.skipif.with_args("x")', [(1, 42, "'skipif'")]),
    ('CASES = [pytest.param(1, marks=pytest.mark.xfail("x" + "y"))]', [(1, 49, "'xfail'")]),
    # through an alias of pytest, of pytest.mark, of the mark, or a name bound to the string
    ('import pytest as pt\n@pt.mark.skipif("x")\ndef test_x():\n    pass', [(2, 16, "'skipif'")]),
    ('from pytest import mark\n@mark.skipif("x")\ndef test_x():\n    pass', [(2, 13, "'skipif'")]),
    ('m = pytest.mark\n@m.xfail("x")\ndef test_x():\n    pass', [(2, 9, "'xfail'")]),
    ('when = pytest.mark.skipif\n@when("x".upper(), reason="r")\ndef test_x():\n    pass', [(2, 6, "'skipif'")]),
    ('C = "x"\nD = C\n@pytest.mark.skipif(D, reason="r")\ndef test_x():\n    pass', [(3, 20, "'skipif'")]),
]


@pytest.mark.parametrize(("source", "expected"), CONDITIONS, ids=[case[0] for case in CONDITIONS])
def test_string_conditions_of_skipif_and_xfail_are_rejected(source, expected):
    _assert_finds("import pytest\n" + source, [(line + 1, col, what) for line, col, what in expected])


def test_a_string_condition_is_said_to_be_code_and_a_boolean_asked_for():
    [violation] = check_source('import pytest\n\n@pytest.mark.skipif("1")\ndef test_x():\n    pass\n', "test_gru.py", GRU)
    assert str(violation).startswith("test_gru.py:3:20: string condition of 'skipif', ")
    assert "evaluates a string condition as Python code" in violation.why and "pass a boolean" in violation.why


BOOLEAN_CONDITIONS = [
    'H = 3\n@pytest.mark.skipif(H > 4, reason="needs a wide state")\ndef test_x():\n    pass',
    '@pytest.mark.xfail(reason="known", strict=True, raises=ValueError)\ndef test_x():\n    pass',
    '@pytest.mark.skip("an unconditional skip takes its reason first")\ndef test_x():\n    pass',
    '@pytest.mark.skipif(True, **{"reason": "r"})\ndef test_x():\n    pass',
    'CASES = [pytest.param("s", marks=pytest.mark.xfail(reason="r"))]\n\n\n'
    '@pytest.mark.parametrize("x", CASES, ids=[str(c) for c in CASES])\ndef test_x(x):\n    pass',
]


@pytest.mark.parametrize("source", BOOLEAN_CONDITIONS, ids=[s.splitlines()[0][:40] for s in BOOLEAN_CONDITIONS])
def test_boolean_conditions_and_reasons_pass(source):
    assert check_source("import pytest\n" + source, "test_gru.py", GRU) == []


TEXT: list[Case] = [
    ("x = 1\ndef f(:\n    pass", [(2, 6, "syntax error")]),
    ("x = 'é' +\n", [(1, 9, "syntax error")]),
    ("x = (1,\n", [(1, 4, "never closed")]),
    ("x = 1\r\nyy\x00 = 2", [(2, 2, "null byte")]),
    ("# coding: latin-1\nx = 1", [(1, 0, "encoding")]),
    # utf-7 would turn the comment's +AAo- into a line break: `import os` runs unseen.
    ("# -*- coding: utf-7 -*-\nx = 1  # +AAo-import os", [(1, 0, "utf-7")]),
    ("x = " + "+".join(["1"] * 200_000), [(1, 0, "nested")]),
]


@pytest.mark.parametrize(("source", "expected"), TEXT, ids=[c[0][:30] for c in TEXT])
def test_text_python_would_not_read_as_checked_is_rejected(source, expected):
    _assert_finds(source, expected)


SEED_EXAMPLE = '''\
import math
import numpy as np
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn.gru import gru_cell

def test_hand_example_gru_cell():
    """r = 0.5, z = 0.75, n = tanh(0.5 * 1.5): h' = 0.25 n + 0.75 * 0.5."""
    w = [Tensor(a, dtype=np.float64) for a in ([[0.0]] * 3, [[0.0], [0.0], [1.0]], [0, math.log(3), 0], [0, 0, 1.0])]
    h2 = gru_cell(Tensor([[1.0]], dtype=np.float64), np.array([[0.5]]), *w)
    assert np.allclose(h2.data, [[0.25 * np.tanh(0.75) + 0.375]])
'''

CLEAN_SUITE = '''\
"""Everything a careful student might write."""

from __future__ import annotations

import cmath
import collections.abc
import copy
import dataclasses
import enum
import functools
import itertools
import math
import operator
import random
import statistics
import string
import typing
from collections import OrderedDict, abc
from decimal import Decimal
from fractions import Fraction

import numpy as np
import numpy as whatever
import numpy.random
import pytest
import tinyllm.rnn.gru
from numpy import random as npr
from numpy.testing import assert_allclose
from tinyllm.autograd.tensor import Tensor
from tinyllm.rnn import gru
from tinyllm.rnn.gru import GRU, GRUCell, gru_cell


@dataclasses.dataclass(frozen=True)
class Case:
    batch: int
    hidden: int
    d_in: int = 3


class Shape(enum.Enum):
    SMALL = 1


class Pair:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __eq__(self, other):
        return isinstance(other, Pair) and (self.a, self.b) == (other.a, other.b)

    def __repr__(self):
        return f"Pair({self.a!r}, {self.b!r})"


@pytest.fixture(params=[1, 2])
def layers(request):
    return request.param


@pytest.mark.parametrize(("batch", "hidden"), list(itertools.product([1, 2], [3, 4])))
def test_shapes(batch, hidden, layers, capsys):
    rng = np.random.default_rng(0)
    model = GRU(3, hidden, num_layers=layers)
    out, h_n = model.eval()(Tensor(rng.normal(size=(2, batch, 3))))
    assert out.shape == (2, batch, hidden) and h_n.data.shape == (layers, batch, hidden)
    assert np.allclose(out.data[-1], h_n.data[-1])
    np.testing.assert_allclose(out.data[-1], h_n.data[-1])
    assert_allclose(whatever.zeros(2), numpy.random.default_rng(1).normal(size=2) * 0)
    assert isinstance(tinyllm.rnn.gru.GRUCell(2, 3), gru.GRUCell)
    assert math.isclose(statistics.mean([1.0, 2.0]), 1.5) and cmath.exp(0) == 1
    assert Fraction(1, 2) == Decimal("0.5") == 0.5
    assert copy.deepcopy(Pair(1, 2)) == Pair(1, 2) and OrderedDict(a=1)["a"] == 1
    assert functools.reduce(operator.add, [1, 2]) == 3 and operator.itemgetter(0)([5]) == 5
    assert random.Random(0).random() < 1 and string.ascii_letters and npr is np.random
    assert isinstance([], abc.Sequence) and isinstance([], collections.abc.Sized)
    assert typing.cast(int, 1) == 1 and Shape.SMALL.value == 1 and Case(1, 2).d_in == 3


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="dropout") as excinfo:
        GRU(3, 4, dropout=1.5)
    assert "dropout" in str(excinfo.value) and excinfo.type is ValueError
    assert pytest.approx(0.1 + 0.2) == 0.3


def test_gradients_reach_h(gru_cell=gru_cell):
    h = Tensor(np.zeros((1, 2)), requires_grad=True)
    w = [Tensor(np.zeros(s)) for s in [(6, 1), (6, 2), (6,), (6,)]]
    gru_cell(Tensor([[1.0]]), h, *w).sum().backward()
    match h.grad.shape:
        case (1, 2):
            pass
        case _:
            raise AssertionError(f"{h.grad.shape=}")
    model = GRUCell(1, 2)
    model.train()
    assert [name for name, _ in model.named_parameters()][0] == "weight_ih"
    assert model.state_dict()["bias_hh"].shape == (6,)


if __name__ == "__main__":
    print(__name__)
'''


@pytest.mark.parametrize(
    "source", [SEED_EXAMPLE, CLEAN_SUITE], ids=["seed example", "careful student"]
)
def test_clean_tests_pass(source):
    assert check_source(source, "test_gru.py", GRU) == []


ORDINARY: list[str] = [
    "import numpy as np\n\ndef test_x():\n    input = np.ones(3)\n    assert input.shape == (3,)",
    "def helper(input):\n    return input * 2",
    "f = lambda input: input",
    "xs = [input for input in range(3)]",
    "class Net:\n    def __init__(self):\n        self._w = 1\n\n    def f(self):\n"
    "        return [self._w for _ in range(2)]",
    "class Net:\n    def __init__(self):\n        self.__w = 1\n\n    def f(this):\n"
    "        def g():\n            return this._Net__w\n        return g()",
    "class Net:\n    @classmethod\n    def make(cls):\n        return cls._default",
    "from tinyllm.random import PCG32\nrng = PCG32(0).substream('init')",
    "from tinyllm.nn.module import Module, Parameter",
    "import tinyllm.random\nimport tinyllm.nn.module\n"
    "rng = tinyllm.random.PCG32(0)\np = tinyllm.nn.module.Parameter",
]


@pytest.mark.parametrize("source", ORDINARY, ids=[s.splitlines()[-1][:40] for s in ORDINARY])
def test_ordinary_code_passes(source):
    """A variable or parameter named input, a class's own private attributes and the types
    the contract names (PCG32, Parameter) are not refused."""
    assert check_source(source, "test_gru.py", GRU) == []


def test_a_violation_reads_file_line_column_what_and_why():
    [violation] = check_source("import math\n\nimport os\n", "test_gru.py", GRU)
    assert str(violation) == (
        "test_gru.py:3:0: import of 'os', student tests may import only tinyllm.rnn.gru, "
        "tinyllm.autograd.tensor, tinyllm.nn.module, tinyllm.random, numpy, pytest and the "
        "standard modules math, itertools, "
        "functools, dataclasses, typing, collections, fractions, decimal, statistics, operator, "
        "enum, string, cmath, random, copy"
    )


def test_the_allowlist_is_configurable_and_checked():
    wider = PolicyConfig(allowed_imports=(*GRU.allowed_imports, "json"))
    assert check_source("import json", "t.py", wider) == []
    [violation] = check_source("import json", "t.py", GRU)
    assert "json" in violation.what
    [narrow] = check_source("import numpy", "t.py", PolicyConfig(allowed_imports=("math",)))
    assert narrow.why == "student tests may import only the standard modules math"
    with pytest.raises(ValidationError, match="dotted module names"):
        PolicyConfig(allowed_imports=("numpy", "not a module"))
    with pytest.raises(ValidationError):
        wider.allowed_imports = ()  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Violation(path="t.py", line=1, col=0, what="x", why="y", extra=1)  # type: ignore[call-arg]


def _modules_exposed_by_allowed_modules() -> set[str]:
    """Names under which an allowed module (or numpy's public submodules) holds a module
    that may not be imported: each is a way around the import rule."""
    allowed = set(GRU.allowed_imports)
    todo = [importlib.import_module(name) for name in sorted(allowed)]
    seen, exposed = set(), set()
    while todo:
        module = todo.pop()
        if module.__name__ in seen:
            continue
        seen.add(module.__name__)
        for name in dir(module):
            if name.startswith("_") or check_source(f"x.{name}", "t.py", GRU):
                continue  # already rejected: nothing behind it is reachable
            value = getattr(module, name, None)
            if not isinstance(value, types.ModuleType):
                continue
            if value.__name__ in allowed or value.__name__.startswith("numpy."):
                todo.append(value)
            else:
                exposed.add(f"{module.__name__}.{name} -> {value.__name__}")
    return exposed


def test_every_module_an_allowed_module_exposes_is_rejected_or_harmless():
    harmless = {"abc", "numbers"}  # abstract base classes only
    exposed = {
        line
        for line in _modules_exposed_by_allowed_modules()
        if line.rpartition(" -> ")[2] not in harmless
    }
    assert exposed == set(), "add these attribute names to _MODULE_ATTRIBUTES in grader/core/policy_code.py"


# ---------------------------------------------------------------------------- whole suites
def _write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def _where(violations: list[Violation]) -> list[tuple[str, int, int]]:
    return [(v.path, v.line, v.col) for v in violations]


def test_a_clean_suite_with_other_files_and_a_byte_order_mark_passes(tmp_path):
    suite = _write(
        tmp_path,
        {
            "test_gru.py": SEED_EXAMPLE,
            "test_more.py": b"\xef\xbb\xbf" + CLEAN_SUITE.encode("utf-8"),
            "notes.txt": "import os\n",
            "data.npy": b"\x93NUMPY\xff\xfe",
            "golden.npz": b"PK\x03\x04",
            "golden.json": "{}\n",
            ".tdd/journal.jsonl": "{}\n",
        },
    )
    assert check_suite(suite, GRU) == []


ACCEPTANCE_SUITE = '''\
import numpy as np
from tinyllm.random import PCG32
from tinyllm.rnn.gru import GRUCell


class Net:
    def __init__(self):
        self._w = GRUCell(3, 4, rng=PCG32(0))

    def f(self, x):
        return self._w(x)


def test_a_step_keeps_the_shape():
    input = np.ones((2, 3))
    assert Net().f(input).shape == (2, 4)
'''


def test_a_local_input_a_private_attribute_of_its_own_and_pcg32_pass(tmp_path):
    assert check_suite(_write(tmp_path, {"test_gru.py": ACCEPTANCE_SUITE}), GRU) == []


def test_compiled_files_are_rejected_by_name_and_pycache_folders_passed_over(tmp_path):
    suite = _write(
        tmp_path,
        {
            "test_gru.py": SEED_EXAMPLE,
            "helpers.pyc": b"\x00\xff",
            "legacy.pyo": b"\x00",
            "OLD.PYC": b"\x00",
            "sub/fast.cpython-311-x86_64-linux-gnu.so": b"\x7fELF",
            "win/fast.pyd": b"MZ",
            "win/fast.dll": b"MZ",
            "mac/fast.dylib": b"\xcf\xfa",
            "__pycache__/test_gru.cpython-311.pyc": b"\x00\xff",
            "sub/__pycache__/test_x.cpython-311.pyc": b"\x00\xff",
            "golden.npz": b"PK\x03\x04",
            "golden.json": "{}\n",
            "notes.txt": "x\n",
        },
    )
    violations = check_suite(suite, GRU)
    assert _where(violations) == [
        ("OLD.PYC", 1, 0),
        ("helpers.pyc", 1, 0),
        ("legacy.pyo", 1, 0),
        ("mac/fast.dylib", 1, 0),
        ("sub/fast.cpython-311-x86_64-linux-gnu.so", 1, 0),
        ("win/fast.dll", 1, 0),
        ("win/fast.pyd", 1, 0),
    ]
    by_path = {v.path: str(v) for v in violations}
    assert by_path["helpers.pyc"] == (
        "helpers.pyc:1:0: compiled Python file, compiled code is refused: a submission holds "
        "source files only; delete it and submit the .py file"
    )
    assert by_path["win/fast.dll"].startswith("win/fast.dll:1:0: extension module, ")


def test_conftest_anywhere_is_rejected(tmp_path):
    suite = _write(tmp_path, {"conftest.py": "", "sub/conftest.py": "import numpy\n"})
    violations = check_suite(suite, GRU)
    assert _where(violations) == [("conftest.py", 1, 0), ("sub/conftest.py", 1, 0)]
    assert all(v.what == "conftest.py" for v in violations)


def test_a_nested_directory_is_checked_and_paths_are_relative(tmp_path):
    suite = _write(
        tmp_path,
        {
            "test_a.py": "x = 1\nimport sys\n",
            "deep/er/test_b.py": "import numpy as np\nnp.load('w')\n",
        },
    )
    violations = check_suite(suite, GRU)
    assert _where(violations) == [("deep/er/test_b.py", 2, 3), ("test_a.py", 2, 0)]
    assert "load" in violations[0].what and "sys" in violations[1].what


def test_a_syntax_error_is_reported_with_its_line(tmp_path):
    suite = _write(tmp_path, {"test_gru.py": "import numpy\n\ndef test_x(:\n    pass\n"})
    [violation] = check_suite(suite, GRU)
    assert _where([violation]) == [("test_gru.py", 3, 11)]
    assert violation.what.startswith("syntax error")


def test_a_file_that_is_not_utf8_is_rejected_where_it_breaks(tmp_path):
    suite = _write(tmp_path, {"test_gru.py": b"x = 1\r\ny = '\xe9t\xe9'\n"})
    [violation] = check_suite(suite, GRU)
    assert _where([violation]) == [("test_gru.py", 2, 5)]
    assert "UTF-8" in violation.what


def test_links_are_rejected_and_not_followed(tmp_path):
    outside = _write(tmp_path / "outside", {"test_evil.py": "import os\n"})
    suite = _write(tmp_path / "suite", {"test_gru.py": SEED_EXAMPLE})
    os.symlink(outside / "test_evil.py", suite / "test_link.py")
    os.symlink(outside, suite / "linked_dir")
    os.symlink(suite / "missing.py", suite / "dangling.py")
    violations = check_suite(suite, GRU)
    assert _where(violations) == [
        ("dangling.py", 1, 0),
        ("linked_dir", 1, 0),
        ("test_link.py", 1, 0),
    ]
    assert all(v.what == "symbolic link" for v in violations)


def test_special_files_are_rejected_without_being_read(tmp_path):
    os.mkfifo(tmp_path / "test_fifo.py")  # reading it would block forever
    [violation] = check_suite(tmp_path, GRU)
    assert (violation.path, violation.what) == ("test_fifo.py", "special file")


def test_violations_come_sorted_by_path_line_and_column(tmp_path):
    suite = _write(
        tmp_path,
        {
            "test_b.py": "x = open('f')\nimport os\n",
            "test_a.py": "y = t.__class__\n__file__\n",
            "a/test_c.py": "eval('1')\n",
        },
    )
    violations = check_suite(suite, GRU)
    assert _where(violations) == [
        ("a/test_c.py", 1, 0),
        ("test_a.py", 1, 6),
        ("test_a.py", 2, 0),
        ("test_b.py", 1, 4),
        ("test_b.py", 2, 0),
    ]


def test_a_suite_must_be_a_directory(tmp_path):
    with pytest.raises(ValueError, match="tests_dir must be a directory"):
        check_suite(tmp_path / "missing")
    (tmp_path / "test_x.py").write_text("")
    with pytest.raises(ValueError, match="tests_dir must be a directory"):
        check_suite(tmp_path / "test_x.py")



def test_what_a_suite_may_import_comes_from_its_assignments_contract():
    lstm = policy_for(layout_for(default_layout().root, "l3-2-lstm"))
    assert "tinyllm.rnn.lstm" in lstm.allowed_imports and "tinyllm.rnn.gru" not in lstm.allowed_imports
    assert "tinyllm.rnn.gru" in GRU.allowed_imports and "tinyllm.rnn.lstm" not in GRU.allowed_imports
    for config in (GRU, lstm):  # the types the stubs name, and nothing of the framework besides
        assert {"tinyllm.autograd.tensor", "tinyllm.nn.module", "tinyllm.random"} <= set(config.allowed_imports)
        assert not {"tinyllm", "tinyllm.rnn", "tinyllm.nn", "tinyllm.autograd.functional"} & set(config.allowed_imports)
        assert set(STANDARD_IMPORTS) <= set(config.allowed_imports)
    [wrong] = check_source("import tinyllm.rnn.gru\n", "test_lstm.py", lstm)
    assert "tinyllm.rnn.gru" in str(wrong)
    assert check_source("from tinyllm.rnn.lstm import LSTM, lstm_cell\n", "test_lstm.py", lstm) == []
