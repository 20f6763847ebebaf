"""A supplementary pool of automatic mutants of an assignment's reference module, made by mutmut 3.

The pool is for staff review only and never enters a pass/fail decision: it shows which
mechanical changes of the module the course suite kills, and the diffs of those it misses.

mutmut 3 works in the project it is started in and writes a folder called ``mutants/`` there,
which would collide with any folder of that name. So every run stages a fresh src-style
project in a folder of its own (``src/tinyllm`` copied from the reference, ``tests/`` copied
from the course tests, a ``pyproject.toml`` whose ``[tool.mutmut]`` restricts mutation to
the module under test) and runs mutmut there, in a subprocess of this interpreter.

The committed pool, ``auto_pool.json`` of the assignment's folder, must be regenerated whenever the module under test
changes (a test compares its hash)::

    python -c "from grader.flows.automutants import *; from grader.core.paths import default_layout as d; \
        write_pool(d(), run_auto_mutants(d()))"
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict, model_validator

from grader.core.paths import Layout

__all__ = [
    "AutoMutantError",
    "AutoPool",
    "POOL_FILE",
    "load_pool",
    "mutant_pattern",
    "pool_path",
    "run_auto_mutants",
    "write_pool",
]

POOL_FILE = "auto_pool.json"

# The console script's own body; run with this interpreter so the mutmut that runs is the one
# installed next to the grader, whatever is first on PATH.
_MUTMUT_CLI = "import sys; from mutmut.__main__ import cli; sys.exit(cli())"

# `mutmut show` costs half a second of start-up per mutant; one process shows them all.
_SHOW_ALL = """\
import contextlib, io, json, sys
from mutmut.__main__ import cli
diffs = {}
for name in json.loads(sys.stdin.read()):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["show", name], standalone_mode=False)
    diffs[name] = out.getvalue()
sys.stdout.write(json.dumps(diffs))
"""

_RESULT_LINE = re.compile(r"^\s+(?P<name>\S+__mutmut_\d+): (?P<status>.+?)\s*$")
_FUNCTION_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")
_CLASS_SEPARATOR = "ǁ"  # mutmut's mangling of Class.method: xǁClassǁmethod
_LOG_TAIL = 4000


class AutoMutantError(RuntimeError):
    """mutmut could not make or run the pool; the message carries the tail of its output."""


class AutoPool(BaseModel):
    """The result of one mutmut run over the reference module with the course suite."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mutmut_version: str
    source: str  # the mutated file, relative to the checkout root
    source_sha256: str  # of the module's source the mutants were made from
    selection: list[str] = []  # the functions mutated ("cell", "Cell.forward"); [] = all
    killed: list[str]
    survived: list[str]
    other: dict[str, str] = {}  # mutant -> mutmut's status: timeout, suspicious, no tests, ...
    total: int
    max_children: int
    duration_s: float
    run_s: float = 0.0  # of duration_s, the `mutmut run` itself (0.0 in pools made before it was kept)
    survivor_diffs: dict[str, str] = {}  # survivor -> unified diff, for staff review

    @model_validator(mode="after")
    def _counts_add_up(self) -> AutoPool:
        groups = [set(self.killed), set(self.survived), set(self.other)]
        counted = sum(len(group) for group in groups)
        if counted != self.total or len(set().union(*groups)) != self.total:
            raise ValueError(
                f"killed, survived and other must partition total={self.total} distinct mutants, "
                f"got {len(self.killed)} + {len(self.survived)} + {len(self.other)}"
            )
        if not set(self.survivor_diffs) <= set(self.survived):
            extra = sorted(set(self.survivor_diffs) - set(self.survived))
            raise ValueError(f"survivor_diffs must only hold survivors, got {extra}")
        return self


def pool_path(layout: Layout) -> Path:
    """Where the committed pool lives: ``auto_pool.json`` of the assignment's folder."""
    return layout.mutants / POOL_FILE


def mutant_pattern(layout: Layout, function: str) -> str:
    """The glob of mutmut's names for the mutants of one function of the module under test.

    Args:
        layout: the checkout whose module under test is mutated (it names the module).
        function: ``"cell"`` for a module-level function, ``"Cell.forward"`` for a method.

    Returns:
        A pattern such as ``tinyllm.rnn.name.x_cell__mutmut_*``.

    Raises:
        ValueError: if ``function`` is not a name or a ``Class.method`` name.
    """
    if not isinstance(function, str) or not _FUNCTION_NAME.match(function):
        raise ValueError(
            f"function must be a name like 'cell' or 'Cell.forward', got {function!r}"
        )
    owner, _, name = function.rpartition(".")
    mangled = f"x{_CLASS_SEPARATOR}{owner}{_CLASS_SEPARATOR}{name}" if owner else f"x_{name}"
    return f"{_module_name(layout)}.{mangled}__mutmut_*"


def run_auto_mutants(
    layout: Layout,
    *,
    workdir: Path | None = None,
    max_children: int = 2,
    functions: Sequence[str] = (),
    timeout_s: float = 1800.0,
    tests: Path | None = None,
) -> AutoPool:
    """Stage the reference and the course tests, run mutmut on the module under test, and collect the pool.

    Args:
        layout: the checkout to take ``reference/tinyllm``, the course tests and goldens from.
        workdir: an empty (or missing) folder to stage in, kept afterwards for inspection;
            a temporary folder, removed afterwards, when omitted.
        max_children: how many mutants mutmut tests at once.
        functions: only mutate these functions of the module under test (see :func:`mutant_pattern`);
            all of them when empty.
        timeout_s: wall-clock limit of the whole mutmut run.
        tests: the suite to kill them with (a folder of test files); the course tests when
            omitted (bench/grade_speed.py times mutmut on the bundled student's suite).

    Returns:
        The pool, with the diff of every survivor.

    Raises:
        ValueError: if ``max_children`` is not a positive int, a function name is malformed,
            or ``workdir`` is not empty.
        FileNotFoundError: if the reference, the course tests or the goldens are missing.
        AutoMutantError: if mutmut is missing, fails (for example because the course suite
            does not pass on the staged reference), or runs past ``timeout_s``.
    """
    if isinstance(max_children, bool) or not isinstance(max_children, int) or max_children < 1:
        raise ValueError(f"max_children must be a positive int, got {max_children!r}")
    if isinstance(functions, str):
        raise ValueError(f"functions must be a sequence of names, got the string {functions!r}")
    patterns = [mutant_pattern(layout, function) for function in functions]
    tests = Path(tests) if tests is not None else layout.course_tests
    for path in (layout.module_source, tests, layout.goldens):
        if not path.exists():
            raise FileNotFoundError(f"{path} must exist to make the automatic mutants, got nothing")
    version = _mutmut_version()

    selection = list(functions)
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="mutagrade-mutmut-") as tmp:
            return _run_in(layout, Path(tmp), version, max_children, selection, patterns, timeout_s, tests)
    workdir = Path(workdir)
    if workdir.exists() and any(workdir.iterdir()):
        # mutmut resumes from whatever mutants/ it finds, so a used folder would give stale results.
        raise ValueError(f"workdir must be empty or missing, got {workdir} with files in it")
    workdir.mkdir(parents=True, exist_ok=True)
    return _run_in(layout, workdir, version, max_children, selection, patterns, timeout_s, tests)


def write_pool(layout: Layout, pool: AutoPool) -> Path:
    """Write ``pool`` to ``auto_pool.json`` of the assignment's folder as pretty JSON with sorted keys.

    Returns:
        The path written.
    """
    path = pool_path(layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(pool.model_dump(mode="json"), indent=2, sort_keys=True, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_pool(layout: Layout) -> AutoPool | None:
    """The pool in ``auto_pool.json`` of the assignment's folder, or None if none was written.

    Raises:
        pydantic.ValidationError: if the file is not a valid pool.
    """
    path = pool_path(layout)
    if not path.is_file():
        return None
    return AutoPool.model_validate_json(path.read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- staging
def _module_name(layout: Layout) -> str:
    return ".".join(layout.module_source.relative_to(layout.reference).with_suffix("").parts)


def _mutmut_version() -> str:
    try:
        version = importlib.metadata.version("mutmut")
    except importlib.metadata.PackageNotFoundError:
        raise AutoMutantError(
            f"mutmut 3 must be installed in {sys.prefix} to make the automatic mutants, got none"
        ) from None
    # The staged [tool.mutmut] keys and the results format are those of mutmut 3.
    if not version.startswith("3."):
        raise AutoMutantError(f"mutmut must be version 3.x, got {version}")
    return version


def _stage(layout: Layout, stage: Path, tests: Path) -> tuple[str, str]:
    """Lay out the src-style project mutmut expects; the staged module's path and sha256."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    package = layout.module_source.relative_to(layout.reference).parts[0]
    shutil.copytree(layout.reference / package, stage / "src" / package, ignore=ignore)
    shutil.copytree(tests, stage / "tests", ignore=ignore)

    # Read the module once and write those very bytes, so the hash names what was mutated even if
    # the checkout's file changes during the copy.
    source = layout.module_source.read_bytes()
    relative = (Path("src") / layout.module_source.relative_to(layout.reference)).as_posix()
    (stage / relative).write_bytes(source)

    # source_paths is all of src/ so the rest of tinyllm is importable beside the mutated file;
    # only_mutate keeps mutation to the module under test. Git change detection off: the stage is no repository.
    (stage / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = [{json.dumps(relative)}]\n"
        'pytest_add_cli_args_test_selection = ["tests"]\n'
        'pytest_add_cli_args = ["-p", "no:cacheprovider"]\n'
        "use_git_change_detection = false\n",
        encoding="utf-8",
    )
    return relative, hashlib.sha256(source).hexdigest()


def _env(layout: Layout) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",  # mutmut's names of methods hold a non-ASCII separator
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        # The staged conftest would look for fixtures/ beside the stage; point it at the real file.
        "MUTAGRADE_GOLDENS": str(layout.goldens.resolve()),
    }
    # HOME and TMPDIR for the libraries mutmut imports; OpenBLAS needs these two on some CPUs.
    for name in ("HOME", "TMPDIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _mutmut(
    args: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float, stdin: str = "",
    script: str = _MUTMUT_CLI,
) -> tuple[int, str, str]:
    """Run mutmut in ``cwd``; its exit status, its stdout and its stderr."""
    # A session of its own, so a timeout can end mutmut's forked workers with it.
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(stdin.encode("utf-8"), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        text = (out + err).decode("utf-8", "replace")
        raise AutoMutantError(
            f"mutmut {' '.join(args[:1])} must finish within {timeout_s:g} s, got killed after it; "
            f"output ends:\n{text[-_LOG_TAIL:]}"
        ) from None
    return process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _sort_key(name: str) -> tuple[str, int]:
    # Natural order (…_2 before …_10) keeps the committed JSON's diffs readable.
    function, _, number = name.rpartition("__mutmut_")
    return function, int(number)


# ----------------------------------------------------------------------------- the run
def _run_in(
    layout: Layout,
    stage: Path,
    version: str,
    max_children: int,
    functions: list[str],
    patterns: list[str],
    timeout_s: float,
    tests: Path,
) -> AutoPool:
    started = time.monotonic()
    relative, digest = _stage(layout, stage, tests)
    env = _env(layout)

    code, out, err = _mutmut(
        ["run", "--max-children", str(max_children), *patterns],
        cwd=stage, env=env, timeout_s=timeout_s,
    )
    run_s = round(time.monotonic() - started, 2)
    output = out + err
    (stage / "mutmut-run.log").write_text(output, encoding="utf-8")
    if code != 0:
        raise AutoMutantError(
            f"mutmut run must exit 0, got {code} (in {stage}); output ends:\n{output[-_LOG_TAIL:]}"
        )

    code, output, err = _mutmut(["results", "--all", "true"], cwd=stage, env=env, timeout_s=120)
    if code != 0:
        raise AutoMutantError(
            f"mutmut results must exit 0, got {code}; output:\n{err[-_LOG_TAIL:]}"
        )
    status_by_name = {
        match["name"]: match["status"]
        for match in map(_RESULT_LINE.match, output.splitlines())
        if match and (not patterns or any(fnmatch.fnmatchcase(match["name"], p) for p in patterns))
    }
    if not status_by_name:
        raise AutoMutantError(
            f"mutmut results must list the mutants, got none; output:\n{output[-_LOG_TAIL:]}"
        )

    names = sorted(status_by_name, key=_sort_key)
    killed = [name for name in names if status_by_name[name] == "killed"]
    survived = [name for name in names if status_by_name[name] == "survived"]
    other = {
        name: status_by_name[name]
        for name in names
        if status_by_name[name] not in ("killed", "survived")
    }
    diffs = _survivor_diffs(survived, stage=stage, env=env)
    return AutoPool(
        mutmut_version=version,
        source=layout.module_source.relative_to(layout.root).as_posix(),
        source_sha256=digest,
        selection=functions,
        killed=killed,
        survived=survived,
        other=other,
        total=len(names),
        max_children=max_children,
        duration_s=round(time.monotonic() - started, 1),
        run_s=run_s,
        survivor_diffs=diffs,
    )


def _survivor_diffs(survived: list[str], *, stage: Path, env: dict[str, str]) -> dict[str, str]:
    if not survived:
        return {}
    code, out, err = _mutmut(
        [], cwd=stage, env=env, timeout_s=300, stdin=json.dumps(survived), script=_SHOW_ALL
    )
    if code != 0:
        raise AutoMutantError(f"mutmut show must exit 0, got {code}; output:\n{err[-_LOG_TAIL:]}")
    shown = json.loads(out)
    # Drop `show`'s "# name: status" header line; the diff is what staff read.
    return {
        name: "\n".join(
            line for line in shown[name].splitlines() if not line.startswith("# ")
        ).strip() + "\n"
        for name in survived
    }
