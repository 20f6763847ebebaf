"""``mutagrade bundle gradescope``: a Gradescope autograder, as the one zip Gradescope takes.

The zip holds, at its root, ``setup.sh`` and ``run_autograder`` (``scripts/gradescope/``), and
what ``setup.sh`` installs mutagrade from: either this checkout (``mutagrade/``: the grader, the
reference, the mutants, the assignment; installed editable, as the grader finds its material
beside its code), or the file ``repository`` (the course's repository URL, then a branch or tag
on a second line), which ``setup.sh`` clones. The file ``assignment`` names the assignment
graded (its folder under ``assignments/``): ``run_autograder`` grades by it. An assignment file
given replaces that assignment's ``assignment.toml`` (``assignment.toml`` beside the scripts when
the checkout is cloned).

The zip is the same byte for byte for the same checkout: its entries are sorted and dated
1980-01-01, with their modes (the scripts 0755). The command also says the points to set the
assignment to on Gradescope: the ``max_score`` its ``results.json`` scores out of, one per
mutant of the manifest (:func:`grader.report.gradescope.gradescope_points`).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from grader.core.paths import Layout, rules_file
from grader.report.gradescope import gradescope_points

__all__ = ["BundleError", "BundleSummary", "build_gradescope_bundle", "run_bundle_command"]

# What an installable checkout is made of (pyproject.toml names README.md as its readme).
CHECKOUT_PARTS = ("pyproject.toml", "README.md", "grader", "api", "reference", "assignments", "scripts")
_SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
SCRIPTS = ("setup.sh", "run_autograder")
_DATE = (1980, 1, 1, 0, 0, 0)
# A git URL: scheme://host/path, or scp-like user@host:path; no blanks or control characters.
_URL = re.compile(r"(?:(?:https?|ssh|git|file)://[^\s]+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+)")
_REF = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._/-]*")


class BundleError(ValueError):
    """The bundle cannot be built as asked; the message names the option or the file."""


@dataclass(frozen=True)
class BundleSummary:
    path: Path
    files: int
    size: int
    source: str  # where setup.sh installs mutagrade from, in words
    points: float  # what results.json scores out of: the assignment's points on Gradescope


def build_gradescope_bundle(
    layout: Layout,
    output: Path,
    *,
    repository: str | None = None,
    ref: str | None = None,
    assignment: Path | None = None,
) -> BundleSummary:
    """Write the Gradescope autograder zip to ``output``.

    Args:
        layout: the checkout to bundle (its scripts, and its material unless ``repository``).
        output: the zip to write; its folder must exist. Written whole or not at all.
        repository: the course's git repository for ``setup.sh`` to clone instead of the copy.
        ref: the branch or tag of ``repository`` to clone (default: its default branch).
        assignment: an assignment file to grade with instead of the checkout's.

    Raises:
        BundleError: a bad option, a checkout that is not whole, or an output that cannot be
            written.
        AssignmentError, ManifestError: the assignment or the manifest does not load.
    """
    from grader.core.assignment import load_assignment
    from grader.core.variants import VariantKind, build_variants

    if ref is not None and repository is None:
        raise BundleError("--ref needs --repository: a branch or tag of which repository?")
    if repository is not None and (not _URL.fullmatch(repository) or repository.startswith("-")):
        raise BundleError(
            "--repository: expected a git URL (https://host/path, ssh://host/path or user@host:path, "
            f"no blanks), found {repository!r}"
        )
    if ref is not None and (not _REF.fullmatch(ref) or ".." in ref):
        raise BundleError(f"--ref: expected a branch or tag name (letters, digits, '.', '_', '-', '/'), found {ref!r}")
    if not output.parent.is_dir():
        raise BundleError(f"{output.parent}: no such folder to write the bundle into")
    if not layout.assignment_dir.resolve().is_relative_to((layout.root / "assignments").resolve()):
        raise BundleError(f"{layout.assignment_dir}: a bundled assignment is a folder of {layout.root / 'assignments'}")
    manifest = (layout.mutants / "manifest.toml").relative_to(layout.root).as_posix()
    for part in ("grader", "reference", manifest, "scripts/setup-sandbox.sh"):
        if not (layout.root / part).exists():
            raise BundleError(f"{layout.root}: not a whole mutagrade checkout: {part} is missing")
    scripts = layout.root / "scripts" / "gradescope"
    for name in SCRIPTS:
        if not (scripts / name).is_file():
            raise BundleError(f"{scripts / name}: missing: the checkout's autograder scripts are needed")
    assignment_text = None
    if assignment is not None:
        load_assignment(assignment)  # checked here, not when Gradescope builds the image
        assignment_text = assignment.read_bytes()
    else:
        load_assignment(layout.assignment)
    variants = build_variants(layout)  # the manifest and every patch apply
    # Counted as the scoring counts the mutants it grades (score.total, results.json's max_score).
    points = gradescope_points(sum(v.kind is VariantKind.MUTANT for v in variants))

    entries: list[tuple[str, bytes, int]] = [(name, (scripts / name).read_bytes(), 0o755) for name in SCRIPTS]
    entries.append(("assignment", f"{layout.assignment_name}\n".encode(), 0o644))
    if repository is not None:
        entries.append(("repository", f"{repository}\n{ref or ''}\n".encode().replace(b"\n\n", b"\n"), 0o644))
        if assignment_text is not None:
            entries.append(("assignment.toml", assignment_text, 0o644))
        source = f"a clone of {repository}" + (f" at {ref}" if ref else "")
    else:
        tree = _checkout_files(layout.root, skip={output.resolve()})
        for relative, path in tree:
            data = path.read_bytes()
            if path.resolve() == layout.assignment.resolve() and assignment_text is not None:
                data = assignment_text
            entries.append((f"mutagrade/{relative}", data, 0o755 if os.access(path, os.X_OK) else 0o644))
        source = f"the copy of {layout.root} inside it (mutagrade/)"
    size = _write_zip(output, entries)
    return BundleSummary(path=output, files=len(entries), size=size, source=source, points=points)


def _checkout_files(root: Path, *, skip: set[Path]) -> list[tuple[str, Path]]:
    """The checkout's files to install from, sorted: no caches, no compiled or built files, no
    links (a checkout has none), nothing outside :data:`CHECKOUT_PARTS`."""
    files: list[tuple[str, Path]] = []
    for part in CHECKOUT_PARTS:
        top = root / part
        if top.is_symlink() or not top.exists():
            continue
        if top.is_file():
            files.append((part, top))
            continue
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.endswith(_SKIPPED_SUFFIXES))
            for name in sorted(names):
                path = Path(folder) / name
                if name.endswith(_SKIPPED_SUFFIXES) or path.is_symlink() or not path.is_file():
                    continue
                if path.resolve() in skip:
                    continue
                files.append((path.relative_to(root).as_posix(), path))
    return sorted(files)


def _write_zip(output: Path, entries: list[tuple[str, bytes, int]]) -> int:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data, mode in sorted(entries, key=lambda e: (e[0] not in SCRIPTS, e[0])):
            info = zipfile.ZipInfo(name, date_time=_DATE)
            info.external_attr = (0o100000 | mode) << 16  # a regular file with its mode
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    data = buffer.getvalue()
    handle, temporary = tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, output)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return len(data)


def run_bundle_command(args: argparse.Namespace, layout: Layout) -> int:
    """``mutagrade bundle gradescope``: exit 0 written, 2 bad input (said on stderr)."""
    from grader.core.assignment import AssignmentError
    from grader.core.variants import ManifestError

    try:
        summary = build_gradescope_bundle(
            layout,
            Path(args.output),
            repository=args.repository,
            ref=args.ref,
            # A rules file given replaces the assignment's own; a name or folder is the layout's.
            assignment=rules if (rules := rules_file(layout, args.assignment)) != layout.assignment else None,
        )
    except (BundleError, AssignmentError, ManifestError, OSError) as exc:
        print(f"mutagrade: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {summary.path} ({summary.files} files, {summary.size / 1024:.0f} KiB)")
    print(f"setup.sh installs mutagrade from {summary.source}, and its sandbox;")
    print(f"run_autograder grades /autograder/submission as the service takes an upload ({layout.student_tests}/ "
          "and .tdd/, or test files at its top, either possibly in one wrapping folder)")
    print("upload it as the autograder of a Gradescope programming assignment (an Ubuntu 22.04 or 24.04 base image)")
    print(f"Set the assignment's points to {summary.points:g} on Gradescope: results.json scores out of "
          f"{summary.points:g}, one point per mutant.")
    return 0
