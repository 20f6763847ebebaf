"""No token in the service's logs.

Tokens reach the service only in the ``Authorization`` header and the sign-in cookie, which no
log line holds. An address is logged whole, though (uvicorn's access log writes the path and the
query string), and a person may paste a token into one: :class:`RedactTokens` blanks, in each
record of the loggers :func:`install` puts it on, the value of every query parameter whose name
holds ``token`` and anything shaped like a token of ours (``mg_`` and URL-safe characters).
"""

from __future__ import annotations

import logging
import re

__all__ = ["REDACTED", "RedactTokens", "install", "redact"]

REDACTED = "[redacted]"
LOGGERS = ("uvicorn.access", "uvicorn.error", "mutagrade.queue")  # a filter acts on its own logger only
_TOKEN = re.compile(r"mg_[A-Za-z0-9_-]{16,}")
_TOKEN_PARAMETER = re.compile(r"((?:^|[?&;])[^=&;#?\s]*token[^=&;#\s]*=)[^&;#\s\"]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with token-named query values and token-shaped strings blanked."""
    return _TOKEN.sub("mg_" + REDACTED, _TOKEN_PARAMETER.sub(r"\1" + REDACTED, text))


class RedactTokens(logging.Filter):
    """Blanks tokens in a record's arguments (and in its message, when it has none: a message
    with arguments is a format string of ours). The arguments keep their number and types, as
    uvicorn's access formatter unpacks them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif not record.args and isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


_FILTER = RedactTokens()


def install() -> None:
    """Put the filter on the service's loggers (once, however often it is called)."""
    for name in LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)
