"""National scale: ingest, bound and noise one day of up to 100M stays on one machine, with
DuckDB, with Spark in local mode and with Spark through a Spark Connect server, and check
that they give identical results.

    .venv/bin/python benchmarks/scale.py                       # 10M, 100M; every engine
    .venv/bin/python benchmarks/scale.py --sizes 10M --engines duckdb,spark   # a quick look

For each size the synthetic day of ``synth.py`` (the ``make bench`` generator: ~3.5 stays
per user, 3,051 regions) is generated once (cached under ``benchmarks/data/``; the largest
days take gigabytes of Parquet). Then each engine runs in a fresh child process that does
what the pipeline's ``ingest``, ``bound_contributions`` and ``noise`` tasks do:
``ingest`` (the day as a raw partition -> clean rows and quarantine), ``bound``, then
``noise`` (ledger on SQLite) of the mobility report bound to the data root.

* **duckdb**: the pipeline's settings (``dp_ops.settings``): memory limit
  ``--duckdb-memory`` (``DP_DUCKDB_MEMORY_LIMIT``, default the pipeline's 1GB), user parts
  of ``DP_DUCKDB_ROWS_PER_PART`` rows, spilling under the data root.
* **spark**: ``DP_ENGINE=spark``; the child first starts a local SparkSession
  (``local[N]`` over the machine's cores, driver memory ``--spark-memory``, shuffle
  partitions ``--spark-partitions``, scratch under the data root), which the engine then
  uses as it would under ``spark-submit``. Session start is timed apart.
* **connect**: ``DP_ENGINE=spark`` with ``DP_SPARK_REMOTE`` pointing at a Spark Connect
  server that this script starts first (``scripts/spark_connect_server.py``: local[N],
  the same driver memory and shuffle partitions) and stops afterwards; the child is a thin
  client. Server start is timed apart.

Measured from outside each child: wall seconds and the **peak memory of its whole process
tree** (the sum of the resident sizes of the child and its descendants, the Spark JVM
included, and for ``connect`` the server's process tree too, sampled every 0.1 s from
``/proc``); inside: the seconds of each step. All engines run on the same cores, so the
ratio of their step seconds is the ratio per core: the report prints Spark's (local and
Connect) over DuckDB's for ingest and for bounding. After the engines ran a size, their
bounded cell files (private, deleted afterwards) are compared cell by cell, and their
ingest outcome counts (clean and quarantined rows per reason) are compared: the report
says whether they are identical, never the values. Results go to
``benchmarks/results/scale-<time>.{md,json}`` and ``benchmarks/results/scale-latest.*``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(REPO / "plugins"))

from run import human, parse_size  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
import spark_connect_server as connect_server  # noqa: E402

# -- the child ------------------------------------------------------------------------------

def child(engine: str, data: Path, work: Path, spark_memory: str,
          spark_partitions: int, remote: str | None) -> dict[str, Any]:
    """One day ingested, bounded and noised as the pipeline's tasks do; returns step
    seconds."""
    from contenders import BENCH_DAY, SOURCE, prepare_root

    import dp_ops.privacy.ledger_migrations  # noqa: F401  imports outside the timed part
    import dp_ops.reports.mobility.bounding  # noqa: F401
    from dp_ops.reports.mobility.config import MobilityConfig
    from dp_ops.reports.mobility.declaration import REPORT
    from dp_ops.reports.registry import bind, prepare_noise_samplers
    from dp_ops.settings import load_execution_settings
    from dp_ops.steps.noise_request import NoiseRequest

    prepare_noise_samplers()
    cfg = MobilityConfig()
    out: dict[str, Any] = {"engine": engine}
    root = prepare_root(data, work, raw_days=[BENCH_DAY])
    if engine in ("spark", "connect"):
        os.environ["DP_ENGINE"] = "spark"
        t = time.perf_counter()
        if engine == "spark":
            session = start_local_spark(work, spark_memory, spark_partitions)
        else:
            from dp_ops.engine.spark import spark_session

            os.environ["DP_SPARK_REMOTE"] = str(remote)
            session = spark_session(load_execution_settings())
        out["session_start_s"] = round(time.perf_counter() - t, 2)
        out["spark_conf"] = {k: session.conf.get(k) for k in (
            "spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions",
            "spark.sql.adaptive.enabled")}
    out["execution"] = vars(load_execution_settings())
    mobility = bind(REPORT, cfg, root, f"sqlite:///{work}/ledger.db")
    t0 = time.perf_counter()
    mobility.ingest(BENCH_DAY)
    t1 = time.perf_counter()
    mobility.bound(BENCH_DAY)
    t2 = time.perf_counter()
    mobility.noise(NoiseRequest(day=BENCH_DAY, run_id="scale"))
    t3 = time.perf_counter()
    report = root.clean_partition(SOURCE, BENCH_DAY) / "ingest_report.json"
    return out | {"ingest_s": round(t1 - t0, 2), "bound_s": round(t2 - t1, 2),
                  "noise_s": round(t3 - t2, 2), "seconds": round(t3 - t0, 2),
                  "ingest_report": str(report),
                  "bounded_file": str(root.bounded_file("mobility", BENCH_DAY))}


def start_local_spark(work: Path, memory: str, partitions: int) -> Any:
    from pyspark.sql import SparkSession

    scratch = work / "spark-tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    return (SparkSession.builder.appName("dp_ops-scale")
            .master(f"local[{os.cpu_count() or 2}]")
            .config("spark.driver.memory", memory)
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config("spark.local.dir", str(scratch))
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.log.level", "WARN")
            .getOrCreate())


# -- the parent -----------------------------------------------------------------------------

def _tree_rss_bytes(pgid: int) -> int:
    """Resident bytes of every process in the process group ``pgid`` (the child leads its
    own group; the Spark JVM it starts joins it)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[2]) != pgid:      # field 5 of stat: the process group
                continue
            with open(f"/proc/{entry.name}/statm") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def _pid_rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_child(argv: list[str], log: Path, timeout_s: float,
              server_pid: int | None = None) -> dict[str, Any]:
    """Run the child; its wall seconds and the peak memory of its process tree (plus the
    Spark Connect server's JVM, ``server_pid``, when it works for the child)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    peak = 0
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        while proc.poll() is None:
            peak = max(peak, _tree_rss_bytes(proc.pid)
                       + (_pid_rss_bytes(server_pid) if server_pid else 0))
            if time.perf_counter() - t0 > timeout_s:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                timed_out = True
                break
            time.sleep(0.1)
        wall = time.perf_counter() - t0
    return {"exit_code": proc.returncode, "timed_out": timed_out, "wall_s": round(wall, 2),
            "peak_tree_rss_mib": round(peak / 2**20)}


def same_cells(a: Path, b: Path) -> dict[str, Any]:
    """Whether two bounded cell files hold exactly the same (level, region, metric, value)
    rows. Only counts are returned: the values are private."""
    import pyarrow.parquet as pq

    keys = ["level", "region_id", "metric"]
    fa = pq.read_table(a).to_pandas().sort_values(keys, ignore_index=True)
    fb = pq.read_table(b).to_pandas().sort_values(keys, ignore_index=True)
    fa["level"] = fa["level"].astype("int64")
    fb["level"] = fb["level"].astype("int64")
    identical = (len(fa) == len(fb) and fa[keys].equals(fb[keys])
                 and (fa["value"].to_numpy() == fb["value"].to_numpy()).all())
    return {"identical": bool(identical), "cells": [len(fa), len(fb)]}


def same_outcomes(a: Path, b: Path) -> dict[str, Any]:
    """Whether two ingest runs had the same number of rows per outcome (clean, and each
    quarantine reason). Only whether they agree is returned."""
    ca = json.loads(a.read_text())["rows_by_outcome"]
    cb = json.loads(b.read_text())["rows_by_outcome"]
    return {"identical": ca == cb, "outcomes": sorted(set(ca) | set(cb))}


def ratios(entry: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per Spark engine, its step seconds over DuckDB's (same cores: the ratio per core)."""
    runs = entry["runs"]
    duck = runs.get("duckdb", {})
    out = {}
    for engine in ("spark", "connect"):
        r = runs.get(engine, {})
        out[engine] = {step: round(r[f"{step}_s"] / duck[f"{step}_s"], 2)
                       for step in ("ingest", "bound")
                       if r.get(f"{step}_s") and duck.get(f"{step}_s")}
    return {k: v for k, v in out.items() if v}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10M,100M")
    p.add_argument("--engines", default="duckdb,spark,connect",
                   help="duckdb, spark (local) and connect (Spark Connect server)")
    p.add_argument("--spark-max", default="100M", help="largest size Spark runs at")
    p.add_argument("--duckdb-memory", default="1GB", help="DP_DUCKDB_MEMORY_LIMIT")
    p.add_argument("--spark-memory", default="6g", help="spark.driver.memory (local mode)")
    p.add_argument("--spark-partitions", type=int, default=0,
                   help="spark.sql.shuffle.partitions (default: one per 2M stays, >= 8)")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--data-dir", type=Path, default=BENCH_DIR / "data")
    p.add_argument("--seed", type=int, default=2020)
    p.add_argument("--keep-work", action="store_true")
    # the child's arguments
    p.add_argument("--child", choices=["duckdb", "spark", "connect"], help=argparse.SUPPRESS)
    p.add_argument("--remote", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.child:
        result = child(a.child, a.data, a.work, a.spark_memory, a.spark_partitions,
                       a.remote)
        a.result.write_text(json.dumps(result, default=str) + "\n")
        return 0

    sizes = [parse_size(s) for s in a.sizes.split(",")]
    engines = a.engines.split(",")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    runs_dir = a.data_dir / "runs" / f"scale-{stamp}"
    results_dir = BENCH_DIR / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "plugins", "include", "benchmarks"],
                           cwd=REPO, capture_output=True, text=True).stdout.strip()
    report: dict[str, Any] = {"commit": commit, "dirty": bool(dirty), "started": stamp,
                              "cores": os.cpu_count(), "duckdb_memory": a.duckdb_memory,
                              "spark_memory": a.spark_memory, "sizes": []}
    for n in sizes:
        data = a.data_dir / f"stays-{human(n)}-seed{a.seed}-50x3000"
        t = time.perf_counter()
        subprocess.run([sys.executable, str(BENCH_DIR / "synth.py"), "--stays", str(n),
                        "--out", str(data), "--seed", str(a.seed)], check=True,
                       stdout=subprocess.DEVNULL)
        meta = json.loads((data / "meta.json").read_text())
        print(f"[{human(n)}] data ready ({meta['bytes'] / 2**30:.2f} GiB, "
              f"{time.perf_counter() - t:.0f} s)", flush=True)
        entry: dict[str, Any] = {"stays": n, "users": meta.get("users"),
                                 "parquet_gib": round(meta["bytes"] / 2**30, 2), "runs": {}}
        bounded: dict[str, Path] = {}
        reports: dict[str, Path] = {}
        for engine in engines:
            if engine in ("spark", "connect") and n > parse_size(a.spark_max):
                continue
            work = runs_dir / f"{engine}-{human(n)}"
            result_file = runs_dir / f"{engine}-{human(n)}.json"
            partitions = a.spark_partitions or max(8, n // 2_000_000)
            env_argv = [sys.executable, str(Path(__file__).resolve()), "--child", engine,
                        "--data", str(data), "--work", str(work), "--result", str(result_file),
                        "--spark-memory", a.spark_memory, "--spark-partitions", str(partitions)]
            os.environ["DP_DUCKDB_MEMORY_LIMIT"] = a.duckdb_memory
            server = None
            if engine == "connect":
                t = time.perf_counter()
                server = connect_server.start(
                    runs_dir / f"server-{human(n)}", driver_memory=a.spark_memory,
                    conf={"spark.sql.shuffle.partitions": str(partitions)})
                env_argv += ["--remote", server.url]
                entry.setdefault("server_start_s", round(time.perf_counter() - t, 2))
            print(f"[{human(n)}] {engine} ...", flush=True)
            try:
                outer = run_child(env_argv, runs_dir / f"{engine}-{human(n)}.log", a.timeout,
                                  server_pid=server.pid() if server else None)
            finally:
                if server is not None:
                    connect_server.stop(server.directory)
            inner = json.loads(result_file.read_text()) if result_file.is_file() else {}
            entry["runs"][engine] = outer | inner
            if inner.get("bounded_file"):
                bounded[engine] = Path(inner["bounded_file"])
                reports[engine] = Path(inner["ingest_report"])
            write_results({**report, "sizes": [*report["sizes"], entry]}, results_dir, stamp)
            timings = {k: v for k, v in inner.items() if k.endswith("_s")}
            print(f"[{human(n)}] {engine}: {json.dumps(outer | timings)}", flush=True)
        others = [e for e in bounded if e != "duckdb"]
        if "duckdb" in bounded and others:
            entry["same_cells"] = {e: same_cells(bounded["duckdb"], bounded[e]) for e in others}
            entry["same_outcomes"] = {e: same_outcomes(reports["duckdb"], reports[e])
                                      for e in others}
            print(f"[{human(n)}] same cells: {entry['same_cells']}; same ingest outcomes: "
                  f"{entry['same_outcomes']}", flush=True)
        entry["ratios"] = ratios(entry)
        for engine, r in entry["ratios"].items():
            print(f"[{human(n)}] per-core ratio {engine}/duckdb: "
                  + ", ".join(f"{step} {v:.2f}x" for step, v in r.items()), flush=True)
        if not a.keep_work:
            for engine in engines:
                shutil.rmtree(runs_dir / f"{engine}-{human(n)}", ignore_errors=True)
        report["sizes"].append(entry)
        write_results(report, results_dir, stamp)
    print(render(report))
    return 0


def write_results(report: dict[str, Any], results_dir: Path, stamp: str) -> None:
    """The results so far, stamped and as the latest (after every size: a long run that is
    stopped keeps what it measured)."""
    md = render(report)
    (results_dir / f"scale-{stamp}.json").write_text(json.dumps(report, indent=2) + "\n")
    (results_dir / f"scale-{stamp}.md").write_text(md)
    shutil.copyfile(results_dir / f"scale-{stamp}.json", results_dir / "scale-latest.json")
    (results_dir / "scale-latest.md").write_text(md)


def render(report: dict[str, Any]) -> str:
    lines = [f"# Scale: one day ingested, bounded and noised (commit {report['commit']}"
             f"{', uncommitted changes' if report['dirty'] else ''}, {report['cores']} cores)",
             "",
             f"DuckDB memory limit {report['duckdb_memory']}; Spark (local, and the Connect "
             f"server) driver memory {report['spark_memory']}, local[{report['cores']}]. "
             "Wall: the child process from start to exit; steps: timed inside it. Peak: the "
             "child's whole process tree (JVM included), plus the Connect server's JVM for "
             "connect.", "",
             "| stays | users | engine | wall s | session start s | ingest s | bound s | "
             "noise s | peak MiB | ingest s per 1M | bound s per 1M | same cells | "
             "same ingest outcomes |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]

    def yes(check: dict[str, Any] | None) -> str:
        return "" if check is None else ("yes" if check["identical"] else "NO")

    for e in report["sizes"]:
        for engine, r in e["runs"].items():
            cells = e.get("same_cells", {}).get(engine)
            outcomes = e.get("same_outcomes", {}).get(engine)
            per_m = [f"{r[k] / e['stays'] * 1e6:.2f}" if k in r else ""
                     for k in ("ingest_s", "bound_s")]
            lines.append(
                f"| {human(e['stays'])} | {e.get('users') or ''} | {engine} | {r['wall_s']} | "
                f"{r.get('session_start_s', '')} | {r.get('ingest_s', 'failed')} | "
                f"{r.get('bound_s', 'failed')} | {r.get('noise_s', '')} | "
                f"{r['peak_tree_rss_mib']} | {per_m[0]} | {per_m[1]} | {yes(cells)} | "
                f"{yes(outcomes)} |")
    lines += ["", "Per-core ratio of Spark's step seconds to DuckDB's (same cores; target at "
              "most 3):", "", "| stays | engine | ingest | bound |", "|---:|---|---:|---:|"]
    for e in report["sizes"]:
        for engine, r in e.get("ratios", {}).items():
            lines.append(f"| {human(e['stays'])} | {engine} | {r.get('ingest', '')} | "
                         f"{r.get('bound', '')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
