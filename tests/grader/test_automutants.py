"""The mutmut pool: a real run staged outside the checkout, its JSON, and the committed pool."""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import shutil
from pathlib import Path

import pytest

from grader.flows.automutants import (
    AutoMutantError,
    AutoPool,
    load_pool,
    mutant_pattern,
    pool_path,
    run_auto_mutants,
    write_pool,
)
from grader.core.paths import Layout, default_layout

LAYOUT = default_layout()

# What mutmut 3 leaves in the folder it runs in; none of it may appear in the checkout (which
# has no mutants/ folder of its own: the variants live in the assignment folders).
_MUTMUT_DROPPINGS = (
    "mutants",
    "mutants/mutants",
    "mutants/src",
    "mutants/tests",
    "mutants/pyproject.toml",
    "mutants/mutmut-stats.json",
    "mutants/mutmut-cicd-stats.json",
    ".mutmut-cache",
    "html",
    "src",
    "setup.cfg",
)


def _droppings(root: Path) -> set[str]:
    found = {name for name in _MUTMUT_DROPPINGS if (root / name).exists()}
    return found | {p.name for p in (root / "mutants").glob("*.meta")}


@pytest.fixture(scope="module")
def gru_cell_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[AutoPool, Path, set[str]]:
    """One real mutmut run over gru_cell's mutants only (the whole file takes about a minute)."""
    before = _droppings(LAYOUT.root)
    stage = tmp_path_factory.mktemp("automutants") / "stage"
    pool = run_auto_mutants(LAYOUT, workdir=stage, max_children=2, functions=["gru_cell"])
    return pool, stage, before


def test_the_counts_partition_the_selected_mutants(gru_cell_run):
    pool, _, _ = gru_cell_run
    assert pool.total > 0
    assert len(pool.killed) + len(pool.survived) + len(pool.other) == pool.total
    pattern = mutant_pattern(LAYOUT, "gru_cell")
    names = pool.killed + pool.survived + list(pool.other)
    assert all(fnmatch.fnmatchcase(name, pattern) for name in names), names
    assert pool.selection == ["gru_cell"]
    assert pool.mutmut_version == importlib.metadata.version("mutmut")


def test_the_course_suite_kills_some_and_every_survivor_has_a_diff(gru_cell_run):
    pool, _, _ = gru_cell_run
    assert pool.killed, "the course suite must kill at least one mutant of gru_cell"
    assert set(pool.survivor_diffs) == set(pool.survived)
    for name, diff in pool.survivor_diffs.items():
        lines = diff.splitlines()
        assert lines[0].startswith("--- ") and lines[1].startswith("+++ "), (name, diff)
        assert any(line.startswith("-") and not line.startswith("---") for line in lines), name


def test_the_pool_names_the_reference_it_was_made_from(gru_cell_run):
    pool, _, _ = gru_cell_run
    assert pool.source == "reference/tinyllm/rnn/gru.py"
    assert pool.source_sha256 == hashlib.sha256(LAYOUT.module_source.read_bytes()).hexdigest()


def test_mutmut_works_in_the_stage_and_leaves_the_checkout_alone(gru_cell_run):
    _, stage, before = gru_cell_run
    assert (stage / "mutants" / "mutmut-stats.json").is_file()
    assert (stage / "mutants" / "src" / "tinyllm" / "rnn" / "gru.py.meta").is_file()
    assert _droppings(LAYOUT.root) == before == set()


def test_the_pool_round_trips_through_json(gru_cell_run, tmp_path):
    pool, _, _ = gru_cell_run
    (tmp_path / "assignments" / "l3-3-gru").mkdir(parents=True)
    (tmp_path / "assignments" / "course.toml").write_text('default = "l3-3-gru"\n', encoding="utf-8")
    checkout = Layout(tmp_path)
    assert load_pool(checkout) is None
    path = write_pool(checkout, pool)
    assert path == tmp_path / "assignments" / "l3-3-gru" / "auto_pool.json"
    assert load_pool(checkout) == pool
    text = path.read_text(encoding="utf-8")
    write_pool(checkout, load_pool(checkout))
    # Stable bytes, so a regenerated pool diffs cleanly.
    assert path.read_text(encoding="utf-8") == text


def test_the_committed_pool_was_made_from_the_current_reference():
    pool = load_pool(LAYOUT)
    assert pool is not None, f"{pool_path(LAYOUT)} is missing; regenerate it (grader.flows.automutants)"
    digest = hashlib.sha256(LAYOUT.module_source.read_bytes()).hexdigest()
    assert pool.source_sha256 == digest, (
        f"{pool_path(LAYOUT)} was made from another gru.py; regenerate it with "
        "write_pool(layout, run_auto_mutants(layout))"
    )
    assert pool.selection == [], "the committed pool must cover every function of gru.py"
    assert pool.killed and pool.total == len(pool.killed) + len(pool.survived) + len(pool.other)


def test_a_reference_the_suite_fails_is_refused(tmp_path):
    # mutmut's clean run must pass before any mutant counts; a broken copy must raise, not score.
    for part in ("reference/tinyllm", "assignments"):
        shutil.copytree(
            LAYOUT.root / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__")
        )
    broken = Layout(tmp_path)
    source = broken.module_source.read_text(encoding="utf-8")
    wrong = source.replace("return (1 - z) * n + z * h", "return z * n + (1 - z) * h")
    assert wrong != source
    broken.module_source.write_text(wrong, encoding="utf-8")
    with pytest.raises(AutoMutantError, match="mutmut run must exit 0"):
        run_auto_mutants(broken, functions=["_check_rng"])


def test_arguments_are_checked_where_they_enter(tmp_path):
    with pytest.raises(ValueError, match="max_children must be a positive int, got 0"):
        run_auto_mutants(LAYOUT, max_children=0)
    with pytest.raises(ValueError, match="functions must be a sequence of names"):
        run_auto_mutants(LAYOUT, functions="gru_cell")
    (tmp_path / "left-over").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="workdir must be empty or missing"):
        run_auto_mutants(LAYOUT, workdir=tmp_path)
    with pytest.raises(ValueError, match="function must be a name"):
        mutant_pattern(LAYOUT, "gru_cell; rm")


def test_mutant_patterns_follow_mutmuts_mangling():
    assert mutant_pattern(LAYOUT, "gru_cell") == "tinyllm.rnn.gru.x_gru_cell__mutmut_*"
    assert mutant_pattern(LAYOUT, "GRU.forward") == "tinyllm.rnn.gru.xǁGRUǁforward__mutmut_*"


def test_a_pool_whose_counts_do_not_add_up_is_rejected():
    with pytest.raises(ValueError, match="must partition total=3"):
        AutoPool(
            mutmut_version="3.8.1", source="reference/tinyllm/rnn/gru.py", source_sha256="0" * 64,
            killed=["a__mutmut_1"], survived=["a__mutmut_2"], total=3, max_children=1,
            duration_s=0.0,
        )
