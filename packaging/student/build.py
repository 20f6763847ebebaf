"""Build the student package: ``python packaging/student/build.py [--dist DIR]`` (``make
student-package``) writes ``DIR/mutagrade_student-<version>-py3-none-any.whl``.

Exactly the files ``packaging/student/pyproject.toml`` lists are staged in a temporary folder
with that pyproject, and pip builds the wheel from there in an isolated build environment with
the pinned setuptools its ``[build-system]`` names (taken from the package index, or pip's cache):
whatever the Python (3.11's venvs come with an old setuptools, 3.12's with none) and whoever
runs it, the same build. The wheel is then read back: a file in it that was not listed
(or a listed one missing) stops the build, so nothing else of the checkout can slip in.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
COURSE = "grader/course"  # where the course material is installed, inside the grader package


class BuildError(Exception):
    """The wheel could not be built as listed; the message says what differs."""


def _listed() -> dict[str, Path]:
    """Every file to stage: its path in the wheel -> its path in the checkout."""
    project = tomllib.loads((HERE / "pyproject.toml").read_text(encoding="utf-8"))
    listing = project["tool"]["mutagrade-student"]
    files = {module: ROOT / module for module in listing["modules"]}
    files.update({f"{COURSE}/{path}": ROOT / path for path in listing["course"]})
    missing = [str(source.relative_to(ROOT)) for source in files.values() if not source.is_file()]
    if missing:
        raise BuildError(f"{HERE / 'pyproject.toml'}: listed, but not in the checkout: {', '.join(missing)}")
    return files


def build(dist: Path) -> Path:
    """Stage, build and check the wheel; returns its path.

    Raises:
        BuildError: a listed file is missing, pip failed, or the wheel holds other files.
    """
    files = _listed()
    dist.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mutagrade-student-build-") as tmp:
        stage = Path(tmp) / "stage"
        for inside, source in files.items():
            (stage / inside).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, stage / inside)
        shutil.copyfile(HERE / "pyproject.toml", stage / "pyproject.toml")
        out = Path(tmp) / "wheels"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--disable-pip-version-check",
             "--wheel-dir", str(out), str(stage)],
            capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise BuildError(f"pip wheel failed:\n{done.stdout}{done.stderr}")
        [wheel] = out.glob("*.whl")
        _check(wheel, set(files))
        target = dist / wheel.name
        shutil.copyfile(wheel, target)
    return target


def _check(wheel: Path, expected: set[str]) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = {n for n in archive.namelist() if ".dist-info/" not in n}
    if names != expected:
        extra, missing = sorted(names - expected), sorted(expected - names)
        raise BuildError(f"{wheel.name}: not the listed files: extra {extra}, missing {missing}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Build the student package (a wheel).")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the wheel goes (default: dist)")
    args = parser.parse_args()
    try:
        wheel = build(args.dist)
    except BuildError as exc:
        print(f"student-package: {exc}", file=sys.stderr)
        return 1
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
