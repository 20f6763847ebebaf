"""Gradings stay bounded whatever the suite: too many tests are refused before any runs, and
huge or hostile suites give small reports from a grader whose own memory stays low."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.core.assignment import Assignment, Limits
from grader.core.caps import MAX_ID_CHARS, MAX_LISTED, MAX_STORED_REPORT_BYTES, MAX_TEST_FILE_BYTES, MAX_TESTS, MAX_TEXT_CHARS
from grader.flows.grading import grade_suite
from grader.core.matrix import Matrix
from grader.core.models import JournalSummary, Outcome, SuiteRun, TestOutcome
from grader.core.paths import default_layout
from grader.report import render
from grader.core.scoring import score_suite
from grader.core.variants import Variant, VariantKind, build_variants

LAYOUT = default_layout()
FAST = Assignment(name="test", threshold=0.70, limits=Limits(test_timeout_s=5.0, run_timeout_s=120.0))
REPORT_BYTES = 1024**2  # what a report of any of these suites must stay under

# The grader's own process, as `mutagrade grade` runs it, and its peak memory afterwards (VmHWM:
# its own, where ru_maxrss would count the pages of the test process that forked it).
GRADE = textwrap.dedent("""
    import re, sys
    from grader.cli import main, start_process
    start_process()
    code = main(["grade", *sys.argv[1:]])
    sys.stdout.flush()
    peak = re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read()).group(1)
    print(f"peak_kib={peak}", file=sys.stderr)
    sys.exit(code)
""")


def parametrized(count: int, id_chars: int) -> str:
    """A test file of ``count`` passing tests whose ids are ``id_chars`` long and share a prefix."""
    return textwrap.dedent(f"""
        import pytest
        from tinyllm.rnn.gru import gru_cell

        IDS = ["case_" + "x" * {id_chars - 10} + f"{{i:05d}}" for i in range({count})]


        @pytest.mark.parametrize("i", range({count}), ids=IDS)
        def test_p(i):
            assert gru_cell is not None
    """)


def grade_cli(tests: Path, tmp_path: Path) -> tuple[int, str, int, str]:
    """Exit code, the JSON report, the grader's peak memory (KiB) and stderr."""
    output = tmp_path / "report.json"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", GRADE, str(tests), "--format", "json", "--output", str(output)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=LAYOUT.root)
    peak = next(int(line.split("=")[1]) for line in done.stderr.splitlines() if line.startswith("peak_kib="))
    return done.returncode, output.read_text() if output.exists() else "", peak, done.stderr


def test_a_suite_of_more_tests_than_the_limit_is_refused_after_collection(tmp_path):
    (tmp_path / "test_many.py").write_text(parametrized(MAX_TESTS + 100, 40))
    report = grade_suite(tmp_path, layout=LAYOUT, assignment=FAST)
    assert report.refused == (
        f"the suite has {MAX_TESTS + 100} tests, more than the limit of {MAX_TESTS}: nothing else was run"
    )
    assert report.input_refused and not report.passed and report.reasons == [report.refused]
    assert report.tests == [] and report.problems == []
    # The reference's two collections, and at most one wheat's that went beside them (each
    # stopped at the cap); nothing else.
    assert report.timing.runs in (2, 3)


def test_a_suite_at_the_limit_is_graded(tmp_path):
    (tmp_path / "test_many.py").write_text(parametrized(MAX_TESTS, 40))
    report = grade_suite(tmp_path, layout=LAYOUT, assignment=FAST)
    assert report.refused == "" and not report.input_refused
    assert len(report.tests) == MAX_TESTS and all(t.valid for t in report.tests)


def test_the_cli_refuses_600_long_id_tests_with_exit_2_and_a_small_report(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_long.py").write_text(parametrized(600, 3000))
    code, document, _, stderr = grade_cli(suite, tmp_path)
    assert code == 2, stderr
    assert len(document.encode()) <= REPORT_BYTES
    data = json.loads(document)
    assert data["refused"] == f"the suite has 600 tests, more than the limit of {MAX_TESTS}: nothing else was run"


def test_long_ids_are_cut_in_the_report_and_every_test_keeps_its_row(tmp_path):
    (tmp_path / "test_long.py").write_text(parametrized(200, 1000))
    report = grade_suite(tmp_path, layout=LAYOUT, assignment=FAST)
    ids = [t.id for t in report.tests]
    assert len(ids) == len(set(ids)) == 200
    assert all(len(i) <= MAX_ID_CHARS and i.startswith("test_long.py::test_p[case_xxx") for i in ids)
    assert ids[7].endswith("00007]")
    assert len(report.model_dump_json(indent=2).encode()) <= REPORT_BYTES


@pytest.mark.parametrize(
    ("line", "lines", "what"),
    [
        # 2 MB: over the size limit, refused unread.
        ("import os\n", 200_000, "bytes, a test file may be at most"),
        # The densest file the limit lets through: one violation every three bytes.
        ("os\n", MAX_TEST_FILE_BYTES // 3, "use of 'os'"),
    ],
    ids=["200000-lines", "densest-allowed"],
)
def test_a_huge_file_of_violations_gives_a_small_report_from_a_lean_grader(tmp_path, line, lines, what):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_big.py").write_text(line * lines)
    code, document, peak_kib, stderr = grade_cli(suite, tmp_path)
    assert code == 2, stderr
    assert len(document.encode()) <= REPORT_BYTES
    policy = json.loads(document)["policy"]
    assert what in policy["violations"][0]
    assert len(policy["violations"]) + policy["violations_omitted"] == (1 if "bytes" in what else lines)
    # Before the caps the 2 MB file took the grader 424 MiB and the densest file about 1 GiB.
    assert peak_kib < 320 * 1024, peak_kib


def test_a_collection_error_in_every_file_lists_the_first_problems_and_counts_the_rest(tmp_path):
    for n in range(60):
        (tmp_path / f"test_{n:02d}.py").write_text(f'raise ValueError("{"e" * 5000}")\n\ndef test_x():\n    pass\n')
    report = grade_suite(tmp_path, layout=LAYOUT, assignment=FAST)
    # Each run keeps its first 20 errors word for word and counts the rest; the second reference
    # run meets the same ones, said once.
    assert len(report.problems) == 21 and report.problems_omitted == 0
    assert all(len(str(p)) <= MAX_TEXT_CHARS for p in report.problems)
    assert str(report.problems[0]).startswith("reference: test_00.py: ")
    assert str(report.problems[-1]) == "reference: ... and 40 more collection errors"
    assert "... and 40 more collection errors" in render(report, "text")


def test_the_largest_report_scoring_can_make_stays_far_below_the_stored_cap():
    """MAX_TESTS tests of 3,000-character ids, each killing every mutant (a full matrix) after
    failing with the longest message, every run with collection errors, a journal of problems."""
    variants = build_variants(LAYOUT)
    ids = [f"test_x.py::test_p[{'x' * 3000}{n:05d}]" for n in range(MAX_TESTS)]
    message = "AssertionError: " + "m" * 3000
    errors = tuple(f"test_{n}.py: {'e' * 2000}" for n in range(100))

    def run(variant: Variant, outcome: Outcome, seed: int = 1) -> SuiteRun:
        crashed = "c" * 3000 if variant.kind is VariantKind.WHEAT else ""
        return SuiteRun(variant=variant.id, hash_seed=seed, collection_errors=errors, crashed=crashed,
                        results=tuple(TestOutcome(test_id=i, outcome=outcome, message=message) for i in ids))

    first = {v.id: run(v, Outcome.FAILED if v.kind is VariantKind.MUTANT else Outcome.PASSED) for v in variants}
    second = {"reference": run(variants[0], Outcome.PASSED, seed=2)}
    # Every kill confirmed under the other seed, as a kill must be to count.
    second.update({v.id: run(v, Outcome.FAILED, seed=2) for v in variants if v.kind is VariantKind.MUTANT})
    journal = JournalSummary(checked=True, ok=False, problems=["j" * 3000] * 1000,
                             history={i: "red at entry 1, green at entry 2" for i in ids})
    report = score_suite(submission="huge", matrix=Matrix(first=first, second=second), variants=variants,
                         assignment=FAST, audience="staff", journal=journal)
    size = len(report.model_dump_json(indent=2).encode())
    print(f"largest report: {size} bytes")
    assert size < MAX_STORED_REPORT_BYTES // 2, size
    assert all(len(t.id) <= MAX_ID_CHARS for t in report.tests) and len({t.id for t in report.tests}) == MAX_TESTS
    assert all(len(m.killed_by) == MAX_TESTS for m in report.mutants)
    # The problems of visible runs, and those of hidden mutants' runs (staff's alone) after them,
    # each list capped, the hidden one with a line of its own for what it left out.
    assert len(report.problems) == 2 * MAX_LISTED + 1 and report.problems_omitted > 0
    assert all(len(str(p)) <= MAX_TEXT_CHARS for p in report.problems)
    assert len(report.journal.problems) == MAX_LISTED and report.journal.problems_omitted == 1000 - MAX_LISTED
    assert list(report.journal.history) == [t.id for t in report.tests]
