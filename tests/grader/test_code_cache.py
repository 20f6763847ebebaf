"""Variants compiled once per machine, not once per run: the cache of their code objects.

Each run's child used to compile its variant's source (a few milliseconds, seventeen times a
grading). The grader now sends the code compiled ahead beside the source; the cache lives in
the grading user's own folder, closed to everyone else, and whatever in it does not check out
is compiled again.
"""

from __future__ import annotations

import marshal
import stat

import pytest

from grader.run import codecache
from grader.core.assignment import load_assignment
from grader.flows.grading import grade_suite
from grader.core.paths import default_layout
from grader.core.variants import build_variants
from grader.core.contract import read_contract

LAYOUT = default_layout()
EXAMPLE = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
# The file name the GRU's variants are compiled under (its contract's module, as a path).
FILENAME = read_contract(LAYOUT.contract_stub, LAYOUT.module_under_test).filename

SOURCE = '''
"""A variant."""
LIMIT = 3


def clip(x):
    assert x >= 0, "no negatives"
    return min(x, LIMIT)
'''


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    codecache.variant_code.cache_clear()
    yield tmp_path / "cache" / "mutagrade" / "variants"
    codecache.variant_code.cache_clear()


def _run(code: bytes) -> dict:
    namespace: dict = {}
    exec(marshal.loads(code), namespace)  # noqa: S102 - the test's own source
    return namespace


def test_the_code_is_the_source_compiled_under_the_variant_file_name(cache_home):
    code = codecache.variant_code(SOURCE, FILENAME)
    loaded = marshal.loads(code)
    assert loaded.co_filename == FILENAME
    namespace = _run(code)
    assert namespace["clip"](7) == 3
    with pytest.raises(AssertionError, match="no negatives"):  # asserts kept, whatever -O says
        namespace["clip"](-1)


def test_the_cache_is_the_users_own_and_is_read_back(cache_home, monkeypatch):
    first = codecache.variant_code(SOURCE, FILENAME)
    [entry] = list(cache_home.iterdir())
    assert stat.S_IMODE(cache_home.stat().st_mode) == 0o700
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    codecache.variant_code.cache_clear()

    def no_compiling(source: str) -> bytes:
        raise AssertionError("compiled again instead of reading the cache")

    monkeypatch.setattr(codecache, "_compile", no_compiling)
    assert codecache.variant_code(SOURCE, FILENAME) == first


def test_a_damaged_entry_is_compiled_again(cache_home):
    good = codecache.variant_code(SOURCE, FILENAME)
    [entry] = list(cache_home.iterdir())
    for damage in (b"", entry.read_bytes()[:-5], entry.read_bytes()[:40] + b"x" * 50):
        entry.write_bytes(damage)
        codecache.variant_code.cache_clear()
        assert codecache.variant_code(SOURCE, FILENAME) == good
        assert entry.read_bytes() != damage  # and put right


def test_a_source_that_does_not_compile_has_no_code(cache_home):
    assert codecache.variant_code("def broken(:\n", FILENAME) is None
    assert not cache_home.exists() or not list(cache_home.iterdir())


def test_an_unwritable_cache_still_gives_the_code(tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    codecache.variant_code.cache_clear()
    try:
        assert _run(codecache.variant_code(SOURCE, FILENAME))["clip"](1) == 1
    finally:
        codecache.variant_code.cache_clear()


def test_the_cache_keeps_a_bounded_number_of_entries(cache_home, monkeypatch):
    monkeypatch.setattr(codecache, "MAX_ENTRIES", 8)
    for n in range(20):
        codecache.variant_code(SOURCE + f"\nN = {n}\n", FILENAME)
    assert 0 < len(list(cache_home.iterdir())) <= 8


def test_a_grading_sends_the_cached_code_and_grades_as_before(cache_home):
    assignment = load_assignment(LAYOUT.assignment)
    report = grade_suite(EXAMPLE, layout=LAYOUT, assignment=assignment, audience="staff")
    variants = build_variants(LAYOUT)
    assert len(list(cache_home.iterdir())) == len(variants)  # every variant's code, compiled once
    again = grade_suite(EXAMPLE, layout=LAYOUT, assignment=assignment, audience="staff")
    assert report.passed and again.score == report.score
    assert [(t.id, t.status, t.kills) for t in again.tests] == [(t.id, t.status, t.kills) for t in report.tests]
