"""The policy check stays bounded whatever the suite: it lists the first violations and counts
the rest, refuses a test file too large to read, and keeps its own memory low."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from grader.core.caps import MAX_LISTED, MAX_TEST_FILE_BYTES
from grader.core.policy import check_suite, find_violations


def test_the_first_violations_are_listed_in_order_and_the_rest_counted(tmp_path):
    (tmp_path / "test_x.py").write_text("import os\n" * 1000)
    findings = find_violations(tmp_path)
    assert len(findings.violations) == MAX_LISTED
    assert [v.line for v in findings.violations] == list(range(1, MAX_LISTED + 1))
    assert findings.omitted == 1000 - MAX_LISTED
    assert findings.total == 1000


def test_the_listed_violations_are_the_first_over_every_file(tmp_path):
    (tmp_path / "test_b.py").write_text("import os\n" * 40)
    (tmp_path / "test_a.py").write_text("import sys\n" * 40)
    findings = find_violations(tmp_path, limit=50)
    assert [v.path for v in findings.violations] == ["test_a.py"] * 40 + ["test_b.py"] * 10
    assert findings.omitted == 30


def test_a_clean_suite_has_no_findings(tmp_path):
    (tmp_path / "test_ok.py").write_text("import numpy as np\n\ndef test_x():\n    assert np.ones(2).sum() == 2\n")
    findings = find_violations(tmp_path)
    assert findings.violations == [] and findings.omitted == 0 and findings.total == 0


def test_a_test_file_over_the_size_limit_is_refused_unread_naming_the_file_and_the_limit(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test_big.py").write_text("import os\n" * 200_000)  # 2 MB
    [violation] = find_violations(tmp_path).violations
    text = str(violation)
    assert text.startswith("sub/test_big.py:1:0: ")
    assert "2000000 bytes" in text and f"at most {MAX_TEST_FILE_BYTES // 1024} KiB" in text
    # The same for the unbounded check: the file is not parsed either way.
    assert [str(v) for v in check_suite(tmp_path)] == [text]


def test_a_file_at_the_size_limit_is_still_checked(tmp_path):
    source = "import os\n" * (MAX_TEST_FILE_BYTES // 10)
    (tmp_path / "test_edge.py").write_text(source)
    assert len(source) <= MAX_TEST_FILE_BYTES
    findings = find_violations(tmp_path)
    assert findings.total == MAX_TEST_FILE_BYTES // 10


def test_a_huge_name_is_cut_in_the_violation(tmp_path):
    (tmp_path / "test_x.py").write_text(f"import {'a' * 100_000}\n")
    [violation] = find_violations(tmp_path).violations
    assert len(str(violation)) < 1000 and "..." in violation.what


def test_checking_a_suite_of_a_quarter_million_violations_keeps_the_checks_memory_low(tmp_path):
    """Four files at the size limit, each one import of 65,000 refused modules: kept as objects,
    their violations alone took the check past 330 MiB."""
    aliases = (MAX_TEST_FILE_BYTES - 8) // 4
    for n in range(4):
        (tmp_path / f"test_{n}.py").write_text("import " + ", ".join(["os"] * aliases) + "\n")
    # VmHWM: this process's own peak (ru_maxrss would count the forking test process's pages).
    probe = textwrap.dedent(f"""
        import re
        from grader.core.policy import find_violations
        findings = find_violations({str(tmp_path)!r})
        assert findings.total == {4 * aliases}, findings.total
        assert len(findings.violations) == {MAX_LISTED}, len(findings.violations)
        print(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read()).group(1))
    """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < 150 * 1024, f"{int(done.stdout) // 1024} MiB"
