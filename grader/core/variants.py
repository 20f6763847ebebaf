"""Variants of an assignment's reference module: the manifest, the patches, and the sources they build.

A variant's source is the reference module with its unified-diff patch applied, in
memory. A patch must apply cleanly (every context and removed line exactly as written; a
hunk may only have moved), else :class:`PatchError` names the variant and the hunk.
"""

from __future__ import annotations

import re
import shutil
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.core.paths import Layout
from grader.core.tomlfile import field_problems, read_toml

__all__ = [
    "ManifestError",
    "PatchError",
    "Variant",
    "VariantKind",
    "VariantSpec",
    "apply_patch",
    "build_variants",
    "export_variant",
    "load_manifest",
]

REFERENCE_ID = "reference"


class ManifestError(ValueError):
    """The manifest cannot be read: the message names the file, the entry and the field."""


class PatchError(ManifestError):
    """A variant's patch does not apply cleanly to the reference source."""


class VariantKind(StrEnum):
    REFERENCE = "reference"
    WHEAT = "wheat"
    MUTANT = "mutant"


class VariantSpec(BaseModel):
    """One ``[[variant]]`` entry of ``mutants/manifest.toml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    kind: VariantKind
    title: str = Field(min_length=1)
    pitfall: str
    required: bool = False
    hidden: bool = False
    caught_by: tuple[str, ...] = ()
    differs_on: str = "goldens"
    patch: str | None = None


class Variant(BaseModel):
    """A built variant: its manifest entry and the full source of its module."""

    model_config = ConfigDict(frozen=True)

    spec: VariantSpec
    source: str
    diff: str = ""

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def kind(self) -> VariantKind:
        return self.spec.kind


def load_manifest(path: Path) -> list[VariantSpec]:
    """Read and check every entry of a manifest.

    Raises:
        ManifestError: on a TOML error, a missing or ill-typed field, a duplicate id, a
            mutant without ``caught_by``, or not exactly one reference entry.
    """
    data = read_toml(path, "manifest", ManifestError)
    entries = data.get("variant")
    if not isinstance(entries, list) or not entries:
        raise ManifestError(f"{path}: expected [[variant]] entries, found none")
    specs: list[VariantSpec] = []
    for number, entry in enumerate(entries, start=1):
        label = f"{path}: variant #{number}" + (
            f" ({entry['id']!r})" if isinstance(entry, dict) and "id" in entry else ""
        )
        try:
            spec = VariantSpec.model_validate(entry)
        except ValidationError as exc:
            raise ManifestError(f"{label}: {field_problems(exc)}") from None
        if spec.kind is VariantKind.MUTANT and not spec.caught_by:
            raise ManifestError(f"{label}: field caught_by: a mutant must name the course tests that kill it")
        if spec.kind is VariantKind.MUTANT and not spec.pitfall.strip():
            raise ManifestError(f"{label}: field pitfall: a mutant needs the hint shown to students")
        specs.append(spec)
    ids = [s.id for s in specs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ManifestError(f"{path}: field id: each id must be unique, got duplicates {duplicates}")
    references = [s.id for s in specs if s.kind is VariantKind.REFERENCE]
    if references != [REFERENCE_ID]:
        raise ManifestError(
            f"{path}: field kind: expected exactly one reference entry with id {REFERENCE_ID!r}, "
            f"got {references}"
        )
    return specs


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_patch(source: str, patch: str, *, name: str) -> str:
    """Apply a unified diff to ``source`` and return the result.

    Args:
        source: the text to patch.
        patch: a unified diff with one file's hunks (``---``/``+++`` headers are ignored).
        name: what to call the patch in errors (the variant's id).

    Raises:
        PatchError: if the patch has no hunks, a malformed line, or a hunk whose context
            and removed lines are not found, in order, in ``source``.
    """
    lines = source.splitlines(keepends=True)
    hunks: list[tuple[int, list[str], list[str]]] = []
    current: tuple[int, list[str], list[str]] | None = None
    for number, raw in enumerate(patch.splitlines(keepends=True), start=1):
        text = raw.rstrip("\n")
        if current is None and (text.startswith("---") or text.startswith("+++") or not text):
            continue
        match = _HUNK.match(text)
        if match:
            current = (int(match.group(1)), [], [])
            hunks.append(current)
            continue
        if current is None:
            raise PatchError(f"variant {name}: patch line {number}: expected a hunk header '@@ -l,n +l,n @@', got {text!r}")
        if text.startswith("\\"):  # "\ No newline at end of file"
            continue
        tag, body = (text[:1], raw[1:]) if text else (" ", "\n")
        if tag == " ":
            current[1].append(body)
            current[2].append(body)
        elif tag == "-":
            current[1].append(body)
        elif tag == "+":
            current[2].append(body)
        else:
            raise PatchError(
                f"variant {name}: patch line {number}: expected ' ', '-' or '+' at the start of a hunk line, got {text!r}"
            )
    if not hunks:
        raise PatchError(f"variant {name}: the patch holds no hunk")

    out: list[str] = []
    position = 0
    for number, (start, old, new) in enumerate(hunks, start=1):
        at = _find(lines, old, position, start - 1)
        if at is None:
            first = old[0].rstrip("\n") if old else ""
            raise PatchError(
                f"variant {name}: hunk {number} (at line {start}) does not apply cleanly: "
                f"its lines starting {first!r} are not in the reference; regenerate the patch"
            )
        out.extend(lines[position:at])
        out.extend(new)
        position = at + len(old)
    out.extend(lines[position:])
    return "".join(out)


def _find(lines: list[str], block: list[str], start: int, hint: int) -> int | None:
    """The index at or after ``start`` where ``block`` occurs, the one nearest ``hint``."""
    width = len(block)
    found = [i for i in range(start, len(lines) - width + 1) if lines[i : i + width] == block]
    return min(found, key=lambda i: abs(i - hint)) if found else None


def build_variants(layout: Layout) -> list[Variant]:
    """Every variant of the manifest, its source built from the reference and its patch.

    Raises:
        ManifestError: if the manifest is invalid or a patch file is missing.
        PatchError: if a patch does not apply cleanly.
    """
    manifest = layout.mutants / "manifest.toml"
    reference = layout.module_source.read_text(encoding="utf-8")
    variants = []
    for spec in load_manifest(manifest):
        if spec.kind is VariantKind.REFERENCE:
            variants.append(Variant(spec=spec, source=reference))
            continue
        patch_path = layout.mutants / (spec.patch or f"patches/{spec.id}.patch")
        try:
            diff = patch_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ManifestError(f"{manifest}: variant {spec.id!r}: field patch: no file {patch_path}") from None
        variants.append(Variant(spec=spec, source=apply_patch(reference, diff, name=spec.id), diff=diff))
    return variants


def export_variant(layout: Layout, variant: Variant, dest: Path) -> Path:
    """Write the whole reference package with this variant's module under test to ``dest/tinyllm``.

    Returns:
        ``dest``, which is what to put on ``PYTHONPATH``.
    """
    target = dest / "tinyllm"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(
        layout.reference / "tinyllm", target, ignore=shutil.ignore_patterns("__pycache__")
    )
    (dest / layout.module_file).write_text(variant.source, encoding="utf-8")
    return dest
