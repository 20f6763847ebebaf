"""The mutagrade command line, run as a user runs it: a subprocess, its output, its exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.core.paths import default_layout
from grader.core.variants import build_variants
from tests.calls import record_calls

LAYOUT = default_layout()


def mutagrade(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "grader.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd or LAYOUT.root,
    )


def test_demo_prints_the_hand_example_and_passes_the_course_tests():
    done = mutagrade("demo")
    assert done.returncode == 0, done.stderr
    assert "h′ = 0.25 × n + 0.75 × 0.5 = 0.533787" in done.stdout
    assert "0.824573" in done.stdout
    assert "10 passed, 0 failed" in done.stdout


def test_variants_list_is_a_table_of_every_variant():
    done = mutagrade("variants", "list")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["id", "kind", "required", "hidden"]
    s02 = next(line for line in lines if line.startswith("s02"))
    assert "mutant" in s02 and "yes" in s02 and "Cho" in s02
    assert sum(line.startswith("s") for line in lines[1:]) == 12


def test_variants_show_prints_the_diff():
    done = mutagrade("variants", "show", "s03")
    assert done.returncode == 0
    assert "+    return z * n + (1 - z) * h" in done.stdout
    assert "caught by: test_hand_example_gru_cell" in done.stdout


def test_an_unknown_variant_is_exit_2_with_the_choices():
    done = mutagrade("variants", "show", "s99")
    assert done.returncode == 2
    assert "variant 's99': no such variant" in done.stderr and "s12" in done.stderr


def test_export_writes_a_runnable_package_per_variant(tmp_path):
    done = mutagrade("variants", "export", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    gru = (tmp_path / "out" / "s02" / "tinyllm" / "rnn" / "gru.py").read_text()
    assert "(r * h) @ w_hn.T" in gru
    assert (tmp_path / "out" / "w01" / "tinyllm" / "autograd" / "tensor.py").is_file()


def test_export_into_a_file_is_exit_2(tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    done = mutagrade("variants", "export", str(target))
    assert done.returncode == 2 and "expected a directory" in done.stderr


def test_calibrate_json_is_data(tmp_path):
    done = mutagrade("calibrate", "--format", "json")
    assert done.returncode == 0, done.stdout[-2000:]
    data = json.loads(done.stdout)
    assert data["problems"] == []
    assert data["matrix"]["test_gru_properties.py::test_gradcheck_gru_cell"]["s12"] == "kill"
    assert data["matrix"]["test_gru_properties.py::test_gradcheck_gru_cell"]["reference"] == "pass"


def test_calibrate_fails_loudly_naming_the_cell(tmp_path):
    """A manifest claim that does not hold (s05 caught by the init test) is exit 1 and named."""
    import shutil

    for part in ("reference", "assignments"):
        shutil.copytree(LAYOUT.root / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = tmp_path / "assignments" / "l3-3-gru" / "manifest.toml"
    manifest.write_text(
        manifest.read_text().replace(
            'caught_by = ["test_hand_example_gru_cell"]\n',
            'caught_by = ["test_hand_example_gru_cell", "test_init_orthogonal_recurrence_and_zero_bias"]\n',
        )
    )
    done = mutagrade("--root", str(tmp_path), "calibrate")
    assert done.returncode == 1
    assert "CALIBRATION FAILED" in done.stdout
    assert "cell (test_gru_properties.py::test_init_orthogonal_recurrence_and_zero_bias, s05): expected a kill, got passed" in done.stdout


@pytest.mark.parametrize("args", [["golden", "--no-live"], ["golden", "--cases", "1"]])
def test_golden_says_which_variants_match_torch(args):
    done = mutagrade(*args)
    assert done.returncode == 0, done.stdout
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert rows["reference"].endswith("matches torch")
    assert rows["w02"].endswith("matches torch")
    assert rows["s02"].endswith("differs")
    assert rows["s06"].endswith("matches torch")  # init mutants are invisible to torch's goldens


EXAMPLE = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"


def test_grade_the_example_passes_with_exit_0_and_writes_the_github_summary(tmp_path):
    summary = tmp_path / "summary.md"
    env_done = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(EXAMPLE), "--format", "junit", "--output", str(tmp_path / "r.xml")],
        capture_output=True, text=True, timeout=300, cwd=LAYOUT.root,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert env_done.returncode == 0, env_done.stderr
    import xml.etree.ElementTree as ET

    root = ET.parse(tmp_path / "r.xml").getroot()
    mutants = next(s for s in root.iter("testsuite") if s.get("name") == "mutagrade.mutants")
    assert int(mutants.get("tests")) == 12 and int(mutants.get("failures")) == 0
    assert "✅" in summary.read_text()


def test_grade_a_weak_suite_is_exit_1_and_json_names_the_survivors(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_weak.py").write_text(
        "from tinyllm.rnn.gru import GRU\n\ndef test_keys():\n    assert 'bias_hh_l0' in GRU(2, 3).state_dict()\n"
    )
    done = mutagrade("grade", str(tests), "--format", "json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["schema"] == "mutagrade.report/2" and report["passed"] is False
    assert report["score"]["killed"] == 0 and report["score"]["required_missing"] == ["s02"]
    assert all(m["killed"] is False for m in report["mutants"])


def test_grade_a_policy_violation_is_exit_2_with_file_and_line(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_sneaky.py").write_text("import numpy as np\n\n\ndef test_x():\n    np.load('/etc/passwd')\n")
    done = mutagrade("grade", str(tests))
    assert done.returncode == 2
    assert "test_sneaky.py:5:" in done.stdout and "load" in done.stdout


def test_grade_a_repository_folder_grades_its_tests_with_its_journal(tmp_path):
    """A folder is opened as an archive is (grader/flows/intake.py): a student repository's
    tests are python/tests/l3-3-gru/ and its journal is verified; the workers the command
    starts before anything else are started for those tests."""
    import shutil

    repository = tmp_path / "l3-3-gru-main" / "student"  # in one wrapping folder
    shutil.copytree(LAYOUT.examples / "student", repository, ignore=shutil.ignore_patterns("__pycache__"))
    done = mutagrade("grade", str(tmp_path / "l3-3-gru-main"), "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["score"]["killed"] == 12 and len(report["tests"]) == 10
    assert report["journal"]["checked"] and report["journal"]["ok"] and report["journal"]["entries"] == 20


def test_grade_a_missing_directory_is_exit_2(tmp_path):
    done = mutagrade("grade", str(tmp_path / "nope"))
    assert done.returncode == 2
    assert "no such directory of tests" in done.stderr


def test_grade_batch_writes_a_gradebook_and_survives_a_broken_submission(tmp_path):
    import csv
    import shutil

    subs = tmp_path / "subs"
    shutil.copytree(LAYOUT.examples / "student", subs / "alice")
    (subs / "bob").mkdir(parents=True)
    (subs / "bob" / "test_bob.py").write_text("import os\n\ndef test_x():\n    assert os\n")
    (subs / "carol").mkdir()  # nothing to grade
    done = mutagrade("grade-batch", str(subs), "--output", str(tmp_path / "grades.csv"), "--reports", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "grades.csv").open())}
    assert set(rows) == {"alice", "bob", "carol"}
    assert rows["alice"]["passed"] == "yes" and rows["alice"]["killed"] == "12"
    assert rows["bob"]["passed"] == "no" and "policy" in rows["bob"]["problems"]
    assert rows["carol"]["passed"] == "no" and "found no Python file" in rows["carol"]["problems"]
    assert json.loads((tmp_path / "r" / "alice.json").read_text())["passed"] is True
    assert "3 submissions graded, 1 passed" in done.stdout


def test_the_installed_command_delivers_its_whole_output_and_exit_code(tmp_path):
    """The console script ends its process without tearing the interpreter down: what it
    wrote must still arrive whole, through a pipe and into a file, and the exit code stand."""
    script = Path(sys.executable).with_name("mutagrade")
    example = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    piped = subprocess.run([str(script), "grade", str(example), "--format", "json"],
                           capture_output=True, text=True, timeout=300, env=env)
    assert piped.returncode == 0, piped.stderr
    report = json.loads(piped.stdout)
    assert report["passed"] is True and len(report["tests"]) == 10
    with open(tmp_path / "out.txt", "w") as out:
        into_file = subprocess.run([str(script), "variants", "list"], stdout=out, stderr=subprocess.PIPE,
                                   text=True, timeout=60, env=env)
    assert into_file.returncode == 0, into_file.stderr
    assert (tmp_path / "out.txt").read_text().count("\n") == 1 + len(build_variants(LAYOUT))  # header + variants
    refused = subprocess.run([str(script), "grade", str(tmp_path / "no-such-folder")],
                             capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 2 and "no-such-folder" in refused.stderr


def test_grade_starts_its_workers_before_reading_the_rest_of_the_command_line(monkeypatch, tmp_path):
    """The whole command line's parser (every command's options) is built only once the
    grading's workers are starting: their start-up overlaps it."""
    import grader.cli as cli
    import grader.run.launch as launch

    order: list[str] = []
    record_calls(monkeypatch, order, parser=(cli, "build_parser"), workers=(launch, "launch_grading"))
    out = tmp_path / "report.json"
    assert cli.main(["grade", str(EXAMPLE), "--format", "json", "--output", str(out)]) == 0
    assert order == ["workers", "parser"]
    assert json.loads(out.read_text())["passed"] is True


def test_grade_with_a_bad_option_starts_no_worker(capsys, monkeypatch):
    import grader.cli as cli
    import grader.sandbox.process as process

    claimed: list[str] = []
    record_calls(monkeypatch, claimed, user=(process, "claim_user"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["grade", str(EXAMPLE), "--format", "pdf"])
    assert exit_.value.code == 2
    assert "invalid choice: 'pdf'" in capsys.readouterr().err
    assert claimed == []  # the grade's own parser read the option too: nothing was started


def test_grade_collects_garbage_without_walking_what_its_imports_made():
    """The command imports with the collector off; it turns it on for the grading with the
    imported objects frozen, so no collection walks them (and it does collect)."""
    example = LAYOUT.examples / "student" / "python" / "tests" / "l3-3-gru"
    probe = (
        "import gc, sys\n"
        "from grader import cli\n"
        "cli.start_process()\n"
        "walked = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and walked.append(info['generation']))\n"
        f"code = cli.main(['grade', {str(example)!r}, '--format', 'json', '--output', '/dev/null'])\n"
        "print(code, gc.isenabled(), gc.get_freeze_count(), len(walked), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, cwd=LAYOUT.root)
    code, enabled, frozen, collections = done.stderr.split()[-4:]
    assert (code, enabled) == ("0", "True"), done.stderr
    assert int(frozen) > 20_000  # the grader, pydantic and the models, made while the collector was off
    assert int(collections) > 0  # and the grading's own garbage is collected as usual


def test_grade_an_archive_without_tests_names_the_archive_not_where_it_was_unpacked(tmp_path):
    import tarfile

    archive = tmp_path / "mine.tar.gz"
    notes = tmp_path / "notes.py"
    notes.write_text("x = 1\n")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(notes, arcname="notes.py")
    done = mutagrade("grade", str(archive))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "mine.tar.gz" in done.stderr and "mutagrade-intake-" not in done.stderr, done.stderr
