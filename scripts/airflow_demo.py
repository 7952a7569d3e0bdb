#!/usr/bin/env python
"""Backfill both reports through a real, local Airflow 3 (``make demo``).

What it does, in order:

1. configures an isolated Airflow home (``$AIRFLOW_HOME``, default ``<repo>/airflow_home``):
   SQLite metadata DB, LocalExecutor, this repository's ``dags/`` (dp_ops is imported
   from the venv, where ``make venv`` installs it), no example DAGs, no scheduled runs
   (only the backfill runs);
2. ``airflow db migrate``;
3. starts ``airflow api-server`` (Airflow 3 tasks report their state to its Execution API,
   and it serves the UI) and ``airflow dag-processor`` in the background, logs in
   ``$AIRFLOW_HOME/logs/demo/``;
4. for the DAGs (``--dag-id``, repeatable; default ``mobility_report`` and
   ``symptoms_dataset``), all at once (``--no-together``: one after the other):
   a. waits until each DAG is parsed (fails loudly on import errors), unpauses it;
   b. stops the dag-processor (the DAGs are parsed; with ``--keep-running`` it starts
      again afterwards), ``airflow backfill create`` for the date range (forwards,
      ``--max-active-runs`` per DAG), retried when SQLite says "database is locked", then
      starts ``airflow scheduler`` (which executes the backfill runs);
   c. follows the runs until all succeed, or stops at the first failed run and prints
      the failed task and the path of its log;
5. stops the background processes (also on Ctrl-C or failure), prints where the releases
   are (``$DP_DATA_ROOT/published/<report>/latest/``) and how long it took.

It expects the synthetic input to exist already (``python -m dp_ops generate``), or
generates it with ``--generate-users N`` (what ``make demo`` does) while step 1 to 4b run:
the scheduler starts once the generator has written the input of the whole range, and
the generator computes the truth for the evaluation beside the
backfill; the demo waits for it before it ends.
``--keep-running`` leaves Airflow up afterwards so the UI can be browsed.

Run state is read straight from the SQLite metadata DB (read-only), because each
``airflow`` CLI call is a new process that imports Airflow, which is costly; every change
goes through the ``airflow`` CLI.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DAG_ID = "mobility_report"
DEFAULT_DAG_IDS = ("mobility_report", "symptoms_dataset")
REPORT_OF = {"mobility_report": "mobility", "symptoms_dataset": "symptoms"}
LOCKED = "database is locked"


def log(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why and where to look."""


# --------------------------------------------------------------------------- settings --
def free_port(preferred: int) -> int:
    """``preferred`` if nothing listens on it, else any free port."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise DemoError("no free TCP port")


def airflow_env(args: argparse.Namespace, home: Path, data_root: Path, api_port: int,
                log_port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(args.dags_folder),
        # Airflow's plugin manager exec()s every .py file under plugins_folder as a
        # top-level module (dp_ops/__main__.py would run the dp_ops CLI inside the
        # scheduler). dp_ops holds no Airflow plugin: it is installed in the venv
        # (`make venv`: pip install -e .), which every airflow process here runs on, and
        # plugins_folder is an (empty) folder of the Airflow home.
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        # LocalExecutor is Airflow 3's default and works on SQLite (there is no
        # SequentialExecutor any more). Its worker processes are forked up front, so
        # parallelism is kept to what the backfill can use.
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(executor_slots(args)),
        # SQLite allows one writer; wait for the lock (default 5 s) instead of failing.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=60",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://localhost:{api_port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{api_port}/execution/",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
        # Only the backfill runs: unpausing must not also start "yesterday's" scheduled run,
        # for which the demo has no input data.
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        # The DAG files do not change during a demo: re-parse them every 5 min instead of
        # every 30 s (re-parsing costs the dag-processor CPU the backfill could use)
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "GX_ANALYTICS_ENABLED": "false",
        "DP_DATA_ROOT": str(data_root),
        "PYTHONUNBUFFERED": "1",
    })
    # The scheduler sleeps this long when a loop found nothing to do (Airflow's default
    # 1 s), so every task of a backfill's chains waits up to that long to be scheduled
    # after the one before it ended. One DAG at a time leaves the cores idle during those
    # waits: a short sleep. Both DAGs at once keep the cores busy, and a shorter sleep only
    # adds scheduler loops: the default (docs/airflow.md). An exported value wins.
    both_at_once = args.together and len(args.dag_ids) > 1
    env.setdefault("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME",
                   "1" if both_at_once else "0.2")
    if not args.warm_imports:
        # Without the local settings file no supervisor notices its task's exit at once
        # (dp_ops.airflow.supervisor): each may hold its executor slot a whole heartbeat
        # interval after its task ended. 1 s, the least Airflow reads, bounds that.
        env.setdefault("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "1")
    return env


# --------------------------------------------------------------------------- processes --
@dataclass
class Services:
    """The background Airflow processes, each in its own process group."""

    env: dict[str, str]
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    commands: dict[str, tuple[str, ...]] = field(default_factory=dict)
    restarts: int = 0

    def start(self, name: str, *cmd: str) -> None:
        self.commands[name] = cmd
        out = (self.log_dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            ["airflow", *cmd], env=self.env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        log(f"started airflow {' '.join(cmd)} (pid {self.procs[name].pid}, "
            f"log {self.log_dir / (name + '.log')})")

    def check_alive(self) -> None:
        for name, p in list(self.procs.items()):
            if p.poll() is None:
                continue
            where = self.log_dir / (name + ".log")
            # On SQLite the scheduler can die of a write conflict (seen here: StaleDataError
            # on dag_run); its state is all in the DB, so starting it again is safe.
            if name == "scheduler" and self.restarts < 3:
                self.restarts += 1
                log(f"airflow scheduler exited ({p.returncode}, see {where}); restarting "
                    f"({self.restarts}/3)")
                self.start(name, *self.commands[name])
                continue
            raise DemoError(f"airflow {name} exited with code {p.returncode}; see {where}")

    def stop(self, *names: str) -> None:
        # The scheduler first, so that it stops handing out work.
        order = [n for n in ("scheduler", "dag-processor", "api-server")
                 if n in self.procs and (not names or n in names)]
        for name in order:
            p = self.procs[name]
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 45
        for name in order:
            p = self.procs[name]
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(f"airflow {name} did not stop in time; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            # Whatever the process left in its group (task runners) goes with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        if order:
            log("stopped " + ", ".join(order))
        for name in order:
            del self.procs[name]


# The deployments' Airflow local settings (also mounted by docker-compose.yaml): pre-import
# pandas, pyarrow, DuckDB, matplotlib and GX in the scheduler, whose LocalExecutor workers
# fork the task processes, so that every task starts with them imported instead of paying
# for the imports each time.
LOCAL_SETTINGS = REPO / "docker" / "airflow" / "airflow_local_settings.py"


def write_local_settings(home: Path, warm: bool) -> None:
    path = home / "config" / "airflow_local_settings.py"
    if warm:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(LOCAL_SETTINGS.read_text())
    elif path.is_file() and "pre-import the pipeline's heavy" in path.read_text():
        path.unlink()


def release_signing_key(env: dict[str, str], home: Path) -> Path | None:
    """Make the release-signing key the demo's releases are signed with, when it has none:
    the key file of ``env`` (``DP_RELEASE_SIGNING_KEY_FILE``, default
    ``~/.config/dp-ops/release_signing.key``, beside the ledger key), never in the data
    root. Write its public half as ``$AIRFLOW_HOME/allowed_signers`` (what an agency
    publishes; ``verify-release --public-key`` and ``ssh-keygen -Y verify`` read it) and
    return that path; None when the demo publishes unsigned (``DP_RELEASE_UNSIGNED``)."""
    from dp_ops import release_signing

    if env.get(release_signing.UNSIGNED_ENV) and not env.get(release_signing.KEY_ENV):
        return None
    path = release_signing.key_file(env)
    if not env.get(release_signing.KEY_ENV) and not path.exists():
        release_signing.generate_key_file(path, release_signing.signer_identity(env))
        log(f"release-signing key made: {path}")
    signer = release_signing.load_signer(Path(env["DP_DATA_ROOT"]), env)
    assert signer is not None
    signers = home / "allowed_signers"
    signers.write_text(signer.allowed_signers_line() + "\n")
    log(f"releases are signed by key {signer.fingerprint}; check one with: python -m dp_ops "
        f"verify-release --public-key {signers} <release directory>")
    return signers


def write_env_file(home: Path, env: dict[str, str]) -> Path:
    """``$AIRFLOW_HOME/demo.env``: source it to point the ``airflow`` CLI at this demo."""
    keys = sorted(k for k in env if k.startswith(("AIRFLOW", "DP_", "GX_")))
    path = home / "demo.env"
    path.write_text("".join(f"export {k}={shlex.quote(env[k])}\n" for k in keys))
    return path


def airflow_cli(env: dict[str, str], log_dir: Path, name: str, *cmd: str,
                check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["airflow", *cmd], env=env, capture_output=True, text=True)
    with (log_dir / f"{name}.log").open("a") as f:
        f.write(f"$ airflow {' '.join(cmd)}\n{res.stdout}\n{res.stderr}\n")
    if check and res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
        raise DemoError(f"`airflow {' '.join(cmd)}` failed ({res.returncode}):\n{tail}")
    return res


# --------------------------------------------------------------------------- metadata --
class Metadata:
    """Read-only queries on the SQLite metadata DB."""

    def __init__(self, db: Path) -> None:
        self.db = db

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple]:
        for attempt in range(10):
            try:
                con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
                try:
                    return con.execute(sql, params).fetchall()
                finally:
                    con.close()
            except sqlite3.OperationalError as exc:
                if LOCKED not in str(exc) or attempt == 9:
                    raise
                time.sleep(1)
        return []

    def dag_parsed(self, dag_id: str) -> bool:
        rows = self.query("SELECT is_stale FROM dag WHERE dag_id = ?", (dag_id,))
        return bool(rows) and not rows[0][0]

    def import_errors(self) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self.query("SELECT filename, stacktrace FROM import_error")]

    def active_backfill(self, dag_id: str) -> bool:
        return bool(self.query(
            "SELECT 1 FROM backfill WHERE dag_id = ? AND completed_at IS NULL", (dag_id,)))

    def unfinished_runs(self, dag_id: str) -> int:
        return int(self.query("SELECT count(*) FROM dag_run WHERE dag_id = ? AND state IN "
                              "('queued', 'running')", (dag_id,))[0][0])

    def runs(self, dag_id: str, start: date, end: date) -> dict[str, tuple[str, str]]:
        """logical day -> (run_id, state), the newest run for each day of the range."""
        rows = self.query(
            "SELECT substr(logical_date, 1, 10), run_id, state FROM dag_run "
            "WHERE dag_id = ? AND substr(logical_date, 1, 10) BETWEEN ? AND ? ORDER BY id",
            (dag_id, start.isoformat(), end.isoformat()))
        return {day: (run_id, state) for day, run_id, state in rows}

    def failed_tasks(self, dag_id: str, run_id: str) -> list[tuple[str, int]]:
        return [(r[0], int(r[1])) for r in self.query(
            "SELECT task_id, try_number FROM task_instance WHERE dag_id = ? AND run_id = ? "
            "AND state = 'failed' ORDER BY start_date",
            (dag_id, run_id))]


def task_error(log_file: Path) -> str:
    """The last exception recorded in a task log (JSON lines), e.g. ``IngestError: ...``."""
    error = ""
    with contextlib.suppress(OSError):
        for line in log_file.read_text(errors="replace").splitlines():
            if '"error_detail"' not in line:
                continue
            with contextlib.suppress(ValueError, TypeError, KeyError, IndexError):
                detail = json.loads(line)["error_detail"][-1]
                error = f"{detail['exc_type']}: {detail['exc_value']}"
    return error


def task_log(home: Path, dag_id: str, run_id: str, task_id: str, attempt: int) -> Path:
    """Airflow 3's default ``log_filename_template``."""
    return (home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
            / f"attempt={max(attempt, 1)}.log")


# --------------------------------------------------------------------------- steps --
def wait_for_api(services: Services, port: int, timeout: float) -> None:
    url = f"http://127.0.0.1:{port}/api/v2/monitor/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        services.check_alive()
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    json.loads(r.read())
                    return
        time.sleep(2)
    raise DemoError(f"api-server not healthy at {url} after {timeout:.0f} s")


def wait_for_dag(services: Services, meta: Metadata, dag_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        services.check_alive()
        errors = meta.import_errors()
        if errors:
            text = "\n\n".join(f"{f}:\n{trace}" for f, trace in errors)
            raise DemoError(f"DAG import errors:\n{text}")
        if meta.dag_parsed(dag_id):
            return
        time.sleep(2)
    raise DemoError(f"DAG {dag_id} not parsed after {timeout:.0f} s; see "
                    f"{services.log_dir / 'dag-processor.log'}")


def close_finished_backfill(services: Services, meta: Metadata, dag_id: str) -> None:
    """An earlier demo stopped at a failed run leaves its backfill open (the scheduler closes
    finished backfills every 30 s), and Airflow allows one open backfill per DAG. Let the
    scheduler close it, so that failed days can be backfilled again."""
    if not meta.active_backfill(dag_id) or meta.unfinished_runs(dag_id):
        return
    log("closing the earlier, finished backfill (the scheduler does it within ~30 s)")
    services.start("scheduler", "scheduler")
    deadline = time.monotonic() + 120
    while meta.active_backfill(dag_id) and time.monotonic() < deadline:
        services.check_alive()
        time.sleep(3)
    services.stop("scheduler")


def create_backfill(env: dict[str, str], log_dir: Path, args: argparse.Namespace,
                    meta: Metadata) -> None:
    """``airflow backfill create``; on "database is locked", wait and retry.

    A locked DB can interrupt the command after the backfill row and some of its runs were
    committed; the caller's loop then waits for that backfill and creates the missing days.
    """
    cmd = ["backfill", "create", "--dag-id", args.dag_id,
           "--from-date", args.start.isoformat(), "--to-date", args.end.isoformat(),
           "--max-active-runs", str(max_active_runs(args, args.dag_id)),
           "--reprocess-behavior", "failed"]
    for attempt in range(1, 7):
        res = airflow_cli(env, log_dir, "backfill-create", *cmd, check=False)
        out = res.stdout + res.stderr
        if res.returncode == 0:
            return
        if LOCKED in out or "Another backfill is running" in out:
            log(f"backfill create attempt {attempt}: "
                f"{'database is locked' if LOCKED in out else 'a backfill is already active'}"
                "; retrying")
            if meta.active_backfill(args.dag_id):
                return  # created (maybe partially); the caller follows it
            time.sleep(5 * attempt)
            continue
        tail = "\n".join(out.strip().splitlines()[-15:])
        raise DemoError(f"`airflow {' '.join(cmd)}` failed ({res.returncode}):\n{tail}")
    raise DemoError("airflow backfill create kept failing with 'database is locked'; see "
                    f"{log_dir / 'backfill-create.log'}")


def follow_backfill(services: Services, meta: Metadata, args: argparse.Namespace,
                    home: Path, t0: float) -> None:
    days = [(args.start + timedelta(days=i)).isoformat()
            for i in range((args.end - args.start).days + 1)]
    deadline = time.monotonic() + args.timeout_minutes * 60
    last_line = ""
    last_print = 0.0
    creations = 0
    while True:
        services.check_alive()
        runs = meta.runs(args.dag_id, args.start, args.end)
        states = [runs.get(d, ("", "missing"))[1] for d in days]
        failed = [d for d in days if runs.get(d, ("", ""))[1] == "failed"]
        if failed:
            lines = []
            for d in failed:
                run_id = runs[d][0]
                for task_id, attempt in meta.failed_tasks(args.dag_id, run_id):
                    log_file = task_log(home, args.dag_id, run_id, task_id, attempt)
                    lines.append(f"  {d}  run {run_id}  task {task_id} (try {attempt})\n"
                                 f"    log {log_file}")
                    if error := task_error(log_file):
                        lines.append(f"    {error[:500]}")
            raise DemoError(f"{len(failed)} run(s) failed:\n" + "\n".join(lines))
        done = states.count("success")
        line = (f"runs done {done}/{len(days)} (running {states.count('running')}, queued "
                f"{states.count('queued')}), elapsed {time.monotonic() - t0:.0f} s")
        if line != last_line and time.monotonic() - last_print > 10 or done == len(days):
            log(line)
            last_line, last_print = line, time.monotonic()
        if done == len(days):
            return
        if "missing" in states and not meta.active_backfill(args.dag_id):
            if creations >= 5:
                raise DemoError("backfill keeps missing days: " + ", ".join(
                    d for d, s in zip(days, states, strict=True) if s == "missing"))
            creations += 1
            services.stop("scheduler")
            with dag_processor_stopped(services, restart=args.keep_running):
                create_backfill(services.env, services.log_dir, args, meta)
            services.start("scheduler", *services.commands["scheduler"])
            continue
        if time.monotonic() > deadline:
            hint = ""
            baseline = Path(services.env["DP_DATA_ROOT"]) / "baseline" / "mobility"
            if args.dag_id == DEFAULT_DAG_ID and not (baseline / "baseline.parquet").exists():
                hint = (f"\n{baseline}/baseline.parquet does not exist: runs from the first "
                        "public date wait for it in the baseline task; the baseline window "
                        "(2020-01-03..2020-02-06) must be noised first")
            raise DemoError(f"timed out after {args.timeout_minutes} min: {line}{hint}")
        time.sleep(3)


def prepare_backfills(services: Services, meta: Metadata,
                      group: list[argparse.Namespace]) -> None:
    """Unpause each DAG of ``group`` and create its backfill over the date range (unless
    one is open or every day succeeded already), with the scheduler and the
    dag-processor stopped (:func:`dag_processor_stopped`)."""
    env, log_dir = services.env, services.log_dir
    for args in group:
        wait_for_dag(services, meta, args.dag_id, timeout=300)
    services.stop("scheduler")  # `backfill create` racing the scheduler locks SQLite
    names = [args.dag_id for args in group]
    log(f"{', '.join(names)} parsed; unpausing")
    airflow_cli(env, log_dir, "unpause", "dags", "unpause", "--treat-dag-id-as-regex",
                "--yes", "^(" + "|".join(re.escape(n) for n in names) + ")$")
    todo = []
    for args in group:
        close_finished_backfill(services, meta, args.dag_id)
        runs = meta.runs(args.dag_id, args.start, args.end)
        if not meta.active_backfill(args.dag_id) and not all(
                runs.get((args.start + timedelta(days=i)).isoformat(), ("", ""))[1] == "success"
                for i in range((args.end - args.start).days + 1)):
            todo.append(args)
    if not todo:
        return
    # The dag-processor's writes are the other lock holder on SQLite: creating a long
    # backfill (a year of runs) failed repeatedly with "database is locked" while it ran.
    # The DAGs are serialized already, so stop the dag-processor while the runs are
    # created.
    with dag_processor_stopped(services, restart=group[0].keep_running):
        for args in todo:
            t_backfill = time.monotonic()
            create_backfill(env, log_dir, args, meta)
            log(f"{args.dag_id}: backfill created ({time.monotonic() - t_backfill:.0f} s)")


@contextlib.contextmanager
def dag_processor_stopped(services: Services, *, restart: bool) -> Iterator[None]:
    """Run the block with the dag-processor stopped; start it again afterwards only with
    ``restart`` (``--keep-running``: the deployment stays up as a real one would).
    The backfill runs do not need it: the DAGs are serialized already, the task processes
    parse their own DAG file, and the DAGs declare no DAG-level callback (what the
    scheduler hands to it). Started again, it re-parsed every DAG file at once and every
    ``min_file_process_interval`` after, CPU the backfill could use."""
    services.stop("dag-processor")
    try:
        yield
    finally:
        if restart:
            services.start("dag-processor", *services.commands["dag-processor"])


def backfill_dags(services: Services, meta: Metadata, args: argparse.Namespace, home: Path,
                  t0: float, input_ready: Callable[[], None] = lambda: None,
                  done: Callable[[str], None] = lambda dag_id: None) -> float | None:
    """Backfill every DAG of ``args.dag_ids`` over the date range and follow them to the
    end: all at once (``--together``, the default: while the runs of one DAG wait for the
    scheduler between tasks, the other's tasks use the CPU), or one DAG after the other.
    Returns when (``time.monotonic()``) the first scheduler that executed runs started."""
    executing: float | None = None
    per_dag = [argparse.Namespace(**{**vars(args), "dag_id": d}) for d in args.dag_ids]
    groups = [per_dag] if args.together else [[a] for a in per_dag]
    for group in groups:
        t_group = time.monotonic()
        prepare_backfills(services, meta, group)
        input_ready()  # the scheduler runs tasks: their input must be there
        # Started only now: `backfill create` racing the scheduler's writes on SQLite
        # failed with "database is locked" and once crashed the scheduler (StaleDataError).
        services.start("scheduler", "scheduler")
        executing = time.monotonic() if executing is None else executing
        for dag_args in group:
            follow_backfill(services, meta, dag_args, home, t0)
            log(f"{dag_args.dag_id}: backfill done in {time.monotonic() - t_group:.0f} s")
            done(dag_args.dag_id)
    return executing


def check_input(data_root: Path, start: date, end: date) -> None:
    missing = [p for p in (data_root / "reference" / "regions.csv",
                           data_root / "reference" / "symptoms.txt",
                           data_root / "raw" / "location_history" / f"date={start}",
                           data_root / "raw" / "location_history" / f"date={end}",
                           data_root / "raw" / "search_activity" / f"date={start}",
                           data_root / "raw" / "search_activity" / f"date={end}")
               if not p.exists()]
    if missing:
        raise DemoError(
            "no synthetic input for the demo range: missing " + ", ".join(map(str, missing))
            + f"\ngenerate it first, e.g. DP_DATA_ROOT={data_root} python -m dp_ops generate "
            f"--start {start} --end {end}")


def check_no_later_release(data_root: Path, end: date, reports: list[str]) -> None:
    """Refuse, before anything starts, a demo whose evaluation would fail at the end: a
    report's release in ``data_root`` (``latest``) already ends after ``end``, from an
    earlier demo over a longer range. The backfill would leave it published (a release
    never moves back to an earlier day) and the evaluation refuses to compare it with the
    truth of the shorter range (docs/airflow.md, "The demo's range")."""
    for report in reports:
        manifest = data_root / "published" / report / "latest" / "manifest.json"
        try:
            last = date.fromisoformat(json.loads(manifest.read_text())["last_date"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # no release (or none readable): the pipeline judges it, not this
        if last > end:
            raise DemoError(
                f"{manifest}: the {report} release already ends on {last}, after --end "
                f"{end} (an earlier demo over a longer range): the evaluation could not "
                f"compare it with the truth of this range. Use a fresh data root (delete "
                f"{data_root}, or set DP_DATA_ROOT), or --end {last} or later")


# The truth for the evaluation and the evaluations themselves run beside the backfill at
# this niceness: they take the cores' idle moments (a run's tasks waiting for the scheduler)
# instead of slowing the task processes down; nothing waits for them before the end.
BACKGROUND_NICENESS = 10


def lower_priority(pid: int = 0, niceness: int = BACKGROUND_NICENESS) -> None:
    """Raise the niceness of every thread of process ``pid`` (0: this one) to at least
    ``niceness`` (on Linux a niceness is a thread's: DuckDB's worker threads exist
    already); best effort: where it cannot, the process runs at its priority."""
    tasks = Path(f"/proc/{pid or os.getpid()}/task")
    for tid in ([int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [pid]):
        try:
            current = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, max(current, niceness))
        except OSError:
            pass  # the thread ended meanwhile, or the platform refuses


# Concurrent backfill runs per DAG. One DAG alone: 4, which suits 2 cores. Both at once
# (the default): a symptoms run costs more CPU than a mobility run (whose days before
# 2020-02-15 skip four tasks), so symptoms gets 6 and both end together
# (docs/airflow.md).
MAX_ACTIVE_RUNS = 4
MAX_ACTIVE_RUNS_TOGETHER = {"mobility_report": 4, "symptoms_dataset": 6}


def max_active_runs(args: argparse.Namespace, dag_id: str) -> int:
    """``--max-active-runs``, else the default of ``dag_id`` for how the DAGs are run."""
    if args.max_active_runs is not None:
        return int(args.max_active_runs)
    if args.together and len(args.dag_ids) > 1:
        return MAX_ACTIVE_RUNS_TOGETHER.get(dag_id, MAX_ACTIVE_RUNS)
    return MAX_ACTIVE_RUNS


def executor_slots(args: argparse.Namespace) -> int:
    """Twice the runs at a time of the DAGs backfilled together (a run's next task is
    queued while the last one's process ends); at least 2."""
    slots = [2 * max_active_runs(args, d) for d in args.dag_ids]
    return max(2, sum(slots) if args.together else max(slots))


class Generator:
    """``python -m dp_ops generate`` for the demo range, run beside Airflow's start-up
    (``--generate-users``): generating keeps one core busy while migrating the metadata
    DB, starting the api-server and dag-processor and creating the backfills use mostly
    the other. The generator writes every input file first,
    then the truth (for the evaluation only): the scheduler starts as soon as the input is
    complete (:meth:`input_written`), and the demo waits for the truth at the end
    (:meth:`wait`)."""

    POLL_SECONDS = 0.2

    def __init__(self, args: argparse.Namespace, data_root: Path) -> None:
        self.args, self.data_root = args, data_root
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        a = self.args
        cmd = [sys.executable, "-m", "dp_ops", "generate", "--start", str(a.start),
               "--end", str(a.end), "--users", str(a.generate_users)]
        log(f"generating the input beside Airflow's start-up: {shlex.join(cmd)}")
        self.proc = subprocess.Popen(cmd, env={**os.environ, "DP_DATA_ROOT": str(self.data_root)})

    def last_files(self) -> list[Path]:
        """The files the generator writes last of the input (each by one rename): the last
        day's partition of each source; the reference files come before any day."""
        raw = self.data_root / "raw"
        return [raw / source / f"date={self.args.end}" / "part-0.parquet"
                for source in ("location_history", "search_activity")]

    def input_written(self) -> None:
        """Return once the input of the whole range is written (the generator may still be
        computing the truth), or the generator has ended (then as :meth:`wait`)."""
        if self.proc is None:
            return
        t = time.monotonic()
        while self.proc.poll() is None:
            if all(p.is_file() for p in self.last_files()):
                check_input(self.data_root, self.args.start, self.args.end)
                lower_priority(self.proc.pid)
                log(f"input written (waited {time.monotonic() - t:.0f} s for it); the "
                    "truth for the evaluation is computed beside the backfill, at "
                    f"niceness {BACKGROUND_NICENESS}")
                return
            time.sleep(self.POLL_SECONDS)
        self.wait()

    def wait(self) -> None:
        if self.proc is None:
            return
        t = time.monotonic()
        rc = self.proc.wait()
        self.proc = None
        if rc != 0:
            raise DemoError(f"generating the input failed (exit {rc}; its output is above)")
        log(f"generator done: input and truth (waited {time.monotonic() - t:.0f} s for it)")
        check_input(self.data_root, self.args.start, self.args.end)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


class Evaluations:
    """``python -m dp_ops evaluate <report>`` of each report whose backfill is done
    (``--evaluate``), started at once: the other DAG's last runs leave a core idle. Each
    writes to
    ``$AIRFLOW_HOME/logs/demo/evaluate-<report>.log``, printed by :meth:`finish`."""

    def __init__(self, data_root: Path, log_dir: Path, python: str | None = None) -> None:
        self.data_root, self.log_dir = data_root, log_dir
        self.python = python or sys.executable
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    def start(self, report: str) -> None:
        out = self.log_dir / f"evaluate-{report}.log"
        cmd = [self.python, "-m", "dp_ops", "evaluate", report,
               "--json", str(self.figures_file(report))]
        log(f"evaluating the {report} release beside the rest: {shlex.join(cmd)}")
        with open(out, "wb") as fh:
            self.procs[report] = (subprocess.Popen(
                cmd, stdout=fh, stderr=subprocess.STDOUT,
                env={**os.environ, "DP_DATA_ROOT": str(self.data_root)},
                preexec_fn=lower_priority), out)

    def figures_file(self, report: str) -> Path:
        return self.log_dir / f"evaluate-{report}.json"

    def finish(self) -> int:
        """Wait for the evaluations, print their output in report order; 1 if one failed."""
        status = 0
        for report, (proc, out) in self.procs.items():
            rc = proc.wait()
            sys.stdout.write(out.read_text(errors="replace"))
            sys.stdout.flush()
            if rc != 0:
                log(f"evaluating {report} failed (exit {rc}; its output is above)")
                status = 1
        self.procs.clear()
        return status

    def stop(self) -> None:
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
        self.procs.clear()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--start", type=date.fromisoformat, default=date(2020, 1, 1))
    # the demo's range (docs/airflow.md, "The demo's range")
    p.add_argument("--end", type=date.fromisoformat, default=date(2020, 2, 23))
    p.add_argument("--airflow-home", type=Path,
                   default=Path(os.environ.get("AIRFLOW_HOME") or REPO / "airflow_home"),
                   help="default: $AIRFLOW_HOME, else <repo>/airflow_home")
    p.add_argument("--max-active-runs", type=int, default=None,
                   help="concurrent backfill runs of each DAG (default 4; with both DAGs "
                        "at once 4 of mobility_report and 6 of symptoms_dataset, suited "
                        "to 2 cores; see docs/airflow.md)")
    p.add_argument("--port", type=int, default=8080,
                   help="api-server (UI) port; another free port if taken")
    p.add_argument("--dag-id", dest="dag_ids", action="append", default=None,
                   help="a DAG to backfill (repeatable; default: "
                        f"{' then '.join(DEFAULT_DAG_IDS)})")
    p.add_argument("--together", action=argparse.BooleanOptionalAction, default=True,
                   help="backfill all the DAGs at once (default; --no-together: one after "
                        "the other)")
    p.add_argument("--dags-folder", type=Path, default=REPO / "dags")
    p.add_argument("--timeout-minutes", type=float, default=120)
    p.add_argument("--fresh", action="store_true",
                   help="delete the Airflow metadata DB and logs first (not the data root)")
    p.add_argument("--warm-imports", action=argparse.BooleanOptionalAction, default=True,
                   help="pre-import pandas/pyarrow/DuckDB/GX in the scheduler so that the "
                        "forked task processes start warm (default on)")
    p.add_argument("--keep-running", action="store_true",
                   help="leave Airflow running afterwards (UI at the printed URL)")
    p.add_argument("--generate-users", type=int, default=None, metavar="N",
                   help="first generate synthetic input of N users for the range (python -m "
                        "dp_ops generate), beside Airflow's start-up (`make demo`)")
    p.add_argument("--evaluate", action="store_true",
                   help="compare each report's release with the synthetic truth (python -m "
                        "dp_ops evaluate <report>) as soon as its backfill is done, beside the "
                        "other's last runs; the output is printed at the end (`make demo`)")
    p.add_argument("--results", default=None, metavar="NAME",
                   help="write the run's figures (time, CPU, the evaluation) to "
                        "benchmarks/results/NAME.{md,json}, stamped with the commit and "
                        "the date (`make demo`: demo)")
    p.add_argument("--skip-input-check", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.dag_ids = args.dag_ids or list(DEFAULT_DAG_IDS)
    args.dag_id = args.dag_ids[0]
    if args.end < args.start:
        p.error(f"--end {args.end} is before --start {args.start}")
    if args.max_active_runs is not None and args.max_active_runs < 1:
        p.error("--max-active-runs must be >= 1")
    if args.generate_users is not None and args.generate_users < 1:
        p.error("--generate-users must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t0 = time.monotonic()
    home = args.airflow_home.resolve()
    data_root = Path(os.environ.get("DP_DATA_ROOT") or REPO / "data").resolve()
    if shutil.which("airflow") is None:
        log("`airflow` is not on PATH: activate the venv (e.g. PATH=.venv/bin:$PATH)")
        return 2
    try:
        if not args.skip_input_check and args.generate_users is None:
            check_input(data_root, args.start, args.end)
        if args.evaluate:
            check_no_later_release(data_root, args.end,
                                   [REPORT_OF[d] for d in args.dag_ids if d in REPORT_OF])
    except DemoError as exc:
        log(str(exc))
        return 2

    if args.fresh:
        for p in (home / "airflow.db", home / "airflow.db-wal", home / "airflow.db-shm"):
            p.unlink(missing_ok=True)
        shutil.rmtree(home / "logs", ignore_errors=True)
    log_dir = home / "logs" / "demo"
    log_dir.mkdir(parents=True, exist_ok=True)
    (home / "plugins").mkdir(exist_ok=True)
    write_local_settings(home, args.warm_imports)
    api_port = free_port(args.port)
    env = airflow_env(args, home, data_root, api_port, free_port(8793))
    release_signing_key(env, home)
    env_file = write_env_file(home, env)
    log(f"AIRFLOW_HOME={home}  DP_DATA_ROOT={data_root}  DAGs {', '.join(args.dag_ids)} "
        f"{args.start}..{args.end}  max_active_runs "
        + ", ".join(f"{d}={max_active_runs(args, d)}" for d in args.dag_ids))

    services = Services(env=env, log_dir=log_dir)
    meta = Metadata(home / "airflow.db")

    def on_sigterm(signum: int, frame: object) -> None:  # SIGINT too
        raise KeyboardInterrupt

    # Explicitly, because a shell that starts the demo in the background ignores SIGINT.
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_sigterm)
    ok = False
    generator = Generator(args, data_root)
    evaluations = Evaluations(data_root, log_dir)

    backfilled: dict[str, float] = {}
    executing: float | None = None  # when the scheduler executing the runs started

    def evaluate(dag_id: str) -> None:
        backfilled[dag_id] = time.monotonic() - t0
        if args.evaluate and dag_id in REPORT_OF:
            generator.wait()  # the truth is written after the input
            evaluations.start(REPORT_OF[dag_id])

    try:
        if args.generate_users is not None:
            generator.start()
        log("airflow db migrate ...")
        airflow_cli(env, log_dir, "db-migrate", "db", "migrate")
        services.start("api-server", "api-server")
        services.start("dag-processor", "dag-processor")
        wait_for_api(services, api_port, timeout=180)
        log(f"api-server up: UI at http://localhost:{api_port} (user admin, password in "
            f"{home / 'simple_auth_manager_passwords.json.generated'})")
        started = backfill_dags(services, meta, args, home, t0,
                                input_ready=generator.input_written, done=evaluate)
        executing = None if started is None else started - t0
        generator.wait()  # the truth, for the evaluation
        ok = True
    except DemoError as exc:
        log(f"FAILED: {exc}")
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        generator.stop()
        if not ok:
            evaluations.stop()
        if args.keep_running and ok:
            groups = " ".join(f"-{p.pid}" for p in services.procs.values())
            log(f"Airflow keeps running: UI http://localhost:{api_port}; for the airflow "
                f"CLI: source {env_file}; stop it with kill -TERM -- {groups}")
        else:
            services.stop()
    log(f"elapsed {time.monotonic() - t0:.0f} s")
    if not ok:
        return 1
    from dp_ops.reports.mobility.config import load_mobility_config

    status = 0
    for dag_id in args.dag_ids:
        report = REPORT_OF.get(dag_id)
        if report is None:
            continue
        release = data_root / "published" / report / "latest"
        if release.exists():
            log(f"{report} release: {release}/")
            continue
        first_public = load_mobility_config().first_public_date
        if report == "mobility" and args.end < first_public:
            log(f"no mobility release: nothing is published before {first_public}")
            continue
        log(f"{report} release missing: {release}/ does not exist")
        status = 1
    evaluated = list(evaluations.procs)
    if evaluated:
        status = max(status, evaluations.finish())
        log(f"evaluated; elapsed {time.monotonic() - t0:.0f} s")
    if status == 0 and args.results:
        path = write_results(args, time.monotonic() - t0, backfilled, executing,
                             {r: evaluations.figures_file(r) for r in evaluated},
                             {r: log_dir / f"evaluate-{r}.log" for r in evaluated})
        log(f"figures written to {path}")
    return status


def write_results(args: argparse.Namespace, elapsed: float, backfilled: dict[str, float],
                  executing: float | None, figures: dict[str, Path], texts: dict[str, Path],
                  results_dir: Path | None = None) -> Path:
    """The run's results file (``benchmarks/results/<--results>.md`` and ``.json``): the run's
    parameters, its wall and CPU time, when each backfill was done, and each report's
    evaluation against the synthetic truth, stamped with the commit and the date.
    ``executing``: when the scheduler that executed the runs started, from the demo's
    start (None: no runs were executed); the backfills themselves are timed from there."""
    import resource

    sys.path.insert(0, str(REPO / "benchmarks"))
    import results_file

    own, children = (resource.getrusage(resource.RUSAGE_SELF),
                     resource.getrusage(resource.RUSAGE_CHILDREN))
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    data: dict[str, object] = {
        "command": "make demo" if args.generate_users is not None else "airflow_demo.py",
        "users": args.generate_users, "start": str(args.start), "end": str(args.end),
        "dag_ids": list(args.dag_ids), "together": args.together,
        "seconds": round(elapsed, 1), "cpu_seconds": round(cpu, 1),
        "backfill_done_after_seconds": {d: round(t, 1) for d, t in backfilled.items()},
        "runs_executing_after_seconds": None if executing is None else round(executing, 1),
        "evaluation": {r: json.loads(p.read_text()) for r, p in figures.items()
                       if p.exists()}}
    lines = [f"`{data['command']}`: {args.start}..{args.end}, "
             f"{args.generate_users or 'existing'} users, DAGs {', '.join(args.dag_ids)}.",
             "", "| what | seconds |", "|---|---:|",
             f"| end to end (wall) | {elapsed:.0f} |", f"| CPU, every process | {cpu:.0f} |"]
    lines += [f"| {d} backfill done | {t:.0f} |" for d, t in backfilled.items()]
    if executing is not None and backfilled:
        last = max(backfilled.values())
        lines += [f"| the backfills themselves: the scheduler started at {executing:.0f}, "
                  f"the last run done at {last:.0f} | {last - executing:.0f} |"]
    for report, text in texts.items():
        lines += ["", f"## {report}: the release against the synthetic truth", "",
                  "```", text.read_text(errors="replace").rstrip(), "```"]
    return results_file.write(args.results, "make demo: both reports through Airflow",
                              "\n".join(lines), data,
                              results_dir=results_dir or results_file.RESULTS)


if __name__ == "__main__":
    sys.exit(main())
