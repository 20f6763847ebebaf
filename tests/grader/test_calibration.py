"""Calibration on the shipped variants, and variant exports under plain pytest."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grader.flows.calibration import calibrate, render_text
from grader.core.paths import default_layout
from grader.core.variants import VariantKind, build_variants, export_variant

LAYOUT = default_layout()


@pytest.fixture(scope="module")
def report():
    return calibrate(LAYOUT)


def test_calibration_holds(report):
    assert report.problems == []
    assert report.ok
    assert len(report.tests) == 10


def test_each_mutant_is_killed_by_at_least_its_caught_by_tests(report):
    for variant in report.variants:
        if variant.kind is VariantKind.MUTANT:
            assert set(variant.caught_by) <= set(variant.killed_by), variant.id
            assert variant.proof, f"{variant.id} has no proof of non-equivalence"
        else:
            assert variant.killed_by == []
            assert all(c.matches for c in variant.golden + variant.live)
            assert all(variant.properties.values())


def test_the_text_matrix_shows_every_variant_and_the_verdict(report):
    text = render_text(report)
    assert "Calibration OK" in text
    header = next(line for line in text.splitlines() if " ref " in line)
    assert header.split() == ["ref"] + [v.id for v in report.variants[1:]]
    assert "test_hand_example_gru_cell" in text


def test_exports_run_under_plain_pytest(tmp_path):
    """Reference and wheats green, every mutant red, with nothing but PYTHONPATH."""
    outcomes = {}
    for variant in build_variants(LAYOUT):
        dest = export_variant(LAYOUT, variant, tmp_path / variant.id)
        env = {**os.environ, "PYTHONPATH": str(dest), "OPENBLAS_NUM_THREADS": "1"}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(LAYOUT.course_tests)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )
        outcomes[variant.id] = (variant.kind, done.returncode, done.stdout[-400:])
    for vid, (kind, code, tail) in outcomes.items():
        if kind is VariantKind.MUTANT:
            assert code == 1, f"{vid} passed the course tests under plain pytest:\n{tail}"
        else:
            assert code == 0, f"{vid} failed the course tests under plain pytest:\n{tail}"


def test_calibration_runs_under_the_assignments_limits(tmp_path, monkeypatch):
    """The course tests are calibrated under the limits students' suites are graded under."""
    import grader.flows.calibration as calibration
    from grader.core.assignment import load_assignment
    from grader.core.paths import Layout

    folder = tmp_path / "assignments" / LAYOUT.assignment_name
    folder.mkdir(parents=True)
    (tmp_path / "assignments" / "course.toml").write_text(f'default = "{LAYOUT.assignment_name}"\n')
    text = LAYOUT.assignment.read_text()
    (folder / "assignment.toml").write_text(text.replace("test_timeout_s = 10.0", "test_timeout_s = 1.0"))
    layout = Layout(tmp_path)
    seen = []

    def run_matrix(*, limits, **_):
        seen.append(limits)
        raise RuntimeError("stopped here")

    monkeypatch.setattr(calibration, "build_variants", lambda _: [])
    monkeypatch.setattr(calibration, "run_matrix", run_matrix)
    with pytest.raises(RuntimeError, match="stopped here"):
        calibrate(layout)
    [limits] = seen
    assert limits.limits == load_assignment(layout.assignment).limits and limits.limits.test_timeout_s == 1.0
    assert limits.conftests  # the course's own tests


def test_a_budget_that_runs_out_is_named_not_taken_for_claims_that_fail(tmp_path):
    """Calibration runs under the grading budgets: where one runs out, the report says so first
    (with what to change), instead of only calling the cells not run failed claims."""
    from grader.core.paths import Layout

    (tmp_path / "reference").symlink_to(LAYOUT.reference)
    folder = tmp_path / "assignments" / LAYOUT.assignment_name
    folder.mkdir(parents=True)
    (tmp_path / "assignments" / "course.toml").symlink_to(LAYOUT.root / "assignments" / "course.toml")
    for item in LAYOUT.assignment_dir.iterdir():
        if item.name != "assignment.toml":
            (folder / item.name).symlink_to(item)
    text = LAYOUT.assignment.read_text()
    assert "budget_cpu_s = 300.0" in text
    (folder / "assignment.toml").write_text(text.replace("budget_cpu_s = 300.0", "budget_cpu_s = 0.2"))
    layout = Layout(tmp_path)
    report = calibrate(layout, sandbox="none", live=False)
    assert not report.ok
    assert "cpu budget (0.2 s) ran out" in report.problems[0], report.problems[:3]
    assert "budget_cpu_s" in report.problems[0] and str(layout.assignment) in report.problems[0]
