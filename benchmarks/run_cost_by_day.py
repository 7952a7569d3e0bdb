#!/usr/bin/env python
"""Does a daily run cost more late in a backfill? Per window of days of the year, the mean
time inside each task of the runs of those days, from a finished backfill's Airflow
metadata DB (``benchmarks/airflow_backfill.py`` keeps its Airflow home under ``--work``).

    python benchmarks/run_cost_by_day.py --airflow-home DIR [--dag-id mobility_report]
        [--windows 46-55,81-90,171-180,351-360]

Day 46 is 15 February, the mobility report's first public day. Times inside a task are
wall times while the other runs' tasks share the cores (a backfill runs four at a time),
so compare windows of one backfill, not across backfills.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
from datetime import datetime
from pathlib import Path


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--airflow-home", type=Path, required=True)
    p.add_argument("--dag-id", default="mobility_report")
    p.add_argument("--windows", default="46-55,81-90,171-180,351-360")
    args = p.parse_args(argv)
    db = args.airflow_home / "airflow.db"
    if not db.is_file():
        raise SystemExit(f"{db} does not exist")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT ti.task_id, dr.logical_date, ti.start_date, ti.end_date FROM task_instance ti "
        "JOIN dag_run dr ON ti.dag_id = dr.dag_id AND ti.run_id = dr.run_id "
        "WHERE ti.dag_id = ? AND ti.state = 'success'", (args.dag_id,)).fetchall()
    inside: dict[str, dict[int, list[float]]] = {}
    for task, logical, start, end in rows:
        day = datetime.fromisoformat(logical).timetuple().tm_yday
        inside.setdefault(task, {}).setdefault(day, []).append(_ts(end) - _ts(start))
    for window in args.windows.split(","):
        lo, hi = (int(x) for x in window.split("-"))
        means = {task: statistics.mean(v for d, vs in by_day.items() if lo <= d <= hi
                                       for v in vs)
                 for task, by_day in inside.items()
                 if any(lo <= d <= hi for d in by_day)}
        parts = ", ".join(f"{t} {m:.2f}" for t, m in sorted(means.items(), key=lambda kv: -kv[1]))
        print(f"days {lo}-{hi}: all tasks {sum(means.values()):.2f} s a run; {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
