#!/usr/bin/env python
"""What one daily run costs early and late in the year: does it grow with the release?

    python benchmarks/daily_cost.py --input DIR [--report symptoms] [--at DAYS]

``DIR`` is a data root that ``python -m dp_ops generate`` filled for the year (only its
``raw/`` and ``reference/`` are read). In a fresh data root the script runs the report's
step functions in-process, day by day from 2020-01-01, as the daily DAG does (ingest,
bound, noise, [baseline,] report for the day, then gate and publish of the whole release
so far), with every step timed on the days of ``--at`` (day of the year, 1 = 1 January).
The day before each timed day also gates and publishes, so the timed day finds what a
daily schedule leaves behind (the previous release, the period state); the other days
only build the per-day files, untimed. Heavy libraries are imported before timing, as the
Airflow processes' warm imports do (``docker/airflow/airflow_local_settings.py``).

Prints one line per timed day (seconds per step) and, for the gate's validation, the
gate and gate + publish, the ratio of late to early: the timed days are split at the middle
of their span into an early and a late group, and each group counts by its median, so one
day that also rebuilt the Data Docs index (due every few minutes) does not decide the
ratio. The default times the weekdays of two weeks at each end of 2020 (ten days a
group: one day's figure differs by a fifth or more between runs); time
weekdays only, the same at both ends: a symptoms gate also validates the week a Sunday
completes, so a weekend day costs more than a weekday at any time of the year. The
figures go to the
stamped results file ``benchmarks/results/daily_cost_<report>.md`` and ``.json``
(``benchmarks/results_file.py``). A report whose cost does not grow has a ratio near 1.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
YEAR_START = date(2020, 1, 1)
# Monday to Friday of 6-17 January and of 14-25 December 2020 (days of the year)
WEEKDAYS_AT_BOTH_ENDS = "6,7,8,9,10,13,14,15,16,17,349,350,351,352,353,356,357,358,359,360"


def log(msg: str) -> None:
    print(f"[daily-cost {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fresh_root(input_dir: Path, prefix: str, workdir: Path | None = None
               ) -> tuple[Path, Any, str]:
    """A new data root under a temporary directory (returned, to delete afterwards) that
    reads ``input_dir``'s ``raw/`` through a link and has its own copy of ``reference/``;
    with the URL of its SQLite ledger."""
    from dp_ops.layout import DataRoot

    base = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
    root_dir = base / "data"
    root_dir.mkdir()
    (root_dir / "raw").symlink_to(input_dir.resolve() / "raw")
    shutil.copytree(input_dir / "reference", root_dir / "reference")
    return base, DataRoot(root_dir), f"sqlite:///{root_dir / 'ledger.sqlite'}"


def time_validation(report: str) -> dict[str, float]:
    """Time the gate's validation (its GX run, and what lets it carry rows over: the
    row digests, the look-up of the previous gate's record, the whole-table checks) by
    wrapping the functions the gate calls; the returned dict adds up their seconds per
    function name."""
    import importlib

    seconds: dict[str, float] = {}
    wrapped = [(f"dp_ops.reports.{report}.suites", f"validate_{report}_release"),
               ("dp_ops.gx.carried", "table_digests"),
               ("dp_ops.steps.release_flow", "carried_gate_rows"),
               ("dp_ops.steps.release_flow", "record_gate_rows")]
    for module_name, name in wrapped:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue  # a version without carry-over
        real = getattr(module, name, None)
        if real is None:
            continue

        def timed(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _real(*a, **k)
            finally:
                seconds[_name] = seconds.get(_name, 0.0) + time.perf_counter() - t0

        setattr(module, name, timed)
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, required=True)
    p.add_argument("--report", choices=("symptoms", "mobility"), default="symptoms")
    p.add_argument("--at", default=WEEKDAYS_AT_BOTH_ENDS,
                   help="days of the year to time (default: Monday to Friday of two weeks "
                        "at each end of 2020)")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--users-note", default="users not stated",
                   help="how the input was generated, for the results file (e.g. "
                        "'--users 20000')")
    p.add_argument("--profile", action="store_true",
                   help="profile gate and publish on the last timed day (cProfile, top 40 "
                        "by cumulative time, dp_ops functions)")
    args = p.parse_args(argv)
    at = sorted({int(x) for x in args.at.split(",")})
    last = YEAR_START + timedelta(days=at[-1] - 1)
    if not (args.input / "raw").is_dir():
        raise SystemExit(f"{args.input}/raw does not exist: run python -m dp_ops generate")

    import os

    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    # warm imports, as in the Airflow processes that fork tasks
    import duckdb  # noqa: F401
    import great_expectations  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from dp_ops.gx.runner import warm_up
    from dp_ops.steps.noise_request import NoiseRequest

    warm_up()  # as airflow_local_settings does before forking tasks

    # the tree measured is the one imported now: stamp it before the run, not after
    sys.path.insert(0, str(REPO / "benchmarks"))
    import results_file

    measured = results_file.stamp()
    results_file.stamp = lambda: measured
    validation = time_validation(args.report)

    from dp_ops.reports.registry import bind, declared_report
    from dp_ops.reports.spec import report_spec

    declared = declared_report(report_spec(args.report))
    base, root, url = fresh_root(args.input, "daily-cost-", args.workdir)
    rep = bind(declared, declared.load_config(), root, url)
    gate_days = {YEAR_START + timedelta(days=d - 1) for d in at}
    gate_days |= {d - timedelta(days=1) for d in gate_days}
    rows: list[dict[str, Any]] = []
    parts: dict[int, dict[str, float]] = {}  # per timed day: the validation's parts
    t_all = time.monotonic()
    day = YEAR_START
    try:
        while day <= last:
            timed = day in {YEAR_START + timedelta(days=d - 1) for d in at}
            chain = [("ingest", lambda d=day: rep.ingest(d)),
                     ("bound", lambda d=day: rep.bound(d)),
                     ("noise", lambda d=day: rep.noise(NoiseRequest(day=d, run_id=f"day-{d}")))]
            if declared.baseline is not None:
                chain.append(("baseline", rep.build_baseline))
            chain.append(("report", lambda d=day: rep.report_day(d)))
            if day in gate_days:
                chain += [("gate", lambda d=day: rep.gate(run_id=f"day-{d}")),
                          ("publish", lambda d=day: rep.publish(run_id=f"day-{d}"))]
            times: dict[str, float] = {}
            validation.clear()
            profile = args.profile and day == last
            for name, fn in chain:
                t0 = time.perf_counter()
                if profile and name in ("gate", "publish"):
                    import cProfile
                    import pstats

                    prof = cProfile.Profile()
                    prof.runcall(fn)
                    pstats.Stats(prof).sort_stats("cumulative").print_stats("dp_ops", 40)
                else:
                    fn()
                times[name] = round(time.perf_counter() - t0, 3)
            if day in gate_days:
                times["gate validation"] = round(sum(validation.values()), 3)
            if timed:
                n = (day - YEAR_START).days + 1
                rows.append({"day_of_year": n, "date": day.isoformat(), **times})
                parts[n] = {k: round(v, 3) for k, v in validation.items()}
                log(f"day {n} ({day}): " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items())
                    + f"; total {sum(times.values()):.2f} s")
            elif (day - YEAR_START).days % 30 == 0:
                log(f"{day} ({time.monotonic() - t_all:.0f} s)")
            day += timedelta(days=1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    gate = {r["day_of_year"]: r.get("gate", 0.0) for r in rows}
    checked = {r["day_of_year"]: r.get("gate validation", 0.0) for r in rows}
    release = {r["day_of_year"]: round(r.get("gate", 0) + r.get("publish", 0), 3) for r in rows}
    whole = {r["day_of_year"]: round(sum(v for k, v in r.items()
                                         if k not in ("day_of_year", "date", "gate validation")),
                                     3) for r in rows}
    early, late = split_early_late(at)
    check_ratio = late_over_early(checked, early, late)
    gate_ratio = late_over_early(gate, early, late)
    ratio = late_over_early(release, early, late)
    log(f"{args.report}: gate {gate}; gate + publish {release}; whole daily run {whole}; "
        f"late {late} / early {early}, medians: {check_ratio:.2f}x (gate validation), "
        f"{gate_ratio:.2f}x (gate), {ratio:.2f}x (gate + publish)")
    out = write_results(args, rows, (check_ratio, gate_ratio, ratio), release, whole, parts)
    log(f"figures in {out} and its .json")
    return 0


def split_early_late(days: list[int]) -> tuple[list[int], list[int]]:
    """The sorted timed ``days`` split at the middle of their span: (early, late)."""
    middle = (days[0] + days[-1]) / 2
    return [d for d in days if d <= middle], [d for d in days if d > middle]


def late_over_early(seconds: dict[int, float], early: list[int], late: list[int]) -> float:
    """The median of ``seconds`` over the ``late`` days over its median over the ``early``
    ones (nan when a group is empty or the early median is 0)."""
    import statistics

    if not early or not late:
        return float("nan")
    first = statistics.median(seconds[d] for d in early)
    return statistics.median(seconds[d] for d in late) / first if first else float("nan")


def parts_table(parts: dict[int, dict[str, float]], early: list[int], late: list[int]
                ) -> list[str]:
    """A Markdown table of the gate validation's parts: the median seconds of each over
    the early and the late days, and their ratio."""
    import statistics

    names = sorted({name for day in parts.values() for name in day})
    table = ["| part of gate validation | early median | late median | late / early |",
             "|---|---:|---:|---:|"]
    for name in names:
        a = statistics.median(parts[d].get(name, 0.0) for d in early)
        b = statistics.median(parts[d].get(name, 0.0) for d in late)
        table.append(f"| `{name}` | {a:.3f} | {b:.3f} | "
                     + (f"{b / a:.2f}x |" if a else "- |"))
    return table


def write_results(args: argparse.Namespace, rows: list[dict[str, Any]],
                  ratios: tuple[float, float, float], release: dict[Any, Any],
                  whole: dict[Any, Any], parts: dict[int, dict[str, float]]) -> Path:
    """``benchmarks/results/daily_cost_<report>.md`` and ``.json``, stamped
    (:mod:`results_file`)."""
    import results_file

    check_ratio, gate_ratio, ratio = ratios
    steps = [k for k in rows[0] if k not in ("day_of_year", "date")]
    table = ["| day of year | date | " + " | ".join(steps) + " |",
             "|---|---|" + "---|" * len(steps)]
    table += [f"| {r['day_of_year']} | {r['date']} | "
              + " | ".join(f"{r.get(k, 0.0):.2f}" for k in steps) + " |" for r in rows]
    early, late = split_early_late([r["day_of_year"] for r in rows])
    groups = (f"days {', '.join(map(str, late))} over days {', '.join(map(str, early))}, "
              "median over median")
    body = "\n".join([
        f"`python benchmarks/daily_cost.py --input DIR --report {args.report} --at "
        f"{args.at}`, on a data root generated for 2020 ({args.users_note}). Seconds per "
        "step of one daily run, in-process; the machine may have been shared, so read "
        "the ratios.", "", *table, "",
        "`gate validation` is the part of the gate step spent validating (its Great "
        "Expectations run, the row digests, the look-up of what the previous release's "
        "gate validated, the whole-table checks).", "",
        f"Late / early ({groups}): gate validation {check_ratio:.2f}x, gate "
        f"{gate_ratio:.2f}x, gate + publish {ratio:.2f}x.", "",
        "The gate validation's parts, each the function of dp_ops the gate calls:", "",
        *parts_table(parts, early, late)])
    return Path(results_file.write(
        f"daily_cost_{args.report}", f"Daily cost of a {args.report} run, early and late "
        "in the year", body,
        {"report": args.report, "input_users": args.users_note, "days": rows,
         "early_days": early, "late_days": late,
         "gate_validation_ratio_late_early": round(check_ratio, 3),
         "gate_ratio_late_early": round(gate_ratio, 3),
         "validation_parts": parts, "gate_plus_publish": release, "whole_run": whole,
         "ratio_late_early": round(ratio, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
