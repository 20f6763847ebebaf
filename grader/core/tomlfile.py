"""Reading the project's TOML files (manifest, assignment) with errors that name file and field."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

__all__ = ["field_problems", "read_toml"]


def read_toml(path: Path, what: str, error: type[Exception]) -> dict[str, Any]:
    """The parsed TOML at ``path``.

    Raises:
        error: "<path>: no such <what> file" or "<path>: not valid TOML: ...".
    """
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


def field_problems(exc: ValidationError) -> str:
    """A pydantic validation error as "field a.b: message; field c: message"."""
    return "; ".join(
        f"field {'.'.join(str(p) for p in err['loc']) or '(entry)'}: {err['msg']}" for err in exc.errors()
    )
