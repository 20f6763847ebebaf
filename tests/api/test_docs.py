"""The API's documentation page needs no internet: ``/docs`` (Swagger UI) loads only what the
service itself serves, and renders every operation in headless Chromium with every other host
blocked. ``/redoc``, which loads its logo from its own CDN, is not served."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx

from tests.api.chromium import Chromium
from tests.api.conftest import Server

REFERENCE = re.compile(r"""(?:src|href|spec-url)=["']([^"']+)["']|url:\s*'([^']+)'""")
CSS_URL = re.compile(r"""url\(\s*["']?([^"')]+)["']?\s*\)""")
ABSOLUTE = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")  # a scheme, or another host
OPERATIONS = ("/v1/submissions", "/v1/submissions/{submission_id}/regrade", "/v1/gradebook.csv")


def _references(html: str) -> list[str]:
    return [a or b for a, b in REFERENCE.findall(html)]


def test_the_docs_page_and_all_it_loads_come_from_this_server(server: Server) -> None:
    path = "/docs"
    with httpx.Client(base_url=server.url, timeout=30) as http:
        page = http.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        external = re.search(r"\S*https?://\S*", page.text)
        assert external is None, f"{path} names another host: {external and external.group(0)}"
        references = _references(page.text)
        assert any(r.endswith(".js") for r in references) and "/openapi.json" in references, references
        for reference in references:
            assert not ABSOLUTE.match(reference), f"{path} loads {reference!r} from elsewhere"
            asset = http.get(reference)
            assert asset.status_code == 200, (reference, asset.status_code)
            if reference.endswith(".css"):
                for url in CSS_URL.findall(asset.text):
                    assert url.startswith("data:") or not ABSOLUTE.match(url), f"{reference} loads {url!r}"
        assert http.get("/redoc").status_code == 404
    # Swagger UI's online validator badge would load from validator.swagger.io.
    assert '"validatorUrl": null' in page.text


RENDERED = "Array.from(document.querySelectorAll('.opblock-summary-path')).map(e => e.innerText.trim())"


def test_the_docs_page_renders_the_operations_with_every_other_host_blocked(server: Server, tmp_path: Path) -> None:
    with Chromium(tmp_path) as browser:
        browser.block_other_origins(server.url)
        browser.visit(f"{server.url}/docs", "null")
        deadline, shown = time.monotonic() + 30, []
        while time.monotonic() < deadline:  # the page builds itself from /openapi.json
            shown = browser.evaluate(f"JSON.stringify({RENDERED})")
            if all(operation in shown for operation in OPERATIONS):
                break
            time.sleep(0.3)
        blocked = list(browser.blocked)
    assert blocked == [], f"/docs asked other hosts for {blocked}"
    for operation in OPERATIONS:
        assert operation in shown, f"/docs: {operation} is not shown"
