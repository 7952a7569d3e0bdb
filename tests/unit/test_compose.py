"""The Docker Compose deployment: docker-compose.yaml, Dockerfile, .dockerignore,
.env.example and docker/.

The build machine has no Docker engine, so the stack is checked statically: the compose
file is parsed (PyYAML resolves its anchors and ``<<`` merges as Compose does) and its
``${VAR}`` references are interpolated here with ``.env.example``, using the Compose rules
for the forms the file uses (``${VAR:-default}``, ``${VAR:?error}``, ``$$``). The
airflow-init script is run with the image's entrypoint and ``chown`` stubbed out, the
postgres service's command with the image's entrypoint stubbed, and the PostgreSQL init
script with ``psql`` stubbed (what it sends is checked; docs/deploy.md says where it was
run against a real server). ``docker compose config`` runs too when the Compose plugin is
installed (no engine needed); otherwise that one test is skipped and says why.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url
from support.pipeline_helpers import load_script

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"

AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer", "airflow-worker", "airflow-init")
REQUIRED_SERVICES = ("postgres", "redis") + AIRFLOW_SERVICES
# Keys a service may add to the common environment, and why.
EXTRA_ENV = {
    "airflow-worker": {"DUMB_INIT_SETSID"},           # Celery warm shutdown
    "airflow-init": {"_AIRFLOW_DB_MIGRATE",            # the entrypoint migrates the DB
                     "_AIRFLOW_WWW_USER_USERNAME", "_AIRFLOW_WWW_USER_PASSWORD",
                     # the approver's password for the auth file
                     "_AIRFLOW_APPROVER_USERNAME", "_AIRFLOW_APPROVER_PASSWORD",
                     "DP_LEDGER_OWNER_URL"},               # ledger init, as the owner
    "airflow-cli": {"CONNECTION_CHECK_MAX_COUNT"},
}
# Where the repository and the data root are mounted inside every Airflow container
# (plugins/ is not mounted: the image installs dp_ops and dp_demo).
DAGS, INCLUDE = "/opt/airflow/dags", "/opt/airflow/include"
CONFIG, DATA = "/opt/airflow/dp_config", "/opt/airflow/data"
# Airflow's plugins folder, which stays empty.
AIRFLOW_PLUGINS = "/opt/airflow/plugins"
# .env variables that are secrets, and the container variable airflow-init checks for each.
INIT_SECRETS = {
    "AIRFLOW_JWT_SECRET": "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY": "AIRFLOW__API__SECRET_KEY",
    "AIRFLOW_FERNET_KEY": "AIRFLOW__CORE__FERNET_KEY",
    "POSTGRES_PASSWORD": "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "DP_LEDGER_DB_PASSWORD": "DP_LEDGER_URL",
    "DP_LEDGER_OWNER_DB_PASSWORD": "DP_LEDGER_OWNER_URL",
    "DP_LEDGER_KEY": "DP_LEDGER_KEY",
    "DP_RELEASE_SIGNING_KEY": "DP_RELEASE_SIGNING_KEY",
    "AIRFLOW_ADMIN_PASSWORD": "_AIRFLOW_WWW_USER_PASSWORD",
    "AIRFLOW_APPROVER_PASSWORD": "_AIRFLOW_APPROVER_PASSWORD",
}
# The passwords the postgres service reads, and its container variable for each (its
# command refuses their placeholders before the image's entrypoint runs). The superuser's
# is in no Airflow container, so airflow-init cannot check it.
POSTGRES_SECRETS = {
    "POSTGRES_SUPERUSER_PASSWORD": "POSTGRES_PASSWORD",   # the image's superuser
    "POSTGRES_PASSWORD": "AIRFLOW_DB_PASSWORD",           # the airflow role
    "DP_LEDGER_OWNER_DB_PASSWORD": "DP_LEDGER_OWNER_DB_PASSWORD",
    "DP_LEDGER_DB_PASSWORD": "DP_LEDGER_DB_PASSWORD",
}
SECRETS = set(INIT_SECRETS) | set(POSTGRES_SECRETS)
PLACEHOLDER = "change-me"
# The PostgreSQL roles (docs/deploy.md, "The database roles"): the image's superuser, used
# only by the postgres service; Airflow's metadata role; the ledger's owner, used only by
# airflow-init's `ledger init`; the pipeline's role, SELECT and INSERT on the ledger only.
SUPERUSER, METADATA_ROLE, LEDGER_OWNER, PIPELINE_ROLE = (
    "postgres", "airflow", "dp_ledger_owner", "dp_ledger")
INIT_SCRIPT_DIR = "/docker-entrypoint-initdb.d/"
# What each role created by the init script may be: a login, nothing else.
ROLE_ATTRIBUTES = {"LOGIN", "NOSUPERUSER", "NOCREATEDB", "NOCREATEROLE", "NOREPLICATION",
                   "NOBYPASSRLS"}

# Compose interpolation (an escaped $, ${NAME[:-|:?]arg}; any other $ use is an error, so
# that it stays the same as Compose's) and .env reading: scripts/topology.py's, which
# starts this very stack as local processes (tests/integration/test_topology.py).
_topology = load_script("topology")
_TOKEN = _topology._TOKEN
MissingVariable = _topology.MissingVariable
interpolate = _topology.interpolate
read_env_file = _topology.read_env_file


def strings(node: Any) -> list[str]:
    """Every string value of a parsed YAML node: what Compose interpolates (comments are
    gone, and keys are not interpolated)."""
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return [node] if isinstance(node, str) else []


def volume_map(service: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Container path -> (source, mode) of a service's short-syntax volumes."""
    mounts = {}
    for spec in service.get("volumes", []):
        source, target, *mode = spec.split(":")
        mounts[target] = (source, mode[0] if mode else "rw")
    return mounts


def good_env() -> dict[str, str]:
    """.env.example with every placeholder replaced by a fresh random value."""
    env = read_env_file(ENV_EXAMPLE)
    return {k: (secrets.token_hex(16) if v.startswith(PLACEHOLDER) else v)
            for k, v in env.items()}


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """The compose file as written (``${VAR}`` not interpolated)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def example_env() -> dict[str, str]:
    return read_env_file(ENV_EXAMPLE)


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any], example_env: dict[str, str]) -> dict[str, Any]:
    """The compose file as Compose sees it with ``.env.example`` as its ``.env``."""
    return interpolate(raw, example_env)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def airflow_image_services(raw: dict[str, Any]) -> list[str]:
    """Every service built from the common block (the required ones, airflow-cli, flower)."""
    image = raw["x-airflow-common"]["image"]
    return [name for name, svc in raw["services"].items() if svc.get("image") == image]


# ------------------------------------------------------------------------- services ----
def test_required_services_exist(services: dict[str, Any]) -> None:
    missing = set(REQUIRED_SERVICES) - set(services)
    assert not missing, f"docker-compose.yaml lacks services {sorted(missing)}"


def test_every_airflow_service_shares_the_common_block(raw: dict[str, Any]) -> None:
    common = raw["x-airflow-common"]
    names = airflow_image_services(raw)
    assert set(AIRFLOW_SERVICES) <= set(names), "an Airflow service has its own image"
    for name in names:
        svc = raw["services"][name]
        assert svc.get("build") == common["build"], name
        assert svc.get("volumes") == common["volumes"], f"{name}: mounts differ from common"
        env = svc["environment"]
        for key, value in common["environment"].items():
            assert env.get(key) == value, f"{name}: {key}={env.get(key)!r}, common {value!r}"
        extra = set(env) - set(common["environment"])
        assert extra <= EXTRA_ENV.get(name, set()), f"{name}: unexpected variables {extra}"
        expected_user = "0:0" if name == "airflow-init" else common["user"]
        assert svc.get("user") == expected_user, name


def test_common_environment(compose: dict[str, Any], services: dict[str, Any],
                            example_env: dict[str, str]) -> None:
    env = compose["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"

    meta = make_url(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert meta.get_backend_name() == "postgresql" and meta.host == "postgres"
    assert (meta.username, meta.database) == (METADATA_ROLE, "airflow")
    assert meta.password == example_env["POSTGRES_PASSWORD"]
    # Not the image's superuser: the init script creates this role and its database
    # (test_init_script_creates_the_roles_and_databases).
    postgres = services["postgres"]["environment"]
    assert postgres["POSTGRES_USER"] != meta.username
    assert postgres["AIRFLOW_DB_PASSWORD"] == meta.password
    result = urlsplit(env["AIRFLOW__CELERY__RESULT_BACKEND"])
    assert result.scheme == "db+postgresql" and result.hostname == "postgres"
    assert (result.username, result.path) == (meta.username, f"/{meta.database}")
    broker = urlsplit(env["AIRFLOW__CELERY__BROKER_URL"])
    assert broker.scheme == "redis" and broker.hostname == "redis"

    # Tasks report to the api-server's Execution API: the URL must name that service and
    # the container port it listens on.
    api = urlsplit(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert api.hostname == "airflow-apiserver" and api.path == "/execution/"
    published = [p.rsplit(":", 1)[-1] for p in services["airflow-apiserver"]["ports"]]
    assert str(api.port) in published

    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "true"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "false"
    assert env["GX_ANALYTICS_ENABLED"] == "false"


def test_one_jwt_secret_for_all(raw: dict[str, Any]) -> None:
    """Airflow makes up a JWT secret per process when none is set, and then the api-server
    rejects every task's token: one required variable, set once, for every service."""
    text = COMPOSE_FILE.read_text()
    assert len(re.findall(r"^\s*AIRFLOW__API_AUTH__JWT_SECRET:", text, re.M)) == 1
    assert "JWT_PRIVATE_KEY" not in text
    value = raw["x-airflow-common"]["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"]
    assert re.fullmatch(r"\$\{AIRFLOW_JWT_SECRET:\?[^}]+\}", value), value
    for name in airflow_image_services(raw):
        assert raw["services"][name]["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"] == value


# --------------------------------------------------------------------------- mounts ----
def test_repository_and_data_root_are_mounted(compose: dict[str, Any],
                                              services: dict[str, Any]) -> None:
    for name in airflow_image_services(compose):
        mounts = volume_map(services[name])
        for target in (DAGS, CONFIG, DATA):
            assert target in mounts, f"{name}: nothing mounted at {target}"
        source, mode = mounts[DAGS]
        assert (REPO / source).resolve() == REPO / "dags", f"{name}: {DAGS}"
        assert mode == "ro", f"{name}: {DAGS} should be read-only"
        # the SQL is package data of the image's dp_ops: a mounted include/ would not be read
        assert INCLUDE not in mounts, f"{name}: include/ is mounted but never read"
        # dp_ops is imported from the image (test_dockerfile_installs_the_project): a
        # mounted copy of plugins/ would look like the code in use without being it.
        for target, (source, _) in mounts.items():
            if source.startswith("."):
                assert (REPO / source).resolve() != REPO / "plugins", f"{name}: {target}"
        assert AIRFLOW_PLUGINS not in mounts, f"{name}: Airflow's plugins folder is mounted"
        assert (REPO / mounts[CONFIG][0]).is_dir(), f"{name}: config dir missing"
        assert mounts[DATA][1] == "rw", f"{name}: the data root must be writable"
    assert list((REPO / "dags").glob("*.py")) and list((REPO / "include/sql").glob("*.sql"))


def test_dp_ops_settings_point_at_the_mounts(compose: dict[str, Any],
                                           services: dict[str, Any]) -> None:
    env = compose["x-airflow-common"]["environment"]
    assert env["DP_DATA_ROOT"] == DATA
    # dp_ops comes from the image's site-packages, nothing is put on the import path.
    for name in airflow_image_services(compose):
        assert "PYTHONPATH" not in services[name]["environment"], name
    # Airflow exec()s every .py under its plugins folder (dp_ops/__main__ would run the
    # CLI): the plugins folder is an empty directory of the container, never plugins/.
    assert PurePosixPath(env["AIRFLOW__CORE__PLUGINS_FOLDER"]) == PurePosixPath(AIRFLOW_PLUGINS)
    # The installed (non-editable) dp_ops reads its SQL as package data (the wheel test,
    # tests/integration/test_wheel.py): no DP_SQL_DIR to keep in step with the image.
    assert "DP_SQL_DIR" not in env
    for variable in ("DP_MOBILITY_CONFIG", "DP_SYMPTOMS_CONFIG", "DP_EXECUTION_CONFIG"):
        assert variable in env


def test_execution_config_example_is_valid(compose: dict[str, Any]) -> None:
    from dp_ops.settings import load_execution_settings

    source, _ = volume_map(compose["x-airflow-common"])[CONFIG]
    example = REPO / source / "execution.example.json"
    settings = load_execution_settings({"DP_EXECUTION_CONFIG": str(example)})
    assert settings.bounding_shards == 2


# ------------------------------------------------------------------ health and order ----
HEALTH_COMMANDS = {
    "postgres": "pg_isready",
    "redis": "redis-cli",
    "airflow-apiserver": "http://localhost:8080/api/v2/",
    "airflow-scheduler": "http://localhost:8974/health",
    "airflow-dag-processor": "--job-type DagProcessorJob",
    "airflow-triggerer": "--job-type TriggererJob",
    "airflow-worker": "inspect ping",
}


def test_every_long_running_service_has_a_health_check(services: dict[str, Any]) -> None:
    long_running = [n for n, s in services.items()
                    if n != "airflow-init" and not s.get("profiles")]
    assert set(HEALTH_COMMANDS) == set(long_running)
    for name in long_running:
        test = services[name].get("healthcheck", {}).get("test")
        assert test, f"{name} has no health check"
        command = test if isinstance(test, str) else " ".join(test)
        assert HEALTH_COMMANDS[name] in command, f"{name}: {command}"
        assert services[name].get("restart") == "always", name
    env = services["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "true"  # serves :8974/health
    assert "restart" not in services["airflow-init"], "airflow-init is one-shot"


def test_start_order(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        deps = services[name]["depends_on"]
        for backend in ("postgres", "redis"):
            assert deps[backend]["condition"] == "service_healthy", f"{name} -> {backend}"
        if name != "airflow-init":
            assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
    worker = services["airflow-worker"]["depends_on"]
    assert worker["airflow-apiserver"]["condition"] == "service_healthy"
    for name, svc in services.items():
        for dep, spec in svc.get("depends_on", {}).items():
            if spec["condition"] == "service_healthy":
                assert services[dep].get("healthcheck"), f"{name} waits for {dep}'s health"


# --------------------------------------------------------------------------- ledger ----
def _init_scripts(postgres: Mapping[str, Any]) -> list[tuple[Path, str]]:
    return [(REPO / src, target) for target, (src, _) in volume_map(postgres).items()
            if target.startswith(INIT_SCRIPT_DIR)]


def test_the_tasks_ledger_connection_is_the_command_lines_ledger(
        compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks read the ledger from the Connection `dp_ledger`, the command line from
    DP_LEDGER_URL: both must name the same database, role and password."""
    from dp_ops.airflow.runtime import ledger_url_from_connection

    env = compose["x-airflow-common"]["environment"]
    monkeypatch.setenv("AIRFLOW_CONN_DP_LEDGER", env["AIRFLOW_CONN_DP_LEDGER"])
    assert make_url(ledger_url_from_connection()) == make_url(env["DP_LEDGER_URL"])


def test_ledger_is_postgres_apart_from_the_metadata(compose: dict[str, Any],
                                                    services: dict[str, Any],
                                                    example_env: dict[str, str]) -> None:
    env = compose["x-airflow-common"]["environment"]
    ledger = make_url(env["DP_LEDGER_URL"])
    meta = make_url(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert ledger.drivername == "postgresql+psycopg"  # psycopg 3, pinned in requirements
    assert "psycopg[binary]==" in (REPO / "requirements.txt").read_text()
    assert ledger.host == "postgres" and ledger.database != meta.database
    assert (ledger.username, ledger.database) == (PIPELINE_ROLE, "dp_ledger")
    assert ledger.username != meta.username
    assert ledger.password == example_env["DP_LEDGER_DB_PASSWORD"]

    # The postgres service creates the roles and databases on first start, with one script.
    postgres = services["postgres"]
    assert postgres["environment"]["DP_LEDGER_DB_PASSWORD"] == ledger.password
    scripts = _init_scripts(postgres)
    assert len(scripts) == 1, "one init script creates the roles and databases"
    script, target = scripts[0]
    assert script.is_file() and target.endswith(".sh")
    assert PurePosixPath(target).name == script.name
    assert script.stat().st_mode & stat.S_IXUSR, f"{script} must be executable"
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(script)], check=True)


def test_postgres_superuser_is_not_airflows(raw: dict[str, Any], services: dict[str, Any],
                                            example_env: dict[str, str]) -> None:
    """The image's superuser (POSTGRES_USER) is `postgres`, with its own password, and no
    Airflow container has either: `airflow` is an ordinary role (the issue: as the
    superuser it could UPDATE budget_spend)."""
    env = services["postgres"]["environment"]
    assert env["POSTGRES_USER"] == SUPERUSER != METADATA_ROLE
    assert env.get("POSTGRES_DB", SUPERUSER) == SUPERUSER  # the default database
    assert env["POSTGRES_PASSWORD"] == example_env["POSTGRES_SUPERUSER_PASSWORD"]
    assert raw["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith(
        "${POSTGRES_SUPERUSER_PASSWORD:?")
    # distinct values, so that a leak shows: no Airflow container has the superuser's
    # password, and none of their URLs names the superuser
    values = good_env()
    compose = interpolate(raw, values)
    for name in airflow_image_services(raw):
        container = compose["services"][name]["environment"]
        for key, value in container.items():
            assert values["POSTGRES_SUPERUSER_PASSWORD"] not in str(value), f"{name}: {key}"
            if "://" in str(value) and str(value).split("://")[0].startswith(
                    ("postgresql", "db+postgresql")):
                user = urlsplit(str(value)).username
                assert user in (METADATA_ROLE, PIPELINE_ROLE, LEDGER_OWNER), f"{name}: {key}"
                assert user != SUPERUSER, f"{name}: {key} connects as the superuser"
    # The health check asks over TCP (the image runs the init scripts on a socket-only
    # server, so the socket would say "ready" before the roles exist), as the superuser.
    test = services["postgres"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "pg_isready"], test
    assert test[test.index("-U") + 1] == SUPERUSER
    assert test[test.index("-h") + 1] == "127.0.0.1"


def run_postgres_command(tmp_path: Path, env_values: Mapping[str, str]) -> tuple[
        subprocess.CompletedProcess[str], list[str]]:
    """Run the postgres service's command as Compose would, with the image's
    docker-entrypoint.sh stubbed: returns the process and the entrypoint's calls."""
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    svc = interpolate(raw["services"]["postgres"], env_values)
    assert svc["entrypoint"] == "/bin/bash" and svc["command"][0] == "-c"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "entrypoint.calls"
    entrypoint = stubs / "docker-entrypoint.sh"
    entrypoint.write_text(
        f'#!/bin/sh\necho "${{POSTGRES_USER}}|${{POSTGRES_PASSWORD}}|$*" >> "{calls}"\n')
    entrypoint.chmod(0o755)
    env = {k: str(v) for k, v in svc["environment"].items()}
    env.update(PATH=f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(tmp_path))
    proc = subprocess.run(["bash", "-c", svc["command"][1]], env=env, capture_output=True,
                          text=True, timeout=60)
    return proc, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("secret", sorted(POSTGRES_SECRETS))
def test_postgres_refuses_a_placeholder(tmp_path: Path, secret: str) -> None:
    values = good_env()
    values[secret] = read_env_file(ENV_EXAMPLE)[secret]
    proc, calls = run_postgres_command(tmp_path, values)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert POSTGRES_SECRETS[secret] in proc.stderr and PLACEHOLDER in proc.stderr
    assert calls == [], "the image's entrypoint (initdb, init scripts) may not run"


def test_postgres_runs_the_image_entrypoint(tmp_path: Path) -> None:
    values = good_env()
    proc, calls = run_postgres_command(tmp_path, values)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls == [f"{SUPERUSER}|{values['POSTGRES_SUPERUSER_PASSWORD']}|postgres"]


def run_roles_script(tmp_path: Path, env_values: Mapping[str, str]) -> tuple[
        subprocess.CompletedProcess[str], list[str], str]:
    """Run the postgres init script as the image does (its environment from the compose
    file, interpolated with ``env_values``), with ``psql`` stubbed: returns the process,
    psql's arguments and the SQL it was sent (``[]`` and ``""`` if not called)."""
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    postgres = interpolate(raw["services"]["postgres"], env_values)
    (script, _), = _init_scripts(postgres)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    args, sql = tmp_path / "psql.args", tmp_path / "psql.sql"
    (stubs / "psql").write_text(
        f'#!/bin/sh\nprintf \'%s\\n\' "$@" > "{args}"\ncat > "{sql}"\n')
    (stubs / "psql").chmod(0o755)
    env = {k: str(v) for k, v in postgres["environment"].items()}
    env.update(PATH=f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(tmp_path))
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=60)
    return (proc, args.read_text().splitlines() if args.exists() else [],
            sql.read_text() if sql.exists() else "")


def _psql_variables(args: list[str]) -> dict[str, str]:
    """The ``--set name=value`` pairs of a psql command line."""
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args)
                if a in ("--set", "-v") and "=" in args[i + 1])


def test_init_script_creates_the_roles_and_databases(compose: dict[str, Any],
                                                     services: dict[str, Any],
                                                     tmp_path: Path) -> None:
    """Three login roles with nothing else, two databases each with its owner, PUBLIC
    locked out of both, Airflow's role out of the ledger's; passwords only as psql
    variables (format %L), never in the SQL text."""
    values = good_env()
    # passwords that would break out of a naively quoted SQL string
    values.update(POSTGRES_PASSWORD="air'flow;--", DP_LEDGER_OWNER_DB_PASSWORD="own'er",
                  DP_LEDGER_DB_PASSWORD="led$ger'")
    proc, args, sql = run_roles_script(tmp_path, values)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert args[args.index("--username") + 1] == SUPERUSER
    assert "ON_ERROR_STOP=1" in args
    variables = _psql_variables(args)
    for secret in ("POSTGRES_PASSWORD", "DP_LEDGER_OWNER_DB_PASSWORD", "DP_LEDGER_DB_PASSWORD"):
        assert values[secret] in variables.values(), f"{secret} not passed to psql"
        assert values[secret] not in sql, f"{secret} spliced into the SQL"

    # adjacent string literals, as PostgreSQL joins them
    text = re.sub(r"'\s*\n\s*'", "", sql)
    # every role gets LOGIN and explicitly none of the other attributes
    role = re.search(r"format\('%s ROLE %I WITH ([A-Z ]+) PASSWORD %L'", text)
    assert role, "the roles are not created with format('%s ROLE %I WITH ... PASSWORD %L')"
    assert set(role.group(1).split()) == ROLE_ATTRIBUTES
    assert re.search(r"WHEN EXISTS \(SELECT FROM pg_roles WHERE rolname = r\.name\)\s+"
                     r"THEN 'ALTER' ELSE 'CREATE' END", text), "not idempotent"
    rows = dict(re.findall(r"\('([a-z_]+)', :'([a-z_]+)'\)", text))
    assert set(rows) == {METADATA_ROLE, LEDGER_OWNER, PIPELINE_ROLE}
    assert variables[rows[METADATA_ROLE]] == values["POSTGRES_PASSWORD"]
    assert variables[rows[LEDGER_OWNER]] == values["DP_LEDGER_OWNER_DB_PASSWORD"]
    assert variables[rows[PIPELINE_ROLE]] == values["DP_LEDGER_DB_PASSWORD"]
    # No role gets a privilege attribute anywhere else in the script (comments and the
    # error message aside).
    code = re.sub(r"--[^\n]*|RAISE EXCEPTION[^;]*;", "", text)
    granted = re.findall(r"(?<![A-Z])(SUPERUSER|CREATEDB|CREATEROLE|REPLICATION|BYPASSRLS)\b",
                         code)
    assert granted == [], f"a role is given {granted}"
    # A cluster whose bootstrap superuser is airflow (the old volume) is refused.
    assert re.search(r"rolname = 'airflow' AND oid = 10", text)

    # The databases the compose URLs name, each owned by its role.
    env = compose["x-airflow-common"]["environment"]
    meta = make_url(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    ledger = make_url(env["DP_LEDGER_URL"])
    owner = make_url(services["airflow-init"]["environment"]["DP_LEDGER_OWNER_URL"])
    assert owner.username == LEDGER_OWNER and owner.database == ledger.database
    for database, db_owner in ((meta.database, meta.username),
                               (ledger.database, owner.username)):
        assert f"CREATE DATABASE {database} OWNER {db_owner}" in text
        assert f"ALTER DATABASE {database} OWNER TO {db_owner};" in text
        assert f"REVOKE ALL ON DATABASE {database} FROM PUBLIC;" in text
    assert f"GRANT CONNECT ON DATABASE {meta.database} TO {meta.username};" in text
    assert (f"GRANT CONNECT ON DATABASE {ledger.database} TO {ledger.username}, "
            f"{owner.username};") in text
    assert f"REVOKE ALL ON DATABASE {ledger.database} FROM {meta.username};" in text
    # Airflow's role is never granted anything on the ledger's database.
    grants = re.findall(r"GRANT [A-Z, ]+ ON DATABASE (\w+) TO ([\w, ]+);", text)
    assert all(meta.username not in to for db, to in grants if db == ledger.database)
    assert {db for db, _ in grants} == {meta.database, ledger.database}
    # In the ledger's database, only its owner may create objects in schema public.
    after = text.split(f"\\connect {ledger.database}\n", 1)
    assert len(after) == 2, "the script does not connect to the ledger's database"
    assert "REVOKE CREATE ON SCHEMA public FROM PUBLIC;" in after[1]
    assert "ALTER SCHEMA public OWNER TO dp_ledger_owner" in after[1]


@pytest.mark.parametrize("missing", ["AIRFLOW_DB_PASSWORD", "DP_LEDGER_OWNER_DB_PASSWORD",
                                     "DP_LEDGER_DB_PASSWORD"])
def test_init_script_needs_every_password(tmp_path: Path, missing: str) -> None:
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    postgres = interpolate(raw["services"]["postgres"], good_env())
    (script, _), = _init_scripts(postgres)
    env = {k: str(v) for k, v in postgres["environment"].items() if k != missing}
    env.update(PATH=os.environ.get("PATH", ""), HOME=str(tmp_path))
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0 and missing in proc.stderr


def test_only_airflow_init_has_the_ledger_owner(raw: dict[str, Any],
                                                compose: dict[str, Any],
                                                example_env: dict[str, str]) -> None:
    """The owner's URL (it could drop the ledger's triggers) is in airflow-init alone, and
    its password in no other service but postgres (which creates the role)."""
    assert "DP_LEDGER_OWNER_URL" not in raw["x-airflow-common"]["environment"]
    for name, svc in raw["services"].items():
        has_url = "DP_LEDGER_OWNER_URL" in svc.get("environment", {})
        assert has_url == (name == "airflow-init"), name
        mentions = any("DP_LEDGER_OWNER_DB_PASSWORD" in s for s in strings(svc))
        assert mentions == (name in ("airflow-init", "postgres")), name
    env = compose["services"]["airflow-init"]["environment"]
    owner, ledger = make_url(env["DP_LEDGER_OWNER_URL"]), make_url(env["DP_LEDGER_URL"])
    assert owner.drivername == ledger.drivername == "postgresql+psycopg"
    assert (owner.host, owner.port, owner.database) == (ledger.host, ledger.port,
                                                        ledger.database)
    assert owner.username == LEDGER_OWNER != ledger.username
    assert owner.password == example_env["DP_LEDGER_OWNER_DB_PASSWORD"] != ledger.password


def test_init_initialises_and_verifies_the_ledger(compose: dict[str, Any]) -> None:
    """airflow-init creates the schema as the owner, granting exactly DP_LEDGER_URL's role,
    then verifies as the pipeline's role; `set -e` makes either failure stop the stack."""
    script = compose["services"]["airflow-init"]["command"][1]
    assert script.lstrip().startswith("set -euo pipefail")
    ledger = make_url(compose["x-airflow-common"]["environment"]["DP_LEDGER_URL"])
    lines = [ln.strip() for ln in script.splitlines()]
    init = [ln for ln in lines if "dp_ops ledger init" in ln]
    verify = [ln for ln in lines if "dp_ops ledger --verify" in ln]
    assert init == [f"_AIRFLOW_DB_MIGRATE= /entrypoint python -m dp_ops ledger init "
                    f"--grant {ledger.username}"]
    assert verify == ["env -u DP_LEDGER_OWNER_URL _AIRFLOW_DB_MIGRATE= /entrypoint python -m "
                      "dp_ops ledger --verify"]
    assert lines.index(init[0]) < lines.index(verify[0])
    assert not [ln for ln in lines if re.search(r"dp_ops ledger\s*$", ln)], \
        "the ledger is no longer opened as the pipeline's role to create it"


# ----------------------------------------------------------------------- Dockerfile ----
def _pin(path: Path, package: str) -> str:
    match = re.search(rf"^{re.escape(package)}==(\S+)", path.read_text(), re.M)
    assert match, f"{path.name} does not pin {package}"
    return match.group(1)


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip()
             .startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def test_dockerfile_builds_on_the_pinned_airflow(compose: dict[str, Any]) -> None:
    instructions = _dockerfile_instructions()
    froms = [arg for op, arg in instructions if op == "FROM"]
    assert len(froms) == 1
    match = re.fullmatch(r"apache/airflow:(\S+)-python(\d+\.\d+)", froms[0])
    assert match, f"not an official apache/airflow image: {froms[0]}"
    airflow, python = match.groups()
    assert airflow == _pin(REPO / "requirements.txt", "apache-airflow")
    assert airflow == _pin(REPO / "constraints.txt", "apache-airflow")
    # The constraints were resolved on the project's Python (ruff's target version).
    target = re.search(r'target-version\s*=\s*"py(\d)(\d+)"', (REPO / "ruff.toml").read_text())
    assert target and python == f"{target.group(1)}.{target.group(2)}"
    # The tag the build is given names the same version.
    assert compose["x-airflow-common"]["image"].endswith(f":{airflow}")


def _dockerfile_copies() -> dict[str, str]:
    """Source copied (trailing / dropped) -> its destination directory."""
    sources = {}
    for op, arg in _dockerfile_instructions():
        if op == "COPY":
            words = [w for w in arg.split() if not w.startswith("--")]
            sources.update(dict.fromkeys((w.rstrip("/") for w in words[:-1]), words[-1]))
    return sources


def _pip_installs() -> list[list[str]]:
    return [arg.split() for op, arg in _dockerfile_instructions()
            if op == "RUN" and "pip install" in arg]


def test_dockerfile_installs_requirements_with_constraints() -> None:
    instructions = _dockerfile_instructions()
    users = [arg for op, arg in instructions if op == "USER"]
    assert users and users[-1] == "airflow", "pip runs as the airflow user"
    sources = _dockerfile_copies()
    assert {"requirements.txt", "constraints.txt"} <= set(sources)
    runs = [pip for pip in _pip_installs() if "-r" in pip and "--no-deps" not in pip]
    assert len(runs) == 1
    pip = runs[0]
    req = PurePosixPath(sources["requirements.txt"]) / "requirements.txt"
    con = PurePosixPath(sources["constraints.txt"]) / "constraints.txt"
    assert pip[pip.index("-r") + 1] == str(req) and pip[pip.index("-c") + 1] == str(con)
    assert "--no-cache-dir" in pip
    assert '"apache-airflow==${AIRFLOW_VERSION}"' in pip  # pip may not change Airflow
    # then, without their requirements, the packages of requirements-nodeps.txt (the Spark
    # provider, whose pyspark-client would overwrite pyspark's files)
    nodeps = [pip for pip in _pip_installs() if "-r" in pip and "--no-deps" in pip]
    assert len(nodeps) == 1 and "requirements-nodeps.txt" in sources
    assert nodeps[0][nodeps[0].index("-r") + 1] == str(
        PurePosixPath(sources["requirements-nodeps.txt"]) / "requirements-nodeps.txt")


def test_dockerfile_installs_the_project() -> None:
    """dp_ops and dp_demo are installed into the image (what every container imports),
    after the pinned requirements and without touching them."""
    sources = _dockerfile_copies()
    project = {"pyproject.toml", "README.md", "plugins", "include"}  # README.md: the readme
    assert project <= set(sources), "the Dockerfile must copy the project"
    src = PurePosixPath(sources["pyproject.toml"])
    assert PurePosixPath(sources["README.md"]) == src
    assert PurePosixPath(sources["plugins"]) == src / "plugins"
    # plugins/dp_ops/sql is a symlink to include/sql: both must be in the build directory
    assert PurePosixPath(sources["include"]) == src / "include"
    assert (REPO / "plugins/dp_ops/sql").is_symlink()
    assert (REPO / "plugins/dp_ops/sql").resolve() == REPO / "include/sql"
    installs = _pip_installs()
    assert len(installs) == 3 and all("-r" in pip for pip in installs[:2]), (
        "the project after the requirements")
    pip = installs[2]
    assert pip[-1].rstrip("/") == str(src), pip
    assert "--no-deps" in pip, "the pinned requirements are the project's dependencies"
    assert "-e" not in pip and "--editable" not in pip, "a copy in site-packages"
    assert "--no-cache-dir" in pip
    # what it installs: both packages, from plugins/ (pyproject.toml's package-dir)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'package-dir = {"" = "plugins"}' in pyproject
    assert 'include = ["dp_ops*", "dp_demo*"]' in pyproject


def _docker_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, enough for these patterns: the last matching pattern wins, and a
    pattern matching a parent directory matches everything under it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        if any(fnmatch(p, pattern.lstrip("!").strip("/")) for p in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_private_data_and_secrets_out() -> None:
    patterns = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    for path in ("data/raw/location_history/date=2020-01-01/part.parquet", ".env",
                 ".venv/bin/python", "airflow_home/airflow.db", "logs/scheduler/x.log",
                 "benchmarks/results/run.json", ".git/config", ".pytest_cache/v",
                 "plugins/dp_ops/__pycache__/x.pyc"):
        assert _docker_ignored(path, patterns), f"{path} would be sent to the build"
    # what a local install or test run leaves in plugins/ stays out too
    for path in ("plugins/dp_report_factory.egg-info/PKG-INFO", "plugins/dp_ops/x.pyc"):
        assert _docker_ignored(path, patterns), f"{path} would be sent to the build"
    for path in ("requirements.txt", "constraints.txt", "pyproject.toml", "README.md",
                 "plugins/dp_ops/__init__.py", "plugins/dp_ops/engine/sql.py",
                 "include/sql/aggregate_cells.sql",
                 "plugins/dp_demo/__init__.py", "plugins/dp_demo/data/x.txt"):
        assert not _docker_ignored(path, patterns), f"the Dockerfile copies {path}"


# -------------------------------------------------------------- variables and secrets ----
def test_every_compose_variable_is_documented(raw: dict[str, Any],
                                              example_env: dict[str, str]) -> None:
    tokens = [m for text in strings(raw) for m in _TOKEN.finditer(text)]
    used = {m.group("name") for m in tokens if m.group("name")}
    assert not [m.group(0) for m in tokens if m.group("other")], "unsupported $ forms"
    assert used - set(example_env) == set(), "undocumented in .env.example"
    assert set(example_env) - used == set(), ".env.example documents unused variables"
    # and explained: a comment line above it, or above its group of lines
    text_example = ENV_EXAMPLE.read_text()
    for name in used:
        assert re.search(rf"#[^\n]*\n(?:[A-Z_]+=[^\n]*\n)*{name}=", text_example), name


def test_secrets_are_required_and_only_placeholders(raw: dict[str, Any],
                                                   example_env: dict[str, str]) -> None:
    text = "\n".join(strings(raw))
    for name in SECRETS:
        uses = re.findall(rf"\$\{{{name}(:[-?])?", text)
        assert uses and set(uses) == {":?"}, f"{name} must always be ${{{name}:?...}}"
        assert example_env[name].startswith(PLACEHOLDER), f".env.example: {name}"
    secret_like = re.compile(r"[0-9a-fA-F]{24,}|[A-Za-z0-9+/]{32,}={0,2}|[A-Za-z0-9_-]{43}=")
    for key, value in example_env.items():
        if re.search("SECRET|PASSWORD|KEY", key):
            assert value.startswith(PLACEHOLDER), f"{key} should hold a placeholder"
        assert not secret_like.search(value), f".env.example {key} looks like a real secret"

    without_jwt = {k: v for k, v in example_env.items() if k != "AIRFLOW_JWT_SECRET"}
    with pytest.raises(MissingVariable, match="AIRFLOW_JWT_SECRET"):
        interpolate(raw, without_jwt)


def test_env_file_is_git_ignored() -> None:
    lines = {ln.strip() for ln in (REPO / ".gitignore").read_text().splitlines()}
    assert lines & {".env", "/.env"}, ".env holds the secrets: add it to .gitignore"


# ---------------------------------------------------------------------- airflow-init ----
def run_init(tmp_path: Path, env_values: Mapping[str, str], fail_on: str | None = None
             ) -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    """Run airflow-init's script as Compose would (interpolated with ``env_values``), with
    /opt/airflow moved under ``tmp_path`` and the image's /entrypoint and chown stubbed:
    returns the process, the relocated /opt/airflow and the entrypoint calls, each as
    ``<_AIRFLOW_DB_MIGRATE>|<DP_LEDGER_OWNER_URL's user>|<arguments>``. The stub exits 1
    for arguments that contain ``fail_on``."""
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    init = interpolate(raw["services"]["airflow-init"], env_values)
    assert init["entrypoint"] == "/bin/bash" and init["command"][0] == "-c"
    opt = tmp_path / "opt-airflow"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "entrypoint.calls"
    owner_user = ('$(echo "${DP_LEDGER_OWNER_URL:-}" | sed -n '
                  "'s|^[^:]*://\\([^:@]*\\).*|\\1|p')")
    fail = f'case "$*" in *"{fail_on}"*) exit 1 ;; esac\n' if fail_on else ""
    (stubs / "entrypoint").write_text(
        f'#!/bin/sh\necho "${{_AIRFLOW_DB_MIGRATE:-}}|{owner_user}|$*" >> "{calls}"\n{fail}')
    (stubs / "chown").write_text("#!/bin/sh\nexit 0\n")
    for stub in ("entrypoint", "chown"):
        (stubs / stub).chmod(0o755)
    (stubs / "python3").symlink_to(sys.executable)

    def relocate(text: str) -> str:
        text = text.replace("/opt/airflow", str(opt))
        return re.sub(r"(?<![\w/.-])/entrypoint\b", str(stubs / "entrypoint"), text)

    env = {k: relocate(str(v)) for k, v in init["environment"].items()}
    env.update(PATH=f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}", HOME=str(tmp_path))
    proc = subprocess.run(["bash", "-c", relocate(init["command"][1])], env=env,
                          capture_output=True, text=True, timeout=60)
    return proc, opt, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("secret", sorted(INIT_SECRETS))
def test_init_refuses_a_placeholder(tmp_path: Path, secret: str) -> None:
    values = good_env()
    values[secret] = read_env_file(ENV_EXAMPLE)[secret]
    proc, opt, calls = run_init(tmp_path, values)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert INIT_SECRETS[secret] in proc.stderr and PLACEHOLDER in proc.stderr
    assert calls == [] and not opt.exists(), "nothing may run before the check"


def test_init_writes_the_password_file_and_migrates(tmp_path: Path) -> None:
    values = good_env()
    proc, opt, calls = run_init(tmp_path, values)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for sub in ("logs", "data", "auth", "plugins"):
        assert (opt / sub).is_dir()
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    env = interpolate(raw["x-airflow-common"]["environment"], values)
    passwords = Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
                     .replace("/opt/airflow", str(opt)))
    # The format SimpleAuthManager reads: {"<user>": "<password>"}, for the configured
    # users: the admin and the approver (role user: may answer approvals, not administer)
    roles = dict(u.split(":") for u in env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(","))
    admin, approver = values["AIRFLOW_ADMIN_USERNAME"], values["AIRFLOW_APPROVER_USERNAME"]
    assert roles == {admin: "admin", approver: "user"}
    assert json.loads(passwords.read_text()) == {admin: values["AIRFLOW_ADMIN_PASSWORD"],
                                                 approver: values["AIRFLOW_APPROVER_PASSWORD"]}
    assert env["DP_SPEND_APPROVERS"] == approver
    assert passwords.stat().st_mode & 0o077 == 0, "password file readable by others"
    assert calls == ["true|dp_ledger_owner|airflow version",  # waits for the DB, migrates
                     "|dp_ledger_owner|airflow db check-migrations --migration-wait-timeout 0",
                     # the schema, as the ledger's owner, granting the pipeline's role
                     "|dp_ledger_owner|python -m dp_ops ledger init --grant dp_ledger",
                     # verification, as the pipeline's role only
                     "||python -m dp_ops ledger --verify"]


@pytest.mark.parametrize("step", ["ledger init", "ledger --verify"])
def test_init_fails_when_the_ledger_does(tmp_path: Path, step: str) -> None:
    """`ledger init` exits 1 when a trigger is missing, `ledger --verify` when the chain,
    a trigger or the data root's identity record fails: the stack must not start."""
    proc, _, calls = run_init(tmp_path, good_env(), fail_on=step)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert calls[-1].endswith(f"python -m dp_ops {step}" + (" --grant dp_ledger"
                                                          if step == "ledger init" else ""))


# ------------------------------------------------------------------ docker compose ----
def test_docker_compose_config(tmp_path: Path) -> None:
    """``docker compose config`` (no engine needed) validates the file against Compose's
    own schema and interpolation."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client on this machine")
    version = subprocess.run([docker, "compose", "version"], capture_output=True, text=True,
                             timeout=60)
    if version.returncode != 0:
        pytest.skip("the docker compose plugin is not installed here (`docker compose "
                    f"version`: {(version.stderr or version.stdout).strip()[:200]}); the "
                    "compose file is checked by parsing only")
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "DOCKER_CONFIG") or k.startswith("XDG_")}
    proc = subprocess.run(
        [docker, "compose", "--env-file", str(ENV_EXAMPLE), "-f", str(COMPOSE_FILE),
         "config", "--format", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    resolved = json.loads(proc.stdout)["services"]
    assert set(REQUIRED_SERVICES) <= set(resolved)
    secrets_seen = {resolved[n]["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"]
                    for n in AIRFLOW_SERVICES}
    assert secrets_seen == {read_env_file(ENV_EXAMPLE)["AIRFLOW_JWT_SECRET"]}


def test_airflow_settings_exist_in_this_airflow(raw: dict[str, Any]) -> None:
    """A misspelt AIRFLOW__SECTION__KEY is silently ignored by Airflow: every one the
    compose file sets must be an option of the pinned Airflow (the celery section belongs
    to the Celery provider, which is in the image but not in requirements.txt)."""
    from importlib.util import find_spec

    spec = find_spec("airflow")  # locates the package without importing it
    assert spec and spec.submodule_search_locations
    package = Path(list(spec.submodule_search_locations)[0])
    options = yaml.safe_load((package / "config_templates" / "config.yml").read_text())
    names = {k for svc in raw["services"].values() for k in svc.get("environment", {})}
    for name in sorted(n for n in names if n.startswith("AIRFLOW__")):
        section, key = name.removeprefix("AIRFLOW__").lower().split("__")
        if section == "celery":
            continue
        assert key in options.get(section, {}).get("options", {}), f"{name}: no such option"
