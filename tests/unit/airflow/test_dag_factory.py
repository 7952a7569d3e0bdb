"""The report DAGs come from one factory (``dp_ops.airflow.dag_factory``): the graph follows
the spec (a baseline wait only for a report that declares the baseline asset), and building
a DAG reads the spec only, never the report's code."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

from dp_ops.airflow.dag_factory import daily_report_dag, region_rerun_dag, rerun_dag_id
from dp_ops.reports.spec import report_spec


def _chain(dag: object) -> list[str]:
    tasks = {t.task_id: t for t in dag.tasks}  # type: ignore[attr-defined]
    (first,) = [t for t in tasks.values() if not t.upstream_task_ids]
    order = [first.task_id]
    while tasks[order[-1]].downstream_task_ids:
        (nxt,) = tasks[order[-1]].downstream_task_ids
        order.append(nxt)
    assert len(order) == len(tasks)
    return order


def test_the_baseline_wait_follows_the_spec() -> None:
    mobility = report_spec("mobility")
    with_wait = daily_report_dag(mobility)
    assert _chain(with_wait) == ["ingest", "bound_contributions", "noise", "baseline",
                                 "report", "gate", "publish"]
    assert with_wait.get_task("report").trigger_rule == "none_failed"
    # the same report declaring no baseline asset: no wait, report after noise succeeded
    without = daily_report_dag(replace(mobility, assets=()))
    assert _chain(without) == ["ingest", "bound_contributions", "noise", "report", "gate",
                               "publish"]
    assert without.get_task("report").trigger_rule == "all_success"


def test_the_rerun_dag_passes_the_form_down() -> None:
    spec = report_spec("symptoms")
    dag = region_rerun_dag(spec)
    assert dag.dag_id == rerun_dag_id(spec) == "symptoms_region_rerun"
    assert _chain(dag)[:2] == ["validate_request", "approve_spend"]
    assert dag.get_task("gate").region == "{{ params.region }}"
    assert dag.get_task("noise").renoise == "{{ params.renoise }}"


def test_building_the_dags_imports_no_report_code() -> None:
    code = (
        "import json, sys\n"
        "from dp_ops.airflow.dag_factory import daily_report_dag, region_rerun_dag\n"
        "from dp_ops.reports.spec import report_specs\n"
        "for spec in report_specs().values():\n"
        "    daily_report_dag(spec); region_rerun_dag(spec)\n"
        "light = {'spec', 'protocol'} | set(report_specs())  # a report package's __init__\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('dp_ops.reports.')\n"
        "                        and m.split('.')[-1] not in light)))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == []
