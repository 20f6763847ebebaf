"""Real services on loopback for the tests and the benchmarks: a throwaway PostgreSQL cluster, a
Redis server, and Celery workers started as a user starts them (``mutagrade worker``).

Nothing here is a fake: each is the real program, on a free 127.0.0.1 port, in its own
temporary folder, stopped (and its folder removed) by the caller. PostgreSQL and Redis come
from the Debian packages ``scripts/setup-services.sh`` installs (``make test`` runs it).
Importable from tests (``from tests.services import ...``) and from ``bench/`` scripts.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

__all__ = [
    "ApiProcess",
    "PostgresServer",
    "RedisServer",
    "WorkerProcess",
    "free_port",
    "kill_group",
    "postgres_server",
    "redis_server",
    "service_env",
]

REDIS_SERVER = Path("/usr/bin/redis-server")
DATABASE = "mutagrade"


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now (a caller that loses it to a race retries)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_group(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Send ``sig`` to the process group ``process`` leads and reap it; SIGKILL after ``timeout``.

    Every process here is started with ``start_new_session=True``, so its group is its own and
    holds its children too (Celery's pool processes, uvicorn)."""
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)


def _wait_port(port: int, process: subprocess.Popen, log: Path, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited early ({process.returncode}):\n{_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s:\n{_tail(log)}")


def _tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


# ------------------------------------------------------------------------- PostgreSQL
def _pg_bin() -> Path:
    """The newest installed PostgreSQL's binaries (Debian keeps them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run `bash scripts/setup-services.sh` (make test does)")
    return Path(found[-1]).parent


def _as_postgres(*command: str | Path) -> list[str]:
    """``command`` run as the ``postgres`` user when we are root: initdb and postgres refuse
    to run as root, and then the data folder must belong to ``postgres``."""
    argv = [str(c) for c in command]
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str], log: Path | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        tail = _tail(log) if log is not None else ""
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}\n{tail}")


@dataclass
class PostgresServer:
    """A PostgreSQL cluster of our own (``initdb`` into a temporary folder), listening only on
    127.0.0.1 at a free port, its unix socket in that folder, with an empty ``mutagrade``
    database. ``url`` is the SQLAlchemy URL of that database."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mutagrade-pg-")))
    port: int = 0
    started: bool = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    def start(self) -> None:
        import psycopg  # the service extra's driver; imported late so this module loads without it

        bindir = _pg_bin()
        # Not pytest's tmp_path: its parents are root-only (0700), and postgres must reach the folder.
        if os.geteuid() == 0:
            shutil.chown(self.root, user="postgres", group="postgres")
        data = self.root / "data"
        # trust: the server only listens on loopback and the socket folder is private to postgres;
        # no fsync: a test cluster that is thrown away needs no durability, and fsync is slow.
        _run(_as_postgres(bindir / "initdb", "-D", data, "-U", "postgres", "-A", "trust",
                          "-E", "UTF8", "--no-locale", "--no-sync"))
        for attempt in range(3):  # the free port may be taken between choosing it and binding it
            self.port = free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            try:
                _run(_as_postgres(bindir / "pg_ctl", "-D", data, "-l", self.log, "-o", options,
                                  "-w", "-t", "60", "start"), self.log)
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        self.started = True
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")

    def create_database(self, name: str) -> str:
        """Another empty database on this server (a fresh deployment without a fresh cluster);
        returns its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.started:
            _run(_as_postgres(_pg_bin() / "pg_ctl", "-D", self.root / "data", "-m", "fast", "-w", "stop"), self.log)
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A started :class:`PostgresServer`, stopped and removed on exit."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------ Redis
@dataclass
class RedisServer:
    """``redis-server`` on 127.0.0.1 at a port of its own, with no persistence: a restart
    (:meth:`kill` then :meth:`start`) comes back empty, as a broker that lost its data does."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mutagrade-redis-")))
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.root / "redis.log"

    def start(self) -> None:
        """Start it; on the port it had before when it is restarted (clients reconnect there)."""
        if not REDIS_SERVER.exists():
            raise RuntimeError(f"{REDIS_SERVER} is missing: run `bash scripts/setup-services.sh` (make test does)")
        for attempt in range(3):  # a free port may be taken before redis binds it
            port = self.port or free_port()
            handle = self.log.open("ab")
            # --save "" and no AOF: nothing is kept across a restart; --dir keeps any file it
            # might write in our folder.
            self.process = subprocess.Popen(
                [str(REDIS_SERVER), "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                 "--appendonly", "no", "--dir", str(self.root), "--protected-mode", "no"],
                stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
            )
            handle.close()
            try:
                _wait_port(port, self.process, self.log, "redis-server", timeout=20)
                self.port = port
                return
            except RuntimeError:
                kill_group(self.process, signal.SIGKILL)
                self.process = None
                # A restart must keep its port (the clients know it); retry it a little later.
                if attempt == 2:
                    raise
                time.sleep(0.5)

    def kill(self) -> None:
        """Stop it at once, with no chance to save anything (SIGKILL)."""
        if self.process is not None:
            kill_group(self.process, signal.SIGKILL)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            kill_group(self.process, signal.SIGTERM)
            self.process = None
        shutil.rmtree(self.root, ignore_errors=True)

    def command(self, *args: str) -> str:
        """One command over RESP (redis-py would do; this keeps the module dependency-free)."""
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(b"".join(parts))
            return sock.recv(65536).decode(errors="replace").strip()


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A started :class:`RedisServer`, stopped and removed on exit."""
    server = RedisServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------- mutagrade processes
def _spawn(args: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen:
    """``mutagrade ARGS`` (this interpreter's), in a session of its own, output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "api.cli", *args], env=dict(env), stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@dataclass
class ApiProcess:
    """``mutagrade serve`` on 127.0.0.1; ``args`` (after ``mutagrade``) default to a plain serve
    on ``port``. Ready when ``/readyz`` answers 200: the database and the queue are up."""

    port: int
    env: Mapping[str, str]
    log: Path
    args: list[str] | None = None
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90, require_ready: bool = True) -> None:
        """Start it and wait until ``/readyz`` says ready, or with ``require_ready=False`` only
        until it answers (``/healthz``: its broker or database may be away on purpose)."""
        import httpx

        args = self.args or ["serve", "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        self.process = _spawn(args, self.env, self.log)
        probe = f"{self.url}/readyz" if require_ready else f"{self.url}/healthz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mutagrade serve exited early ({self.process.returncode}):\n{_tail(self.log)}")
            try:
                if httpx.get(probe, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"mutagrade serve not ready within {timeout} s:\n{_tail(self.log)}")

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as when its machine dies."""
        if self.process is not None:
            kill_group(self.process, signal.SIGKILL)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            kill_group(self.process, signal.SIGTERM)
            self.process = None


@dataclass
class WorkerProcess:
    """``mutagrade worker --queues QUEUES --hostname NAME`` (or ``args``, after ``mutagrade``): a
    Celery worker in a session, and process group, of its own, so killing the group kills its
    pool processes too. ``name`` is its node name as Celery prints it (``%h`` expanded)."""

    name: str
    env: Mapping[str, str]
    log: Path
    queues: str = "cpu"
    concurrency: int = 1
    args: list[str] | None = None
    process: subprocess.Popen | None = None

    _offset: int = 0

    def start(self, wait: bool = True, timeout: float = 90) -> None:
        """Start it; with ``wait``, until it is ready (see :meth:`wait_ready`)."""
        self._offset = self.log.stat().st_size if self.log.exists() else 0  # a restarted worker appends
        args = self.args or ["worker", "--queues", self.queues, "--concurrency", str(self.concurrency),
                             "--hostname", self.name]
        self.process = _spawn(args, self.env, self.log)
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 90) -> None:
        """Until Celery says this start of the worker is ready: it consumes from then on."""
        assert self.process is not None, f"worker {self.name} was not started"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited early ({self.process.returncode}):\n{_tail(self.log)}")
            with self.log.open("rb") as handle:
                handle.seek(self._offset)
                if f"{self.name} ready.".encode() in handle.read():  # Celery's "NAME ready." line
                    return
            time.sleep(0.1)
        raise RuntimeError(f"worker {self.name} not ready within {timeout} s:\n{_tail(self.log)}")

    def pids(self) -> set[int]:
        """The worker's own pid and its direct children's (the pool processes)."""
        if self.process is None:
            return set()
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            children = []
        return {self.process.pid} | {int(c) for c in children}

    def kill(self) -> None:
        """SIGKILL to the whole process group: the worker and its pool die mid-job, acking nothing."""
        if self.process is not None:
            kill_group(self.process, signal.SIGKILL)
            self.process = None

    def stop(self) -> None:
        """A warm shutdown (SIGTERM): Celery finishes the job in hand, then exits."""
        if self.process is not None:
            kill_group(self.process, signal.SIGTERM, timeout=60)
            self.process = None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def service_env(**settings: str) -> dict[str, str]:
    """This process's environment with one BLAS thread and ``MUTAGRADE_<NAME>`` for each setting."""
    return {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        **{f"MUTAGRADE_{name.upper()}": value for name, value in settings.items()},
    }
