"""``mutagrade check`` of the student package: everything that can be checked without the
answer key, and where the mutation grade comes from.

Here, on the student's machine: the policy check of the tests, the course tests on the
student's implementation (stored goldens; live torch where installed), and the journal,
replayed. The mutants are not in the student package, so the mutation grade is the server's:
:func:`mutation_source` says whether a server and a token are configured (``--server`` and
``--token``, or ``MUTAGRADE_SERVER`` and ``MUTAGRADE_TOKEN``), and if not, how to get it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from grader.core.caps import bound_journal, cap_text
from grader.flows.check import check_implementation, check_journal
from grader.core.errors import GradingInputError
from grader.core.models import ImplementationCheck, JournalSummary, PolicySummary
from grader.core.paths import Layout
from grader.core.policy import find_violations, policy_for
from grader.report.text import implementation_lines, journal_lines, policy_lines
from grader.run.runner import RunLimits
from grader.flows.tdd import StudentRepo

__all__ = ["LocalCheck", "MutationSource", "local_check", "mutation_source", "render_local_check", "tests_to_submit"]

SERVER_VARIABLE = "MUTAGRADE_SERVER"
TOKEN_VARIABLE = "MUTAGRADE_TOKEN"


@dataclass(frozen=True)
class LocalCheck:
    """What ``check`` found on the student's machine."""

    policy: PolicySummary
    implementation: ImplementationCheck
    journal: JournalSummary

    @property
    def reasons(self) -> list[str]:
        """Why the local checks did not pass, most important first; empty when they did."""
        reasons = []
        if not self.policy.ok:
            reasons.append("your tests break the rules of what tests may import and use")
        if not self.implementation.ok:
            reasons.append("your implementation does not pass the course tests")
        if not self.journal.ok:
            reasons.append("the red-then-green journal does not verify")
        return reasons


@dataclass(frozen=True)
class MutationSource:
    """Where the mutation grade comes from: ``server`` and ``token`` when both are set,
    otherwise ``missing``, one line saying what to set."""

    server: str = ""
    token: str = ""
    missing: str = ""


def local_check(repo: StudentRepo, *, layout: Layout, limits: RunLimits) -> LocalCheck:
    """The policy, the course tests on the implementation, and the journal's replay.

    Raises:
        GradingInputError: if the tests folder or the implementation is missing.
    """
    if not repo.tests_dir.is_dir():
        raise GradingInputError(f"{repo.tests_dir}: no such folder of tests; your tests belong in {repo.tests}")
    findings = find_violations(repo.tests_dir, policy_for(layout))
    policy = PolicySummary(
        ok=not findings.total, violations=[cap_text(str(v)) for v in findings.violations],
        violations_omitted=findings.omitted, syntax_errors=findings.syntax_errors,
    )
    implementation = check_implementation(repo.impl_dir, layout=layout, limits=limits)
    journal = check_journal(repo, layout=layout, limits=limits)
    return LocalCheck(policy=policy, implementation=implementation, journal=bound_journal(journal))


def mutation_source(server: str | None, token: str | None) -> MutationSource:
    """The server and token given on the command line, else in the environment."""
    server = server or os.environ.get(SERVER_VARIABLE, "")
    token = token or os.environ.get(TOKEN_VARIABLE, "")
    if server and token:
        return MutationSource(server=server, token=token)
    if server:
        return MutationSource(missing=(
            f"Mutation grade: not graded: the server is {server} but no token is set: "
            f"set {TOKEN_VARIABLE} (or pass --token) to the token your course gave you"
        ))
    return MutationSource(missing=(
        "Mutation grade: not graded here (the mutants are on the course's server): set "
        f"{SERVER_VARIABLE} and {TOKEN_VARIABLE} (or pass --server and --token) and `mutagrade check` "
        "submits your tests and journal for it, or run `mutagrade submit --server URL`"
    ))


def render_local_check(check: LocalCheck) -> str:
    """The local checks as text, one section a line, problems indented below, worded as the
    text report words them."""
    lines = [
        *policy_lines(check.policy),
        *implementation_lines(check.implementation),
        *journal_lines(check.journal),
    ]
    return "\n".join(lines)


def tests_to_submit(repo: StudentRepo, layout: Layout) -> Path:
    """What ``submit`` packs: the repository (its tests and ``.tdd/``) when the tests are where
    the course puts them (``layout``'s assignment's ``student_tests``), else the tests folder
    alone."""
    return repo.root if repo.tests == Path(layout.student_tests) else repo.tests_dir
