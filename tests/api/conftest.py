"""Fixtures for the service's tests: a real uvicorn server on a free loopback port, with its
own database, started as a user starts it (``mutagrade serve``), and HTTP clients."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from sqlalchemy.orm import sessionmaker

from api.store.db import make_engine, make_sessionmaker
from api.store.migrate import upgrade
from grader.core.paths import default_layout
from tests.services import PostgresServer, postgres_server

LAYOUT = default_layout()
STUDENT = LAYOUT.examples / "student"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mutagrade(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


@dataclass
class Server:
    """A running ``mutagrade serve`` and what it needs: its URL, database, environment."""

    url: str
    database_url: str
    env: dict[str, str]
    port: int
    log: Path
    log_level: str = "warning"  # `mutagrade serve --log-level`: "info" and below write the access log
    process: subprocess.Popen | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "serve", "--port", str(self.port), "--log-level", self.log_level],
            env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mutagrade serve exited early:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"mutagrade serve did not become ready:\n{self.log.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None

    def token(self, user: str, role: str = "student") -> str:
        if user not in self.tokens:
            done = mutagrade("admin", "token", "create", "--user", user, "--role", role, env=self.env)
            assert done.returncode == 0, done.stderr
            self.tokens[user] = done.stdout.strip()
        return self.tokens[user]

    def signed_in(self, user: str, role: str = "student") -> httpx.Client:
        """A client signed in to the pages as a browser is: it holds the cookie the sign-in form sets."""
        with httpx.Client(base_url=self.url, timeout=30) as form:
            answer = form.post("/login", data={"token": self.token(user, role)})
            assert answer.status_code == 303, answer.text
            cookies = form.cookies
        return httpx.Client(base_url=self.url, timeout=30, cookies=cookies)

    def client(self, user: str | None = None, role: str = "student") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token(user, role)}"} if user else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


def make_server(tmp: Path, database_url: str | None = None, *, log_level: str = "warning", **settings: str) -> Server:
    port = free_port()
    database_url = database_url or f"sqlite:///{tmp / 'mutagrade.db'}"
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "MUTAGRADE_DATABASE_URL": database_url,
        **{f"MUTAGRADE_{k.upper()}": v for k, v in settings.items()},
    }
    return Server(
        url=f"http://127.0.0.1:{port}", database_url=database_url, env=env, port=port, log=tmp / "server.log",
        log_level=log_level,
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = make_server(tmp_path)
    srv.start()
    yield srv
    srv.stop()


def tar_gz(files: dict[str, bytes | str]) -> bytes:
    """A .tar.gz of name -> content."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def example_archive() -> bytes:
    """The bundled student's tests and journal, as ``mutagrade submit`` packs them."""
    from grader.flows.submit import pack

    return pack(STUDENT, LAYOUT.student_tests)


def wait_done(client: httpx.Client, submission_id: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get(f"/v1/submissions/{submission_id}").json()
        if body["status"] in ("done", "error"):
            return body
        time.sleep(0.2)
    raise AssertionError(f"submission {submission_id} not graded within {timeout} s")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for one test module."""
    with postgres_server() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty, migrated database of each kind."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'mutagrade.db'}"
    else:
        url = request.getfixturevalue("postgres").create_database(f"db_{uuid.uuid4().hex[:10]}")
    upgrade(url)
    return url


@pytest.fixture
def make_session(database_url: str) -> Iterator[sessionmaker]:
    """Sessions on ``database_url``."""
    engine = make_engine(database_url)
    yield make_sessionmaker(engine)
    engine.dispose()
