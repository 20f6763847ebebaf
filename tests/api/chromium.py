"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ending in a NUL byte, read on fd 3, written on fd 4): no WebSocket client, no
browser-automation package, only the real browser.

:meth:`Chromium.visit` loads a page and says what happened there: every JavaScript dialog that
opened (each is accepted, so a page cannot hang the test), every console call, and whatever a
JavaScript expression finds in the DOM once the page has loaded. :meth:`Chromium.sign_in` signs
in the way a person does, with the sign-in form (the pages take a token no other way),
:meth:`Chromium.choose_file` picks a file in a form's file input as the file dialog would, and
:meth:`Chromium.click` follows a button or link to the page it leads to.
:meth:`Chromium.block_other_origins` fails every request to any other origin than the one given,
as a machine without internet would, and keeps the address of each.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Chromium", "Visit"]


@dataclass
class Visit:
    """What one page load did."""

    url: str
    dialogs: list[str] = field(default_factory=list)  # the message of each alert/confirm/prompt
    console: list[str] = field(default_factory=list)
    found: Any = None  # the value of the expression evaluated after the load
    responses: list[tuple[str, int]] = field(default_factory=list)  # (address, HTTP status) of each response


class Chromium:
    """One headless browser with one tab; :meth:`close` it (it is a context manager)."""

    def __init__(self, profile: Path, *, timeout: float = 60.0) -> None:
        chromium = shutil.which("chromium")
        assert chromium, "chromium is not installed: run `bash scripts/setup-services.sh` (make test does)"
        self.timeout = timeout
        self._log = profile / "chromium.log"
        browser_reads, self._to_browser = os.pipe()
        self._from_browser, browser_writes = os.pipe()
        # Above 4, so that putting one on fd 3 or 4 cannot overwrite the other.
        browser_reads, browser_writes = (_above_four(fd) for fd in (browser_reads, browser_writes))
        # The protocol wants the pipes on fds 3 and 4 exactly: bash puts them there (dash cannot
        # redirect from a descriptor above 9).
        script = f'exec "$0" "$@" 3<&{browser_reads} 4>&{browser_writes}'
        self.process = subprocess.Popen(
            ["bash", "-c", script, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(browser_reads, browser_writes), stdout=subprocess.DEVNULL, stderr=self._log.open("wb"),
        )
        os.close(browser_reads)
        os.close(browser_writes)
        self._buffer = b""
        self._last_id = 0
        self._events: list[dict[str, Any]] = []
        self._allowed_origin: str | None = None  # see block_other_origins
        self.blocked: list[str] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network"):
            self.call(f"{domain}.enable", session=self.session)

    # ------------------------------------------------------------------ the protocol
    def _send(self, method: str, session: str | None, params: dict[str, Any]) -> int:
        self._last_id += 1
        message: dict[str, Any] = {"id": self._last_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._last_id

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    tail = self._log.read_text(errors="replace")[-2000:]
                    raise EOFError(f"Chromium closed its end of the pipe; its log ends:\n{tail}")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message = json.loads(raw)
        if message.get("method") == "Page.javascriptDialogOpening":
            self._send("Page.handleJavaScriptDialog", message.get("sessionId"), {"accept": True})
        elif message.get("method") == "Fetch.requestPaused":
            self._let_through_or_block(message)
        if "method" in message:
            self._events.append(message)
        return message

    def call(self, method: str, *, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer (events that come first are kept)."""
        wanted = self._send(method, session, params)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def _wait_for(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(event["method"] == method for event in self._events):
            self._receive(deadline)

    def _drain(self, seconds: float) -> None:
        """Take in what arrives for ``seconds`` (handlers that run after the load event)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self._receive(deadline)
        except TimeoutError:
            pass

    # ------------------------------------------------------------------ pages
    def visit(self, url: str, expression: str) -> Visit:
        """Load ``url``, let it settle, then evaluate ``expression`` (its value must be JSON)."""
        self._events.clear()
        self.call("Page.navigate", session=self.session, url=url)
        self._wait_for("Page.loadEventFired")
        self._drain(0.5)
        result = self.call(
            "Runtime.evaluate", session=self.session, expression=expression, returnByValue=True
        )["result"]
        return self._visit_of(url, result.get("value"))

    def wait(self, seconds: float) -> Visit:
        """Let the page run for ``seconds`` (what its scripts do after loading) and say what
        happened meanwhile, as :meth:`visit` does."""
        self._events.clear()
        self._drain(seconds)
        return self._visit_of(self.evaluate("location.href"), None)

    def _visit_of(self, url: str, found: Any) -> Visit:
        visit = Visit(url=url, found=found)
        for event in self._events:
            params = event.get("params", {})
            if event["method"] == "Page.javascriptDialogOpening":
                visit.dialogs.append(params.get("message", ""))
            elif event["method"] == "Runtime.consoleAPICalled":
                visit.console.append(" ".join(str(a.get("value", "")) for a in params.get("args", [])))
            elif event["method"] == "Network.responseReceived":
                visit.responses.append((params["response"]["url"], params["response"]["status"]))
        return visit

    def evaluate(self, expression: str) -> Any:
        """The value (JSON) of ``expression`` in the page as it is now."""
        return self.call(
            "Runtime.evaluate", session=self.session, expression=expression, returnByValue=True
        )["result"].get("value")

    def choose_file(self, selector: str, path: Path) -> None:
        """Put ``path`` in the file input ``selector`` finds, as choosing it in the file dialog does."""
        found = self.call("Runtime.evaluate", session=self.session,
                          expression=f"document.querySelector({json.dumps(selector)})")["result"]
        assert found.get("subtype") == "node", f"no element {selector!r} on the page"
        self.call("DOM.setFileInputFiles", session=self.session, files=[str(path)], objectId=found["objectId"])

    def block_other_origins(self, origin: str) -> None:
        """From now on, fail every request this tab makes anywhere but ``origin``
        (``http://host:port``); the address of each is added to :attr:`blocked`."""
        self._allowed_origin = origin.rstrip("/")
        self.call("Fetch.enable", session=self.session, patterns=[{"urlPattern": "*"}])

    def _let_through_or_block(self, message: dict[str, Any]) -> None:
        params = message["params"]
        url = params["request"]["url"]
        allowed = self._allowed_origin
        if allowed is not None and url != allowed and not url.startswith(allowed + "/"):
            self.blocked.append(url)
            self._send("Fetch.failRequest", message.get("sessionId"),
                       {"requestId": params["requestId"], "errorReason": "BlockedByClient"})
        else:
            self._send("Fetch.continueRequest", message.get("sessionId"), {"requestId": params["requestId"]})

    def click(self, selector: str) -> str:
        """Click the element ``selector`` finds (a form's button, a link), wait for the page it
        leads to, and return that page's address."""
        self._events.clear()
        clicked = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e?.click(); return !!e; }})()"
        )
        assert clicked, f"no element {selector!r} on the page"
        self._wait_for("Page.loadEventFired")
        return self.evaluate("location.href")

    def sign_in(self, base_url: str, token: str) -> str:
        """Fill in the sign-in form at ``base_url/login`` and send it; the address landed on."""
        self.visit(f"{base_url}/login", "null")
        self.evaluate(f"document.getElementById('token').value = {json.dumps(token)}")
        return self.click('form[action="/login"] button[type="submit"]')

    def resize(self, width: int, height: int) -> None:
        """Show pages in a ``width`` x ``height`` window from now on."""
        self.call("Emulation.setDeviceMetricsOverride", session=self.session, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def screenshot(self, url: str, path: Path, *, width: int, height: int, expression: str = "null") -> Visit:
        """Load ``url`` in a ``width`` x ``height`` window and write what it shows to ``path``
        (PNG); the visit, with the value of ``expression`` on the page as shot."""
        self.resize(width, height)
        visit = self.visit(url, expression)
        shot = self.call("Page.captureScreenshot", session=self.session, format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return visit

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (OSError, RuntimeError, TimeoutError, EOFError):
            pass
        self.process.kill()
        self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _above_four(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 5)
    os.close(fd)
    return moved
