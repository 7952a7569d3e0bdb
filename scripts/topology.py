#!/usr/bin/env python
"""docker-compose.yaml's production stack as local processes, without Docker (``make
topology``; ``tests/integration/test_topology.py`` runs the same).

The stack is read from ``docker-compose.yaml`` itself, interpolated with the variables of
``.env.example`` (every change-me secret replaced by a fresh random value), so the compose
file stays the one source of truth. Each service becomes a process on loopback:

- ``postgres``: a private cluster (``initdb``; as root it belongs to the ``postgres``
  user), superuser password from the service's environment, then the compose file's own
  init script (``docker/postgres/10-create-roles-and-databases.sh``) with that environment:
  roles ``airflow``, ``dp_ledger_owner``, ``dp_ledger``, databases ``airflow`` and
  ``dp_ledger``;
- ``redis``: ``redis-server`` (the Celery broker), no persistence;
- ``airflow-init``: the service's own bash command, run as written, with the image's
  ``/entrypoint`` replaced by a shim that does what the image's does for it (``airflow db
  migrate`` when ``_AIRFLOW_DB_MIGRATE`` is set, then runs the command) and ``chown`` by a
  no-op (every process runs as the caller);
- ``airflow-apiserver``, ``airflow-scheduler``, ``airflow-dag-processor``,
  ``airflow-triggerer``, ``airflow-worker``: ``airflow <command>`` with the service's
  environment.

What differs from the containers, and nothing else (:func:`relocate`, :data:`LOCAL`):
``/opt/airflow`` is a directory of ours (``AIRFLOW_HOME``), whose ``dags``,
``data``, ``logs`` and ``dp_config`` are symlinks to what the compose file mounts there;
the host names ``postgres``, ``redis`` and ``airflow-apiserver`` are 127.0.0.1 with a free
port each; the processes share one network namespace, so each listening component gets a
port of its own. PostgreSQL and Redis come from Debian's ``postgresql`` and
``redis-server`` packages, installed with apt-get when missing and running as root.

The scenario (:func:`run_scenario`), through the REST API as an operator would use the UI:
synthetic input; unpausing the DAGs (which, as in production, also creates each daily
DAG's scheduled run for yesterday: it fails at ingest, there is no input for it, and
alerts); backfills of ``mobility_report`` (2020-01-03..03-09: the 35-day
baseline window, then 23 public days) and ``symptoms_dataset`` (14 days) at once; while the
mobility backfill runs, an on-call rerun of one region with a re-noise, which waits for
approval (the requester's own approval is refused, the approver's is taken); then a method
update, approved the same way. ``--keep-running`` leaves the stack up to browse the UI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"
PLACEHOLDER = "change-me"
CONTAINER_HOME = "/opt/airflow"

# The Airflow services, each started as `airflow <its command>`, in this order.
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-dag-processor", "airflow-scheduler",
                    "airflow-triggerer", "airflow-worker")
# The users of the scenario: the compose file's admin triggers; the approver approves.
APPROVER = "approver"

# Synthetic input and the scenario's dates (module docstring).
MOBILITY_START, MOBILITY_END = date(2020, 1, 3), date(2020, 3, 9)
SYMPTOMS_START, SYMPTOMS_END = date(2020, 1, 1), date(2020, 1, 14)
RERUN_DAY = date(2020, 2, 15)
METHOD_UPDATE = {"method_version": "v2-topology", "effective_date": "2020-03-09",
                 "categories": ["parks"], "factor": 1.2,
                 "reason": "topology test: new parks classifier"}
USERS = 12_000
SEED = 5


def log(msg: str) -> None:
    print(f"[topology {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class TopologyError(RuntimeError):
    """The stack or the scenario cannot go on; the message says why and where to look."""


# ------------------------------------------------------------- compose interpolation --
_TOKEN = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|:\?)"
                    r"(?P<arg>[^}]*))?\}|(?P<other>\$.?)")


class MissingVariable(LookupError):
    """A ``${VAR:?message}`` whose variable is unset or empty (Compose refuses to run)."""


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` (a parsed YAML node) with every string interpolated as Compose does
    (``$$``, ``${VAR}``, ``${VAR:-default}``, ``${VAR:?message}``; nothing else is used)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("other") is not None:
            raise ValueError(f"unsupported interpolation {match.group(0)!r} in {value!r}")
        name, op, arg = match.group("name", "op", "arg")
        current = env.get(name, "")
        if op == ":?" and not current:
            raise MissingVariable(f"{name}: {arg}")
        if op == ":-":
            return current or arg
        return current

    return _TOKEN.sub(substitute, value)


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``#`` comments), as Compose reads ``.env``."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path.name}: not KEY=VALUE: {line!r}")
            values[key.strip()] = value.strip()
    return values


def fernet_key() -> str:
    import base64

    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def env_values(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """``.env.example`` with every change-me value replaced by a fresh secret, then
    ``overrides``: the ``.env`` of this stack."""
    values = read_env_file(ENV_EXAMPLE)
    for key, value in values.items():
        if value.startswith(PLACEHOLDER):
            values[key] = (fernet_key() if key == "AIRFLOW_FERNET_KEY"
                           # the ledger key and the release-signing key's Ed25519 seed:
                           # 32 bytes as hex (dp_ops.privacy.ledger_key, release_signing)
                           else secrets.token_hex(32) if key in ("DP_LEDGER_KEY",
                                                                 "DP_RELEASE_SIGNING_KEY")
                           else secrets.token_hex(16))
    values.update(overrides or {})
    return values


def load_compose(values: Mapping[str, str]) -> dict[str, Any]:
    import yaml

    return interpolate(yaml.safe_load(COMPOSE_FILE.read_text()), values)


# ------------------------------------------------------------------- relocation --
@dataclass(frozen=True)
class Ports:
    postgres: int
    redis: int
    api: int
    worker_logs: int
    triggerer_logs: int
    scheduler_health: int

    @classmethod
    def free(cls) -> Ports:
        return cls(*(free_port() for _ in range(6)))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def relocate(value: str, home: Path, ports: Ports) -> str:
    """A container's value on this machine: ``/opt/airflow`` is ``home``; the compose
    network's host names are loopback with this stack's ports."""
    value = value.replace(CONTAINER_HOME, str(home))
    value = re.sub(r"@postgres(?::5432)?/", f"@127.0.0.1:{ports.postgres}/", value)
    value = value.replace("@redis:6379/", f"@127.0.0.1:{ports.redis}/")
    return value.replace("http://airflow-apiserver:8080/", f"http://127.0.0.1:{ports.api}/")


def local_settings(home: Path, ports: Ports) -> dict[str, str]:
    """What the processes need beyond the compose file's environment, and why: the
    image's ``AIRFLOW_HOME``; one port each for what listens (in Compose every container
    has its own network namespace)."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(ports.api),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{ports.api}",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports.worker_logs),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports.triggerer_logs),
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(ports.scheduler_health),
    }


LOCAL = tuple(local_settings(Path("/"), Ports(0, 0, 0, 0, 0, 0)))


def service_env(compose: Mapping[str, Any], service: str, home: Path,
                ports: Ports) -> dict[str, str]:
    """The environment of ``service``'s process: the compose file's, relocated, plus
    :func:`local_settings` and the caller's PATH (the venv's ``airflow`` and ``python``)."""
    env = {k: relocate(str(v), home, ports)
           for k, v in compose["services"][service].get("environment", {}).items()}
    env.update(local_settings(home, ports))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                   os.environ.get("PATH", "")])
    env["HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def link_volumes(compose: Mapping[str, Any], home: Path) -> None:
    """``home`` laid out as the containers see ``/opt/airflow``: a symlink for each bind
    mount of the Airflow services (``./dags``, the data root, the logs, the
    configuration), a directory for each named volume."""
    home.mkdir(parents=True, exist_ok=True)
    for spec in compose["x-airflow-common"]["volumes"]:
        source, target = spec.split(":")[:2]
        if not target.startswith(CONTAINER_HOME + "/"):
            continue
        where = home / target[len(CONTAINER_HOME) + 1:]
        if where.exists() or where.is_symlink():
            continue
        if source.startswith((".", "/")):
            path = (REPO / source).resolve() if source.startswith(".") else Path(source)
            path.mkdir(parents=True, exist_ok=True)
            where.symlink_to(path, target_is_directory=True)
        else:
            where.mkdir(parents=True)


# ---------------------------------------------------------------- Debian packages --
def ensure_programs(programs: Mapping[str, str]) -> None:
    """Install the Debian ``package`` of each missing ``program`` (as root, with apt-get),
    or say what to install."""
    missing = {prog: pkg for prog, pkg in programs.items() if find_program(prog) is None}
    if not missing:
        return
    packages = sorted(set(missing.values()))
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise TopologyError(f"{', '.join(sorted(missing))} not found: install Debian's "
                            f"{' '.join(packages)} (apt-get install {' '.join(packages)})")
    log(f"installing {' '.join(packages)} (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise TopologyError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    # the packages may start their default servers; this stack uses none of them
    if "redis-server" in packages and shutil.which("service"):
        subprocess.run(["service", "redis-server", "stop"], capture_output=True)
    if shutil.which("pg_lsclusters"):
        out = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            ver, name, _port, status, *_ = line.split()
            if status == "online":
                subprocess.run(["pg_ctlcluster", ver, name, "stop"], capture_output=True)


def find_program(name: str) -> str | None:
    """``name`` on PATH, or PostgreSQL's server programs under /usr/lib/postgresql."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
                        key=lambda p: [int(x) for x in re.findall(r"\d+", p.parts[-3])])
    return str(candidates[-1]) if candidates else None


# ---------------------------------------------------------------------- processes --
@dataclass
class Stack:
    """The running processes of the stack, each in its own process group."""

    home: Path
    ports: Ports
    compose: dict[str, Any]
    values: dict[str, str]
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    pg_stop: Callable[[], None] | None = None
    # one engine on Airflow's metadata DB for the scenario's reads (sample_deadlines)
    _metadata: Any = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.api}"

    def start(self, name: str, cmd: list[str], env: Mapping[str, str],
              user: str | None = None) -> None:
        out = (self.log_dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            cmd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(self.home), user=user)
        log(f"started {name} (pid {self.procs[name].pid}, log {self.log_dir / name}.log)")

    def check_alive(self) -> None:
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise TopologyError(f"{name} exited with code {p.returncode}; see "
                                    f"{self.log_dir / name}.log")

    def stop(self) -> None:
        for name in reversed(list(self.procs)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.procs[name].pid, signal.SIGTERM)
        deadline = time.monotonic() + 45
        for name, p in reversed(list(self.procs.items())):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"{name} did not stop in time; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        if self.procs:
            log("stopped " + ", ".join(self.procs))
        self.procs.clear()
        if self._metadata is not None:
            self._metadata.dispose()
            self._metadata = None
        if self.pg_stop is not None:
            self.pg_stop()
            self.pg_stop = None


def start_postgres(stack: Stack) -> None:
    """A private cluster on loopback, then the compose file's init script."""
    ensure_programs({"initdb": "postgresql", "pg_ctl": "postgresql", "psql": "postgresql"})
    initdb, pg_ctl = find_program("initdb"), find_program("pg_ctl")
    assert initdb and pg_ctl
    service = stack.compose["services"]["postgres"]
    env = {k: str(v) for k, v in service["environment"].items()}
    root = os.geteuid() == 0
    run_as = "postgres" if root else None
    # its own short directory under /tmp: the socket path must fit in 107 bytes, and as
    # root the server's user (postgres) must be able to reach it (a pytest tmp_path is
    # under a directory only root may enter)
    pg_dir = Path(tempfile.mkdtemp(prefix="dp_topology_pg."))
    if root:
        shutil.chown(pg_dir, "postgres", "postgres")
    pwfile = pg_dir / "superuser.pw"
    pwfile.write_text(env["POSTGRES_PASSWORD"] + "\n")
    if root:
        shutil.chown(pwfile, "postgres", "postgres")
    base = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8"}
    data = pg_dir / "data"
    proc = subprocess.run([initdb, "-D", str(data), "-U", env["POSTGRES_USER"],
                           f"--pwfile={pwfile}", "--auth-local=trust",
                           "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C",
                           "--no-sync"], env=base, user=run_as, cwd="/", capture_output=True,
                          text=True)
    if proc.returncode != 0:
        shutil.rmtree(pg_dir, ignore_errors=True)
        raise TopologyError(f"initdb failed:\n{proc.stdout}{proc.stderr}")
    pwfile.unlink()
    port = stack.ports.postgres

    def stop() -> None:
        subprocess.run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop"],
                       env=base, user=run_as, cwd="/", capture_output=True)
        with contextlib.suppress(OSError):
            shutil.copy(pg_dir / "server.log", stack.log_dir / "postgres.log")
        shutil.rmtree(pg_dir, ignore_errors=True)

    stack.pg_stop = stop
    # the server's log in its own directory: as root the server runs as postgres
    proc = subprocess.run([pg_ctl, "-D", str(data), "-l", str(pg_dir / "server.log"), "-w",
                           "-t", "60", "-o", f"-c listen_addresses=127.0.0.1 -c port={port} "
                           f"-c unix_socket_directories={pg_dir} -c fsync=off "
                           "-c synchronous_commit=off -c full_page_writes=off", "start"],
                          env=base, user=run_as, cwd="/", capture_output=True, text=True)
    if proc.returncode != 0:
        raise TopologyError(f"PostgreSQL did not start:\n{proc.stdout}{proc.stderr}")
    log(f"PostgreSQL on 127.0.0.1:{port}")
    # the compose file's init script, with the postgres service's environment, as the
    # image runs it from /docker-entrypoint-initdb.d (psql over the local socket)
    script = next(REPO / s.split(":")[0] for s in service["volumes"]
                  if "docker-entrypoint-initdb.d" in s)
    # fed on stdin: as root it runs as postgres, which may not read the checkout (a
    # clone in a 0700 directory such as mktemp -d's failed with "Permission denied")
    proc = subprocess.run(["bash", "-s"], input=script.read_text(),
                          env={**base, **env, "PGHOST": str(pg_dir), "PGPORT": str(port)},
                          capture_output=True, text=True, user=run_as, cwd="/")
    if proc.returncode != 0:
        raise TopologyError(f"{script.name} failed:\n{proc.stdout}{proc.stderr}")
    log(proc.stdout.strip().splitlines()[-1])


def start_redis(stack: Stack) -> None:
    ensure_programs({"redis-server": "redis-server"})
    server = find_program("redis-server")
    assert server
    stack.start("redis", [server, "--bind", "127.0.0.1", "--port", str(stack.ports.redis),
                          "--save", "", "--appendonly", "no", "--dir", str(stack.log_dir)],
                {"PATH": os.environ.get("PATH", "")})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stack.check_alive()
        with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", stack.ports.redis), timeout=2) as s:
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                return
        time.sleep(0.5)
    raise TopologyError(f"redis did not answer PING; see {stack.log_dir}/redis.log")


ENTRYPOINT_SHIM = """#!/bin/sh
# Stands in for the Airflow image's /entrypoint, as far as airflow-init uses it: with
# _AIRFLOW_DB_MIGRATE set, `airflow db migrate` first (the image ignores its failure too:
# airflow-init checks the migrations itself), then the command.
if [ -n "${_AIRFLOW_DB_MIGRATE:-}" ]; then airflow db migrate >&2 || true; fi
exec "$@"
"""


def run_init(stack: Stack) -> None:
    """The airflow-init service's own command, relocated (module docstring)."""
    service = stack.compose["services"]["airflow-init"]
    if service.get("entrypoint") != "/bin/bash" or service["command"][0] != "-c":
        raise TopologyError("airflow-init is no longer `bash -c SCRIPT`: update topology.py")
    shims = stack.home.parent / "shims"
    shims.mkdir()
    (shims / "entrypoint").write_text(ENTRYPOINT_SHIM)
    (shims / "chown").write_text("#!/bin/sh\n# every process of this stack runs as the "
                                 "caller: nothing to hand over\nexit 0\n")
    for shim in ("entrypoint", "chown"):
        (shims / shim).chmod(0o755)
    env = service_env(stack.compose, "airflow-init", stack.home, stack.ports)
    env["PATH"] = os.pathsep.join([str(shims), env["PATH"]])
    script = relocate(service["command"][1], stack.home, stack.ports)
    script = re.sub(r"(?<![\w/.-])/entrypoint\b", str(shims / "entrypoint"), script)
    log("airflow-init (db migrate, auth file, ledger init --grant dp_ledger, ledger --verify)")
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          cwd=str(stack.home))
    (stack.log_dir / "airflow-init.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise TopologyError(f"airflow-init failed ({proc.returncode}):\n{tail}")


def start_airflow(stack: Stack) -> None:
    for service in AIRFLOW_SERVICES:
        command = stack.compose["services"][service]["command"]
        args = command.split() if isinstance(command, str) else list(command)
        env = service_env(stack.compose, service, stack.home, stack.ports)
        stack.start(service, ["airflow", *args], env)


@contextlib.contextmanager
def running_stack(base: Path, overrides: Mapping[str, str] | None = None,
                  ) -> Iterator[Stack]:
    """The whole stack under ``base`` (deleted by nobody: the caller's), stopped on exit."""
    home = base / "opt-airflow"
    data = base / "data"
    data.mkdir(parents=True, exist_ok=True)
    ports = Ports.free()
    values = env_values({
        "DP_DATA_DIR": str(data), "AIRFLOW_LOGS_DIR": str(base / "logs"),
        "AIRFLOW_UID": str(os.getuid()), **(overrides or {})})
    compose = load_compose(values)
    link_volumes(compose, home)
    log_dir = base / "services"
    log_dir.mkdir()
    stack = Stack(home=home, ports=ports, compose=compose, values=values, log_dir=log_dir)
    try:
        start_postgres(stack)
        start_redis(stack)
        run_init(stack)
        start_airflow(stack)
        wait_healthy(stack)
        yield stack
    finally:
        stack.stop()


def wait_healthy(stack: Stack, timeout: float = 300) -> None:
    """Until the api-server's health endpoint reports the metadata DB, scheduler,
    dag-processor and triggerer healthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        stack.check_alive()
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
            with urllib.request.urlopen(f"{stack.api_url}/api/v2/monitor/health",
                                        timeout=5) as r:
                last = json.loads(r.read())
                parts = ("metadatabase", "scheduler", "dag_processor", "triggerer")
                if all((last.get(p) or {}).get("status") == "healthy" for p in parts):
                    log(f"healthy: {', '.join(parts)}; UI {stack.api_url}")
                    return
        time.sleep(2)
    raise TopologyError(f"the stack is not healthy after {timeout:.0f} s: {last}")


# ----------------------------------------------------------------------- REST API --
class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class Api:
    """Airflow's REST API as one user (the simple auth manager's token)."""

    base: str
    username: str
    password: str
    token: str = ""

    def login(self) -> Api:
        data = json.dumps({"username": self.username, "password": self.password}).encode()
        req = urllib.request.Request(f"{self.base}/auth/token", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            self.token = json.loads(r.read())["access_token"]
        return self

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(f"{self.base}/api/v2{path}", data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, method, path, exc.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"/dags/{dag_id}/dagRuns?limit=1000")["dag_runs"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return list(self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=1000")
                    ["task_instances"])

    def asset_events(self, name: str) -> list[dict[str, Any]]:
        assets = self.get(f"/assets?name_pattern={name}")["assets"]
        ids = [a["id"] for a in assets if a["name"] == name]
        if not ids:
            return []
        events = self.get(f"/assets/events?asset_id={ids[0]}&limit=1000")
        return sorted(events["asset_events"], key=lambda e: e["id"])


def users(stack: Stack) -> dict[str, str]:
    """user -> password, from the auth manager's password file (written by airflow-init)."""
    path = Path(relocate(stack.compose["x-airflow-common"]["environment"]
                         ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"],
                         stack.home, stack.ports))
    return dict(json.loads(path.read_text()))


# ----------------------------------------------------------------------- scenario --
@dataclass
class Outcome:
    """What the scenario did, for the checks and the report."""

    backfills: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rerun: dict[str, Any] = field(default_factory=dict)
    method_update: dict[str, Any] = field(default_factory=dict)
    self_approval: str = ""
    approval_body: str = ""
    rerun_done_while_backfill_ran: bool = False
    # the daily DAGs' scheduled runs: unpausing creates the run for yesterday, and one more
    # comes each time the scenario crosses midnight UTC. dag_id -> run id -> its state and
    # failed tasks (the synthetic input has no data for these days)
    scheduled: dict[str, dict[str, tuple[str, list[str]]]] = field(default_factory=dict)
    consumer_runs: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    # the daily runs' deadlines the scheduler created, as seen while the backfills ran:
    # dag_id -> (most rows at once, their interval after queueing in hours), and how many
    # deadlines were ever missed
    deadlines: dict[str, tuple[int, float]] = field(default_factory=dict)
    deadlines_missed: int = 0


def sample_deadlines(stack: Stack, outcome: Outcome) -> None:
    """Read Airflow's ``deadline`` table (as the metadata DB's own role): the run deadlines
    of the daily DAGs' running runs, and any missed one."""
    import sqlalchemy as sa

    if stack._metadata is None:  # one engine for every poll, disposed by Stack.stop
        url = stack.compose["x-airflow-common"]["environment"][
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        stack._metadata = sa.create_engine(relocate(url, stack.home, stack.ports))
    with stack._metadata.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT r.dag_id, count(*), "
            "max(extract(epoch FROM d.deadline_time - r.queued_at)) / 3600 "
            "FROM deadline d JOIN dag_run r ON r.id = d.dagrun_id "
            "GROUP BY r.dag_id")).all()
        missed = conn.execute(sa.text(
            "SELECT count(*) FROM deadline WHERE missed")).scalar_one()
    for dag_id, count, hours in rows:
        seen = outcome.deadlines.get(dag_id, (0, 0.0))
        if count > seen[0]:
            outcome.deadlines[dag_id] = (int(count), round(float(hours), 6))
    outcome.deadlines_missed = max(outcome.deadlines_missed, int(missed))


def wait_for(what: str, check: Callable[[], Any], stack: Stack, timeout: float,
             every: float = 3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        stack.check_alive()
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TopologyError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def dags_parsed(api: Api, dag_ids: list[str]) -> bool:
    errors = api.get("/importErrors")
    if errors["total_entries"]:
        raise TopologyError(f"DAG import errors: {json.dumps(errors)[:2000]}")
    known = {d["dag_id"] for d in api.get("/dags?limit=100")["dags"]}
    return set(dag_ids) <= known


def backfill_state(api: Api, dag_id: str, days: int) -> tuple[int, int, list[str]]:
    """(succeeded, finished, failed run ids) of a DAG's backfill runs."""
    runs = [r for r in api.runs(dag_id) if r["run_type"] == "backfill"]
    failed = [r["dag_run_id"] for r in runs if r["state"] == "failed"]
    ok = sum(r["state"] == "success" for r in runs)
    return ok, ok + len(failed), failed


def failed_detail(api: Api, dag_id: str, run_ids: list[str]) -> str:
    lines = []
    for run_id in run_ids[:3]:
        for ti in api.task_instances(dag_id, run_id):
            if ti["state"] in ("failed", "upstream_failed"):
                lines.append(f"{dag_id} {run_id} {ti['task_id']}: {ti['state']}")
    return "\n".join(lines)


# how long a request waits before the helper answers it (answer_approvals)
SETTLE_S = 5.0


def answer_approvals(approver: Api, dag_id: str, run_id: str,
                     is_alive: Callable[[], None], timeout: float = 600,
                     on_request: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Approve, as ``approver``, every approval request of the run's ``approve_spend`` until
    that task is done; returns how many requests there were. More than one happens when
    Airflow retries the task: in Airflow 3.3.2 an answer that arrives within a second or so
    of the task parking can race the executor's report of the parked attempt, which the
    scheduler then takes for a failure and retries, and the retry asks again (nothing is
    spent without an answer), so it answers a request only after it has waited
    ``SETTLE_S`` seconds, and again if it is asked again. ``on_request`` sees each new
    request first."""
    base = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/approve_spend"
    answered: set[int] = set()
    parked_since: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        is_alive()
        ti = approver.get(base)
        state, try_number = ti["state"], int(ti["try_number"])
        if state in ("success", "skipped"):
            return len(answered)
        if state in ("failed", "upstream_failed"):
            raise TopologyError(f"{dag_id} {run_id}: approve_spend {state}")
        if state == "awaiting_input":
            parked_since.setdefault(try_number, time.monotonic())
        # answer once the scheduler has taken in the parked attempt (as a person would,
        # seconds later): an earlier answer is what the race above needs
        if (state == "awaiting_input" and try_number not in answered
                and time.monotonic() - parked_since[try_number] >= SETTLE_S):
            detail = approver.get(f"{base}/-1/hitlDetails")
            if not detail.get("response_received"):
                if on_request is not None:
                    on_request(detail)
                try:
                    approver.call("PATCH", f"{base}/-1/hitlDetails",
                                  {"chosen_options": ["Approve"], "params_input": {}})
                except ApiError as exc:
                    if exc.status != 409:  # 409: answered already
                        raise
            answered.add(try_number)
        time.sleep(1)
    raise TopologyError(f"{dag_id} {run_id}: approve_spend not done after {timeout:.0f} s")


def approve(admin: Api, approver: Api, dag_id: str, run_id: str, stack: Stack,
            outcome: Outcome) -> None:
    """Answer the run's approval requests: first the requester tries (refused), then the
    approver approves."""
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/approve_spend/-1/hitlDetails"

    def requester_tries(detail: dict[str, Any]) -> None:
        outcome.approval_body = str(detail.get("body") or "")
        try:
            admin.call("PATCH", path, {"chosen_options": ["Approve"], "params_input": {}})
            outcome.self_approval = "accepted"
        except ApiError as exc:
            outcome.self_approval = f"HTTP {exc.status}"
        log(f"{dag_id}: the requester's own approval: {outcome.self_approval}")

    asked = answer_approvals(approver, dag_id, run_id, stack.check_alive,
                             on_request=requester_tries)
    log(f"{dag_id}: approved by {approver.username} ({asked} request(s))")


def create_smtp_connection(api: Api, uri_port: int) -> None:
    """The SMTP server for the alerts, as an operator adds it (Admin > Connections)."""
    api.call("POST", "/connections", {
        "connection_id": "smtp_default", "conn_type": "smtp", "host": "127.0.0.1",
        "port": uri_port, "extra": json.dumps({
            "disable_tls": True, "disable_ssl": True, "from_email": "dp-ops@example.org",
            "retry_limit": 0, "timeout": 10})})


def run_scenario(stack: Stack, data_root: Path, timeout_s: float = 2400,
                 smtp_port: int | None = None) -> Outcome:
    from dp_demo.generator import generate

    from dp_ops.layout import DataRoot

    outcome = Outcome()
    t0 = time.monotonic()
    generate(DataRoot(data_root), min(MOBILITY_START, SYMPTOMS_START), MOBILITY_END,
             users=USERS, seed=SEED)
    outcome.seconds["generate"] = time.monotonic() - t0
    log(f"synthetic input {min(MOBILITY_START, SYMPTOMS_START)}..{MOBILITY_END}, "
        f"{USERS} users ({outcome.seconds['generate']:.0f} s)")
    passwords = users(stack)
    admin_name = stack.values.get("AIRFLOW_ADMIN_USERNAME", "admin")
    admin = Api(stack.api_url, admin_name, passwords[admin_name]).login()
    approver = Api(stack.api_url, APPROVER, passwords[APPROVER]).login()
    dags = ["mobility_report", "symptoms_dataset", "mobility_region_rerun",
            "mobility_method_update", "mobility_release_consumer_example"]
    wait_for("the DAGs to be parsed", lambda: dags_parsed(admin, dags), stack, timeout=300)
    if smtp_port is not None:
        create_smtp_connection(admin, smtp_port)
    # Unpausing a daily DAG also creates its scheduled run for yesterday, as in
    # production; the synthetic input has no data for it, so that run fails at ingest
    # (INPUT MISSING alert) and spends nothing.
    for dag_id in dags:
        admin.call("PATCH", f"/dags/{dag_id}", {"is_paused": False})
    spans = {"mobility_report": (MOBILITY_START, MOBILITY_END),
             "symptoms_dataset": (SYMPTOMS_START, SYMPTOMS_END)}
    t_backfill = time.monotonic()
    for dag_id, (start, end) in spans.items():
        admin.call("POST", "/backfills", {
            "dag_id": dag_id, "from_date": f"{start}T00:00:00Z", "to_date": f"{end}T00:00:00Z",
            "max_active_runs": 4, "reprocess_behavior": "failed", "run_backwards": False,
            "dag_run_conf": {}})
        log(f"backfill {dag_id} {start}..{end} created")

    def mobility_day_done(day: date) -> bool:
        sample_deadlines(stack, outcome)
        for r in admin.runs("mobility_report"):
            if r["state"] == "failed" and r["run_type"] == "backfill":
                raise TopologyError("a mobility backfill run failed:\n" + failed_detail(
                    admin, "mobility_report", [r["dag_run_id"]]))
            if r["run_type"] == "backfill" and r["state"] == "success" and \
                    r["data_interval_start"][:10] == day.isoformat():
                return True
        return False

    wait_for(f"the mobility backfill to publish {RERUN_DAY}",
             lambda: mobility_day_done(RERUN_DAY), stack, timeout=timeout_s)
    # the on-call rerun, while the backfill goes on
    region = rerun_region(data_root)
    run_id = f"oncall__{RERUN_DAY}__{region}"
    admin.call("POST", "/dags/mobility_region_rerun/dagRuns", {
        "dag_run_id": run_id, "logical_date": None,
        "conf": {"date": RERUN_DAY.isoformat(), "region": region, "renoise": True,
                 "reason": "topology test: raw data corrected, INC-1"}})
    log(f"on-call rerun {run_id} triggered by {admin_name}")
    approve(admin, approver, "mobility_region_rerun", run_id, stack, outcome)
    final = wait_for("the on-call rerun", lambda: run_finished(admin, "mobility_region_rerun",
                                                                run_id), stack, timeout=900)
    ok, _, _ = backfill_state(admin, "mobility_report", 0)
    total_days = (MOBILITY_END - MOBILITY_START).days + 1
    outcome.rerun_done_while_backfill_ran = ok < total_days
    outcome.rerun = {"run_id": run_id, "region": region, "state": final,
                     "tasks": admin.task_instances("mobility_region_rerun", run_id)}
    log(f"on-call rerun {final}; mobility backfill {ok}/{total_days} at that time")
    for dag_id, (start, end) in spans.items():
        days = (end - start).days + 1

        def done(dag_id: str = dag_id, days: int = days) -> bool:
            sample_deadlines(stack, outcome)
            ok, finished, failed = backfill_state(admin, dag_id, days)
            if failed:
                raise TopologyError(f"{dag_id}: {len(failed)} backfill run(s) failed:\n"
                                    + failed_detail(admin, dag_id, failed))
            return ok == days

        wait_for(f"the {dag_id} backfill", done, stack, timeout=timeout_s)
        outcome.backfills[dag_id] = [r for r in admin.runs(dag_id)
                                     if r["run_type"] == "backfill"]
    outcome.seconds["backfills"] = time.monotonic() - t_backfill
    log(f"both backfills done ({outcome.seconds['backfills']:.0f} s)")
    mu_id = f"method_update__{METHOD_UPDATE['method_version']}"
    admin.call("POST", "/dags/mobility_method_update/dagRuns",
               {"dag_run_id": mu_id, "logical_date": None, "conf": METHOD_UPDATE})
    approve(admin, approver, "mobility_method_update", mu_id, stack, Outcome())
    final = wait_for("the method update", lambda: run_finished(
        admin, "mobility_method_update", mu_id), stack, timeout=900)
    outcome.method_update = {"run_id": mu_id, "state": final,
                             "tasks": admin.task_instances("mobility_method_update", mu_id)}
    # the consumer runs on release events (at least the method update's); let them finish
    def consumed() -> list[dict[str, Any]] | None:
        runs = admin.runs("mobility_release_consumer_example")
        done = runs and all(r["state"] in ("success", "failed") for r in runs)
        return runs if done and any(r["start_date"] and r["start_date"] >= mu_started
                                    for r in runs) else None

    mu_started = str(admin.get(f"/dags/mobility_method_update/dagRuns/{mu_id}")["start_date"])
    outcome.consumer_runs = wait_for("the consumer DAG's run after the method update",
                                     consumed, stack, timeout=600)
    for dag_id in spans:
        def scheduled_done(dag_id: str = dag_id) -> dict[str, tuple[str, list[str]]] | None:
            runs = [r for r in admin.runs(dag_id) if r["run_type"] == "scheduled"]
            if not runs or any(r["state"] not in ("success", "failed") for r in runs):
                return None
            return {str(r["dag_run_id"]): (str(r["state"]), [
                t["task_id"] for t in admin.task_instances(dag_id, r["dag_run_id"])
                if t["state"] == "failed"]) for r in runs}

        outcome.scheduled[dag_id] = wait_for(f"{dag_id}'s scheduled runs", scheduled_done,
                                             stack, timeout=600)
    outcome.seconds["total"] = time.monotonic() - t0
    log(f"scenario done in {outcome.seconds['total']:.0f} s")
    return outcome


def run_finished(api: Api, dag_id: str, run_id: str) -> str | None:
    state = str(api.get(f"/dags/{dag_id}/dagRuns/{run_id}")["state"])
    return state if state in ("success", "failed") else None


def rerun_region(data_root: Path) -> str:
    """A level-2 region of the public region table (the first, in file order)."""
    import csv

    with (data_root / "reference" / "regions.csv").open(newline="") as f:
        return next(r["region_id"] for r in csv.DictReader(f) if r["level"] == "2")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, default=REPO / "topology",
                   help="where the stack lives (deleted first; default ./topology)")
    p.add_argument("--keep-running", action="store_true",
                   help="leave the stack up after the scenario (Ctrl-C stops it)")
    p.add_argument("--no-scenario", action="store_true", help="only start the stack")
    args = p.parse_args(argv)
    if args.base.exists():
        shutil.rmtree(args.base)
    args.base.mkdir(parents=True)
    base = args.base.resolve()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with running_stack(base, {"DP_SPEND_APPROVERS": APPROVER}) as stack:
            if not args.no_scenario:
                outcome = run_scenario(stack, base / "data")
                print(json.dumps({"seconds": outcome.seconds,
                                  "self_approval": outcome.self_approval,
                                  "rerun": outcome.rerun["state"],
                                  "method_update": outcome.method_update["state"]}, indent=1))
            if args.keep_running:
                pw = users(stack)
                log(f"UI {stack.api_url}: {', '.join(f'{u} / {p}' for u, p in pw.items())}; "
                    "Ctrl-C stops the stack")
                while True:
                    stack.check_alive()
                    time.sleep(5)
    except (TopologyError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", None) or ""
        log(f"FAILED: {exc}{chr(10) + str(detail) if detail else ''}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
