"""The class statistics' plots: SVG documents that parse, say what they show in a ``<title>``,
render offline (no script, nothing linked from elsewhere), draw one bar per mutant, and keep
whatever a title holds as text, never as markup."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from grader.core.classstats import ClassStats, class_stats
from grader.flows.stats import load_reports
from grader.report.plots import kill_rate_plot, score_histogram, validity_plot
from tests.grader.test_classstats import grade_class

SVG = "{http://www.w3.org/2000/svg}"
XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
PLOTS = {"kill_rate_plot": kill_rate_plot, "score_histogram": score_histogram, "validity_plot": validity_plot}
NASTY_TITLE = '\x1b[31mGates <script>alert("x")</script> & $\\sigma_{$ -- swapped'


@pytest.fixture(scope="module")
def stats(tmp_path_factory) -> ClassStats:
    reports, errors, problems = load_reports(grade_class(tmp_path_factory.mktemp("class")))
    assert problems == []
    return class_stats(reports, errors=errors)


@pytest.fixture(scope="module")
def nasty(stats) -> ClassStats:
    """The same class, its first mutant titled with markup, mathtext and a control character."""
    first = stats.mutants[0].model_copy(update={"title": NASTY_TITLE})
    return stats.model_copy(update={"mutants": [first, *stats.mutants[1:]]})


def bars(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if re.fullmatch(r"kill-rate-bar-\d+", g.get("id", ""))]


@pytest.mark.parametrize("name", PLOTS)
def test_each_plot_is_an_svg_with_a_title_that_renders_offline(stats, name):
    text = PLOTS[name](stats)
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == f"{SVG}svg"
    title = root.find(f"{SVG}title")
    assert title is not None and len(title.text or "") > 10, "the first child names what the plot shows"
    assert not list(root.iter(f"{SVG}script"))
    for element in root.iter():
        for attribute, value in element.attrib.items():
            if attribute in ("href", XLINK_HREF):
                assert value.startswith("#"), f"{name}: {element.tag} links to {value!r}"
    assert "url(http" not in text and "@import" not in text


def test_the_kill_rate_plot_has_one_bar_per_mutant_as_long_as_its_rate(stats):
    root = ET.fromstring(kill_rate_plot(stats).encode("utf-8"))
    found = bars(root)
    assert len(found) == len(stats.mutants) >= 10
    widths = []
    for group in found:
        [path] = group.iter(f"{SVG}path")
        xs = [float(x) for x in re.findall(r"[ML] ?(-?[\d.]+) ", path.get("d", ""))]
        widths.append(max(xs) - min(xs))
    longest = max(widths)
    for mutant, width in zip(stats.mutants, widths):
        assert width / longest == pytest.approx(mutant.kill_rate / max(m.kill_rate for m in stats.mutants), abs=0.01)


def test_the_title_and_description_name_the_class(stats):
    root = ET.fromstring(kill_rate_plot(stats).encode("utf-8"))
    title = root.find(f"{SVG}title").text
    assert f"{stats.graded}" in title and "mutant" in title
    desc = root.find(f"{SVG}desc").text
    for mutant in stats.mutants:
        assert mutant.id in desc


@pytest.mark.parametrize("name", PLOTS)
def test_a_title_is_text_never_markup(nasty, name):
    text = PLOTS[name](nasty)
    root = ET.fromstring(text.encode("utf-8"))  # a control character would make it unparseable
    assert not list(root.iter(f"{SVG}script"))
    assert "<script" not in text


def test_a_nasty_title_still_gets_its_bar_and_its_words(nasty):
    root = ET.fromstring(kill_rate_plot(nasty).encode("utf-8"))
    assert len(bars(root)) == len(nasty.mutants)
    assert 'Gates <script>alert("x")</script>' in root.find(f"{SVG}desc").text


def test_the_plots_do_not_depend_on_the_clock(stats):
    assert kill_rate_plot(stats) == kill_rate_plot(stats)


def test_the_other_commands_do_not_import_matplotlib():
    code = ("import sys, grader.cli, grader.flows.stats, grader.report.plots, grader.report.classstats; "
            "print('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
