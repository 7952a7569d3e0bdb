"""The mobility DAGs run end to end through Airflow (``dag.test()``) on small synthetic data.

``dag.test()`` runs every task of one DAG run in this process, through the same operators,
templates and dependency checks as the scheduler, against the session's migrated SQLite
metadata DB (``airflow_db`` fixture). A run for day D is made with logical date D + 1 day:
for a manual run, Airflow 3 gives ``CronDataIntervalTimetable("@daily")`` the last whole
interval before the logical date, so ``data_interval_start`` (the day processed) is D,
exactly as in a backfill run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pytest
from support.dagrun_helpers import (
    asset_events,
    delete_runs,
    e2e_data_root,
    logical_date,
    repo_dags,
    run_dag_day,
    task_states,
)
from support.dates import date_range
from support.hitl import responder

pytestmark = [pytest.mark.slow, pytest.mark.integration]

START, END = date(2020, 1, 1), date(2020, 3, 9)
USERS = 1500
SEED = 11


@pytest.fixture(scope="module")
def dags(airflow_db: Path) -> dict:
    return repo_dags()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Synthetic input for START..END, in ``DP_DATA_ROOT`` for the whole module."""
    with e2e_data_root(tmp_path_factory, "mobility_e2e", START, END, users=USERS, seed=SEED,
                       config_env="DP_MOBILITY_CONFIG") as root:
        yield root


def _ledger_total(root: Path) -> tuple[int, float]:
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(ledger_url(DataRoot(root)))
    try:
        spends = ledger.spends("mobility")
        return len(spends), sum(s.epsilon for s in spends)
    finally:
        ledger.dispose()


@pytest.fixture(scope="module")
def backfilled(dags: dict, data_root: Path) -> Path:
    """``mobility_report`` run for every day, in date order, like a backfill."""
    delete_runs("mobility_report", "mobility_region_rerun")
    dag = dags["mobility_report"]
    for day in date_range(START, END):
        run_dag_day(dag, day)
    return data_root


def test_release_published(backfilled: Path) -> None:
    latest = backfilled / "published" / "mobility" / "latest"
    csv = latest / "Global_Mobility_Report.csv"
    assert csv.is_file()
    header, *rows = csv.read_text().splitlines()
    assert header.startswith("country_region_code,country_region,sub_region_1")
    published_days = {line.split(",")[8] for line in rows}
    assert published_days, "no published rows"
    assert min(published_days) >= "2020-02-15"  # nothing before the first public date
    assert max(published_days) == END.isoformat()
    assert (latest / "manifest.json").is_file()
    json.loads((latest / "manifest.json").read_text())


def test_tasks_with_nothing_to_do_are_skipped(dags: dict, backfilled: Path) -> None:
    """A day before the first public date (2020-02-15) publishes nothing: its run noises
    the day (the baseline window needs it), then the noise task skips baseline, report,
    gate and publish instead of Airflow starting four processes that write and publish
    nothing of the day; the release is untouched. Once the baseline is frozen, a public
    day's run skips the wait for it and runs the rest."""
    latest = backfilled / "published" / "mobility" / "latest"
    before = latest.resolve()
    delete_runs("mobility_report")
    run = run_dag_day(dags["mobility_report"], date(2020, 2, 14))
    noised = {"ingest": ("success", 1), "bound_contributions": ("success", 1),
              "noise": ("success", 1)}
    assert task_states(run) == {**noised, "baseline": ("skipped", 0),
                                "report": ("skipped", 0), "gate": ("skipped", 0),
                                "publish": ("skipped", 0)}
    assert latest.resolve() == before
    run = run_dag_day(dags["mobility_report"], date(2020, 2, 15))
    assert task_states(run) == {**noised, "baseline": ("skipped", 0),
                                "report": ("success", 1), "gate": ("success", 1),
                                "publish": ("success", 1)}


def test_the_baseline_task_skips_the_rest_for_a_day_before_the_first_public_date(
        dags: dict, backfilled: Path) -> None:
    """Run for an earlier day anyway (a noise task that did not skip it, e.g. cleared
    alone in the UI), the baseline task succeeds at once and skips report, gate and
    publish."""
    dag = dags["mobility_report"].partial_subset(["baseline"], include_downstream=True,
                                                 include_upstream=False)
    delete_runs("mobility_report")
    run = run_dag_day(dag, date(2020, 2, 14))
    assert task_states(run) == {"baseline": ("success", 1), "report": ("skipped", 0),
                                "gate": ("skipped", 0), "publish": ("skipped", 0)}


def test_ledger_has_spends_for_every_day(backfilled: Path) -> None:
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(ledger_url(DataRoot(backfilled)))
    try:
        days = {day for (_report, day) in ledger.totals("mobility")}
    finally:
        ledger.dispose()
    assert days == set(date_range(START, END))
    assert (backfilled / "baseline" / "mobility" / "baseline.parquet").is_file()


def test_rerunning_a_day_spends_nothing(dags: dict, backfilled: Path) -> None:
    """A second run for the same day reuses the stored noise: same ledger, same release."""
    csv = backfilled / "published" / "mobility" / "latest" / "Global_Mobility_Report.csv"
    before_csv = csv.read_bytes()
    before = _ledger_total(backfilled)
    delete_runs("mobility_report")  # a new run for the same day (not just a retry)
    run_dag_day(dags["mobility_report"], END)
    assert _ledger_total(backfilled) == before
    assert csv.read_bytes() == before_csv


def test_asset_events_only_when_something_changed(dags: dict, backfilled: Path) -> None:
    """Issue 15, point 3: the baseline asset gets exactly one event (the poke that froze
    it), `mobility_release` one per move of `latest`, carrying the release id, last date,
    manifest sha256 and epsilon; a byte-identical rerun adds none."""
    from dp_ops.steps.release import sha256_file

    baseline = asset_events("mobility_baseline")
    assert len(baseline) == 1 and set(baseline[0]) == {"sha256", "window_start",
                                                        "window_end"}
    releases = asset_events("mobility_release")
    published = {p.name for p in (backfilled / "published" / "mobility" / "releases").iterdir()}
    # (the metadata DB is the session's: count this data root's releases only)
    ours = [e for e in releases if e["release_id"] in published]
    assert len(ours) == len(published) >= 1
    assert len({e["release_id"] for e in ours}) == len(ours)
    latest = (backfilled / "published" / "mobility" / "latest").resolve()
    manifest = json.loads((latest / "manifest.json").read_text())
    assert releases[-1] == {
        "release_id": latest.name, "last_date": manifest["last_date"],
        "manifest_sha256": sha256_file(latest / "manifest.json"),
        "epsilon_per_user_day_max": manifest["epsilon"]["per_user_day_max"],
        # what lets later runs there check the ledger holds it (issue 31, attack 7)
        "report": "mobility", "data_root": str(backfilled.resolve())}
    delete_runs("mobility_report")
    run_dag_day(dags["mobility_report"], END)  # reproduces the same release
    assert len(asset_events("mobility_release")) == len(releases)
    assert len(asset_events("mobility_baseline")) == 1


def test_sharded_bounding_runs_as_mapped_tasks_with_identical_aggregates(
        dags: dict, backfilled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DP_BOUNDING_SHARDS=3: bound_contributions expands to three mapped task instances,
    the noise step adds their partial sums, and the day's true aggregates are exactly the
    unsharded ones (so the stored noise is reused and nothing is spent)."""
    import pandas as pd
    import pyarrow.parquet as pq
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from dp_ops.layout import DataRoot

    bounded = DataRoot(backfilled).bounded_file("mobility", END)
    unsharded = pq.read_table(bounded).to_pandas()
    before = _ledger_total(backfilled)
    bounded.unlink()
    monkeypatch.setenv("DP_BOUNDING_SHARDS", "3")
    delete_runs("mobility_report")
    dag_run = run_dag_day(dags["mobility_report"], END)
    with create_session() as session:
        mapped = session.scalars(select(TaskInstance).where(
            TaskInstance.dag_id == "mobility_report", TaskInstance.run_id == dag_run.run_id,
            TaskInstance.task_id == "bound_contributions")).all()
        assert sorted((ti.map_index, str(ti.state)) for ti in mapped) == [
            (0, "success"), (1, "success"), (2, "success")]
    assert len(list(bounded.parent.glob("shard-*-of-00003.parquet"))) == 3
    pd.testing.assert_frame_equal(pq.read_table(bounded).to_pandas(), unsharded)
    assert _ledger_total(backfilled) == before


def _a_region(root: Path) -> str:
    import csv as csv_module

    with (root / "reference" / "regions.csv").open(newline="") as f:
        rows = list(csv_module.DictReader(f))
    return next(r["region_id"] for r in rows if r["level"] == "2")


def test_region_rerun_without_renoise_spends_nothing(dags: dict, backfilled: Path) -> None:
    before = _ledger_total(backfilled)
    dag_run = dags["mobility_region_rerun"].test(
        logical_date=None,
        run_conf={"date": END.isoformat(), "region": _a_region(backfilled), "renoise": False,
                  "reason": "integration test: reuse stored noise"})
    assert dag_run.state == "success", task_states(dag_run)
    assert _ledger_total(backfilled) == before


def test_region_rerun_with_renoise_spends_and_records_reason(dags: dict,
                                                            backfilled: Path) -> None:
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    count, total = _ledger_total(backfilled)
    reason = "integration test: corrected raw data"
    region = _a_region(backfilled)
    with responder("mobility_region_rerun", user="approver") as asked:
        dag_run = dags["mobility_region_rerun"].test(
            logical_date=None,
            run_conf={"date": END.isoformat(), "region": region, "renoise": True,
                      "reason": reason})
    assert dag_run.state == "success", task_states(dag_run)
    new_count, new_total = _ledger_total(backfilled)
    assert new_count > count and new_total > total
    # the approver was shown this spend and the headroom it leaves
    assert len(asked.subjects) == 1 and region in asked.subjects[0]
    assert f"+{new_total - total:.4f} epsilon per user-day" in asked.bodies[0]
    assert "headroom" in asked.bodies[0] and END.isoformat() in asked.bodies[0]
    ledger = Ledger(ledger_url(DataRoot(backfilled)))
    try:
        new = ledger.spends("mobility", END)[-1]
    finally:
        ledger.dispose()
    assert new.reason == reason


def test_a_rejected_renoise_spends_nothing(dags: dict, backfilled: Path) -> None:
    """Reject: every task after the approval is skipped; the ledger and the release are
    untouched. (The day before END: END has no headroom left for a second re-noise, which
    the approval refuses before asking anyone.)"""
    before = _ledger_total(backfilled)
    latest = backfilled / "published" / "mobility" / "latest" / "manifest.json"
    manifest = latest.read_bytes()
    with responder("mobility_region_rerun", user="approver", option="Reject") as asked:
        dag_run = dags["mobility_region_rerun"].test(
            logical_date=None,
            run_conf={"date": (END - timedelta(days=1)).isoformat(),
                      "region": _a_region(backfilled), "renoise": True,
                      "reason": "integration test: rejected re-noise"})
    states = task_states(dag_run)
    assert len(asked.subjects) == 1
    assert states["approve_spend"][0] == "success"
    assert {states[t][0] for t in ("ingest", "noise", "report", "gate", "publish")} == {
        "skipped"}, states
    assert _ledger_total(backfilled) == before
    assert latest.read_bytes() == manifest


def test_region_rerun_rejects_unknown_region(dags: dict, backfilled: Path) -> None:
    dag_run = dags["mobility_region_rerun"].test(
        logical_date=None,
        run_conf={"date": END.isoformat(), "region": "XX-nowhere", "renoise": False,
                  "reason": "integration test"})
    states = task_states(dag_run)
    assert dag_run.state == "failed"
    assert states["validate_request"] == ("failed", 1)
    assert states["ingest"][0] in ("upstream_failed", None)


def test_method_update_dag_spends_a_tenth_and_republishes(dags: dict, backfilled: Path) -> None:
    """``mobility_method_update`` from the UI form: factors for parks from Monday 9 March
    (comparison window 10 Feb..8 Mar, after the baseline window and all noised by the
    backfill), ledger spends of kind method_update, and a release whose manifest names the
    update."""
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger

    with responder("mobility_method_update", user="approver") as asked:
        dag_run = dags["mobility_method_update"].test(
            logical_date=None,
            run_conf={"method_version": "v2-e2e", "effective_date": "2020-03-09",
                      "categories": ["parks"], "factor": 1.2,
                      "reason": "integration test: new parks classifier"})
    assert len(asked.subjects) == 1 and "v2-e2e" in asked.subjects[0]
    assert "2020-02-10" in asked.bodies[0] and "2020-03-08" in asked.bodies[0]
    assert dag_run.state == "success", task_states(dag_run)
    ledger = Ledger(ledger_url(DataRoot(backfilled)))
    try:
        updates = [s for s in ledger.spends("mobility") if s.kind == "method_update"]
    finally:
        ledger.dispose()
    assert updates and {s.method_version for s in updates} == {"v2-e2e"}
    assert min(s.slot.day for s in updates) == date(2020, 2, 10)
    assert max(s.slot.day for s in updates) == date(2020, 3, 8)
    manifest = json.loads((backfilled / "published" / "mobility" / "latest"
                           / "manifest.json").read_text())
    assert [u["method_version"] for u in manifest["method_updates"]] == ["v2-e2e"]


def test_budget_refusal_fails_noise_without_retry(dags: dict, airflow_db: Path,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A spend past the cap is refused before any draw, and the task is not retried; the
    on-call gets one alert (issue 15, point 2), through a real SMTP server, whose text
    holds no user id (leak scan)."""
    import pyarrow.parquet as pq
    from dp_demo.generator import generate
    from support.leak_scan import Findings, LeakScanner
    from support.smtp_sink import SmtpSink

    from dp_ops.layout import DataRoot

    root = tmp_path / "data"
    root.mkdir()
    day = date(2020, 1, 1)
    generate(DataRoot(root), day, day, users=200, seed=SEED)
    config = tmp_path / "mobility.json"
    config.write_text(json.dumps({"cap_override": 0.5}))  # below one normal run's cost
    monkeypatch.setenv("DP_DATA_ROOT", str(root))
    monkeypatch.setenv("DP_MOBILITY_CONFIG", str(config))
    monkeypatch.delenv("DP_LEDGER_URL", raising=False)
    delete_runs("mobility_report")

    with SmtpSink() as sink:
        monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", sink.connection_uri())
        monkeypatch.setenv("DP_ALERT_EMAILS", "oncall@example.org")
        dag_run = dags["mobility_report"].test(logical_date=logical_date(day))
    states = task_states(dag_run)
    assert dag_run.state == "failed"
    assert states["noise"] == ("failed", 1), states  # one try: no retry
    assert states["ingest"][0] == "success"
    assert _ledger_total(root) == (0, 0)
    assert sink.subjects() == [f"[dp-ops] BUDGET REFUSED: mobility_report / noise "
                               f"({dag_run.run_id})"]
    (body,) = sink.bodies()
    assert "would exceed the per-user-day cap" in body and "no noise was drawn" in body
    user_ids = set(pq.read_table(DataRoot(root).raw_partition("location_history", day),
                                 columns=["user_id"]).column("user_id").to_pylist())
    findings = Findings()
    LeakScanner(sorted(user_ids), {}).scan("alert", [body], findings)
    assert len(user_ids) > 100 and not findings, findings.describe()
    delete_runs("mobility_report")


def test_the_ledger_comes_from_the_dp_ledger_connection(dags: dict, airflow_db: Path,
                                                        tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15, point 6: with the Airflow Connection ``dp_ledger`` defined, every task
    spends in that ledger, not in ``DP_LEDGER_URL``'s or the data root's default."""
    from dp_demo.generator import generate

    from dp_ops.layout import DataRoot
    from dp_ops.privacy.ledger import Ledger

    root = tmp_path / "data"
    root.mkdir()
    day = date(2020, 1, 1)
    generate(DataRoot(root), day, day, users=200, seed=SEED)
    ledger_file = tmp_path / "connection-ledger.sqlite"
    monkeypatch.setenv("DP_DATA_ROOT", str(root))
    monkeypatch.setenv("AIRFLOW_CONN_DP_LEDGER", f"sqlite:///{ledger_file}")  # 4 slashes
    monkeypatch.setenv("DP_LEDGER_URL", f"sqlite:///{tmp_path / 'not-this.sqlite'}")
    monkeypatch.delenv("DP_MOBILITY_CONFIG", raising=False)
    delete_runs("mobility_report")
    dag_run = dags["mobility_report"].test(logical_date=logical_date(day))
    assert dag_run.state == "success", task_states(dag_run)
    ledger = Ledger(f"sqlite:///{ledger_file}")
    try:
        assert len(ledger.spends("mobility", day)) == 15  # 5 metric groups x 3 levels
        recorded = json.loads((root / "ledger_identity.json").read_text())["ledger_id"]
        assert recorded == ledger.ledger_id
    finally:
        ledger.dispose()
    assert not (tmp_path / "not-this.sqlite").exists()
    assert not (root / "ledger.sqlite").exists()
    delete_runs("mobility_report")
