"""``docker-compose.yml`` and the ``Dockerfile`` against the real program, then the deployment they
describe run natively on loopback (there is no Docker engine here).

The static half reads the compose file with PyYAML and holds every service to what really
exists: each ``mutagrade`` command and health check parses with the real CLI parser, each
``MUTAGRADE_*`` variable is a real settings field and the set validates, every service has a
health check, the gpu worker exists only in the ``gpu`` profile with an NVIDIA reservation.
The live half starts real PostgreSQL and Redis, the api and two cpu workers with the compose
commands, and grades the bundled example and a weak suite through them.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from celery.utils.nodenames import host_format

from api.config import Settings
from api.cli import build_parser
from tests.api.conftest import example_archive, tar_gz, wait_done
from tests.deploy.conftest import (
    DOCKERFILE,
    WEAK,
    compose,
    compose_env,
    deployment,
    graded_lines,
    interpolate,
    mutagrade_args,
    wait_for,
    with_option,
)
from tests.services import PostgresServer

SERVICES = {"api", "worker-cpu", "worker-gpu", "redis", "postgres"}


def _health_command(service: dict) -> list[str]:
    """A health check's command as argv (``CMD`` lists as they are, ``CMD-SHELL`` split)."""
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return shlex.split(test)
    kind, *rest = test
    assert kind in ("CMD", "CMD-SHELL"), f"unknown health check form {kind!r}"
    return rest if kind == "CMD" else shlex.split(rest[0])


def _mutagrade_commands() -> list[tuple[str, list[str]]]:
    """(where, argv after `mutagrade`) for every mutagrade command in the file."""
    found = []
    for name, service in compose()["services"].items():
        if service.get("command", [None])[0] == "mutagrade":
            found.append((f"{name}: command", mutagrade_args(service["command"])))
        health = _health_command(service)
        if health[0] == "mutagrade":
            found.append((f"{name}: healthcheck", mutagrade_args(health)))
    return found


# ---------------------------------------------------------------------------- static
def test_the_five_services_each_with_a_health_check() -> None:
    services = compose()["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        assert _health_command(service), f"{name} has no health check"
    # What is kept lives in named volumes, not in containers.
    volumes = compose()["volumes"]
    assert any(v.startswith("pgdata:") for v in services["postgres"]["volumes"]) and "pgdata" in volumes
    assert any(v.startswith("redisdata:") for v in services["redis"]["volumes"]) and "redisdata" in volumes


def test_every_mutagrade_command_parses_with_the_real_cli() -> None:
    commands = _mutagrade_commands()
    where = {w for w, _ in commands}
    # api, both workers, and the workers' health checks are mutagrade invocations.
    assert {"api: command", "worker-cpu: command", "worker-gpu: command",
            "worker-cpu: healthcheck", "worker-gpu: healthcheck"} <= where
    parser = build_parser()
    for place, args in commands:
        try:
            parsed = parser.parse_args(args)
        except SystemExit as exc:  # argparse exits 2 on a bad command line
            pytest.fail(f"{place}: `mutagrade {' '.join(args)}` does not parse (exit {exc.code})")
        assert callable(parsed.run), place
    by_place = dict(commands)
    assert parser.parse_args(by_place["api: command"]).command == "serve"
    assert parser.parse_args(by_place["worker-cpu: command"]).queues == "cpu"
    assert parser.parse_args(by_place["worker-gpu: command"]).queues == "gpu"
    assert parser.parse_args(by_place["worker-cpu: healthcheck"]).ping is True


def test_a_wrong_command_would_be_caught() -> None:
    """The check above can fail: a misspelt queue or option is refused by the same parser."""
    parser = build_parser()
    for wrong in (["worker", "--queues", "gpus"], ["serve", "--bind", "0.0.0.0"], ["worker"]):
        with pytest.raises(SystemExit):
            parser.parse_args(wrong)


def test_every_mutagrade_variable_is_a_real_setting_and_they_validate() -> None:
    fields = set(Settings.model_fields)
    for name in ("api", "worker-cpu", "worker-gpu"):
        env = compose_env(name)
        assert env, f"{name} sets no MUTAGRADE_* settings"
        names = {key.removeprefix("MUTAGRADE_").lower() for key in env}
        assert names <= fields, f"{name}: not settings: {sorted(names - fields)}"
        # Explicit values win over this process's environment: the file's own set must validate
        # (the job time limit fits in the claim lease, the queue is one we have, ...).
        settings = Settings(**{key.removeprefix("MUTAGRADE_").lower(): value for key, value in env.items()})
        assert settings.queue == "celery"
        assert settings.task_time_limit_s < settings.claim_lease_s
    # The api and every worker share one database and one broker, reached by service name.
    envs = [compose_env(name) for name in ("api", "worker-cpu", "worker-gpu")]
    assert len({e["MUTAGRADE_DATABASE_URL"] for e in envs}) == 1
    assert len({e["MUTAGRADE_BROKER_URL"] for e in envs}) == 1
    assert "@postgres:5432/" in envs[0]["MUTAGRADE_DATABASE_URL"]
    assert envs[0]["MUTAGRADE_BROKER_URL"].startswith("redis://redis:6379/")
    postgres = compose()["services"]["postgres"]["environment"]
    assert envs[0]["MUTAGRADE_DATABASE_URL"] == (
        f"postgresql+psycopg://{postgres['POSTGRES_USER']}:{interpolate(postgres['POSTGRES_PASSWORD'])}"
        f"@postgres:5432/{postgres['POSTGRES_DB']}"
    )


def test_the_gpu_worker_only_in_the_gpu_profile_with_a_device_reservation() -> None:
    services = compose()["services"]
    for name, service in services.items():
        if name == "worker-gpu":
            assert service["profiles"] == ["gpu"]
        else:
            assert "profiles" not in service, f"{name} must start without a profile"
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert "deploy" not in services["worker-cpu"]  # the cpu worker runs on any machine


def test_the_services_start_in_order() -> None:
    services = compose()["services"]
    assert services["api"]["depends_on"] == {
        "postgres": {"condition": "service_healthy"}, "redis": {"condition": "service_healthy"}
    }
    # The api migrates the schema at start-up; workers wait for it.
    for worker in ("worker-cpu", "worker-gpu"):
        assert services[worker]["depends_on"]["api"]["condition"] == "service_healthy"


def test_the_dockerfile_builds_from_python_311_slim_with_the_extras_as_a_non_root_user() -> None:
    text = DOCKERFILE.read_text()
    instructions = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    assert re.search(r"pip install -e '\.\[torch,service\]'", text)
    users = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "the image must end as a non-root user"
    assert f"useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin {users[-1]}" in text
    # The image's default command is a real one too.
    cmd = re.search(r'^CMD (\[.*\])$', text, re.M)
    assert cmd is not None
    argv = [part.strip(' "') for part in cmd.group(1).strip("[]").split(",")]
    assert build_parser().parse_args(mutagrade_args(argv)).command == "serve"
    # Same torch as pyproject.toml pins.
    pyproject = (DOCKERFILE.parent / "pyproject.toml").read_text()
    torch_pin = re.search(r'"torch==([^"]+)"', pyproject).group(1)
    assert f'"torch=={torch_pin}"' in text


# ------------------------------------------------------------------------------ live
def test_compose_equivalent_on_loopback(tmp_path: Path, postgres: PostgresServer) -> None:
    """The compose deployment, natively: both the example and a weak suite are graded right,
    by the two workers, and the services' own health checks pass."""
    with deployment(tmp_path, postgres, gpu_worker=True) as live:
        ready = httpx.get(f"{live.api.url}/readyz", timeout=10)
        assert ready.status_code == 200
        assert ready.json() == {"status": "ok", "database": "ok", "queue": "ok"}

        # The health checks of the compose file, run here: the api's with its port moved.
        services = compose()["services"]
        api_check = _health_command(services["api"])
        assert api_check[0] == "python"
        probe = [sys.executable, *[a.replace(":8000/", f":{live.api.port}/") for a in api_check[1:]]]
        assert subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
        ping = mutagrade_args(_health_command(services["worker-cpu"]))
        for name in ("cpu-a", "cpu-b"):
            answered = subprocess.run(
                [sys.executable, "-m", "api.cli", *with_option(ping, "--hostname", f"{name}@%h")],
                env=live.env, capture_output=True, text=True, timeout=60,
            )
            assert answered.returncode == 0, answered.stderr
            assert f"{host_format(name + '@%h')}: ok" in answered.stdout
        nobody = subprocess.run(
            [sys.executable, "-m", "api.cli", *with_option(ping, "--hostname", "nobody@%h")],
            env=live.env, capture_output=True, text=True, timeout=60,
        )
        assert nobody.returncode == 1, "a worker that is not there must fail its health check"

        with live.server.client("alice") as alice, live.server.client("prof", "staff") as staff:
            posted = {
                "example": alice.post("/v1/submissions", files={"archive": ("example.tar.gz", example_archive())}),
                "weak": alice.post("/v1/submissions", files={"archive": ("weak.tar.gz", tar_gz(WEAK))}),
            }
            assert all(answer.status_code == 202 for answer in posted.values()), [a.text for a in posted.values()]
            ids = {kind: answer.json()["id"] for kind, answer in posted.items()}
            # The gpu worker's queue, meanwhile: a live torch comparison (on the CPU here).
            golden = staff.post("/v1/golden", json={"cases": 2})
            assert golden.status_code == 202, golden.text
            # The api only queues: each job is claimed by a pool process of one of the workers.
            seen_workers = set()
            for kind, submission_id in ids.items():
                running = wait_done(alice, submission_id, timeout=180)
                assert running["status"] == "done", running.get("error")

            example = alice.get(f"/v1/submissions/{ids['example']}").json()
            assert example["passed"] is True and example["kill_rate"] == 1.0
            assert example["report"]["score"]["killed"] == 12
            assert example["report"]["journal"]["ok"] is True
            weak = alice.get(f"/v1/submissions/{ids['weak']}").json()
            assert weak["passed"] is False
            assert weak["report"]["score"]["required_missing"] == ["s02"]

            from sqlalchemy import create_engine, text

            engine = create_engine(live.database_url)
            try:
                with engine.connect() as connection:
                    rows = connection.execute(text("SELECT id, claimed_by, attempts FROM submissions ORDER BY id")).all()
            finally:
                engine.dispose()
            assert [row.id for row in rows] == sorted(ids.values())
            logs = live.logs()
            for row in rows:
                host, pid, task_id = row.claimed_by.split(":", 2)
                seen_workers.add(live.worker_of(int(pid)))
                assert row.attempts == 1
                assert graded_lines(logs, task_id) == 1, f"submission {row.id} graded other than once"
            # Two jobs posted together go to the two cpu workers (each takes one job at a time).
            assert seen_workers == {"cpu-a", "cpu-b"}, seen_workers

            def golden_finished() -> dict | None:
                body = staff.get(f"/v1/golden/{golden.json()['id']}").json()
                return body if body["status"] in ("done", "error") else None

            run = wait_for(golden_finished, 180, "the golden run", every=0.5)
            assert run["status"] == "done", run["error"]
            rows = {v["id"]: v for v in run["result"]["variants"]}
            assert rows["reference"]["matches"] and not rows["s02"]["matches"]
            # The gpu worker's device: the GPU where the machine has one, else the CPU.
            from grader.flows.golden import device_in_use

            assert run["result"]["device"] == device_in_use()[0] and run["result"]["cases_per_s"] > 0
            assert "mutagrade.golden[" in live.workers["gpu"].text(), "not run by the gpu worker"
            assert "mutagrade.golden[" not in live.workers["cpu-a"].text() + live.workers["cpu-b"].text()
            gradebook = staff.get("/v1/gradebook.csv")
            assert gradebook.status_code == 200 and "alice" in gradebook.text
