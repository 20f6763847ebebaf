"""The documents for newcomers match the code: a short README, every command in README.md and
ARCHITECTURE.md, and every module the documents name by its path."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
MODULE_PATH = re.compile(r"(?<![\w./-])((?:grader|api)/[\w./]*?\.py)\b")


def _entry_point() -> tuple[str, str]:
    """The module and function of the ``mutagrade`` script, as pyproject.toml declares them."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["mutagrade"].partition(":")
    return module, function


def _subcommands() -> list[str]:
    """The subcommands the entry point's parser lists in ``mutagrade --help``."""
    module, function = _entry_point()
    code = f"import sys; sys.argv = ['mutagrade', '--help']; from {module} import {function}; {function}()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    braces = re.search(r"\{([a-z][a-z,-]*)\}", done.stdout.split("\n\n", 1)[0])
    if braces:  # a parser without a metavar lists them in its usage line
        return braces.group(1).split(",")
    commands = re.findall(r"^    ([a-z][a-z-]*)(?:\s|$)", done.stdout, flags=re.MULTILINE)
    assert commands, done.stdout
    return commands


def test_the_readme_is_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move the long material under docs/"


def test_the_readme_opens_with_the_two_set_up_commands() -> None:
    opening = README.read_text(encoding="utf-8").split("\n## ", 1)[0]
    assert "make demo" in opening and "make test" in opening


@pytest.mark.parametrize("document", [README, ARCHITECTURE], ids=lambda path: path.name)
def test_every_command_is_in_the_document(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    commands = _subcommands()
    assert len(commands) >= 10, commands
    missing = [name for name in commands if not re.search(rf"`(?:mutagrade )?{re.escape(name)}[`\s\\|]", text)]
    assert not missing, f"{document.name} does not list: {missing}"


def test_every_module_the_documents_name_exists() -> None:
    documents = [README, ARCHITECTURE, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {
        (document.relative_to(ROOT).as_posix(), path)
        for document in documents
        for path in MODULE_PATH.findall(document.read_text(encoding="utf-8"))
    }
    assert any(document == "ARCHITECTURE.md" for document, _ in named)
    missing = sorted(f"{document}: {path}" for document, path in named if not (ROOT / path).is_file())
    assert not missing, missing
