"""Class statistics over ``grade-batch --reports``: counts, each mutant's kill rate, the score
histogram and the tests by validity, checked against what the reports themselves say; the
reports' loader, and ``mutagrade stats`` as a command."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.classstats import HISTOGRAM_BINS, ClassStats, class_stats
from grader.core.models import Report, TestStatus
from grader.core.paths import default_layout
from grader.flows.stats import load_reports
from grader.report.classstats import render_stats_json, render_stats_text

LAYOUT = default_layout()
SUITE = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru" / "test_gru.py"
ROOT = Path(__file__).resolve().parents[2]


def first_tests(source: str, count: int) -> str:
    """The suite's helpers and its first ``count`` tests (the file cut before the next test)."""
    lines = source.splitlines(keepends=True)
    starts = [n for n, line in enumerate(lines) if line.startswith("def test_")]
    return "".join(lines[: starts[count]])


def grade_class(dest: Path) -> Path:
    """Grade a small class with ``mutagrade grade-batch`` and return its reports folder: ``full``
    (the bundled suite: passes), ``partial`` (its first two tests: does not pass), ``broken`` (a
    syntax error: refused, a report all the same) and ``empty`` (no test file: could not be
    graded, an error file)."""
    subs = dest / "subs"
    for student in ("full", "partial", "broken", "empty"):
        (subs / student).mkdir(parents=True)
    source = SUITE.read_text(encoding="utf-8")
    (subs / "full" / "test_gru.py").write_text(source, encoding="utf-8")
    (subs / "partial" / "test_gru.py").write_text(first_tests(source, 2), encoding="utf-8")
    (subs / "broken" / "test_gru.py").write_text("def test_oops(:\n    pass\n", encoding="utf-8")
    (subs / "empty" / "README.md").write_text("my tests are elsewhere\n", encoding="utf-8")
    reports = dest / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade-batch", str(subs), "--output", str(dest / "gradebook.csv"),
         "--reports", str(reports)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return reports


@pytest.fixture(scope="module")
def reports_dir(tmp_path_factory) -> Path:
    return grade_class(tmp_path_factory.mktemp("class"))


@pytest.fixture(scope="module")
def raw(reports_dir) -> dict[str, dict]:
    """Each student's JSON as written, read independently of the grader's models."""
    return {path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(reports_dir.glob("*.json"))}


@pytest.fixture(scope="module")
def graded(raw) -> dict[str, dict]:
    return {name: doc for name, doc in raw.items() if doc["schema"].startswith("mutagrade.report/")}


@pytest.fixture(scope="module")
def stats(reports_dir) -> ClassStats:
    reports, errors, problems = load_reports(reports_dir)
    assert problems == []
    return class_stats(reports, errors=errors)


# ------------------------------------------------------------------- the class as graded
def test_the_class_is_what_the_fixture_means_it_to_be(raw, graded):
    assert sorted(raw) == ["broken", "empty", "full", "partial"]
    assert raw["empty"]["schema"] == "mutagrade.not-graded/1"
    assert sorted(graded) == ["broken", "full", "partial"]
    assert graded["full"]["passed"] and not graded["partial"]["passed"] and not graded["broken"]["passed"]
    assert 0 < graded["partial"]["score"]["kill_rate"] < graded["full"]["score"]["kill_rate"]
    assert graded["broken"]["policy"]["ok"] is False


def test_loading_finds_every_report_and_counts_the_error_file(reports_dir, graded):
    reports, errors, problems = load_reports(reports_dir)
    assert sorted(r.submission for r in reports) == sorted(graded)
    assert all(isinstance(r, Report) for r in reports)
    assert errors == 1
    assert problems == []


def test_the_counts_follow_the_reports(stats, raw, graded):
    assert stats.graded == len(graded) == 3
    assert stats.passed == sum(doc["passed"] for doc in graded.values()) == 1
    assert stats.not_passed == 2
    assert stats.errors == len(raw) - len(graded) == 1
    assert stats.refused == 1  # the syntax error: graded as a report, refused as a whole
    assert stats.students == 4


def test_each_mutant_is_counted_under_its_own_id_with_its_kills(stats, graded):
    mutants: dict[str, dict] = {}
    killed: dict[str, int] = {}
    for doc in graded.values():
        for mutant in doc["mutants"]:
            mutants.setdefault(mutant["id"], mutant)
            killed[mutant["id"]] = killed.get(mutant["id"], 0) + mutant["killed"]
    assert {m.id for m in stats.mutants} == set(mutants)
    assert any(m["hidden"] for m in mutants.values()), "the class should meet a hidden mutant"
    for shown in stats.mutants:
        assert shown.title == mutants[shown.id]["title"]
        assert shown.hidden == mutants[shown.id]["hidden"]
        assert shown.required == mutants[shown.id]["required"]
        assert shown.killed == killed[shown.id]
        assert shown.suites == 3
        assert shown.kill_rate == pytest.approx(killed[shown.id] / 3, abs=1e-12)
    assert not any(m.id.startswith("hidden mutant") for m in stats.mutants)


def test_the_mutants_the_class_misses_most_come_first(stats):
    rates = [m.kill_rate for m in stats.mutants]
    assert rates == sorted(rates)
    assert rates[0] < rates[-1], "the partial suite should leave some mutants to the full one"
    for before, after in zip(stats.mutants, stats.mutants[1:]):
        if before.killed == after.killed:
            assert before.id < after.id


def test_the_histogram_puts_each_suite_in_its_tenth(stats, graded):
    assert len(stats.histogram) == HISTOGRAM_BINS == 10
    expected = [0] * 10
    for doc in graded.values():
        score = doc["score"]
        expected[min(9, int(10 * score["killed"] // score["total"]))] += 1
    assert [b.count for b in stats.histogram] == expected
    assert expected[9] == 1 and expected[0] == 1  # full (1.0) in the last bin, broken (0.0) in the first
    assert [b.low for b in stats.histogram] == pytest.approx([n / 10 for n in range(10)])
    assert [b.high for b in stats.histogram] == pytest.approx([(n + 1) / 10 for n in range(10)])


def test_the_tests_are_summed_by_validity(stats, graded):
    expected = {status.value: 0 for status in TestStatus}
    for doc in graded.values():
        for test in doc["tests"]:
            expected[test["status"]] += 1
    assert {status.value: count for status, count in stats.tests.items()} == expected
    assert list(stats.tests) == list(TestStatus)  # every category, in the model's order
    assert expected["valid"] > 0


def test_median_and_mean_kill_rate(stats, graded):
    rates = [doc["score"]["kill_rate"] for doc in graded.values()]
    assert stats.median_kill_rate == pytest.approx(statistics.median(rates))
    assert stats.mean_kill_rate == pytest.approx(statistics.fmean(rates))


# ------------------------------------------------------------------------ the function
def test_no_report_is_no_rate(stats):
    empty = class_stats([], errors=2)
    assert (empty.graded, empty.passed, empty.errors) == (0, 0, 2)
    assert empty.median_kill_rate is None and empty.mean_kill_rate is None
    assert empty.mutants == [] and sum(b.count for b in empty.histogram) == 0


def test_a_negative_error_count_is_refused():
    with pytest.raises(ValueError, match="errors must be 0 or more, got -1"):
        class_stats([], errors=-1)


def test_the_bins_hold_their_lower_edge(reports_dir):
    reports, _, _ = load_reports(reports_dir)
    [full] = [r for r in reports if r.submission == "full"]
    total = full.score.total
    assert total >= 10
    made = []
    for killed in (0, total // 2, total * 7 // 10, total - 1, total):
        score = full.score.model_copy(update={"killed": killed, "kill_rate": killed / total})
        made.append(full.model_copy(update={"score": score}))
    counts = [b.count for b in class_stats(made).histogram]
    expected = [0] * 10
    for killed in (0, total // 2, total * 7 // 10, total - 1, total):
        expected[min(9, 10 * killed // total)] += 1
    assert counts == expected


def test_the_stats_are_a_frozen_value(stats):
    with pytest.raises(Exception):
        stats.graded = 7  # type: ignore[misc]
    assert ClassStats.model_validate_json(render_stats_json(stats)) == stats


# ------------------------------------------------------------------------- the loader
def test_a_file_that_is_no_report_is_a_problem_named_never_a_crash(reports_dir, tmp_path):
    folder = tmp_path / "reports"
    shutil.copytree(reports_dir, folder)
    (folder / "notes.txt").write_text("graded on Tuesday\n")
    (folder / "torn.json").write_text('{"schema": "mutagrade.report/2",\n  "submission": ')
    (folder / "list.json").write_text("[1, 2]\n")
    (folder / "other.json").write_text('{"schema": "something/9"}\n')
    full = json.loads((folder / "full.json").read_text())
    del full["score"]["killed"]
    (folder / "lacking.json").write_text(json.dumps(full))
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00junk")
    (folder / ".DS_Store").write_bytes(b"\x00")
    reports, errors, problems = load_reports(folder)
    assert sorted(r.submission for r in reports) == ["broken", "full", "partial"]
    assert errors == 1
    by_file = {line.split(":", 1)[0]: line for line in problems}
    assert sorted(by_file) == ["binary.json", "lacking.json", "list.json", "notes.txt", "other.json", "torn.json"]
    assert "score.killed" in by_file["lacking.json"]
    assert "torn.json:2:" in by_file["torn.json"]
    assert "something/9" in by_file["other.json"] and "mutagrade.report/2" in by_file["other.json"]
    assert "expected a JSON object" in by_file["list.json"]
    assert "UTF-8" in by_file["binary.json"]


def test_a_missing_folder_is_an_error_that_names_it(tmp_path):
    from grader.flows.stats import StatsInputError

    with pytest.raises(StatsInputError, match="nowhere"):
        load_reports(tmp_path / "nowhere")


# ------------------------------------------------------------------------ the renderers
def test_the_text_names_the_counts_and_every_mutant(stats):
    text = render_stats_text(stats)
    assert "3 graded" in text and "1 passed" in text and "2 not passed" in text and "1 could not be graded" in text
    for mutant in stats.mutants:
        assert mutant.id in text
    assert text.index(stats.mutants[0].id + " ") < text.index(stats.mutants[-1].id + " ")
    for status in TestStatus:
        assert status.value in text


# -------------------------------------------------------------------------- the command
def run_stats(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader.cli", "stats", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


def test_the_command_writes_json_and_the_three_plots(reports_dir, stats, tmp_path):
    plots = tmp_path / "plots"
    done = run_stats(str(reports_dir), "--format", "json", "--plots", str(plots))
    assert done.returncode == 0, done.stderr
    assert ClassStats.model_validate_json(done.stdout) == stats
    assert sorted(p.name for p in plots.iterdir()) == ["kill_rates.svg", "scores.svg", "validity.svg"]
    for path in plots.iterdir():
        assert path.read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_the_command_prints_text_by_default(reports_dir):
    done = run_stats(str(reports_dir))
    assert done.returncode == 0, done.stderr
    assert "3 graded" in done.stdout


def test_the_command_names_a_missing_folder_and_exits_2(tmp_path):
    done = run_stats(str(tmp_path / "no-such-reports"))
    assert done.returncode == 2
    assert "no-such-reports" in done.stderr and "Traceback" not in done.stderr


def test_the_command_on_a_folder_of_no_report_exits_2(tmp_path):
    (tmp_path / "gradebook.csv").write_text("student,passed\n")
    done = run_stats(str(tmp_path))
    assert done.returncode == 2
    assert "gradebook.csv" in done.stderr and "no report" in done.stderr
