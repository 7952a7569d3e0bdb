#!/usr/bin/env python
"""Where a finished ``make demo`` (or ``scripts/airflow_demo.py``) spent its time, from
its Airflow metadata DB: per DAG, the span from the first run's start to the last run's
end, and per task the number of instances, the mean and total time inside the task and
the mean wait before it (the scheduler's loop and queueing).

    python benchmarks/demo_breakdown.py [--airflow-home airflow_home]

Times inside a task are wall times while other tasks share the 2 cores, so they include
waiting for the CPU and for locks (the gate's GX project lock, the publish lock).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from airflow_backfill import metadata_figures  # noqa: E402

DAG_IDS = ("mobility_report", "symptoms_dataset")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--airflow-home", type=Path, default=REPO / "airflow_home")
    args = p.parse_args(argv)
    db = args.airflow_home / "airflow.db"
    if not db.is_file():
        raise SystemExit(f"{db} does not exist: run make demo first")
    for dag_id in DAG_IDS:
        f = metadata_figures(db, dag_id)
        if not f["runs"]:
            continue
        span = f["first_start_to_last_end_s"]
        print(f"{dag_id}: {f['runs']} runs, first start -> last end "
              f"{span:.0f} s, {f['task_instances']} task instances run "
              f"({f['skipped_task_instances']} skipped), "
              f"{f['sum_inside_s']:.0f} s inside tasks in all")
        print(f"  {'task':<22}{'count':>6}{'mean inside s':>15}{'total inside s':>16}"
              f"{'mean wait before s':>20}")
        tasks = f["tasks"]
        assert isinstance(tasks, dict)
        for task, t in sorted(tasks.items(), key=lambda kv: -kv[1]["mean_inside_s"]):
            print(f"  {task:<22}{t['count']:>6}{t['mean_inside_s']:>15.2f}"
                  f"{t['mean_inside_s'] * t['count']:>16.0f}{t['mean_wait_before_s']:>20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
