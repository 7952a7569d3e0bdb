"""The production topology for real: docker-compose.yaml's stack as local processes.

``scripts/topology.py`` (``make topology``) reads ``docker-compose.yaml`` and starts each of
its services on loopback: PostgreSQL (initialised by the compose file's own init script:
the ``airflow``, ``dp_ledger_owner`` and ``dp_ledger`` roles), Redis, the ``airflow-init``
command as written, then the api-server, dag-processor, scheduler, triggerer and a Celery
worker with the services' environments. The module fixture runs its scenario once,
through the REST API:

- backfills of ``mobility_report`` (2020-01-03..03-09, 67 days) and ``symptoms_dataset``
  (2020-01-01..01-14) at once, executed by the Celery worker;
- while the mobility backfill runs, an on-call rerun of one region on 2020-02-15 with a
  re-noise, triggered by the admin: it waits for approval; the admin's own approval is
  refused (HTTP 403), the approver's is taken;
- then a method update (parks, from 2020-03-09), approved the same way.

The tests check the ledger (verified as the pipeline's role; exactly the spends the plan
asks for, no more), the releases, the asset events and the consumer DAG, and print what
they saw. ``tests/unit/test_topology_config.py`` checks, without starting anything, that
every process gets exactly the compose file's settings.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.dates import date_range
from support.pipeline_helpers import load_script
from support.smtp_sink import SmtpSink

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ALERTS_TO = "oncall@example.org"


@dataclass
class Deployed:
    topo: ModuleType
    stack: Any  # topology.Stack
    outcome: Any  # topology.Outcome
    api: Any  # topology.Api, as the admin
    data_root: Path
    sink: SmtpSink  # the alerts' SMTP server

    def pipeline_env(self) -> dict[str, str]:
        """What a worker's task sees: the pipeline's ledger role, the data root."""
        env = self.topo.service_env(self.stack.compose, "airflow-worker", self.stack.home,
                                    self.stack.ports)
        return env


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    topo = load_script("topology")
    base = tmp_path_factory.mktemp("topology")
    with pytest.MonkeyPatch.context() as mp, SmtpSink() as sink:
        # nothing of the pytest process's Airflow or dp_ops settings reaches the stack:
        # every process gets the compose file's environment only
        for key in list(os.environ):
            if key.startswith(("AIRFLOW", "DP_")):
                mp.delenv(key)
        # .env values, as an operator sets them: the alerts' addressee (the SMTP server is
        # the connection smtp_default, which the scenario adds through the REST API)
        env = {"DP_SPEND_APPROVERS": topo.APPROVER, "DP_ALERT_EMAILS": ALERTS_TO}
        with topo.running_stack(base, env) as stack:
            outcome = topo.run_scenario(stack, base / "data", smtp_port=sink.port)
            admin = stack.values["AIRFLOW_ADMIN_USERNAME"]
            api = topo.Api(stack.api_url, admin, topo.users(stack)[admin]).login()
            yield Deployed(topo, stack, outcome, api, base / "data", sink)


def _ledger_spends(deployed: Deployed) -> list[Any]:
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(deployed.pipeline_env()["DP_LEDGER_URL"])
    try:
        return ledger.spends()
    finally:
        ledger.dispose()


def _expected_requests(deployed: Deployed) -> dict[str, list[Any]]:
    """The slots the pipeline must have spent: every day's plan, the re-noise of the
    region's chain, the method update's window; from the planning functions."""
    from dp_ops.layout import DataRoot
    from dp_ops.regions import read_regions
    from dp_ops.reports.mobility import method_update
    from dp_ops.reports.mobility.config import MobilityConfig
    from dp_ops.reports.mobility.declaration import REPORT as MOBILITY
    from dp_ops.reports.mobility.new_methods import ScaledCounts
    from dp_ops.reports.symptoms.config import SymptomsConfig
    from dp_ops.reports.symptoms.declaration import REPORT as SYMPTOMS
    from dp_ops.steps.noising import plan_requests

    topo, root = deployed.topo, deployed.data_root
    regions = read_regions(root / "reference" / "regions.csv")
    mcfg, scfg = MobilityConfig(), SymptomsConfig()
    mplan = MOBILITY.noise_plan(DataRoot(root), mcfg)
    splan = SYMPTOMS.noise_plan(DataRoot(root), scfg)

    mu = topo.METHOD_UPDATE
    update = method_update.MethodUpdate(
        method_version=mu["method_version"],
        effective_date=date.fromisoformat(mu["effective_date"]),
        categories=tuple(mu["categories"]),
        method=ScaledCounts.for_categories(mu["categories"], mu["factor"]))
    return {
        "noise/mobility": [r for d in date_range(topo.MOBILITY_START, topo.MOBILITY_END)
                           for r in plan_requests(mplan, regions, d)],
        "noise/symptoms": [r for d in date_range(topo.SYMPTOMS_START, topo.SYMPTOMS_END)
                           for r in plan_requests(splan, regions, d)],
        "renoise/mobility": plan_requests(mplan, regions, topo.RERUN_DAY,
                                          deployed.outcome.rerun["region"]),
        "method_update/mobility": method_update.plan_requests(mcfg, update),
    }


def test_both_backfills_ran_every_day_on_the_celery_worker(deployed: Deployed) -> None:
    topo = deployed.topo
    counts: dict[str, Counter[str]] = {}
    for dag_id, runs in deployed.outcome.backfills.items():
        start, end = ((topo.MOBILITY_START, topo.MOBILITY_END) if dag_id == "mobility_report"
                      else (topo.SYMPTOMS_START, topo.SYMPTOMS_END))
        assert sorted(r["data_interval_start"][:10] for r in runs) == [
            d.isoformat() for d in date_range(start, end)]
        assert {r["state"] for r in runs} == {"success"}
        counts[dag_id] = Counter()
        for run in runs:
            day = date.fromisoformat(run["data_interval_start"][:10])
            states = {}
            for ti in deployed.api.task_instances(dag_id, run["dag_run_id"]):
                counts[dag_id][ti["state"]] += 1
                states[ti["task_id"]] = ti["state"]
                if ti["state"] != "skipped":
                    assert ti["executor"] in (None, "CeleryExecutor") and ti["hostname"]
            # mobility's noise task skips what has nothing to do for the day: everything
            # after it before the first public date, the baseline wait once it is frozen
            if dag_id == "mobility_report" and day < date(2020, 2, 15):
                skipped = {"baseline", "report", "gate", "publish"}
            elif dag_id == "mobility_report":
                skipped = {"baseline"} if states["baseline"] == "skipped" else set()
            else:
                skipped = set()
            assert states == {t: "skipped" if t in skipped else "success" for t in states}, (
                dag_id, day, states)
    print(f"\n[topology] task instances: {json.dumps({k: dict(v) for k, v in counts.items()})}"
          f"; seconds: {json.dumps({k: round(v) for k, v in deployed.outcome.seconds.items()})}")
    assert set(counts["symptoms_dataset"]) == {"success"}


def test_the_ledger_verifies_and_holds_exactly_the_planned_spends(deployed: Deployed) -> None:
    env = deployed.pipeline_env()
    verify = subprocess.run([sys.executable, "-m", "dp_ops", "ledger", "--verify"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    summary = subprocess.run([sys.executable, "-m", "dp_ops", "ledger"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert summary.returncode == 0, summary.stderr
    print(f"\n[topology] python -m dp_ops ledger --verify: {verify.stdout.strip()}\n"
          f"[topology] python -m dp_ops ledger:\n{summary.stdout.strip()}")
    spends = _ledger_spends(deployed)
    seen: dict[str, list[Any]] = {}
    for s in spends:
        seen.setdefault(f"{s.kind}/{s.slot.report}", []).append(s)
    expected = _expected_requests(deployed)
    assert set(seen) == set(expected)
    for key, requests in expected.items():
        assert sorted((s.slot, round(s.epsilon, 9)) for s in seen[key]) == sorted(
            (r.slot, round(r.epsilon, 9)) for r in requests), key
    totals = {k: (len(v), math.fsum(s.epsilon for s in v)) for k, v in seen.items()}
    print("[topology] ledger spends (count, epsilon): "
          + json.dumps({k: [n, round(e, 4)] for k, (n, e) in sorted(totals.items())}))
    rerun = deployed.outcome.rerun
    renoised = seen["renoise/mobility"]
    assert {s.run_id for s in renoised} == {rerun["run_id"]}
    assert {s.reason for s in renoised} == {"topology test: raw data corrected, INC-1"}


def test_the_renoise_waited_for_another_persons_approval(deployed: Deployed) -> None:
    outcome = deployed.outcome
    assert outcome.self_approval == "HTTP 403", "the requester approved their own re-noise"
    assert "epsilon per user-day" in outcome.approval_body
    assert "headroom" in outcome.approval_body and "Requested by **admin**" in \
        outcome.approval_body
    tasks = {t["task_id"]: t for t in outcome.rerun["tasks"]}
    assert outcome.rerun["state"] == "success", tasks
    assert {t["state"] for t in tasks.values()} == {"success"}
    # the on-call tasks outrank the backfill's (priority weights), and the rerun was done
    # while the backfill still ran
    assert {t["priority_weight"] for t in tasks.values()} == {100}
    assert outcome.rerun_done_while_backfill_ran
    mobility_runs = deployed.outcome.backfills["mobility_report"]
    some = deployed.api.task_instances("mobility_report", mobility_runs[-1]["dag_run_id"])
    assert {t["priority_weight"] for t in some} == {1}


def test_the_method_update_was_approved_and_published(deployed: Deployed) -> None:
    mu = deployed.outcome.method_update
    assert mu["state"] == "success", mu["tasks"]
    latest = deployed.data_root / "published" / "mobility" / "latest" / "manifest.json"
    manifest = json.loads(latest.read_text())
    assert [u["method_version"] for u in manifest["method_updates"]] == [
        deployed.topo.METHOD_UPDATE["method_version"]]
    assert manifest["last_date"] == deployed.topo.MOBILITY_END.isoformat()


def test_releases_and_their_asset_events(deployed: Deployed) -> None:
    from dp_ops.steps.release import sha256_file

    topo, api, root = deployed.topo, deployed.api, deployed.data_root
    seen = {}
    for report, last in (("mobility", topo.MOBILITY_END), ("symptoms", topo.SYMPTOMS_END)):
        latest = root / "published" / report / "latest"
        manifest = json.loads((latest / "manifest.json").read_text())
        assert manifest["last_date"] == last.isoformat()
        events = [e["extra"] for e in api.asset_events(f"{report}_release")]
        assert events, f"no {report}_release event"
        ids = [e["release_id"] for e in events]
        assert len(set(ids)) == len(ids), "an event for a release that did not move latest"
        for e in events:
            release = root / "published" / report / "releases" / e["release_id"]
            assert sha256_file(release / "manifest.json") == e["manifest_sha256"]
        assert events[-1]["release_id"] == latest.resolve().name
        assert events[-1]["last_date"] == last.isoformat()
        assert events[-1]["epsilon_per_user_day_max"] > 0
        seen[f"{report}_release"] = len(events)
    seen["mobility_baseline"] = len(api.asset_events("mobility_baseline"))
    assert seen["mobility_baseline"] == 1
    consumer = deployed.outcome.consumer_runs
    assert consumer and {r["state"] for r in consumer} == {"success"}
    assert {r["run_type"] for r in consumer} == {"asset_triggered"}
    seen["consumer runs"] = len(consumer)
    print(f"\n[topology] asset events: {json.dumps(seen)}")


def test_the_daily_runs_carry_a_deadline_that_the_backfill_does_not_fire(
        deployed: Deployed) -> None:
    """The scheduler gave the daily DAGs' runs their deadline (6 h after queueing, not
    after the logical date of 2020), and none was missed."""
    outcome = deployed.outcome
    print(f"\n[topology] deadlines (most at once, hours after queueing): "
          f"{json.dumps(outcome.deadlines)}; missed: {outcome.deadlines_missed}")
    assert outcome.deadlines["mobility_report"][0] >= 1
    assert {hours for _, hours in outcome.deadlines.values()} == {6.0}
    assert set(outcome.deadlines) <= {"mobility_report", "symptoms_dataset"}
    assert outcome.deadlines_missed == 0


def test_the_scheduled_run_without_input_fails_at_ingest_and_alerts(
        deployed: Deployed) -> None:
    """Unpausing a daily DAG creates its run for yesterday, for which the synthetic input
    has no data: it fails at ingest, spends nothing (the ledger test counts every spend),
    and the SMTP server set up through the REST API receives one INPUT MISSING mail per
    scheduled run, naming the DAG, the run and the task; no other alert goes out. A
    scenario that crosses midnight UTC meets one more scheduled run per DAG, each with its
    own alert."""
    scheduled = deployed.outcome.scheduled
    assert set(scheduled) == {"mobility_report", "symptoms_dataset"}
    expected = []
    for dag_id, runs in scheduled.items():
        assert 1 <= len(runs) <= 2, runs
        assert all(outcome == ("failed", ["ingest"]) for outcome in runs.values()), runs
        expected += [f"[dp-ops] INPUT MISSING: {dag_id} / ingest ({run_id})" for run_id in runs]
    subjects = sorted(str(m["Subject"]) for _, m in deployed.sink.received)
    print(f"\n[topology] alerts received: {json.dumps(subjects)}")
    assert subjects == sorted(expected)
    for to, message in deployed.sink.received:
        assert to == [ALERTS_TO]
        body = message.get_payload(decode=True) if not message.is_multipart() else b"".join(
            p.get_payload(decode=True) or b"" for p in message.walk() if not p.is_multipart())
        assert b"scheduled__" in body
