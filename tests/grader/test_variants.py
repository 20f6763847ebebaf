"""Variants: the manifest is checked field by field and patches apply cleanly or say why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.core.paths import Layout, default_layout
from grader.core.variants import (
    ManifestError,
    PatchError,
    VariantKind,
    apply_patch,
    build_variants,
    load_manifest,
)

LAYOUT = default_layout()


def _copy_layout(tmp_path: Path) -> Layout:
    """A private copy of the reference and the assignments, to break on purpose."""
    for part in ("reference/tinyllm", "assignments"):
        shutil.copytree(LAYOUT.root / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    return Layout(tmp_path)


def test_the_manifest_holds_twelve_mutants_three_wheats_and_s02_required():
    variants = build_variants(LAYOUT)
    kinds = [v.kind for v in variants]
    assert kinds.count(VariantKind.REFERENCE) == 1
    assert kinds.count(VariantKind.WHEAT) >= 3
    mutants = [v.id for v in variants if v.kind is VariantKind.MUTANT]
    assert mutants == [f"s{i:02d}" for i in range(1, 13)]
    assert [v.id for v in variants if v.spec.required] == ["s02"]
    for variant in variants:
        if variant.kind is VariantKind.MUTANT:
            assert variant.spec.pitfall and variant.spec.caught_by
            assert variant.source != LAYOUT.module_source.read_text()
        compile(variant.source, variant.id, "exec")


def test_every_variant_differs_from_every_other():
    sources = [v.source for v in build_variants(LAYOUT)]
    assert len(set(sources)) == len(sources)


def test_apply_patch_follows_a_hunk_that_moved():
    source = "a\nb\nc\nd\n"
    patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n c\n-d\n+D\n"
    assert apply_patch(source, patch, name="moved") == "a\nb\nc\nD\n"


def test_a_patch_that_no_longer_applies_names_the_variant_and_hunk(tmp_path):
    layout = _copy_layout(tmp_path)
    gru = layout.module_source
    # Edit the line only s11 changes, as if the reference had been rewritten since the patch.
    gru.write_text(gru.read_text().replace("h = state[k]\n", "h = state[k]  # each layer its own\n"))
    with pytest.raises(PatchError) as info:
        build_variants(layout)
    message = str(info.value)
    assert "variant s11" in message and "hunk 1" in message and "does not apply cleanly" in message


def test_a_malformed_patch_line_is_reported_with_its_number():
    with pytest.raises(PatchError, match=r"variant bad: patch line 4: expected ' ', '-' or '\+'"):
        apply_patch("a\n", "--- a\n+++ b\n@@ -1 +1 @@\n*a\n", name="bad")
    with pytest.raises(PatchError, match="holds no hunk"):
        apply_patch("a\n", "--- a\n+++ b\n", name="empty")


def test_a_manifest_entry_without_a_field_names_the_entry_and_field(tmp_path):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(
        '[[variant]]\nid = "reference"\nkind = "reference"\ntitle = "r"\npitfall = ""\n\n'
        '[[variant]]\nid = "s01"\nkind = "mutant"\npitfall = "p"\ncaught_by = ["t"]\n'
    )
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest)
    assert "variant #2 ('s01')" in str(info.value) and "field title" in str(info.value)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ('id = "s01"\nkind = "mutant"\ntitle = "t"\npitfall = "p"\n', "field caught_by"),
        ('id = "s01"\nkind = "mutnat"\ntitle = "t"\npitfall = "p"\n', "field kind"),
        ('id = "s01"\nkind = "wheat"\ntitle = "t"\npitfall = ""\ncolour = "red"\n', "field colour"),
        ('id = "reference"\nkind = "wheat"\ntitle = "t"\npitfall = ""\n', "field id: each id must be unique"),
    ],
)
def test_manifest_errors_are_clear(tmp_path, entry, expected):
    manifest = tmp_path / "manifest.toml"
    manifest.write_text(
        '[[variant]]\nid = "reference"\nkind = "reference"\ntitle = "r"\npitfall = ""\n\n[[variant]]\n' + entry
    )
    with pytest.raises(ManifestError, match=expected):
        load_manifest(manifest)


def test_invalid_toml_and_a_missing_patch_file_are_manifest_errors(tmp_path):
    bad = tmp_path / "manifest.toml"
    bad.write_text("[[variant]\nid = 1\n")
    with pytest.raises(ManifestError, match="not valid TOML"):
        load_manifest(bad)
    layout = _copy_layout(tmp_path / "copy")
    (layout.mutants / "patches" / "s05.patch").unlink()
    with pytest.raises(ManifestError, match=r"variant 's05': field patch: no file"):
        build_variants(layout)


def test_adding_a_variant_is_a_patch_and_an_entry(tmp_path):
    layout = _copy_layout(tmp_path)
    (layout.mutants / "patches" / "s13.patch").write_text(
        (layout.mutants / "patches" / "s05.patch").read_text().replace(
            "+    n = sigmoid(a_n + r * u_n)", "+    n = tanh(a_n + r * u_n) * 0.5"
        )
    )
    with (layout.mutants / "manifest.toml").open("a") as manifest:
        manifest.write(
            '\n[[variant]]\nid = "s13"\nkind = "mutant"\ntitle = "Halved candidate"\n'
            'pitfall = "The candidate is halved."\ncaught_by = ["test_hand_example_gru_cell"]\n'
        )
    variants = {v.id: v for v in build_variants(layout)}
    assert "n = tanh(a_n + r * u_n) * 0.5" in variants["s13"].source
