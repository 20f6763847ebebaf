"""The installed ``mutagrade`` command (:mod:`api.cli`): every command of the grader and of the
service in one list, and the grader's own command line free of the service."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("grade", "grade-batch", "stats", "similarity", "tdd", "check", "serve", "admin", "submit", "worker",
            "doctor", "demo", "bundle", "starter", "variants", "calibrate", "golden")
SERVICE_PACKAGES = ("fastapi", "sqlalchemy", "celery", "httpx", "uvicorn", "alembic", "starlette")


def test_the_command_lists_every_command_in_order():
    done = subprocess.run([sys.executable, "-m", "api.cli", "--help"], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("    ") and line[4] != " "]
    assert tuple(listed) == COMMANDS


def test_the_grader_command_line_imports_nothing_of_the_service():
    tree = ast.parse((ROOT / "grader" / "cli.py").read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name == "api" or name.startswith("api.")]


def test_building_the_whole_command_line_needs_no_service_package():
    """The core install (no ``service`` extra) runs the same command: its parser, service
    commands included, is built without importing any of them."""
    probe = (
        "import json, sys\n"
        "from api.cli import build_parser\n"
        "build_parser().parse_args(['admin', 'token', 'list'])\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {SERVICE_PACKAGES!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
