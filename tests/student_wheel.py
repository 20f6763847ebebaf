"""The student package for the tests: built by ``make student-package``, installed in a fresh venv
as a student (or a CI runner) installs it, offline.

A fresh venv gets its runtime dependencies as copies of the distributions this environment has
installed (every file its RECORD lists); the student wheel itself is installed by pip from the
file, with no index. Each venv lives in a folder the sandbox users may read, like a student's own
installation. Used by tests/test_student_package.py, tests/api/test_ci_examples.py and
tests/test_handed_out.py.
"""

from __future__ import annotations

import email
import importlib.metadata as metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from grader import __version__
from grader.core.paths import default_layout

__all__ = ["WHEEL", "Installed", "build_wheel", "readable_folder", "student_venv"]

LAYOUT = default_layout()
WHEEL = f"mutagrade_student-{__version__}-py3-none-any.whl"


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    site: Path
    home: Path  # a folder for the student's repositories, readable by the sandbox users

    @property
    def env(self) -> dict[str, str]:
        """A student's shell: the venv's bin first, nothing of this run's own environment."""
        return {
            "PATH": f"{self.venv / 'bin'}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",
        }

    def run(self, *argv: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.venv / "bin" / argv[0]), *argv[1:]], cwd=cwd or self.home, env=env or self.env,
            capture_output=True, text=True, timeout=timeout,
        )

    def student_repo(self, name: str) -> Path:
        dest = self.home / name
        shutil.copytree(LAYOUT.examples / "student", dest, ignore=shutil.ignore_patterns("__pycache__"))
        return dest


def readable_folder(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)  # the sandbox users read the venv and the repositories in it
    return path


def build_wheel(dist: Path) -> Path:
    """``make student-package`` into ``dist``; returns the wheel."""
    built = subprocess.run(
        ["make", "-s", "-C", str(LAYOUT.root), "student-package", f"STUDENT_DIST={dist}"],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert (dist / WHEEL).is_file(), f"expected {WHEEL}; the build wrote {sorted(p.name for p in dist.iterdir())}"
    return dist / WHEEL


def _requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(archive.read(name))
    return [Requirement(line) for line in meta.get_all("Requires-Dist") or []]


def _closure(requirements: list[Requirement]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` need, transitively (no extras, markers
    evaluated here)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]
    while todo:
        requirement = todo.pop()
        key = re.sub(r"[-_.]+", "-", requirement.name).lower()
        if key in found:
            continue
        found[key] = dist = metadata.distribution(requirement.name)
        for line in dist.requires or []:
            nested = Requirement(line)
            if nested.marker is None or nested.marker.evaluate({"extra": ""}):
                todo.append(nested)
    return list(found.values())


def _seed(dist: metadata.Distribution, site: Path) -> None:
    """Copy an installed distribution's files (those inside site-packages) into ``site``."""
    for file in dist.files or []:
        if file.parts[0] == "..":  # console scripts: they name this environment's interpreter
            continue
        source = Path(dist.locate_file(file))
        if not source.is_file() or "__pycache__" in file.parts:
            continue
        target = site / file
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


def student_venv(root: Path, wheel: Path, extra: list[Requirement], *, install: bool = True) -> Installed:
    """A fresh venv under ``root`` with, copied, the distributions the wheel and ``extra`` need,
    and the wheel installed by pip (no index) unless ``install`` is false (a CI step installs it:
    list pip in ``extra`` then)."""
    venv = root / "venv"
    # No pip of its own (ensurepip costs seconds): this environment's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True,
                   timeout=300)
    [site] = (venv / "lib").glob("python3*/site-packages")
    for needed in _closure(_requirements(wheel) + extra):
        _seed(needed, site)
    home = root / "home"
    home.mkdir(mode=0o755)
    installed = Installed(wheel=wheel, venv=venv, site=site, home=home)
    if not install:
        return installed
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check",
           "--no-input"]
    done = subprocess.run([*pip, "install", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, f"the wheel's requirements are not met:\n{check.stdout}{check.stderr}"
    return installed
