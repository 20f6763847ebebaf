"""Python source to a syntax tree, one tree at a time in this process.

CPython 3.11 counts the depth of the syntax tree it is building in one counter per interpreter,
not per thread: two threads parsing at once (a batch grades several submissions at once, and a
grading checks its policy and its copies in threads) can fail with ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905). Every parse of the grader goes
through :func:`parse`, under one lock.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse"]

_ONE_AT_A_TIME = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """:func:`ast.parse` of ``source``, never at the same time as another thread's.

    Raises:
        SyntaxError: as :func:`ast.parse` does (ValueError for a null byte, RecursionError for
            a tree nested too deep).
    """
    with _ONE_AT_A_TIME:
        return ast.parse(source, filename=filename)
