"""Where the shipped material lives: the shared ``tinyllm`` and the folder of each assignment.

A checkout holds one framework, ``reference/tinyllm``, with the reference of every module the
course builds, and one folder per module under ``assignments/``:

    assignments/<name>/
        assignment.toml    the rules, and which module it is (``module``), where a student's
                           repository keeps its tests (``student_tests``), its goldens (``goldens``)
        manifest.toml      the variants; patches/ their diffs against the reference module
        tests/             the course tests; starter/ what students start from
        goldens/           the torch goldens, the script that makes them, and ``compare.py``

Nothing outside an assignment's folder names its module: :class:`Layout` reads it from
``assignment.toml``, and the contract from the stub beside the reference module.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path, PurePosixPath

from grader.core.errors import GradingInputError

__all__ = ["ASSIGNMENTS", "COURSE_FILE", "Layout", "default_layout", "layout_for", "rules_file"]

ASSIGNMENTS = "assignments"  # the folder of the assignment folders, in a checkout
COURSE_FILE = "course.toml"  # in it: ``default``, the assignment a command takes when named none


@dataclass(frozen=True)
class Layout:
    """The folders of a mutagrade checkout (SPEC §2), for one of its assignments."""

    root: Path
    # Another folder holding a ``tinyllm`` package to run suites against (a student's own).
    implementation: Path | None = None
    # The assignment's folder; None: the course's default (``assignments/course.toml``).
    folder: Path | None = field(default=None)

    # ------------------------------------------------------------------ the assignment
    @cached_property
    def assignment_dir(self) -> Path:
        return self.folder if self.folder is not None else self.root / ASSIGNMENTS / _default_name(self.root)

    @property
    def assignment_name(self) -> str:
        """The folder's name: what ``--assignment`` and the service call the assignment."""
        return self.assignment_dir.name

    @property
    def assignment(self) -> Path:
        """The assignment's rules (:func:`grader.core.assignment.load_assignment`)."""
        return self.assignment_dir / "assignment.toml"

    @cached_property
    def subject(self):
        """What the assignment grades (:class:`grader.core.assignment.Subject`), from its
        ``assignment.toml``."""
        from grader.core.assignment import subject_of

        return subject_of(self.assignment)

    @property
    def module_under_test(self) -> str:
        """The dotted name the tests import the module under test by."""
        return self.subject.module

    @property
    def module_file(self) -> str:
        """The module under test's file, relative to the folder holding ``tinyllm``
        (``tinyllm/rnn/<name>.py``): the file a student writes, in an implementation folder."""
        return str(PurePosixPath(*self.module_under_test.split("."))) + ".py"

    @property
    def student_tests(self) -> PurePosixPath:
        """Where a student's repository keeps its tests for this assignment."""
        return PurePosixPath(self.subject.student_tests)

    # ------------------------------------------------------------------ the material
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
    def module_source(self) -> Path:
        """The reference module under test, in the shared ``tinyllm``."""
        return self.reference / self.module_file

    @property
    def contract_stub(self) -> Path:
        """The contract of the module under test (:func:`grader.core.contract.read_contract`)."""
        return self.module_source.with_suffix(".pyi")

    @cached_property
    def answer_files(self) -> tuple[Path, ...]:
        """The reference module of every assignment of the course: each ``.py`` of the shared
        ``tinyllm`` with a contract stub beside it. No run reads them, and no student gets them.
        Looked up once per layout (every worker a grading starts asks)."""
        package = self.reference / "tinyllm"
        if not package.is_dir():
            return ()
        return tuple(sorted(stub.with_suffix(".py") for stub in package.rglob("*.pyi") if stub.with_suffix(".py").is_file()))

    @property
    def course_tests(self) -> Path:
        return self.assignment_dir / "tests"

    @property
    def mutants(self) -> Path:
        """The folder of ``manifest.toml`` and ``patches/``."""
        return self.assignment_dir

    @property
    def goldens(self) -> Path:
        return self.assignment_dir / self.subject.goldens

    @property
    def golden_code(self) -> Path:
        """The assignment's comparison with torch (:mod:`grader.flows.golden` loads it)."""
        return self.assignment_dir / "goldens" / "compare.py"

    @property
    def example_student(self) -> Path | None:
        """The assignment's example student repository (``example``, relative to the checkout),
        the one ``mutagrade demo`` grades; None when it names none."""
        return self.root / self.subject.example if self.subject.example else None

    @property
    def examples(self) -> Path:
        return self.root / "examples"

    @property
    def starter(self) -> Path:
        """What the course hands students beside the framework (the given test, a README), at
        its paths in their repository: ``mutagrade starter`` adds the rest."""
        return self.assignment_dir / "starter"

    def with_implementation(self, implementation: Path | None) -> Layout:
        """This layout, its suites run against ``implementation`` instead."""
        return replace(self, implementation=implementation)

    def available(self) -> list[str]:
        """The names of the assignments of this checkout."""
        folder = self.root / ASSIGNMENTS
        return sorted(p.name for p in folder.iterdir() if (p / "assignment.toml").is_file()) if folder.is_dir() else []


def _default_name(root: Path) -> str:
    """The course's default assignment, as ``assignments/course.toml`` names it."""
    from grader.core.assignment import AssignmentError
    from grader.core.tomlfile import read_toml

    path = root / ASSIGNMENTS / COURSE_FILE
    name = read_toml(path, "course", AssignmentError).get("default")
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise AssignmentError(f"{path}: field default: expected the name of an assignment folder, got {name!r}")
    return name


def layout_for(root: Path, assignment: str | Path | None) -> Layout:
    """The layout of ``root`` for the assignment named ``assignment``: a name under
    ``assignments/``, an assignment's folder, an assignment's ``assignment.toml``, or None for
    the default one. A rules file outside an assignment's folder (no ``manifest.toml`` beside
    it) grades the default assignment by its rules (:func:`rules_file`).

    Raises:
        GradingInputError: if no such assignment exists, naming those there are.
    """
    layout = Layout(root)
    if assignment is None or str(assignment) == "":
        return layout
    text = str(assignment)
    path = Path(text).expanduser()
    if path.is_file():
        folder = path.resolve().parent
        return Layout(root, folder=folder) if (folder / "manifest.toml").is_file() else layout
    if path.is_dir() and (path / "assignment.toml").is_file():
        return Layout(root, folder=path.resolve())
    named = root / ASSIGNMENTS / text
    if "/" not in text and (named / "assignment.toml").is_file():
        return Layout(root, folder=named)
    there = ", ".join(layout.available()) or "none"
    raise GradingInputError(
        f"--assignment {text}: expected the name of an assignment ({there}) or a folder holding an "
        f"assignment.toml; found neither"
    )


def rules_file(layout: Layout, assignment: str | Path | None) -> Path:
    """The rules to grade by: ``assignment`` when it names a file, else the layout's own."""
    if assignment and Path(assignment).expanduser().is_file():
        return Path(assignment).expanduser()
    return layout.assignment


def default_layout() -> Layout:
    """The layout of the checkout this package was installed from (an editable install)."""
    return Layout(Path(__file__).resolve().parents[2])
