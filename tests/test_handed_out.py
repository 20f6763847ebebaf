"""Nothing handed to students holds the answer: every file a student receives (the student
package's wheel, the starter repository, the CI templates, and what the templates install: the
student package) is scanned for the code of the reference's ``gru.py`` and of every variant's.

The answer lines are the lines of every variant's source (the reference's among them), with
whitespace and trailing comments dropped, less what carries no answer: blank lines, comments,
imports, ``def``/``class`` lines, lines under 12 characters (``try:``, ``return (``), and every line
students are given anyway (the contract stub ``gru.pyi``, the framework, the course tests).

What reveals an answer: a whole ``gru.py`` shares about 150 such lines, one function of it
(``gru_cell``'s body, ``_init_layer``) 4 to 12, so a file leaks when it holds 3 of them; a single
shared line is what coincidence gives (the package's golden comparison has an
``if lengths is not None:`` of its own). A line of 40 characters or more is specific enough alone
(``w_hh = np.concatenate([orthogonal(...) ...])`` is mutant s06's whole answer), and is looked
for anywhere in a file's text, so code pasted into a string is found too. Hidden mutants' titles
and pitfalls are looked for as they are written."""

from __future__ import annotations

import re
import shutil
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.core.paths import default_layout, layout_for
from grader.core.variants import build_variants
from grader.flows.starter import CI_FILES, starter_files
from grader.flows.tdd import DEFAULT_IMPL
from tests.student_wheel import build_wheel, readable_folder

LAYOUT = default_layout()
LSTM = layout_for(LAYOUT.root, "l3-2-lstm")
GRU_FILE = LAYOUT.module_file  # tinyllm/rnn/gru.py: the file a student writes
STARTER = LAYOUT.examples / "starter"
CI = LAYOUT.examples / "ci"
MIN_CHARS = 12  # shorter lines (`try:`, `return (`, `h = h_new`) are any program's
LONG_CHARS = 40  # a line this long is specific enough on its own
LEAK_LINES = 3  # shorter answer lines a file may share by coincidence: fewer than this
_NOT_AN_ANSWER = ("#", "import ", "from ", "def ", "class ", "async def ", "@")


@dataclass(frozen=True)
class AnswerKey:
    lines: frozenset[str]  # every answer line, normalised
    long: frozenset[str]  # those of LONG_CHARS or more
    secrets: tuple[str, ...]  # hidden mutants' titles and pitfalls


def _normal(line: str) -> str | None:
    """A line as compared: no whitespace, no trailing comment; None for a line that carries no
    answer whatever file it is in."""
    text = line.strip()
    if not text or text.startswith(_NOT_AN_ANSWER):
        return None
    text = re.sub(r"\s+", "", re.sub(r"\s+#.*$", "", text))
    return text if len(text) >= MIN_CHARS else None


def _normal_lines(text: str) -> set[str]:
    return {n for n in map(_normal, text.splitlines()) if n}


def _given(layout) -> set[str]:
    """The lines students are given anyway: the contract stub, the framework, the course tests."""
    package = layout.reference / "tinyllm"
    answers = set(layout.answer_files)  # the reference module of every assignment: never given
    files = [p for p in package.rglob("*.py*") if p not in answers and "__pycache__" not in p.parts]
    files += list(layout.course_tests.glob("*.py"))
    assert layout.contract_stub in files and len(files) > 10, files
    return set().union(*(_normal_lines(p.read_text(encoding="utf-8")) for p in files))


def answer_key(layout) -> AnswerKey:
    """The answer lines of the reference and every variant, and the hidden mutants' words."""
    variants = build_variants(layout)
    given = _given(layout)
    per_variant = {v.id: _normal_lines(v.source) - given for v in variants}
    lines = frozenset(set().union(*per_variant.values()))
    assert "reference" in per_variant and len(per_variant) >= 16, sorted(per_variant)
    assert all(len(found) > 100 for found in per_variant.values()), {k: len(v) for k, v in per_variant.items()}
    manifest = tomllib.loads((layout.mutants / "manifest.toml").read_text(encoding="utf-8"))
    secrets = tuple(v[key] for v in manifest["variant"] if v.get("hidden") for key in ("title", "pitfall") if v.get(key))
    assert secrets, "no hidden mutant: the scan of their words would prove nothing"
    return AnswerKey(lines=lines, long=frozenset(n for n in lines if len(n) >= LONG_CHARS), secrets=secrets)


def leaks(files: dict[str, bytes], key: AnswerKey) -> list[str]:
    """What of the answer key each file holds, one line per file that leaks it."""
    found = []
    for name, data in sorted(files.items()):
        text = data.decode("utf-8", errors="replace")
        flat = re.sub(r"\s+", "", text)
        shared = key.lines & _normal_lines(text)
        long = sorted(n for n in key.long if n in flat)
        secrets = [s[:60] for s in key.secrets if s in text]
        if long or len(shared) >= LEAK_LINES or secrets:
            shown = long or sorted(shared)
            found.append(f"{name}: {len(shared)} answer line(s), {len(long)} long one(s), e.g. {shown[:3]}"
                         + (f"; hidden mutant text {secrets}" if secrets else ""))
    return found


def _wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {f"{wheel.name}!{n}": archive.read(n) for n in archive.namelist() if not n.endswith("/")}


def _folder_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root.parent).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def key() -> AnswerKey:
    return answer_key(LAYOUT)


@pytest.fixture(scope="module")
def wheel() -> Iterator[Path]:
    dist = readable_folder("mutagrade-handed-out-")
    try:
        yield build_wheel(dist)
    finally:
        shutil.rmtree(dist, ignore_errors=True)


def test_the_templates_install_the_student_package_and_nothing_else() -> None:
    """What the CI templates install is the student package: every pip install takes
    ``$MUTAGRADE_CLIENT``, which the step checks names ``mutagrade-student``, and every example
    value the comments give is one; nothing points at the full wheel."""
    for template in sorted(CI.glob("*.yml")):
        text = template.read_text(encoding="utf-8")
        installs = re.findall(r"pip install [^\n]*", text)
        assert installs and all(line.endswith('"$MUTAGRADE_CLIENT"') for line in installs), (template, installs)
        assert "mutagrade[-_]student*|*/mutagrade_student-*.whl) ;;" in text, template
        examples = re.findall(r'"([^"\n]* @ [^"\n]*)"', text)
        assert examples and all(e.startswith("mutagrade-student @ ") and "/mutagrade_student-" in e for e in examples)
        assert not re.search(r"mutagrade-\d|mutagrade\[\w|pip wheel", text), f"{template.name} names the full package"
    assert sorted(p.name for p in CI.glob("*.yml")) == sorted(CI_FILES)


def test_nothing_a_student_receives_holds_a_line_of_the_reference_or_a_variant(wheel, key) -> None:
    files = {**_wheel_files(wheel), **_folder_files(STARTER), **_folder_files(CI)}
    files.update({f"(mutagrade starter)/{p}": data for p, data in starter_files(LAYOUT).items()})
    assert sum(n.startswith(wheel.name) for n in files) > 30 and f"starter/{DEFAULT_IMPL}/{GRU_FILE}" in files
    assert not leaks(files, key), "\n".join(leaks(files, key))


def test_the_scan_finds_the_reference_added_to_the_wheel(wheel, key, tmp_path) -> None:
    """The negative case: the student wheel with ``reference/tinyllm/rnn/gru.py`` added, as a
    wrong line in packaging/student/pyproject.toml would add it."""
    leaky = tmp_path / wheel.name
    shutil.copyfile(wheel, leaky)
    with zipfile.ZipFile(leaky, "a") as archive:
        archive.write(LAYOUT.module_source, GRU_FILE)
    [found] = leaks(_wheel_files(leaky), key)
    assert found.startswith(f"{wheel.name}!{GRU_FILE}: ") and " answer line(s)" in found, found


def test_the_scan_finds_any_variant_in_place_of_the_stub(key) -> None:
    files = starter_files(LAYOUT)
    stub = f"{DEFAULT_IMPL}/{GRU_FILE}"
    for variant in build_variants(LAYOUT):
        found = leaks({**files, stub: variant.source.encode()}, key)
        assert [line.split(":")[0] for line in found] == [stub], (variant.id, found)


def test_the_scan_finds_the_gates_a_long_line_and_code_in_a_string_but_not_two_lines(key) -> None:
    source = LAYOUT.module_source.read_text(encoding="utf-8")
    lines = source.splitlines()
    gates = [line for line in lines if re.match(r"\s+(r|z|n) = |\s+return \(1 - z\)", line)]
    s06 = next(line.strip() for line in lines if "orthogonal((hidden, hidden), rng)" in line)
    assert len(gates) == 4 and all(len(_normal(line) or "") < LONG_CHARS for line in gates), gates
    texts = {
        "README.md": (STARTER / "README.md").read_text(encoding="utf-8") + "\n```python\n" + "\n".join(gates) + "\n```\n",
        "notes.md": "\n".join(gates[:2]) + "\n",  # two short lines: a coincidence, not an answer
        "hint.md": f"Try `{s06}`.\n",
        "python/sneaky.py": f"SOURCE = {source!r}\n",
        "python/tests/l3-3-gru/test_gru.py": (STARTER / "python/tests/l3-3-gru/test_gru.py").read_text(encoding="utf-8"),
    }
    found = leaks({name: text.encode() for name, text in texts.items()}, key)
    assert [line.split(":")[0] for line in found] == ["README.md", "hint.md", "python/sneaky.py"], found


def test_examples_student_is_marked_as_staff_only_and_the_docs_send_students_to_the_starter() -> None:
    """The bundled student is a complete solution: its README says it is never handed out, and
    the documents point students and GitHub Classroom at the starter instead."""
    readme = (LAYOUT.examples / "student" / "README.md").read_text(encoding="utf-8")
    assert "complete solution" in readme and "never" in readme and "examples/starter" in readme
    for document in ("students.md", "integrations.md"):
        text = (LAYOUT.root / "docs" / document).read_text(encoding="utf-8")
        assert "examples/starter" in text and "mutagrade starter" in text, document


@pytest.fixture(scope="module")
def lstm_key() -> AnswerKey:
    return answer_key(LSTM)


def test_nothing_a_student_receives_holds_a_line_of_the_lstms_reference_or_variants(wheel, lstm_key) -> None:
    """The second module's answer is as safe: the wheel (which carries the LSTM's tests, goldens
    and stub), both starters and the CI templates hold none of it."""
    files = {**_wheel_files(wheel), **_folder_files(STARTER), **_folder_files(CI)}
    files.update({f"(starter gru)/{p}": data for p, data in starter_files(LAYOUT).items()})
    files.update({f"(starter lstm)/{p}": data for p, data in starter_files(LSTM).items()})
    assert f"(starter lstm)/{DEFAULT_IMPL}/{LSTM.module_file}" in files
    assert any(name.endswith("assignments/l3-2-lstm/goldens/lstm_torch.npz") for name in files)
    assert not leaks(files, lstm_key), "\n".join(leaks(files, lstm_key))
    stub = f"(starter lstm)/{DEFAULT_IMPL}/{LSTM.module_file}"
    for variant in build_variants(LSTM):  # and the scan would see any of them in the stub's place
        found = leaks({**files, stub: variant.source.encode()}, lstm_key)
        assert [line.split(":")[0] for line in found] == [stub], (variant.id, found)


def test_the_lstm_example_is_marked_as_staff_only() -> None:
    readme = (LAYOUT.examples / "lstm-student" / "README.md").read_text(encoding="utf-8")
    assert "complete solution" in readme and "never" in readme and "mutagrade starter" in readme
