"""Forms posted to the pages come from the pages: two checks, each enough on its own.

The pages are signed in by a cookie, which the browser sends with every request to this host,
whichever page makes it. ``SameSite=Strict`` keeps it off requests from other *sites*, but not
from another origin of the same site (another port, or a sibling host under the same domain).

1. The browser says where a post comes from: :func:`foreign_origin` refuses one whose
   ``Sec-Fetch-Site`` is not ``same-origin``, or whose ``Origin`` is not this host.
2. Every form carries a token only the signed-in user's own pages hold (:func:`form_token`, an
   HMAC keyed by the sign-in token, which is in an HTTP-only cookie no script can read);
   :func:`token_matches` checks it, in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from fastapi import Request

__all__ = ["FIELD", "foreign_origin", "form_token", "token_matches"]

FIELD = "csrf"  # the form field holding the token
_PURPOSE = b"mutagrade page form"


def form_token(sign_in_token: str) -> str:
    """The form token of the user signed in with ``sign_in_token``: stable for as long as that
    token is, and telling nothing about it."""
    return hmac.new(sign_in_token.encode(), _PURPOSE, hashlib.sha256).hexdigest()


def token_matches(sign_in_token: str, sent: object) -> bool:
    return isinstance(sent, str) and hmac.compare_digest(form_token(sign_in_token), sent)


def foreign_origin(request: Request) -> str | None:
    """Where the request says it comes from, if that is not this host's own pages; ``None``
    when it comes from them or does not say (a client that is not a browser)."""
    fetch_site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if fetch_site is not None and fetch_site != "same-origin":
        return origin or f"a {fetch_site} page"
    if origin is None:
        return None
    # The host, not the scheme: behind a proxy that ends TLS the service sees http.
    if origin == "null" or urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
        return origin
    return None
