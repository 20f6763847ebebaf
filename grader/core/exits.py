"""The exit codes of every ``mutagrade`` command (README.md, "Exit codes")."""

from __future__ import annotations

import sys
from typing import Callable

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_NOT_PASSED", "EXIT_OK", "EXIT_UNREACHABLE", "exit_code_of"]

EXIT_OK = 0  # success
EXIT_NOT_PASSED = 1  # a check ran and did not pass
EXIT_BAD_INPUT = 2  # bad input: a path, an archive, the manifest, a patch, a policy violation, ...
EXIT_INTERNAL = 3  # internal error (the grader's, or the service's)
EXIT_UNREACHABLE = 4  # `submit`: the server could not be reached, or stopped answering


def exit_code_of(command: Callable[[], int], input_errors: Callable[[], tuple[type[Exception], ...]]) -> int:
    """Run ``command`` and return its exit code, turning what escapes it into one: bad input
    (an error of ``input_errors()``, imported only when something went wrong) is one line and
    exit 2; anything else, the traceback and exit 3."""
    try:
        return command()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``| head``): nothing left to say
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the last line of defence: say so, exit 3
        if isinstance(exc, input_errors()):
            print(f"mutagrade: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        import traceback

        traceback.print_exc()
        print("mutagrade: internal error (see the traceback above)", file=sys.stderr)
        return EXIT_INTERNAL
