"""Where the shipped material lives: the reference package, course tests, mutants, fixtures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Layout", "default_layout"]


@dataclass(frozen=True)
class Layout:
    """The folders of a mutagrade checkout (SPEC §2)."""

    root: Path
    # Another folder holding a ``tinyllm`` package to run suites against (a student's own).
    implementation: Path | None = None

    @property
    def reference(self) -> Path:
        """The folder that holds the reference ``tinyllm`` package (put it on sys.path)."""
        return self.root / "reference"

    @property
    def package_dir(self) -> Path:
        """The folder of the ``tinyllm`` package suites run against: the reference, unless
        this layout names another implementation."""
        return self.implementation if self.implementation is not None else self.reference

    @property
    def gru_source(self) -> Path:
        return self.reference / "tinyllm" / "rnn" / "gru.py"

    @property
    def contract_stub(self) -> Path:
        """The contract of the module under test (:func:`grader.core.contract.read_contract`)."""
        return self.gru_source.with_suffix(".pyi")

    @property
    def module_under_test(self) -> str:
        """The dotted name the tests import the module under test by."""
        return "tinyllm.rnn.gru"

    @property
    def course_tests(self) -> Path:
        return self.reference / "tests"

    @property
    def mutants(self) -> Path:
        return self.root / "mutants"

    @property
    def assignment(self) -> Path:
        return self.mutants / "assignment.toml"

    @property
    def goldens(self) -> Path:
        return self.root / "fixtures" / "gru_torch.npz"

    @property
    def examples(self) -> Path:
        return self.root / "examples"

    @property
    def starter(self) -> Path:
        """What the course hands students beside the framework (the given test, a README), at
        its paths in their repository: ``mutagrade starter`` adds the rest."""
        return self.reference / "starter"


def default_layout() -> Layout:
    """The layout of the checkout this package was installed from (an editable install)."""
    return Layout(Path(__file__).resolve().parents[2])
