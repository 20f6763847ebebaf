"""Fixtures for the deployment tests: ``docker-compose.yml`` read as data, and the deployment it
describes started natively on loopback (no Docker engine here): real PostgreSQL, real Redis,
the api and two cpu workers run with the very commands and settings the compose file gives them,
only their addresses changed to 127.0.0.1 and free ports.
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.api.conftest import Server
from tests.services import (
    ApiProcess,
    PostgresServer,
    RedisServer,
    WorkerProcess,
    free_port,
    postgres_server,
    service_env,
)

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"

# A suite that kills almost nothing: not passed, the required mutant s02 missed.
WEAK = {
    "test_weak.py": "from tinyllm.rnn.gru import GRU\n\ndef test_keys():\n    assert 'bias_hh_l0' in GRU(2, 3).state_dict()\n"
}


def compose() -> dict[str, Any]:
    """The compose file as data (PyYAML resolves the ``<<`` merges of its anchors)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` and ``${VAR}``, from this environment as compose does."""
    def one(match: re.Match[str]) -> str:
        return os.environ.get(match["name"]) or (match["default"] or "")

    return re.sub(r"\$\{(?P<name>\w+)(?::-(?P<default>[^}]*))?\}", one, str(value))


def mutagrade_args(command: list[str]) -> list[str]:
    """The arguments of a ``mutagrade ...`` command (or a ``CMD`` health check of one)."""
    command = command[1:] if command[0] == "CMD" else command
    assert command[0] == "mutagrade", f"not a mutagrade command: {command}"
    return [str(part) for part in command[1:]]


def with_option(args: list[str], option: str, value: str) -> list[str]:
    """``args`` with the value after ``option`` replaced (the option must be there)."""
    assert option in args, f"{option} missing from {args}"
    at = args.index(option)
    return [*args[: at + 1], value, *args[at + 2 :]]


def compose_env(service: str) -> dict[str, str]:
    """The ``MUTAGRADE_*`` settings a compose service sets, interpolated."""
    environment = compose()["services"][service].get("environment") or {}
    return {key: interpolate(value) for key, value in environment.items() if key.startswith("MUTAGRADE_")}


def graded_lines(log: str, task_id: str) -> int:
    """How often a worker's log says task ``task_id`` graded and stored its result."""
    return len(re.findall(rf"mutagrade\.grade\[{re.escape(task_id)}\] succeeded in [\d.]+s: 'graded'", log))


@dataclass
class Deployment:
    """The compose deployment, natively: its api, its cpu workers, its broker and database."""

    api: ApiProcess
    workers: dict[str, WorkerProcess]
    redis: RedisServer
    database_url: str
    env: dict[str, str]
    server: Server = field(init=False)  # tokens and HTTP clients (tests/api/conftest.py)

    def __post_init__(self) -> None:
        self.server = Server(url=self.api.url, database_url=self.database_url, env=self.env,
                             port=self.api.port, log=self.api.log)

    def worker_of(self, pid: int) -> str | None:
        """Which worker a pool process belongs to (claimed_by names the pool process's pid)."""
        return next((name for name, worker in self.workers.items() if pid in worker.pids()), None)

    def logs(self) -> str:
        return "\n".join(worker.text() for worker in self.workers.values())


@contextmanager
def deployment(
    tmp: Path,
    postgres: PostgresServer,
    *,
    workers: tuple[str, ...] = ("cpu-a", "cpu-b"),
    gpu_worker: bool = False,
    **settings: str,
) -> Iterator[Deployment]:
    """Redis, a fresh database, the api and one cpu worker per name in ``workers`` (and, with
    ``gpu_worker``, the gpu worker as ``gpu``: on the CPU here), each started with its compose
    command and settings; ``settings`` (MUTAGRADE_<NAME>) override the file's. Everything is
    stopped on exit."""
    services = compose()["services"]
    redis = RedisServer()
    redis.start()
    database_url = postgres.create_database(f"deploy_{uuid.uuid4().hex[:10]}")
    overrides = {f"MUTAGRADE_{name.upper()}": value for name, value in settings.items()}
    env = {**service_env(), **compose_env("api"), "MUTAGRADE_DATABASE_URL": database_url,
           "MUTAGRADE_BROKER_URL": redis.url, **overrides}
    port = free_port()
    api_args = with_option(with_option(mutagrade_args(services["api"]["command"]), "--host", "127.0.0.1"),
                           "--port", str(port))
    api = ApiProcess(port=port, env=env, log=tmp / "api.log", args=[*api_args, "--log-level", "warning"])
    commands = {name: ("worker-cpu", name) for name in workers}
    if gpu_worker:
        commands["gpu"] = ("worker-gpu", "gpu")
    started: dict[str, WorkerProcess] = {}
    host = socket.gethostname()
    try:
        api.start()
        for name, (service, node) in commands.items():
            env_of = {**service_env(), **compose_env(service), "MUTAGRADE_DATABASE_URL": database_url,
                      "MUTAGRADE_BROKER_URL": redis.url, **overrides}
            # Distinct node names, as compose gives each container (cpu@<container id>).
            args = with_option(mutagrade_args(services[service]["command"]), "--hostname", f"{node}@%h")
            started[name] = WorkerProcess(name=f"{node}@{host}", env=env_of, log=tmp / f"{name}.log", args=args)
            started[name].start(wait=False)  # all import at once: a fraction of the wait
        for worker in started.values():
            worker.wait_ready()
        yield Deployment(api=api, workers=started, redis=redis, database_url=database_url, env=env)
    finally:
        for worker in started.values():
            worker.kill()  # their jobs are over or no longer wanted: no warm shutdown to wait for
        api.stop()
        redis.stop()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster per test module; each deployment gets its own database in it."""
    with postgres_server() as server:
        yield server


def wait_for(condition, timeout: float, what: str, every: float = 0.1):
    """Poll ``condition`` until it returns something truthy (returned), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what}")
