"""The HTML pages, as people see them: the submission page rendered by headless Chromium (and
its kill matrix found in the screenshot's pixels), the matrix scrolling in its own box at any
width, its symbols and their legend, times written as times with their zone, hidden mutants
named once, the same page read without JavaScript, the gradebook page for staff only (a student
is told so), and signing in with the form.

``scripts/setup-services.sh`` (run by ``make test``) installs Chromium and a font.
"""

from __future__ import annotations

import ast
import json
import re
import struct
import zlib
from dataclasses import dataclass
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import pytest

from tests.api.chromium import Chromium
from tests.api.conftest import STUDENT, Server, example_archive, make_server, tar_gz, wait_done

WIDTH, HEIGHT = 1400, 1600
KILL = (0x2E, 0x7D, 0x32)  # td.kill: a test that catches a mutant
PASS = (0xD7, 0xF5, 0xDD)  # td.ok (a test passing a correct implementation) and the PASSED verdict
MIN_CELL_PIXELS = 30 * 20  # a matrix cell is about 50 x 38 px at this size; text covers some of it
DROPPED_TEST = "test_each_recurrent_block_is_orthogonal_and_biases_are_zero"  # the only test killing s06
# One test that passes everywhere and one that fails on the reference: it kills nothing, so every
# mutant survives, hidden ones too, and one test is not valid.
MIXED = tar_gz({"test_mixed.py": "def test_ok():\n    assert True\n\n\ndef test_bad():\n    assert False\n"})


@dataclass
class Graded:
    server: Server
    student: str
    full: dict  # the bundled example, graded: every mutant killed
    weak: dict  # the example without DROPPED_TEST: s06 survives, so the page shows its hint
    mixed: dict  # MIXED: no mutant killed, one test not valid


def _without_test(source: str, name: str) -> str:
    """``source`` with the test function ``name`` cut out."""
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = source.splitlines(keepends=True)
    return "".join(lines[: node.lineno - 1] + lines[node.end_lineno:])


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Graded]:
    srv = make_server(tmp_path_factory.mktemp("pages"))
    srv.start()
    try:
        with srv.client("pat") as pat:
            bodies = []
            source = (STUDENT / "python/tests/l3-3-gru/test_gru.py").read_text()
            for archive in (example_archive(), tar_gz({"test_gru.py": _without_test(source, DROPPED_TEST)}), MIXED):
                answer = pat.post("/v1/submissions", files={"archive": ("pat.tar.gz", archive, "application/gzip")})
                assert answer.status_code == 202, answer.text
                bodies.append(wait_done(pat, answer.json()["id"]))
        assert [b["status"] for b in bodies] == ["done"] * 3, [b["error"] for b in bodies]
        yield Graded(server=srv, student="pat", full=bodies[0], weak=bodies[1], mixed=bodies[2])
    finally:
        srv.stop()


# -- a small PNG reader (8-bit RGB or RGBA, not interlaced: what Chromium writes) ---------------

def read_png(path: Path) -> np.ndarray:
    """The image as an array [height, width, 3] of uint8."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    position, chunks = 8, []
    while position < len(data):
        (length,) = struct.unpack(">I", data[position:position + 4])
        kind, body = data[position + 4:position + 8], data[position + 8:position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    bpp = 3 if colour == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(b"".join(chunks))
    rows, previous = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:  # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:  # Up
            line = bytearray((a + b) & 255 for a, b in zip(line, previous))
        elif kind == 3:  # Average
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + previous[i]) // 2) & 255
        elif kind == 4:  # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = previous[i], (previous[i - bpp] if i >= bpp else 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    return np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(height, width, bpp)[:, :, :3]


def runs(flags: np.ndarray) -> int:
    """How many separate runs of True a 1-d array holds (cells are split by their 1 px borders)."""
    padded = np.concatenate(([False], flags, [False])).astype(np.int8)
    return int((np.diff(padded) == 1).sum())


def _expected(report: dict) -> tuple[int, int, int]:
    """From the report: killing cells, mutant columns with a kill, test rows with a kill."""
    mutants = {m["id"] for m in report["mutants"]}
    kills = {
        (t["id"], v)
        for t in report["tests"]
        for v, outcome in t["outcomes"].items()
        if v in mutants and outcome not in ("passed", "skipped", "not_run")  # as the template colours them
    }
    return len(kills), len({v for _, v in kills}), len({t for t, _ in kills})


# -- the tests ------------------------------------------------------------------------------------

GRID_BOX = """JSON.stringify((() => {
  const r = document.querySelector('.matrix').getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom].map(Math.round);
})())"""


def test_submission_page_in_headless_chromium_shows_the_whole_kill_matrix(graded: Graded, tmp_path: Path) -> None:
    shot = tmp_path / "submission.png"
    (tmp_path / "profile").mkdir()
    with Chromium(tmp_path / "profile") as browser:
        landed = browser.sign_in(graded.server.url, graded.server.token(graded.student))
        assert landed == f"{graded.server.url}/submissions"
        url = f"{graded.server.url}/submissions/{graded.full['id']}"
        box = json.loads(browser.screenshot(url, shot, width=WIDTH, height=HEIGHT, expression=GRID_BOX).found)
    assert shot.is_file() and shot.stat().st_size > 10_000

    image = read_png(shot)
    assert image.shape == (HEIGHT, WIDTH, 3)
    left, top, right, bottom = box
    assert 0 <= left < right <= WIDTH and 0 <= top < bottom <= HEIGHT, box
    grid = image[top:bottom, left:right]  # the legend above shows the same colours
    kill = (grid == KILL).all(axis=2)
    passing = (grid == PASS).all(axis=2)
    report = graded.full["report"]
    cells, columns, rows = _expected(report)
    # The example kills every one of the 12 mutants, so no column of the grid may be missing.
    assert columns == len(report["mutants"]) == 12 and cells >= columns

    # Every killing cell is painted, and at a readable size.
    assert kill.sum() >= cells * MIN_CELL_PIXELS, (kill.sum(), cells)
    # Every mutant column with a kill is on screen, none cut off at the right edge ...
    assert runs(kill.any(axis=0)) == columns
    # ... and every test row with a kill.
    assert runs(kill.any(axis=1)) == rows

    # Correct implementations (reference and 4 wheats) pass every test: 5 columns of pass cells
    # in the matrix's rows, and one pass-coloured band per test.
    correct = len(report["variants"]) - len(report["mutants"])
    assert correct == 5
    assert passing.sum() >= correct * len(report["tests"]) * MIN_CELL_PIXELS
    assert runs(passing[kill.any(axis=1)].any(axis=0)) == correct
    assert runs(passing.any(axis=1)) == len(report["tests"])


class _Outline(HTMLParser):
    """What a screen reader or a text browser gets from a page: scripts, headings, the text of
    each class, the kill matrix's column headers and body rows."""

    VOID = {"meta", "br", "input", "link", "img", "hr", "wbr"}  # no end tag to wait for

    def __init__(self) -> None:
        super().__init__()
        self.scripts = 0
        self.headings: list[str] = []
        self.classes: dict[str, list[str]] = {}
        self.grid_headers: list[str] = []
        self.grid_rows = 0
        self._open: list[tuple[str, dict[str, str | None], list[str]]] = []

    def _inside(self, tag: str, css_class: str) -> bool:
        return any(t == tag and css_class in (a.get("class") or "").split() for t, a, _ in self._open)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.scripts += tag == "script"
        if tag == "tr" and self._inside("table", "grid") and any(t == "tbody" for t, _, _ in self._open):
            self.grid_rows += 1
        if tag not in self.VOID:
            self._open.append((tag, dict(attrs), []))

    def handle_data(self, data: str) -> None:
        for _, _, parts in self._open:  # text belongs to every element it is inside
            parts.append(data)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            name, attributes, parts = self._open.pop()
            text = " ".join("".join(parts).split())
            for css_class in (attributes.get("class") or "").split():
                self.classes.setdefault(css_class, []).append(text)
            if name in ("h1", "h2", "h3"):
                self.headings.append(text)
            if name == "th" and attributes.get("scope") == "col" and self._inside("table", "grid"):
                self.grid_headers.append(text)
            if name == tag:
                break


def _outline(html: str) -> _Outline:
    outline = _Outline()
    outline.feed(html)
    return outline


def test_submission_page_reads_without_javascript(graded: Graded) -> None:
    with graded.server.signed_in(graded.student) as http:
        page = http.get(f"/submissions/{graded.weak['id']}")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    outline = _outline(page.text)
    report = graded.weak["report"]

    assert outline.scripts == 0
    assert "PASSED" in outline.classes["verdict"]
    assert outline.grid_rows == len(report["tests"]) == 9  # one row per test
    assert page.text.count('<th scope="col"') >= 2 + len(report["variants"])
    assert outline.grid_headers == ["test", "status", *report["variants"]]
    assert DROPPED_TEST not in page.text

    # The hints: the surviving mutant is named, with what to test to catch it.
    survivors = [m for m in report["mutants"] if not m["killed"]]
    assert [m["id"] for m in survivors] == ["s06"]
    assert "Surviving mutants" in outline.headings
    assert any(h.startswith("s06") for h in outline.headings)
    assert survivors[0]["hint"] and survivors[0]["hint"] in outline.classes["hint"]


def test_gradebook_page_is_for_staff_only(graded: Graded) -> None:
    with graded.server.signed_in("pages-staff", "staff") as staff:
        page = staff.get("/gradebook")
    assert page.status_code == 200
    assert "<td>pat</td>" in page.text
    assert f'href="/submissions/{graded.mixed["id"]}"' in page.text  # latest
    assert f'href="/submissions/{graded.full["id"]}"' in page.text  # best

    with graded.server.signed_in(graded.student) as student:
        refused = student.get("/gradebook")
        assert student.get("/submissions").status_code == 200  # still signed in
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("text/html")
    outline = _outline(refused.text)
    assert "Staff only" in outline.headings
    assert "the gradebook is for course staff only" in refused.text
    assert "signed in as pat (student)" in refused.text
    # Told so, not sent to sign in again: no sign-in form on the page.
    assert 'action="/login"' not in refused.text and 'id="token"' not in refused.text
    assert "<td>pat</td>" not in refused.text


def test_login_form_sets_a_cookie_that_opens_the_submissions(graded: Graded) -> None:
    token = graded.server.token(graded.student)
    with httpx.Client(base_url=graded.server.url, timeout=30) as browser:
        assert browser.get("/submissions").status_code == 303  # not signed in: to the form
        assert browser.get("/login").status_code == 200

        wrong = browser.post("/login", data={"token": "mg_not-a-token"})
        assert wrong.status_code == 401
        assert "mutagrade_token" not in browser.cookies

        signed_in = browser.post("/login", data={"token": token})
        assert signed_in.status_code == 303
        assert signed_in.headers["location"] == "/submissions"
        cookie = signed_in.headers["set-cookie"]
        assert "mutagrade_token=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert browser.cookies["mutagrade_token"] == token

        page = browser.get("/submissions")  # the cookie alone, no header, no ?token=
    assert page.status_code == 200
    assert "signed in as pat (student)" in page.text
    for submission in (graded.full, graded.weak):
        assert f'<a href="/submissions/{submission["id"]}">' in page.text


# -- times, the matrix's box, its symbols, hidden mutants ----------------------------------------

ISO_MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")  # 2026-12-03T21:43:57.650180+00:00


def _text(html: str) -> str:
    """What a page shows: its text without tags (attributes, such as <time datetime>, are not shown)."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _shown(moment: str) -> str:
    """An ISO 8601 moment from the API as the pages write it."""
    return datetime.fromisoformat(moment).strftime("%Y-%m-%d %H:%M:%S UTC")


def test_times_read_as_times_with_their_zone_on_every_page(graded: Graded) -> None:
    full = graded.full
    assert ISO_MOMENT.match(full["created_at"]) and ISO_MOMENT.match(full["finished_at"])  # as the API has them
    with graded.server.signed_in(graded.student) as student:
        pages = {path: student.get(path) for path in ("/submissions", f"/submissions/{full['id']}")}
    with graded.server.signed_in("pages-staff", "staff") as staff:
        pages["/gradebook"] = staff.get("/gradebook")
    expected = {
        "/submissions": [full["created_at"]],
        f"/submissions/{full['id']}": [full["created_at"], full["finished_at"]],
        "/gradebook": [graded.mixed["finished_at"]],  # pat's latest graded submission
    }
    for path, page in pages.items():
        assert page.status_code == 200, path
        text = _text(page.text)
        assert not ISO_MOMENT.search(text), f"{path}: a raw timestamp is shown: {ISO_MOMENT.search(text)}"
        for moment in expected[path]:
            assert _shown(moment) in text, f"{path}: {_shown(moment)} not shown"
            # ... and the exact moment is still there for machines, in <time datetime>.
            assert f'<time datetime="{moment}">' in page.text, path


MEASURE = """JSON.stringify((() => {
  const box = document.querySelector('.matrix');
  const page = { scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth };
  if (!box) return { page };
  const grid = box.querySelector('table.grid');
  const last = grid.querySelector('thead th:last-child');
  const result = { page, overflowX: getComputedStyle(box).overflowX, boxWidth: box.clientWidth,
                   boxRight: Math.round(box.getBoundingClientRect().right), gridWidth: grid.offsetWidth,
                   lastBefore: Math.round(last.getBoundingClientRect().right) };
  box.scrollLeft = box.scrollWidth;
  result.scrolled = box.scrollLeft;
  result.lastAfter = Math.round(last.getBoundingClientRect().right);
  return result;
})())"""


@pytest.mark.parametrize("width", [1280, 800])
def test_the_matrix_scrolls_in_its_box_and_the_page_stays_in_the_window(
    graded: Graded, tmp_path: Path, width: int
) -> None:
    srv = graded.server
    with Chromium(tmp_path) as browser:
        browser.sign_in(srv.url, srv.token(graded.student))
        browser.resize(width, 900)
        measured = {}
        for submission in (graded.full, graded.mixed):
            measured[submission["id"]] = json.loads(browser.visit(f"{srv.url}/submissions/{submission['id']}", MEASURE).found)
        measured["list"] = json.loads(browser.visit(f"{srv.url}/submissions", MEASURE).found)
        browser.sign_in(srv.url, srv.token("pages-staff", "staff"))
        measured["gradebook"] = json.loads(browser.visit(f"{srv.url}/gradebook", MEASURE).found)
    # No page is wider than the window: nothing is cut off, no page scrolls sideways.
    for where, found in measured.items():
        page = found["page"]
        assert page["scrollWidth"] <= page["clientWidth"] <= width, (where, width, page)
    # The full matrix (17 columns) is wider than the window: its own box scrolls, to its last column.
    full = measured[graded.full["id"]]
    assert full["overflowX"] == "auto"
    assert full["gridWidth"] > full["boxWidth"], full
    assert full["lastBefore"] > full["boxRight"] and full["scrolled"] > 0, full
    assert full["lastAfter"] <= full["boxRight"], full  # scrolled to the end, the last column is in the box


def _cells(html: str) -> dict[str, set[str]]:
    """The symbols of the matrix's cells, by the cell's class (td.ok, td.bad, td.kill, td.miss)."""
    found: dict[str, set[str]] = {}
    for css_class, text in re.findall(r'<td class="cell (\w+)"[^>]*>([^<]*)</td>', html):
        found.setdefault(css_class, set()).add(text.strip())
    return found


def test_killed_and_not_valid_have_distinct_symbols_explained_in_a_legend(graded: Graded) -> None:
    with graded.server.signed_in(graded.student) as student:
        full, mixed = (student.get(f"/submissions/{s['id']}").text for s in (graded.full, graded.mixed))
    cells = _cells(full)
    for css_class, symbols in _cells(mixed).items():
        cells.setdefault(css_class, set()).update(symbols)
    # Both pages together show every kind of cell: passes, not valid, killed, survived, not run.
    assert set(cells) == {"ok", "bad", "kill", "miss", "skip"}, cells
    assert all(len(symbols) == 1 for symbols in cells.values()), cells
    symbol = {css_class: next(iter(symbols)) for css_class, symbols in cells.items()}
    assert len(set(symbol.values())) == len(symbol), f"one symbol has two meanings: {symbol}"

    # The legend shows each symbol once, in the colour of its cells, with what it means.
    legend = re.search(r'<p class="legend">(.*?)</p>', full, re.S)
    assert legend, "no legend on the page"
    entries = re.findall(r'<span class="(\w+)"[^>]*>([^<]*)</span>\s*([^<]+)', legend.group(1))
    explained = {css_class: (text.strip(), meaning.strip()) for css_class, text, meaning in entries}
    for css_class, meaning in (("ok", "passes on a correct implementation"), ("bad", "not valid"),
                               ("kill", "catches the mutant"), ("miss", "the mutant passes"),
                               ("skip", "not run")):
        assert explained[css_class][0] == symbol[css_class], (css_class, explained)
        assert meaning in explained[css_class][1], (css_class, explained)
    assert len({text for text, _ in explained.values()}) == len(explained), explained


def test_a_hidden_mutant_is_named_once(graded: Graded) -> None:
    hidden = [m for m in graded.mixed["report"]["mutants"] if m["id"].startswith("hidden mutant")]
    assert len(hidden) == 2 and not any(m["killed"] for m in hidden)
    with graded.server.signed_in(graded.student) as student:
        page = student.get(f"/submissions/{graded.mixed['id']}")
    outline = _outline(page.text)
    for mutant in hidden:
        assert mutant["title"] == mutant["id"]  # the student's report withholds the title
        assert mutant["id"] in outline.headings, outline.headings
        assert f"{mutant['id']}: {mutant['id']}" not in page.text
    # A mutant with a title of its own still has it, after its name.
    assert "s01: Gate blocks read in the order z, r" in outline.headings
    assert any(h.startswith("s02: ") and h.endswith("(required)") for h in outline.headings), outline.headings
    # Staff see every mutant's real name and title.
    with graded.server.signed_in("pages-staff", "staff") as staff:
        staff_outline = _outline(staff.get(f"/submissions/{graded.mixed['id']}").text)
    assert not any(h.startswith("hidden mutant") for h in staff_outline.headings)
