"""DAG integrity: every DAG file imports cleanly and declares what the project promises.

Generic checks (import errors, tags from the fixed list, doc, retries) run for every DAG
in ``dags/``; the report DAGs also get their exact graph, schedule and params checked.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk import BaseSensorOperator, CronDataIntervalTimetable
from airflow.sdk.definitions.timetables.simple import NullTimetable

from dp_ops.airflow.operators import (
    BudgetCheckedNoiseOperator,
    GreatExpectationsGateOperator,
    MethodUpdateOperator,
    SpendApprovalOperator,
)
from dp_ops.airflow.tags import allowed_tags

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"

MOBILITY_CHAIN = ["ingest", "bound_contributions", "noise", "baseline", "report", "gate",
                  "publish"]
SYMPTOMS_CHAIN = ["ingest", "bound_contributions", "noise", "report", "gate", "publish"]
RERUN_CHAIN = ["validate_request", "approve_spend", "ingest", "bound_contributions", "noise",
               "report", "gate", "publish"]


def _arg(task: Any, name: str) -> Any:
    """An operator argument, also of a mapped task (bound_contributions maps over shards)."""
    if hasattr(task, "partial_kwargs"):
        if name in task.partial_kwargs:
            return task.partial_kwargs[name]
        return inspect.signature(task.operator_class.__init__).parameters[name].default
    return getattr(task, name)


def test_bound_contributions_is_mapped_over_the_shards_ingest_returns(dagbag: DagBag) -> None:
    for dag_id in ("mobility_report", "symptoms_dataset", "mobility_region_rerun",
                   "symptoms_region_rerun"):
        bound = dagbag.dags[dag_id].get_task("bound_contributions")
        assert hasattr(bound, "expand_input"), dag_id
        (arg,) = bound.expand_input.value.values()
        assert arg.operator.task_id == "ingest" and arg.key == "return_value", dag_id


@pytest.fixture(scope="module")
def dagbag() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def test_no_import_errors(dagbag: DagBag) -> None:
    assert dagbag.import_errors == {}


def test_expected_dags_present(dagbag: DagBag) -> None:
    assert set(dagbag.dag_ids) == {"mobility_report", "mobility_region_rerun",
                                   "mobility_method_update", "symptoms_dataset",
                                   "symptoms_region_rerun",
                                   "mobility_release_consumer_example"}


def _all_dag_ids() -> list[str]:
    return sorted(DagBag(dag_folder=str(DAGS)).dag_ids)


@pytest.mark.parametrize("dag_id", _all_dag_ids())
def test_every_dag_has_tags_doc_and_retries(dagbag: DagBag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert dag.tags, f"{dag_id} has no tags"
    assert set(dag.tags) <= allowed_tags(), f"{dag_id}: tags not in dp_ops.airflow.tags: " \
        f"{set(dag.tags) - allowed_tags()}"
    assert dag.doc_md and len(dag.doc_md.strip()) > 50, f"{dag_id} has no doc_md"
    for task in dag.tasks:
        if task.task_id == "validate_request":
            continue  # a bad request does not get better by retrying
        assert task.retries >= 1, f"{dag_id}.{task.task_id} has no retries"
        assert task.retry_delay.total_seconds() <= 300, f"{dag_id}.{task.task_id}"


def _assert_chain(dag, chain: list[str]) -> None:
    assert sorted(dag.task_ids) == sorted(chain)
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert dag.get_task(upstream).downstream_task_ids == {downstream}, upstream
    assert dag.get_task(chain[0]).upstream_task_ids == set()
    assert dag.get_task(chain[-1]).downstream_task_ids == set()


def test_mobility_report_graph(dagbag: DagBag) -> None:
    dag = dagbag.dags["mobility_report"]
    _assert_chain(dag, MOBILITY_CHAIN)
    assert isinstance(dag.get_task("noise"), BudgetCheckedNoiseOperator)
    assert isinstance(dag.get_task("gate"), GreatExpectationsGateOperator)
    sensor = dag.get_task("baseline")
    assert isinstance(sensor, BaseSensorOperator)
    assert sensor.mode == "reschedule"
    assert sensor.poke_interval <= 60
    # an alias, not the asset: one event, from the poke that froze the baseline
    assert [(type(a).__name__, a.name) for a in sensor.outlets] == [
        ("AssetAlias", "mobility_baseline_events")]
    # noise skips what has nothing to do for the day (the baseline wait once frozen), so
    # report runs after a skipped baseline, but never after a failed one
    assert dag.get_task("noise").skip_unneeded
    assert dag.get_task("report").trigger_rule == "none_failed"
    assert {dag.get_task(t).trigger_rule for t in MOBILITY_CHAIN if t != "report"} == {
        "all_success"}


def test_every_publish_task_announces_releases_through_an_alias(dagbag: DagBag) -> None:
    """Issue 15, point 3: a publish task's outlet is its report's release alias, so that
    an asset event is added only when `latest` moves; the example consumer is scheduled on
    the release asset."""
    publishers = 0
    for dag in dagbag.dags.values():
        for task in dag.tasks:
            if task.task_id == "publish":
                publishers += 1
                report = "symptoms" if dag.dag_id.startswith("symptoms") else "mobility"
                assert [(type(a).__name__, a.name) for a in task.outlets] == [
                    ("AssetAlias", f"{report}_release_events")], dag.dag_id
    assert publishers == 5
    consumer = dagbag.dags["mobility_release_consumer_example"]
    assert [a.name for a in consumer.timetable.asset_condition.objects] == ["mobility_release"]


def test_only_publish_and_gate_tasks_have_task_links(dagbag: DagBag) -> None:
    """Airflow writes an XCom per operator extra link after every task instance (one
    Execution API call each): the release page link is on publish tasks only, the Data
    Docs link on gate tasks only; serialized as such for the UI."""
    from airflow.serialization.serialized_objects import DagSerialization

    linked = {}
    for dag in dagbag.dags.values():
        serialized = DagSerialization.to_dict(dag)["dag"]["tasks"]
        for task in serialized:
            data = task.get("__var", task)
            names = sorted(data.get("_operator_extra_links", {}) or {})
            if names:
                linked[(dag.dag_id, data["task_id"])] = names
    assert linked and all(task in ("publish", "gate") for _, task in linked), linked
    assert {names for names in map(tuple, linked.values())} == {("Release page",),
                                                                 ("Data Docs",)}
    assert sorted(task for (dag, task) in linked if dag == "mobility_report") == [
        "gate", "publish"]


def test_symptoms_dataset_graph(dagbag: DagBag) -> None:
    dag = dagbag.dags["symptoms_dataset"]
    _assert_chain(dag, SYMPTOMS_CHAIN)
    assert isinstance(dag.get_task("noise"), BudgetCheckedNoiseOperator)
    assert isinstance(dag.get_task("gate"), GreatExpectationsGateOperator)
    for task in dag.tasks:
        assert _arg(task, "report") == "symptoms", task.task_id
    for task_id in ("ingest", "bound_contributions", "noise", "report"):
        assert _arg(dag.get_task(task_id), "day") == "{{ data_interval_start | ds }}", task_id


@pytest.mark.parametrize("dag_id", ["mobility_report", "symptoms_dataset"])
def test_daily_schedule(dagbag: DagBag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.timetable.expression == "0 0 * * *"
    assert str(dag.timetable.timezone) == "UTC"
    assert dag.start_date.isoformat().startswith("2020-01-01T00:00:00")
    assert dag.start_date.utcoffset().total_seconds() == 0
    assert dag.catchup is False
    assert dag.is_paused_upon_creation is True
    assert 1 <= dag.max_active_runs <= 4


def test_mobility_report_tasks_process_the_data_interval_start(dagbag: DagBag) -> None:
    dag = dagbag.dags["mobility_report"]
    for task_id in ("ingest", "bound_contributions", "noise", "baseline", "report"):
        assert _arg(dag.get_task(task_id), "day") == "{{ data_interval_start | ds }}", task_id


@pytest.mark.parametrize("dag_id,report", [("mobility_region_rerun", "mobility"),
                                           ("symptoms_region_rerun", "symptoms")])
def test_rerun_graph_and_params(dagbag: DagBag, dag_id: str, report: str) -> None:
    dag = dagbag.dags[dag_id]
    _assert_chain(dag, RERUN_CHAIN)
    assert isinstance(dag.timetable, NullTimetable)  # schedule=None: manual runs only
    assert dag.max_active_runs == 1
    assert set(dag.params.keys()) == {"date", "region", "renoise", "reason", "repeat_renoise"}
    schema = {k: dag.params.get_param(k).schema for k in dag.params.keys()}
    assert schema["date"]["type"] == "string" and schema["date"]["format"] == "date"
    assert schema["region"]["type"] == "string"
    assert schema["renoise"]["type"] == "boolean"
    assert dag.params.get_param("renoise").value is False
    assert dag.params.get_param("repeat_renoise").value is False
    assert schema["reason"]["maxLength"] == 500
    assert schema["reason"]["type"] == "string" and schema["reason"]["minLength"] >= 3
    for required in ("date", "region", "reason"):
        assert not dag.params.get_param(required).has_value, f"{required} must be required"
    noise = dag.get_task("noise")
    assert (noise.day, noise.region, noise.renoise, noise.reason) == (
        "{{ params.date }}", "{{ params.region }}", "{{ params.renoise }}",
        "{{ params.reason }}")
    approve = dag.get_task("approve_spend")
    assert isinstance(approve, SpendApprovalOperator)
    assert (approve.spend, approve.day, approve.region, approve.renoise, approve.reason) == (
        "renoise", "{{ params.date }}", "{{ params.region }}", "{{ params.renoise }}",
        "{{ params.reason }}")
    # Reject (also the default on timeout) skips every task below: nothing is spent
    assert approve.defaults == ["Reject"] and approve.ignore_downstream_trigger_rules
    for task in dag.tasks:
        assert _arg(task, "report") == report, task.task_id
    if report == "symptoms":
        assert dag.get_task("gate").region == "{{ params.region }}"


def test_method_update_graph_and_params(dagbag: DagBag) -> None:
    dag = dagbag.dags["mobility_method_update"]
    _assert_chain(dag, ["approve_spend", "method_update", "gate", "publish"])
    assert isinstance(dag.timetable, NullTimetable)  # manual runs only
    assert dag.max_active_runs == 1
    assert {"mobility", "spends-privacy-budget"} <= set(dag.tags)
    names = {"method_version", "effective_date", "categories", "factor", "reason"}
    assert set(dag.params.keys()) == names
    schema = {k: dag.params.get_param(k).schema for k in names}
    assert schema["method_version"]["type"] == "string"
    assert schema["effective_date"]["type"] == "string"
    assert schema["effective_date"]["format"] == "date"
    assert schema["categories"]["type"] == "array"
    assert schema["categories"]["items"]["type"] == "string"
    assert "residential" not in schema["categories"]["items"]["enum"]
    assert "parks" in schema["categories"]["items"]["enum"]
    assert schema["factor"]["type"] == "number"
    assert schema["reason"]["type"] == "string" and schema["reason"]["minLength"] >= 3
    for name in names:
        assert not dag.params.get_param(name).has_value, f"{name} must be required"
    approve = dag.get_task("approve_spend")
    assert isinstance(approve, SpendApprovalOperator) and approve.spend == "method_update"
    assert (approve.method_version, approve.effective_date, approve.categories,
            approve.factor) == tuple(f"{{{{ params.{n} }}}}" for n in (
                "method_version", "effective_date", "categories", "factor"))
    assert approve.defaults == ["Reject"] and approve.ignore_downstream_trigger_rules
    task = dag.get_task("method_update")
    assert isinstance(task, MethodUpdateOperator)
    assert task.retries >= 1
    assert (task.method_version, task.effective_date, task.categories, task.factor,
            task.reason) == tuple(f"{{{{ params.{n} }}}}" for n in (
                "method_version", "effective_date", "categories", "factor", "reason"))
    assert isinstance(dag.get_task("gate"), GreatExpectationsGateOperator)


@pytest.mark.parametrize("value,expected", [("['parks']", ["parks"]),
                                            (["parks", "workplaces"], ["parks", "workplaces"]),
                                            ("parks, workplaces", ["parks", "workplaces"])])
def test_rendered_categories_are_parsed(value: object, expected: list[str]) -> None:
    from dp_ops.airflow.operators.method_update import parse_categories

    assert parse_categories(value) == expected


def test_operators_declare_their_templates() -> None:
    assert set(BudgetCheckedNoiseOperator.template_fields) == {"day", "region", "renoise",
                                                               "reason", "repeat_renoise"}


@pytest.mark.parametrize("value,expected", [(True, True), (False, False), ("True", True),
                                            ("False", False), (" false ", False), ("1", True)])
def test_rendered_renoise_is_parsed_strictly(value: object, expected: bool) -> None:
    from dp_ops.airflow.runtime import parse_bool

    assert parse_bool(value, field="renoise") is expected


def test_rendered_renoise_rejects_garbage() -> None:
    from dp_ops.airflow.runtime import parse_bool

    with pytest.raises(ValueError, match="renoise"):
        parse_bool("maybe", field="renoise")


def test_dag_files_do_no_heavy_imports() -> None:
    """Parsing the DAGs must not import the pipeline's heavy libraries (the DAG processor
    re-parses every file every 30 s) nor read the data root."""
    code = (
        "import json, sys, runpy\n"
        "import os; os.environ['DP_DATA_ROOT'] = '/nonexistent/dp-data-root'\n"
        f"for f in {sorted(str(p) for p in DAGS.glob('*.py'))!r}:\n"
        "    runpy.run_path(f)\n"
        "heavy = ['duckdb', 'pandas', 'great_expectations', 'pyarrow', 'numpy',\n"
        "         'dp_ops.steps.noising', 'dp_ops.privacy.ledger', 'dp_ops.gx.runner',\n"
        "         'dp_ops.reports.symptoms.release']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    assert loaded == [], f"DAG files import {loaded} at parse time"
    assert not Path("/nonexistent/dp-data-root").exists()


def test_on_call_dags_run_ahead_of_daily_runs_and_backfills(dagbag: DagBag) -> None:
    """Issue 15, point 5 (priority): every task of an on-call DAG outranks every task of a
    daily DAG, by its own weight ("absolute": not summed over its downstream tasks, so a
    daily chain of seven tasks cannot outweigh a rerun). Shown with a backfill running in
    the topology test."""
    on_call = ("mobility_region_rerun", "symptoms_region_rerun", "mobility_method_update")
    daily = ("mobility_report", "symptoms_dataset")
    lowest_on_call = min(t.priority_weight for d in on_call
                         for t in dagbag.dags[d].tasks)
    highest_daily = max(t.priority_weight for d in daily for t in dagbag.dags[d].tasks)
    assert lowest_on_call > highest_daily
    for dag_id in on_call + daily:
        assert {str(t.weight_rule) for t in dagbag.dags[dag_id].tasks} == {"absolute"}, dag_id


def test_the_daily_dags_carry_their_run_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsed as a deployment parses them (DP_RUN_DEADLINE_HOURS unset; the dag.test()
    harness sets 0, see tests/conftest.py): each daily DAG alerts 6 h after a run is
    queued; the on-call DAGs have no deadline (they may wait a day for approval)."""
    from airflow.sdk.definitions.deadline import DeadlineReference

    monkeypatch.delenv("DP_RUN_DEADLINE_HOURS", raising=False)
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    for dag_id, report in (("mobility_report", "mobility"), ("symptoms_dataset", "symptoms")):
        (alert,) = bag.dags[dag_id].deadline
        assert alert.reference == DeadlineReference.DAGRUN_QUEUED_AT
        assert alert.interval == timedelta(hours=6)
        assert alert.callback.kwargs == {"report": report}
    for dag_id in ("mobility_region_rerun", "mobility_method_update"):
        assert not bag.dags[dag_id].deadline
    monkeypatch.setenv("DP_RUN_DEADLINE_HOURS", "soon")
    bad = DagBag(dag_folder=str(DAGS))
    assert any("DP_RUN_DEADLINE_HOURS='soon'" in str(e) for e in bad.import_errors.values())


def test_bounding_tasks_take_the_configured_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """DP_BOUNDING_POOL puts every task that runs on the engine (ingest and
    bound_contributions, daily and on-call) in that Airflow pool, and no other task;
    unset, the default pool; a malformed name is an import error naming the variable."""
    monkeypatch.setenv("DP_BOUNDING_POOL", "spark_bounding")
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    for dag_id in ("mobility_report", "symptoms_dataset", "mobility_region_rerun",
                   "symptoms_region_rerun"):
        dag = bag.dags[dag_id]
        assert _arg(dag.get_task("bound_contributions"), "pool") == "spark_bounding", dag_id
        assert dag.get_task("ingest").pool == "spark_bounding", dag_id
        engine_tasks = {"ingest", "bound_contributions"}
        others = {t.task_id: t.pool for t in dag.tasks if t.task_id not in engine_tasks}
        assert set(others.values()) == {"default_pool"}, (dag_id, others)
    monkeypatch.delenv("DP_BOUNDING_POOL")
    bag = DagBag(dag_folder=str(DAGS))
    assert _arg(bag.dags["mobility_report"].get_task("bound_contributions"),
                "pool") == "default_pool"
    monkeypatch.setenv("DP_BOUNDING_POOL", "no spaces; please")
    bad = DagBag(dag_folder=str(DAGS))
    assert any("DP_BOUNDING_POOL='no spaces; please'" in str(e)
               for e in bad.import_errors.values())
