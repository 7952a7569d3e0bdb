#!/usr/bin/env python
"""The full-year backfill through Airflow, with Airflow's own overhead broken out.

    python benchmarks/airflow_backfill.py --input DIR [--start 2020-01-01 --end 2020-12-31]

``DIR`` is a data root that ``python -m dp_ops generate`` filled for the range (only its
``raw/`` and ``reference/`` are read). The script makes two fresh data roots that share
that input read-only (symlinks), then measures on the same machine, one after the other:

1. **in-process**: ``python -m dp_ops run <report>`` over the range: the pipeline's own
   work, every step of every day, with no Airflow at all;
2. **Airflow**: ``scripts/airflow_demo.py`` (real scheduler, LocalExecutor, SQLite
   metadata DB, api-server and dag-processor) backfilling the DAG over the range.

It then reads the metadata DB and prints: wall time of both, the Airflow overhead per run
(``(airflow - in-process) / runs``), and per task id the mean time inside the task
(``end - start`` of the task instance, which includes the task process's own start-up) and
the mean wait before it (from the previous task's end, or the run's start, to its start:
scheduling and queueing). Figures go to ``benchmarks/results/airflow_backfill.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import date, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPORT_OF = {"mobility_report": "mobility", "symptoms_dataset": "symptoms"}


def log(msg: str) -> None:
    print(f"[backfill-bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fresh_root(base: Path, name: str, source: Path) -> Path:
    root = base / name
    root.mkdir(parents=True)
    (root / "raw").symlink_to(source / "raw")
    shutil.copytree(source / "reference", root / "reference")
    return root


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    # dp_ops is imported from this interpreter's venv (make venv installs it)
    env.update({"DP_DATA_ROOT": str(root), "GX_ANALYTICS_ENABLED": "false",
                # the `airflow` CLI of this interpreter's environment
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"})
    env.pop("DP_LEDGER_URL", None)
    return env


def timed(cmd: list[str], env: dict[str, str], log_file: Path) -> float:
    t0 = time.monotonic()
    with log_file.open("w") as fh:
        res = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
    if res.returncode != 0:
        tail = log_file.read_text().strip().splitlines()[-20:]
        raise SystemExit(f"{' '.join(cmd[:4])}... failed ({res.returncode}); log "
                         f"{log_file}:\n" + "\n".join(tail))
    return time.monotonic() - t0


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value).timestamp()


def metadata_figures(db: Path, dag_id: str) -> dict[str, object]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    runs = {r[0]: (_ts(r[1]), _ts(r[2])) for r in con.execute(
        "SELECT run_id, start_date, end_date FROM dag_run WHERE dag_id = ?", (dag_id,))}
    # skipped task instances (mobility's report, gate and publish before the first public
    # date) never ran: they are counted apart, not as tasks of no duration
    tis = con.execute(
        "SELECT run_id, task_id, start_date, end_date, try_number FROM task_instance "
        "WHERE dag_id = ? AND state IS NOT 'skipped' ORDER BY run_id, start_date",
        (dag_id,)).fetchall()
    skipped = con.execute("SELECT count(*) FROM task_instance WHERE dag_id = ? AND "
                          "state = 'skipped'", (dag_id,)).fetchone()[0]
    con.close()
    inside: dict[str, list[float]] = defaultdict(list)
    waits: dict[str, list[float]] = defaultdict(list)
    by_run: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for run_id, task_id, start, end, _try in tis:
        s, e = _ts(start), _ts(end)
        if s is None or e is None:
            continue
        inside[task_id].append(e - s)
        by_run[run_id].append((task_id, s, e))
    for run_id, items in by_run.items():
        previous_end = runs[run_id][0]
        for task_id, s, e in sorted(items, key=lambda x: x[1]):
            if previous_end is not None:
                waits[task_id].append(max(0.0, s - previous_end))
            previous_end = max(previous_end or e, e)
    starts = [s for s, _ in runs.values() if s]
    ends = [e for _, e in runs.values() if e]
    run_walls = [e - s for s, e in runs.values() if s and e]
    return {
        "runs": len(runs),
        "first_start_to_last_end_s": max(ends) - min(starts) if starts and ends else None,
        "mean_run_wall_s": statistics.fmean(run_walls) if run_walls else None,
        "tasks": {t: {"count": len(v), "mean_inside_s": statistics.fmean(v),
                      "mean_wait_before_s": statistics.fmean(waits[t]) if waits[t] else 0.0}
                  for t, v in inside.items()},
        "task_instances": sum(len(v) for v in inside.values()),
        "skipped_task_instances": skipped,
        "sum_inside_s": sum(sum(v) for v in inside.values()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, required=True,
                   help="data root holding raw/ and reference/ for the range")
    p.add_argument("--start", type=date.fromisoformat, default=date(2020, 1, 1))
    p.add_argument("--end", type=date.fromisoformat, default=date(2020, 12, 31))
    p.add_argument("--dag-id", default="mobility_report", choices=sorted(REPORT_OF))
    p.add_argument("--max-active-runs", type=int, default=4)
    p.add_argument("--work", type=Path, default=None,
                   help="where the two data roots and the Airflow home go (default: a "
                        "temporary directory, removed afterwards)")
    p.add_argument("--skip-inprocess", action="store_true")
    p.add_argument("--demo-arg", action="append", default=[],
                   help="extra argument passed to scripts/airflow_demo.py (repeatable)")
    args = p.parse_args(argv)
    source = args.input.resolve()
    if not (source / "raw").is_dir() or not (source / "reference").is_dir():
        raise SystemExit(f"--input {source}: expected raw/ and reference/ from "
                         "`python -m dp_ops generate`")
    report = REPORT_OF[args.dag_id]
    runs = (args.end - args.start).days + 1
    keep = args.work is not None
    work = args.work.resolve() if keep else Path(tempfile.mkdtemp(prefix="backfill-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {"dag_id": args.dag_id, "runs": runs,
                                  "range": [str(args.start), str(args.end)],
                                  "max_active_runs": args.max_active_runs,
                                  "cpus": os.cpu_count()}
    try:
        if not args.skip_inprocess:
            root = fresh_root(work, f"inprocess-{time.time_ns()}", source)
            log(f"in-process: python -m dp_ops run {report} over {runs} days")
            results["inprocess_s"] = timed(
                [sys.executable, "-m", "dp_ops", "run", report, "--start", str(args.start),
                 "--end", str(args.end)], _env(root), work / "inprocess.log")
            log(f"in-process: {results['inprocess_s']:.0f} s")
        root = fresh_root(work, f"airflow-{time.time_ns()}", source)
        home = work / f"airflow_home-{time.time_ns()}"
        log(f"Airflow: backfill {args.dag_id} over {runs} days (max_active_runs "
            f"{args.max_active_runs}); progress in {work / 'airflow.log'}")
        results["airflow_script_s"] = timed(
            [sys.executable, str(REPO / "scripts" / "airflow_demo.py"), "--fresh",
             "--airflow-home", str(home), "--dag-id", args.dag_id, "--start",
             str(args.start), "--end", str(args.end), "--max-active-runs",
             str(args.max_active_runs), "--timeout-minutes", "240", *args.demo_arg],
            _env(root), work / "airflow.log")
        results["airflow"] = metadata_figures(home / "airflow.db", args.dag_id)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    from results_file import stamp

    results = {"stamp": stamp(), **results}
    (out_dir / "airflow_backfill.json").write_text(json.dumps(results, indent=2) + "\n")
    print_table(results)
    return 0


# target: a full-2020 backfill through Airflow under 15 min (mobility), 30 min (symptoms)
YEAR_TARGET_MIN = {"mobility_report": 15, "symptoms_dataset": 30}


def print_table(r: dict[str, object]) -> None:
    af = r["airflow"]
    assert isinstance(af, dict)
    runs = int(r["runs"])  # type: ignore[call-overload]
    wall = af["first_start_to_last_end_s"]
    print(f"\n{r['dag_id']}: {runs} daily runs {r['range'][0]}..{r['range'][1]}, "  # type: ignore[index]
          f"max_active_runs {r['max_active_runs']}, {r['cpus']} CPUs")
    print(f"  Airflow, whole script (migrate, start services, backfill, stop): "
          f"{r['airflow_script_s']:.0f} s = {r['airflow_script_s'] / 60:.1f} min")  # type: ignore[operator]
    print(f"  Airflow, first run start -> last run end: {wall:.0f} s = {wall / 60:.1f} min "
          f"({wall / runs:.2f} s per run; issue 16's target for a year: < "
          f"{YEAR_TARGET_MIN.get(str(r['dag_id']), 30)} min)")
    if "inprocess_s" in r:
        ip = float(r["inprocess_s"])  # type: ignore[arg-type]
        print(f"  in-process, same days, no Airflow: {ip:.0f} s ({ip / runs:.2f} s per day)")
        print(f"  Airflow overhead per run: {(wall - ip) / runs:.2f} s "
              f"({(wall - ip) / wall:.0%} of the backfill's wall time)")
    print(f"  task instances: {af['task_instances']} run, "
          f"{af.get('skipped_task_instances', 0)} skipped, time inside tasks "
          f"{af['sum_inside_s']:.0f} s in all")
    print(f"  {'task':<22}{'count':>6}{'mean inside s':>15}{'mean wait before s':>20}")
    for task, f in sorted(af["tasks"].items(), key=lambda kv: -kv[1]["mean_inside_s"]):
        print(f"  {task:<22}{f['count']:>6}{f['mean_inside_s']:>15.2f}"
              f"{f['mean_wait_before_s']:>20.2f}")


if __name__ == "__main__":
    sys.exit(main())
