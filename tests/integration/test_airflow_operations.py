"""Operations through a real Airflow, and a leak scan of what its UI shows (issue 6, 4 and 5).

Unlike the ``dag.test()`` tests, nothing here runs a task in the pytest process. A module
fixture deploys Airflow 3 the way ``make demo`` does, with the pieces of
``scripts/airflow_demo.py``: its own temporary ``AIRFLOW_HOME`` (SQLite metadata DB,
LocalExecutor, warm imports), ``airflow db migrate``, ``airflow api-server`` and ``airflow
dag-processor`` in the background, every change through the ``airflow`` CLI in a
subprocess with its own environment, run states read from the metadata DB read-only.
``DP_BOUNDING_SHARDS=2``, so ``bound_contributions`` runs as two mapped task instances.

On synthetic input for 2020-01-03..02-17 (the 35-day baseline window 01-03..02-06, then
three public report days from 02-15; 12,000 users):

1. ``airflow backfill create --dag-id mobility_report`` over the range, executed by a real
   ``airflow scheduler``: every run succeeds, a release with a manifest is published, the
   ledger has exactly one spend per slot, paid by that day's backfill run.
2. ``mobility_region_rerun`` for one level-2 region on 02-17, three times: reuse of the
   stored noise (triggered with ``airflow dags trigger --conf``; nothing spent, release
   unchanged), ``renoise`` with a reason, triggered by the requester and approved by the
   approver through the REST API (15 spends for the region's chain, recorded with the
   reason, only the chain's rows may change), ``renoise`` again (refused by the cap before
   anyone is asked: ``approve_spend`` fails on its first try with the ledger's documented
   message; nothing changes).
   Then the two attacks of issue 31's rows 8 and 9, on days with room for a re-noise:
   the requester marks ``approve_spend`` successful through the REST API instead of
   waiting for an approval (row 8), and a re-noise triggered with ``airflow dags
   trigger`` (requester: the OS user) is approved by the approver, who asked for it
   (row 9). Both end in a refusal: nothing spent, nothing published.
3. The leak scan (rules in ``leak_scan.py``): every row of every table of the metadata DB
   (XCom, rendered template fields, DAG-run conf, task instances, audit log, notes, ...),
   every file under ``$AIRFLOW_HOME/logs`` (task logs and the services' logs) and every file
   under ``$DP_DATA_ROOT/published`` must hold no input user id and no un-noised value of a
   small cell. **Small cells**: every cell (every metric, every level) of a region-day whose
   true number of contributing users is under the publication threshold
   (``MobilityConfig.min_contributors`` = 100): their values as the pipeline computed them
   (``work/bounded/mobility/date=D/aggregates.parquet``: level, region_id, metric, value)
   and as the generator's truth table holds them (counts, the true average residential
   hours, the true percent changes).

The fast tests at the end plant a user id and small-cell values in a log line, a metadata
table and a Parquet file and check that the scanner finds them: the scan can fail.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import sqlite3
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.cached_roots import GeneratedRoots
from support.dates import date_range
from support.leak_scan import (
    NUMBER,
    Findings,
    LeakScanner,
    file_records,
    significant_digits,
    sqlite_records,
)
from support.pipeline_helpers import load_airflow_demo, load_script

REPO = Path(__file__).resolve().parents[2]
START, END = date(2020, 1, 3), date(2020, 2, 17)
RERUN_DAY = END
USERS = 12_000
SEED = 11
SHARDS = 2
DAILY_DAG, RERUN_DAG = "mobility_report", "mobility_region_rerun"
APPROVER, REQUESTER = "approver", "requester"
MAX_ACTIVE_RUNS = 4
RUN_TIMEOUT_S = 300

# Google's exact header of the mobility CSVs (docs/design.md, Outputs).
MOBILITY_HEADER = [
    "country_region_code", "country_region", "sub_region_1", "sub_region_2", "metro_area",
    "iso_3166_2_code", "census_fips_code", "place_id", "date",
    "retail_and_recreation_percent_change_from_baseline",
    "grocery_and_pharmacy_percent_change_from_baseline",
    "parks_percent_change_from_baseline",
    "transit_stations_percent_change_from_baseline",
    "workplaces_percent_change_from_baseline",
    "residential_percent_change_from_baseline",
]
PERCENT_COLUMNS = frozenset(c for c in MOBILITY_HEADER if c.endswith("_from_baseline"))
# The intervals file: the same keys, then each change's interval (noisy, post-processed).
INTERVALS_HEADER = [*MOBILITY_HEADER[:9], *(f"{c}_{end}" for c in MOBILITY_HEADER[9:]
                                            for end in ("low", "high"))]
INTERVAL_ENDS = frozenset(INTERVALS_HEADER[9:])

# OPERATIONS.md "When a task fails": the refusal the on-call engineer reads in the log.
REFUSAL = re.compile(
    r"privacy budget refused for date (?P<date>\d{4}-\d\d-\d\d), slot (?P<slot>mobility/"
    r"\d{4}-\d\d-\d\d/level \d/\w+/region [\w-]+): spent (?P<spent>\d+\.\d+) \+ requested "
    r"(?P<requested>\d+\.\d+) would exceed the per-user-day cap (?P<cap>\d+\.\d+)")




# -------------------------------------------------------------------------- deployment --
@dataclass
class Deployment:
    """A running local Airflow (api-server, dag-processor, scheduler) and its data root."""

    demo: ModuleType
    home: Path
    data_root: Path
    services: Any  # airflow_demo.Services
    meta: Any  # airflow_demo.Metadata
    api_port: int

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
        """``airflow dags trigger``; retried on "database is locked" (SQLite, one writer:
        the running scheduler's writes can win the lock), unless the run was created."""
        demo = self.demo
        for attempt in range(1, 7):
            self.services.check_alive()
            res = demo.airflow_cli(self.services.env, self.services.log_dir, "trigger",
                                   "dags", "trigger", dag_id, "--run-id", run_id,
                                   "--conf", json.dumps(conf), check=False)
            if res.returncode == 0 or self.run_state(dag_id, run_id) is not None:
                return
            out = res.stdout + res.stderr
            if demo.LOCKED not in out:
                tail = "\n".join(out.strip().splitlines()[-15:])
                raise AssertionError(f"airflow dags trigger {dag_id} failed:\n{tail}")
            time.sleep(2 * attempt)
        raise AssertionError(f"airflow dags trigger {dag_id}: database kept being locked")

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.meta.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?",
                               (dag_id, run_id))
        return str(rows[0][0]) if rows else None

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = RUN_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.services.check_alive()
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        raise AssertionError(f"{dag_id} run {run_id} not finished after {timeout:.0f} s "
                             f"(state {self.run_state(dag_id, run_id)}, tasks "
                             f"{self.task_states(dag_id, run_id)})")

    def task_states(self, dag_id: str, run_id: str) -> dict[str, tuple[str | None, int]]:
        """task id (``id[k]`` for map index k) -> (state, try number)."""
        rows = self.meta.query(
            "SELECT task_id, map_index, state, try_number FROM task_instance "
            "WHERE dag_id = ? AND run_id = ?", (dag_id, run_id))
        return {(t if m < 0 else f"{t}[{m}]"): (s, int(n)) for t, m, s, n in rows}

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        rows = self.meta.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? "
            "AND key = 'return_value'", (dag_id, run_id, task_id))
        return json.loads(rows[0][0]) if rows else None

    def task_log(self, dag_id: str, run_id: str, task_id: str, attempt: int) -> Path:
        return self.demo.task_log(self.home, dag_id, run_id, task_id, attempt)

    def api(self, user: str) -> Any:
        """Airflow's REST API as ``user`` (scripts/topology.py's client)."""
        topo = load_script("topology")
        passwords = json.loads(
            (self.home / "simple_auth_manager_passwords.json.generated").read_text())
        return topo.Api(f"http://127.0.0.1:{self.api_port}", user, passwords[user]).login()

    def _call(self, user: str, method: str, path: str, body: Any) -> Any:
        """A REST call as ``user``, retried while the SQLite metadata DB is locked (the
        api-server answers 500 then)."""
        api = self.api(user)
        for attempt in range(1, 7):
            self.services.check_alive()
            try:
                return api.call(method, path, body)
            except load_script("topology").ApiError as exc:
                if exc.status < 500 or attempt == 6:
                    raise
            time.sleep(2 * attempt)
        raise AssertionError("unreachable")

    def trigger_as(self, user: str, dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
        """Trigger a run through the REST API as ``user`` (its requester)."""
        if self.run_state(dag_id, run_id) is None:
            self._call(user, "POST", f"/dags/{dag_id}/dagRuns",
                       {"dag_run_id": run_id, "logical_date": None, "conf": conf})

    def mark_success(self, user: str, dag_id: str, run_id: str, task_id: str) -> None:
        """What the UI's "Mark as success" does: PATCH the task instance's state."""
        self._call(user, "PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}",
                   {"new_state": "success"})

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str,
                      states: tuple[str, ...], timeout: float = RUN_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout
        while (state := self.task_states(dag_id, run_id).get(task_id, (None, 0))[0]) \
                not in states:
            if time.monotonic() > deadline:
                raise AssertionError(f"{dag_id} {run_id}: {task_id} is {state}, not one of "
                                     f"{states} after {timeout:.0f} s")
            self.services.check_alive()
            time.sleep(1)
        return str(state)

    def approve(self, dag_id: str, run_id: str, timeout: float = RUN_TIMEOUT_S) -> int:
        """Approve the run's spend through the REST API as the approver, as often as it
        asks (scripts/topology.py, answer_approvals); 0 when it never asks (refused
        before, or nothing to approve)."""
        topo = load_script("topology")
        approver = self.api(APPROVER)
        state = self.wait_for_task(dag_id, run_id, "approve_spend",
                                   ("awaiting_input", "success", "failed", "skipped",
                                    "upstream_failed"), timeout)
        if state == "failed":
            return 0  # refused before asking
        return int(topo.answer_approvals(approver, dag_id, run_id,
                                         self.services.check_alive, timeout=timeout))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory,
               generated_roots: GeneratedRoots) -> Iterator[Deployment]:
    """Synthetic input, a fresh Airflow deployment, and ``mobility_report`` backfilled over
    START..END by its scheduler. Every background process is stopped at the end, also when
    the setup fails half way."""
    demo = load_airflow_demo()
    base = tmp_path_factory.mktemp("airflow_operations")
    data_root = generated_roots.copy(base / "data", users=USERS, seed=SEED, start=START,
                                     end=END)

    home = base / "airflow_home"
    log_dir = home / "logs" / "demo"
    log_dir.mkdir(parents=True)
    (home / "plugins").mkdir()
    demo.write_local_settings(home, True)
    args = demo.parse_args([
        "--start", START.isoformat(), "--end", END.isoformat(), "--airflow-home", str(home),
        "--dag-id", DAILY_DAG, "--max-active-runs", str(MAX_ACTIVE_RUNS),
        "--timeout-minutes", "15"])
    api_port = demo.free_port(0)
    with pytest.MonkeyPatch.context() as mp:
        # Nothing of this process's Airflow (tests/conftest.py) or of the developer's
        # shell reaches the deployment: it gets exactly the demo's settings.
        for key in list(os.environ):
            if key.startswith(("AIRFLOW", "DP_")):
                mp.delenv(key)
        env = demo.airflow_env(args, home, data_root, api_port, demo.free_port(0))
    # the deployment's own release-signing key, made as the demo makes it (beside its home)
    env["DP_RELEASE_SIGNING_KEY_FILE"] = str(home / "release_signing.key")
    demo.release_signing_key(env, home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["DP_BOUNDING_SHARDS"] = str(SHARDS)
    # a requester and an approver besides the admin: re-noises are triggered by the
    # requester and wait for the approver's answer, both through the REST API (the CLI's
    # triggering user is the OS user, who is no Airflow user)
    env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] = (
        f"admin:admin,{APPROVER}:user,{REQUESTER}:user")
    env["DP_SPEND_APPROVERS"] = APPROVER
    # the first noise task to draw noise dies with SIGKILL before storing it (once: the
    # retry Airflow schedules inherits the same environment and runs through)
    env["DP_FAULT"] = "noise.after_draw"
    env["DP_FAULT_ONCE"] = str(base / "fault-fired")

    services = demo.Services(env=env, log_dir=log_dir)
    meta = demo.Metadata(home / "airflow.db")
    previous_handler = None
    if threading.current_thread() is threading.main_thread():
        # a CI job stopped with SIGTERM still runs this fixture's teardown (as on Ctrl-C),
        # so that no Airflow process outlives the test session
        previous_handler = signal.signal(signal.SIGTERM, _interrupt)
    try:
        demo.airflow_cli(env, log_dir, "db-migrate", "db", "migrate")
        services.start("api-server", "api-server")
        services.start("dag-processor", "dag-processor")
        demo.wait_for_api(services, api_port, timeout=180)
        demo.wait_for_dag(services, meta, RERUN_DAG, timeout=300)
        # before the scheduler runs: on SQLite its writes make CLI writes fail
        demo.airflow_cli(env, log_dir, "unpause", "dags", "unpause", RERUN_DAG)
        # parsed -> unpause -> backfill create (retried on "database is locked") ->
        # scheduler -> follow until every run succeeded (raises at the first failed run)
        demo.backfill_dags(services, meta, args, home, time.monotonic())
        yield Deployment(demo=demo, home=home, data_root=data_root, services=services,
                         meta=meta, api_port=api_port)
    finally:
        services.stop()
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# ---------------------------------------------------------------------------- backfill --
@pytest.mark.slow
@pytest.mark.integration
def test_backfill_by_the_scheduler_publishes_a_release(deployment: Deployment) -> None:
    runs = deployment.meta.query(
        "SELECT substr(logical_date, 1, 10), run_id, run_type, state FROM dag_run "
        "WHERE dag_id = ?", (DAILY_DAG,))
    assert sorted(r[0] for r in runs) == [d.isoformat() for d in date_range(START, END)]
    assert {(r[2], r[3]) for r in runs} == {("backfill", "success")}
    # the mapped bounding ran as SHARDS task instances in every run
    mapped = deployment.meta.query(
        "SELECT run_id, map_index, state FROM task_instance WHERE dag_id = ? "
        "AND task_id = 'bound_contributions'", (DAILY_DAG,))
    assert len(mapped) == SHARDS * len(runs)
    assert {(m, s) for _, m, s in mapped} == {(k, "success") for k in range(SHARDS)}

    latest = deployment.data_root / "published" / "mobility" / "latest"
    manifest = json.loads((latest / "manifest.json").read_text())
    header, rows = _read_csv(latest / "Global_Mobility_Report.csv")
    assert header == MOBILITY_HEADER
    days = {row["date"] for row in rows}
    assert days == {"2020-02-15", "2020-02-16", "2020-02-17"}
    assert (manifest["first_date"], manifest["last_date"]) == ("2020-02-15", "2020-02-17")
    assert manifest["rows"]["published"] == len(rows)
    assert manifest["run_id"] in {r[1] for r in runs}
    assert manifest["gate"]["success"] is True


@pytest.mark.slow
@pytest.mark.integration
def test_backfill_spends_once_per_slot(deployment: Deployment) -> None:
    """Exactly one ``noise`` spend per (date, level, metric) slot, all regions, paid by
    that day's backfill run; the composed epsilon of every day is one normal run's."""
    from dp_ops.reports.mobility.config import MobilityConfig

    cfg = MobilityConfig()
    run_of_day = {d: r for d, r in deployment.meta.query(
        "SELECT substr(logical_date, 1, 10), run_id FROM dag_run WHERE dag_id = ?",
        (DAILY_DAG,))}
    spends = _spends(deployment.data_root)
    slots = [(s.slot.day, s.slot.level, s.slot.metric, s.slot.region_scope) for s in spends]
    assert len(slots) == len(set(slots))  # one spend per slot
    assert set(slots) == {(d, level, b.name, "*") for d in date_range(START, END)
                          for level in cfg.levels for b in cfg.metric_budgets}
    assert {(s.kind, s.generation) for s in spends} == {("noise", 0)}
    assert all(s.run_id == run_of_day[s.slot.day.isoformat()] for s in spends)
    per_day: dict[date, float] = {}
    for s in spends:
        per_day[s.slot.day] = per_day.get(s.slot.day, 0.0) + s.epsilon
    assert all(abs(v - cfg.run_epsilon) < 1e-9 for v in per_day.values())


@pytest.mark.slow
@pytest.mark.integration
def test_a_noise_task_killed_hard_is_retried_by_airflow_and_spends_once(
        deployment: Deployment) -> None:
    """``DP_FAULT`` killed one ``noise`` task instance with SIGKILL after it drew noise and
    before it stored it (ledger committed). Airflow saw the process die, retried it, and the
    retry reused the paid spends (``test_backfill_spends_once_per_slot`` checks the ledger
    of every day, this one included)."""
    marker = deployment.home.parent / "fault-fired"
    assert marker.is_file() and marker.read_text() == "noise.after_draw"
    tries = deployment.meta.query(
        "SELECT run_id, try_number, state FROM task_instance WHERE dag_id = ? "
        "AND task_id = 'noise'", (DAILY_DAG,))
    retried = [(run, n, state) for run, n, state in tries if n > 1]
    assert len(retried) == 1, retried
    run_id, n, state = retried[0]
    assert (n, state) == (2, "success")
    first = deployment.meta.query(
        "SELECT state FROM task_instance_history WHERE dag_id = ? AND task_id = 'noise' "
        "AND run_id = ? AND try_number = 1", (DAILY_DAG, run_id))
    assert [s for (s,) in first] in (["failed"], ["up_for_retry"])
    spends = [s for s in _spends(deployment.data_root)
              if s.run_id == run_id]
    assert spends and {s.kind for s in spends} == {"noise"}
    assert len({s.slot for s in spends}) == len(spends)


# ------------------------------------------------------------------------------ reruns --
@dataclass(frozen=True)
class Snapshot:
    """What a rerun may change: the release, the ledger and the day's noisy values."""

    csv_bytes: bytes
    rows: dict[tuple[str, str], tuple[str, ...]]  # (region_id, date) -> published values
    release_id: str
    n_spends: int
    noisy: dict[tuple[int, str, str], int]  # (level, region_id, metric) -> current value


@dataclass(frozen=True)
class RerunOutcome:
    region: str
    chain: frozenset[str]
    conf: dict[str, Any]
    run_id: str
    state: str
    tasks: dict[str, tuple[str | None, int]]
    before: Snapshot
    after: Snapshot


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _regions(root: Path) -> list[dict[str, str]]:
    with (root / "reference" / "regions.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def _spends(root: Path) -> list[Any]:
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(ledger_url(DataRoot(root)))
    try:
        return ledger.spends("mobility")
    finally:
        ledger.dispose()


def _noisy_values(root: Path, day: date) -> dict[tuple[int, str, str], int]:
    """The current noisy value of each cell of ``day``: the latest stored draw."""
    import pandas as pd
    import pyarrow.parquet as pq

    from dp_ops.layout import DataRoot

    files = sorted(DataRoot(root).noise_dir("mobility", day).glob("spend-*.parquet"))
    cells = pd.concat([pq.read_table(p).to_pandas() for p in files], ignore_index=True)
    cells = cells.sort_values("spend_id").drop_duplicates(["level", "region_id", "metric"],
                                                          keep="last")
    return {(int(r.level), str(r.region_id), str(r.metric)): int(r.noisy_value)
            for r in cells.itertuples()}


def _snapshot(root: Path) -> Snapshot:
    latest = root / "published" / "mobility" / "latest"
    region_of_place = {r["place_id"]: r["region_id"] for r in _regions(root)}
    _, rows = _read_csv(latest / "Global_Mobility_Report.csv")
    return Snapshot(
        csv_bytes=(latest / "Global_Mobility_Report.csv").read_bytes(),
        rows={(region_of_place[r["place_id"]], r["date"]):
              tuple(r[c] for c in MOBILITY_HEADER) for r in rows},
        release_id=json.loads((latest / "manifest.json").read_text())["release_id"],
        n_spends=len(_spends(root)),
        noisy=_noisy_values(root, RERUN_DAY))


def _true_contributors(root: Path) -> dict[str, int]:
    """region_id -> fewest true contributing users on any day of the range."""
    import pyarrow.parquet as pq

    truth = pq.read_table(root / "truth" / "mobility_truth.parquet",
                          columns=["region_id", "contributors"]).to_pandas()
    return {str(k): int(v) for k, v in truth.groupby("region_id")["contributors"].min().items()}


def _rerun_region(root: Path) -> tuple[str, frozenset[str]]:
    """A level-2 region for the reruns, and its chain (it and its ancestors).

    Never a small cell on any day, nor any region of its chain (the leak scan then
    knows that the region ids the reruns put into conf, rendered fields and logs belong to
    no small cell), and outside the county of the most populous region, so that the
    release keeps rows outside the chain that must not change."""
    from dp_ops.reports.mobility.config import MobilityConfig

    threshold = MobilityConfig().min_contributors
    regions = {r["region_id"]: r for r in _regions(root)}
    fewest = _true_contributors(root)

    def chain(region_id: str) -> list[str]:
        out = [region_id]
        while regions[out[-1]]["parent_id"]:
            out.append(regions[out[-1]]["parent_id"])
        return out

    level2 = [r for r in regions if regions[r]["level"] == "2"]
    biggest_county = regions[max(level2, key=lambda r: fewest.get(r, 0))]["parent_id"]
    candidates = [r for r in level2 if regions[r]["parent_id"] != biggest_county
                  and all(fewest.get(c, 0) >= threshold for c in chain(r))]
    assert candidates, "the synthetic data has no suitable region for the reruns"
    region = max(candidates, key=lambda r: fewest[r])
    return region, frozenset(chain(region))


@pytest.fixture(scope="module")
def reruns(deployment: Deployment) -> dict[str, RerunOutcome]:
    """``mobility_region_rerun`` triggered three times for the same region and day, each
    run awaited: reuse (through the CLI), renoise, renoise again (refused; both through
    the REST API as the requester)."""
    root = deployment.data_root
    region, chain = _rerun_region(root)
    outcomes: dict[str, RerunOutcome] = {}
    # the third asks for a second re-noise of the same region-day explicitly (the
    # recorded override): past the repeat check, the cap refuses it
    for name, renoise in (("reuse", False), ("renoise", True), ("renoise_again", True)):
        conf = {"date": RERUN_DAY.isoformat(), "region": region, "renoise": renoise,
                "repeat_renoise": name == "renoise_again",
                "reason": f"integration test {name}: raw data corrected, INC-{SEED}"}
        run_id = f"ops_test__{name}"
        before = _snapshot(root)
        if renoise:
            deployment.trigger_as(REQUESTER, RERUN_DAG, run_id, conf)
            deployment.approve(RERUN_DAG, run_id)
        else:
            deployment.trigger(RERUN_DAG, run_id, conf)
        state = deployment.wait_for_run(RERUN_DAG, run_id)
        outcomes[name] = RerunOutcome(
            region=region, chain=chain, conf=conf, run_id=run_id, state=state,
            tasks=deployment.task_states(RERUN_DAG, run_id), before=before,
            after=_snapshot(root))
    return outcomes


def _changed_rows(outcome: RerunOutcome) -> set[tuple[str, str]]:
    before, after = outcome.before.rows, outcome.after.rows
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def _rows_outside_chain(outcome: RerunOutcome) -> int:
    return sum(1 for region, _ in outcome.before.rows if region not in outcome.chain)


@pytest.mark.slow
@pytest.mark.integration
def test_rerun_without_renoise_reuses_stored_noise(deployment: Deployment,
                                                   reruns: dict[str, RerunOutcome]) -> None:
    """No epsilon spent, no new draw; the release is recomputed from the stored noise, so
    nothing in it changes (the region's rows included: same raw data, same noise)."""
    outcome = reruns["reuse"]
    assert outcome.state == "success", outcome.tasks
    assert {outcome.tasks[t] for t in ("noise", "gate", "publish")} == {("success", 1)}
    assert {outcome.tasks[f"bound_contributions[{k}]"][0] for k in range(SHARDS)} == {
        "success"}
    assert "0 slot(s) spent" in deployment.xcom(RERUN_DAG, outcome.run_id, "noise")
    assert outcome.after.n_spends == outcome.before.n_spends
    same_noise = outcome.after.noisy == outcome.before.noisy
    assert same_noise, "stored noisy values changed without renoise"
    assert _rows_outside_chain(outcome) > 0
    assert _changed_rows(outcome) == set()
    same_release = (outcome.after.csv_bytes, outcome.after.release_id) == (
        outcome.before.csv_bytes, outcome.before.release_id)
    assert same_release, "the release changed without renoise"


@pytest.mark.slow
@pytest.mark.integration
def test_rerun_with_renoise_spends_for_the_region_chain_only(
        deployment: Deployment, reruns: dict[str, RerunOutcome]) -> None:
    """The ledger records one ``renoise`` spend per metric group for the region and each
    ancestor (15 slots), with the reason and the rerun's run id; fresh noise is drawn for
    exactly those cells, and no published row outside the chain changes."""
    from dp_ops.reports.mobility.config import MobilityConfig

    cfg = MobilityConfig()
    outcome = reruns["renoise"]
    assert outcome.state == "success", outcome.tasks
    assert {outcome.tasks[t] for t in ("noise", "gate", "publish")} == {("success", 1)}
    assert "15 slot(s) spent" in deployment.xcom(RERUN_DAG, outcome.run_id, "noise")
    new = [s for s in _spends(deployment.data_root) if s.run_id == outcome.run_id]
    assert len(new) == outcome.after.n_spends - outcome.before.n_spends
    assert {(s.slot.day, s.slot.region_scope, s.slot.metric) for s in new} == {
        (RERUN_DAY, r, b.name) for r in outcome.chain for b in cfg.metric_budgets}
    assert {(s.kind, s.reason) for s in new} == {("renoise", outcome.conf["reason"])}
    assert abs(sum(s.epsilon for s in new) - cfg.run_epsilon) < 1e-9
    changed_cells = {k for k in outcome.before.noisy
                     if outcome.before.noisy[k] != outcome.after.noisy[k]}
    # every cell of the chain is drawn afresh; that all of them drew their old value
    # again has probability < 1e-12 (over 30 cells, each repeats with p < 0.4)
    assert changed_cells and {region for _, region, _ in changed_cells} <= outcome.chain
    assert _rows_outside_chain(outcome) > 0
    assert {region for region, _ in _changed_rows(outcome)} <= outcome.chain
    assert {day for _, day in _changed_rows(outcome)} <= {RERUN_DAY.isoformat()}


@pytest.mark.slow
@pytest.mark.integration
def test_second_renoise_is_refused_past_the_cap(deployment: Deployment,
                                                reruns: dict[str, RerunOutcome]) -> None:
    """The approval refuses it before asking anyone, on its first try (no retry), with the
    ledger's documented refusal naming the date, the slot, the spent and requested
    epsilon and the cap; nothing is ingested, spent, drawn or published."""
    from dp_ops.reports.mobility.config import MobilityConfig

    cfg = MobilityConfig()
    outcome = reruns["renoise_again"]
    assert outcome.state == "failed"
    assert outcome.tasks["validate_request"] == ("success", 1)
    assert outcome.tasks["approve_spend"] == ("failed", 1), outcome.tasks
    assert {outcome.tasks[t][0] for t in ("ingest", "noise", "report", "gate",
                                          "publish")} == {"upstream_failed"}
    text = deployment.task_log(RERUN_DAG, outcome.run_id, "approve_spend", 1).read_text()
    assert "not sent for approval, nothing was spent" in text
    match = REFUSAL.search(text)
    assert match, "the approval's task log has no budget refusal"
    assert match["date"] == RERUN_DAY.isoformat()
    assert match["slot"].startswith(f"mobility/{RERUN_DAY.isoformat()}/level ")
    assert match["slot"].rsplit("/region ", 1)[1] in outcome.chain
    assert float(match["spent"]) + float(match["requested"]) > cfg.cap
    assert float(match["cap"]) == pytest.approx(cfg.cap, abs=1e-4)
    assert not deployment.task_log(RERUN_DAG, outcome.run_id, "approve_spend", 2).exists()
    unchanged = outcome.after == outcome.before
    assert unchanged, "the refused rerun changed the ledger, the noise store or the release"


# ------------------------------------------------- issue 31, rows 8 and 9: approval --
ROW8_DAY, ROW9_DAY = date(2020, 2, 16), date(2020, 2, 15)  # each with room for a re-noise


@dataclass(frozen=True)
class AttackOutcome:
    run_id: str
    state: str
    tasks: dict[str, tuple[str | None, int]]
    asked: int  # approval requests the approver answered
    before: Snapshot
    after: Snapshot


def _approvals(root: Path, run_id: str) -> list[Any]:
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(ledger_url(DataRoot(root)))
    try:
        return ledger.approvals(run_id)
    finally:
        ledger.dispose()


@pytest.fixture(scope="module")
def attacks(deployment: Deployment, reruns: dict[str, RerunOutcome]) -> dict[str, AttackOutcome]:
    """The two attacks, each on a day with room for one re-noise of the reruns' region:

    - row 8: the requester triggers a re-noise through the REST API and, instead of
      waiting for an approval, marks ``approve_spend`` successful (PATCH of the task
      instance, what the UI's "Mark as success" does);
    - row 9: a re-noise triggered with ``airflow dags trigger`` (its requester is the OS
      user, no Airflow user), answered Approve by the approver, who is the person who
      asked for it."""
    import getpass

    root = deployment.data_root
    region = next(iter(reruns.values())).region
    assert getpass.getuser() not in {"admin", APPROVER, REQUESTER}  # the CLI's requester
    out: dict[str, AttackOutcome] = {}
    for name, day in (("row8", ROW8_DAY), ("row9", ROW9_DAY)):
        conf = {"date": day.isoformat(), "region": region, "renoise": True,
                "repeat_renoise": False, "reason": f"integration test {name}, INC-{SEED}"}
        run_id = f"ops_test__{name}"
        before = _snapshot(root)
        asked = 0
        if name == "row8":
            deployment.trigger_as(REQUESTER, RERUN_DAG, run_id, conf)
            deployment.wait_for_task(RERUN_DAG, run_id, "approve_spend", ("awaiting_input",))
            # as a person would, seconds later (answer_approvals: an earlier change races
            # the executor's report of the parked attempt)
            time.sleep(load_script("topology").SETTLE_S)
            deployment.mark_success(REQUESTER, RERUN_DAG, run_id, "approve_spend")
        else:
            deployment.trigger(RERUN_DAG, run_id, conf)
            asked = deployment.approve(RERUN_DAG, run_id)
        state = deployment.wait_for_run(RERUN_DAG, run_id)
        out[name] = AttackOutcome(run_id=run_id, state=state,
                                  tasks=deployment.task_states(RERUN_DAG, run_id),
                                  asked=asked, before=before, after=_snapshot(root))
    return out


@pytest.mark.slow
@pytest.mark.integration
def test_row8_approve_spend_marked_successful_by_hand_spends_nothing(
        deployment: Deployment, attacks: dict[str, AttackOutcome]) -> None:
    """Issue 31, row 8: the approval was enforced by the order of tasks only, so marking
    ``approve_spend`` successful let the noise task spend and the run publish. Now the
    noise task spends only against an approval the ledger records when an approver
    answers Approve: it fails on its first try (no retry), naming the missing approval;
    nothing is spent, nothing published."""
    outcome = attacks["row8"]
    assert outcome.tasks["approve_spend"][0] == "success"  # as the attacker set it
    assert outcome.state == "failed", outcome.tasks
    assert outcome.tasks["noise"] == ("failed", 1), outcome.tasks
    assert {outcome.tasks[t][0] for t in ("report", "gate", "publish")} == {
        "upstream_failed"}, outcome.tasks
    text = deployment.task_log(RERUN_DAG, outcome.run_id, "noise", 1).read_text()
    assert "no approval is recorded in the ledger for this run and this exact request" in text
    assert "marked successful by hand approves nothing" in text
    assert not deployment.task_log(RERUN_DAG, outcome.run_id, "noise", 2).exists()
    assert outcome.after.n_spends == outcome.before.n_spends, "the re-noise spent budget"
    assert (outcome.after.csv_bytes, outcome.after.release_id) == (
        outcome.before.csv_bytes, outcome.before.release_id), "the re-noise was published"
    assert _approvals(deployment.data_root, outcome.run_id) == []


@pytest.mark.slow
@pytest.mark.integration
def test_row9_a_cli_triggered_renoise_cannot_be_approved(
        deployment: Deployment, attacks: dict[str, AttackOutcome]) -> None:
    """Issue 31, row 9: ``airflow dags trigger`` records the OS user as the requester, so
    the person who asked could approve their own re-noise. Now a run whose requester is
    not an Airflow user is refused before anyone is asked (``approve_spend`` fails on its
    first try): nothing is ingested, spent or published."""
    outcome = attacks["row9"]
    assert outcome.state == "failed", outcome.tasks
    assert outcome.tasks["approve_spend"] == ("failed", 1), outcome.tasks
    assert outcome.asked == 0
    assert {outcome.tasks[t][0] for t in ("ingest", "noise", "report", "gate",
                                          "publish")} == {"upstream_failed"}, outcome.tasks
    text = deployment.task_log(RERUN_DAG, outcome.run_id, "approve_spend", 1).read_text()
    assert "not a known Airflow user" in text and "airflow dags trigger" in text
    assert outcome.after.n_spends == outcome.before.n_spends, "the re-noise spent budget"
    assert (outcome.after.csv_bytes, outcome.after.release_id) == (
        outcome.before.csv_bytes, outcome.before.release_id), "the re-noise was published"
    assert _approvals(deployment.data_root, outcome.run_id) == []


@pytest.mark.slow
@pytest.mark.integration
def test_an_approved_renoise_is_recorded_with_both_people(
        deployment: Deployment, reruns: dict[str, RerunOutcome]) -> None:
    """The approval the approver gave through the REST API is in the ledger: the run, the
    requester (the Airflow user who triggered it), the approver, how it was vouched for."""
    (approval,) = _approvals(deployment.data_root, reruns["renoise"].run_id)
    assert (approval.requester, approval.approver, approval.via) == (
        REQUESTER, APPROVER, "airflow_hitl")
    assert approval.kind == "renoise" and reruns["renoise"].region in approval.request


# --------------------------------------------------------------------------- leak scan --
def _user_ids(root: Path) -> set[str]:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    ids: set[str] = set()
    for source in ("location_history", "search_activity"):
        table = ds.dataset(root / "raw" / source, format="parquet",
                           partitioning="hive").to_table(columns=["user_id"])
        ids.update(pc.unique(table["user_id"]).to_pylist())
    return ids


def _small_cells(root: Path) -> dict[str, list[float | int]]:
    """region_id -> the un-noised values of its small cells (see the module docstring)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from dp_ops.layout import DataRoot
    from dp_ops.reports.mobility.config import MobilityConfig

    threshold = MobilityConfig().min_contributors
    cells: dict[str, list[float | int]] = {}
    for day in date_range(START, END):
        bounded = pq.read_table(DataRoot(root).bounded_file("mobility", day)).to_pandas()
        contributors = bounded[bounded["metric"] == "contributors"]
        small = set(contributors.loc[contributors["value"] < threshold, "region_id"])
        # a region with no contributor at all has no row: all its values are 0
        for row in bounded[bounded["region_id"].isin(small)].itertuples():
            cells.setdefault(str(row.region_id), []).append(int(row.value))
    truth = pq.read_table(root / "truth" / "mobility_truth.parquet").to_pandas()
    truth = truth[truth["contributors"] < threshold]
    values = truth.drop(columns=["date", "region_id", "level"])
    for region, row in zip(truth["region_id"], values.itertuples(index=False), strict=True):
        for v in row:
            if pd.notna(v):  # numpy scalars -> int (counts) or float (averages, changes)
                cells.setdefault(str(region), []).append(v.item() if hasattr(v, "item") else v)
    return cells


def _published_records(path: Path) -> Iterator[str]:
    """A published file's records. In the release tables the six percent-change columns
    (and, in the intervals file, their intervals' ends) hold noisy, post-processed values
    by design and are blanked before the scan (a true count equal to a published percent
    change would be a coincidence, not a leak); the other columns are the region's public
    identity and the date, and the header check of the test makes sure no other column
    exists to carry a value."""
    if path.suffix not in (".csv", ".parquet"):
        yield from file_records(path)
        return
    records = iter(file_records(path))
    header = next(records).split(",")
    intervals = path.stem.endswith("_intervals")
    expected = INTERVALS_HEADER if intervals else MOBILITY_HEADER
    assert header == expected, f"{path.name}: unexpected columns"
    noisy = INTERVAL_ENDS if intervals else PERCENT_COLUMNS
    keep = [c not in noisy for c in header]
    for record in records:
        values = next(csv.reader(io.StringIO(record)))
        yield ",".join(v if k else "" for v, k in zip(values, keep, strict=True))


def _scan_deployment(deployment: Deployment, scanner: LeakScanner) -> Findings:
    findings = Findings()
    for table, columns, values in sqlite_records(deployment.db):
        for column, value in zip(columns, values, strict=True):
            if value:
                scanner.scan(f"metadata DB {table}.{column}", [value], findings)
        scanner.scan(f"metadata DB {table} (whole rows)", [" | ".join(values)], findings)
    for path in sorted((deployment.home / "logs").rglob("*")):
        if path.is_file():
            scanner.scan(f"log {path.relative_to(deployment.home)}", file_records(path),
                         findings)
    published = deployment.data_root / "published"
    for path in sorted(published.rglob("*")):
        if path.is_file() and not path.is_symlink():
            scanner.scan(f"published {path.relative_to(published)}",
                         _published_records(path), findings)
    return findings


@pytest.mark.slow
@pytest.mark.integration
def test_no_user_id_or_small_cell_value_where_a_ui_user_can_read_it(
        deployment: Deployment, reruns: dict[str, RerunOutcome]) -> None:
    """After the backfill and the three reruns (including a failed one, whose error ends
    up in the log): nothing in the metadata DB, the logs or the published files holds a
    user id or a small cell's un-noised value (rules: ``leak_scan.py``)."""
    root = deployment.data_root
    user_ids = _user_ids(root)
    small = _small_cells(root)
    scanner = LeakScanner(user_ids, small)
    assert len(user_ids) > USERS // 2
    # the scan has something to find: many small cells, in many regions
    assert len(small) >= 20 and scanner.n_small_forms > 1000
    assert not set(small) & next(iter(reruns.values())).chain

    findings = _scan_deployment(deployment, scanner)
    assert not findings, findings.describe()

    # the same scanner over the private areas finds both kinds of value: on this data it
    # would have seen them had they leaked
    from dp_ops.layout import DataRoot

    private = Findings()
    raw = DataRoot(root).raw_partition("location_history", END)
    for path in [*sorted(raw.glob("*.parquet")), DataRoot(root).bounded_file("mobility", END)]:
        scanner.scan("private", file_records(path), private)
    assert {rule for _, rule in private.hits} >= {
        "user id", "small-cell value next to its region id"}

    # ... and it read what a UI user reads: the tables and the task logs of every run
    seen = findings.records
    for table_column in ("xcom.value", "rendered_task_instance_fields.rendered_fields",
                         "dag_run.conf", "task_instance.task_id", "log.event"):
        assert seen[f"metadata DB {table_column}"] > 0, table_column
    task_logs = [loc for loc in seen if loc.startswith("log logs/dag_id=")]
    # a log per task instance that ran (mobility's tasks with nothing to do for their day
    # are skipped and start no process: no log); at least ingest, bounding and noise a day
    ((ran,),) = deployment.meta.query(
        "SELECT count(*) FROM task_instance WHERE dag_id = ? AND state IS NOT 'skipped'",
        (DAILY_DAG,))
    assert ran >= 3 * len(date_range(START, END))
    assert len(task_logs) >= ran
    assert any(loc.startswith("published ") and loc.endswith(".csv") for loc in seen)
    # a control in situ: the scanner finds the reruns' reason, which is in the DAG-run
    # conf and the rendered template fields, where a leaked id would have been
    marker = f"INC-{SEED}"
    control = LeakScanner([marker], {})
    control_findings = Findings()
    for table, columns, values in sqlite_records(deployment.db):
        for column, value in zip(columns, values, strict=True):
            control.scan(f"{table}.{column}", [value], control_findings)
    found = {loc for loc, _ in control_findings.hits}
    assert {"dag_run.conf", "rendered_task_instance_fields.rendered_fields"} <= found


# ---------------------------------------------- the scanner finds what is planted (fast) --
PLANTED_ID = "u0123456789ab"
OTHER_IDS = ["u00000000cafe", "uffffffffffff"]


def _planted_scanner() -> LeakScanner:
    return LeakScanner([PLANTED_ID, *OTHER_IDS],
                       {"DM-03-006": [37, -4128, 12.572998046875], "DM-07": [5]})


def _hits(scanner: LeakScanner, *records: str) -> dict[str, int]:
    findings = Findings()
    scanner.scan("planted", records, findings)
    return {rule: n for (_, rule), n in findings.hits.items()}


def test_scanner_finds_a_planted_user_id_in_a_log_line() -> None:
    scanner = _planted_scanner()
    line = ('{"timestamp":"2026-05-12T10:31:05.123456Z","level":"info","event":'
            f'"bound: dropped pair of user {PLANTED_ID}","logger":"task"}}')
    assert _hits(scanner, line) == {"user id": 1}
    # an exact substring also inside a longer token, e.g. a path or a hash
    assert _hits(scanner, f"/work/clean/x{PLANTED_ID}9.parquet") == {"user id": 1}
    assert _hits(scanner, "user u0123456789ac and u0123456789a") == {}
    described = Findings()
    scanner.scan("logs/dag_id=x/attempt=1.log", [line], described)
    assert PLANTED_ID not in described.describe()
    assert "user id found in logs/dag_id=x/attempt=1.log (1 time(s))" == described.describe()


def test_scanner_finds_a_small_cell_value_next_to_its_region() -> None:
    scanner = _planted_scanner()
    rule = "small-cell value next to its region id"
    assert _hits(scanner, "noise DM-03-006 contributors=37 on 2020-02-17") == {rule: 1}
    assert _hits(scanner, '{"region_id": "DM-03-006", "value": -4128}') == {rule: 1}
    assert _hits(scanner, "DM-03-006 residential 12.57 h") == {rule: 1}
    assert _hits(scanner, "DM-07,5") == {rule: 1}
    # not: the value alone, the region alone, another region, digits inside an id or
    # a date or a time, another number
    assert _hits(scanner, "contributors=37", "region DM-03-006 rerun",
                 "DM-03-0061 37", "DM-03 37", "DM-03-006 on 2020-03-07T10:37:05",
                 "DM-03-006 370 3.7 4128", "DM-07-005 5") == {}


def test_scanner_finds_a_distinctive_value_anywhere() -> None:
    scanner = _planted_scanner()
    assert significant_digits("12.572998046875") >= 8
    assert _hits(scanner, "mean 12.572998046875 hours") == {"distinctive un-noised value": 1}
    assert _hits(scanner, "mean 12.572998046876 hours", "mean 12.57 hours") == {}
    # simple ratios (here 1/3 and 37/60) come out of other computations too: rule V only
    simple = LeakScanner([PLANTED_ID], {"DM-07": [1 / 3, 37 / 60]})
    assert simple.distinctive == frozenset()
    assert _hits(simple, "share 0.3333333333333333 of 0.6166666666666667") == {}
    assert _hits(simple, "DM-07 0.6166666666666667") == {
        "small-cell value next to its region id": 1}
    assert NUMBER.findall("2020-02-17 DM-01 10:31:05.12 v1.5.0 -12 a7 7 3.5") == [
        "-12", "7", "3.5"]


def test_scanner_reads_metadata_db_and_parquet(tmp_path: Path) -> None:
    """Planted in an XCom-like JSON column, a zlib-compressed blob and a Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    db = tmp_path / "airflow.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE xcom (key TEXT, value JSON, blob BLOB)")
    con.execute("INSERT INTO xcom VALUES (?, ?, ?)", (
        "return_value", json.dumps({"cells": [["DM-03-006", "contributors", 37]]}),
        zlib.compress(f"kwargs of {PLANTED_ID}".encode())))
    con.commit()
    con.close()
    scanner = _planted_scanner()
    findings = Findings()
    for table, columns, values in sqlite_records(db):
        for column, value in zip(columns, values, strict=True):
            scanner.scan(f"{table}.{column}", [value], findings)
    assert set(findings.hits) == {("xcom.value", "small-cell value next to its region id"),
                                  ("xcom.blob", "user id")}
    table = pa.table({"region_id": ["DM-01", "DM-03-006"], "value": [37, 37],
                      "user": ["x", OTHER_IDS[0]]})
    pq.write_table(table, tmp_path / "cells.parquet")
    findings = Findings()
    scanner.scan("cells.parquet", file_records(tmp_path / "cells.parquet"), findings)
    assert dict(findings.hits) == {
        ("cells.parquet", "small-cell value next to its region id"): 1,
        ("cells.parquet", "user id"): 1}
