#!/usr/bin/env python
"""Where a symptoms gate's time goes early and late in the year, part by part.

    python benchmarks/gate_parts.py --input DIR [--at 60,360] [--repeat 3]

``DIR`` is a data root that ``python -m dp_ops generate`` filled for the year (only its
``raw/`` and ``reference/`` are read). In a fresh data root the script runs the symptoms
steps in-process day by day (as ``benchmarks/daily_cost.py`` does), gating and publishing
the day before each timed day; on a timed day it times, ``--repeat`` times, each part of
``dp_ops.reports.symptoms.release.stage_and_validate`` on its own: the period summary, the
candidate, the published values, each Great Expectations suite, the charts, the release
files and the contract check. Prints the last repetition's seconds per part (the first
pays one-off set-up). Nothing private is printed: seconds and row counts only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

YEAR_START = date(2020, 1, 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", type=Path, required=True)
    p.add_argument("--at", default="60,360")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations  # noqa: F401  (warm, as the Airflow processes are)
    from daily_cost import fresh_root  # this script's neighbour in benchmarks/

    import dp_ops.gx.runner as gx_runner
    from dp_ops.regions import read_regions
    from dp_ops.reports.registry import bind
    from dp_ops.reports.symptoms import release
    from dp_ops.reports.symptoms.assemble import build_candidate, complete_weeks
    from dp_ops.reports.symptoms.charts import write_symptom_charts
    from dp_ops.reports.symptoms.declaration import REPORT
    from dp_ops.reports.symptoms.period import load_period
    from dp_ops.reports.symptoms.suites import published_values, validate_symptoms_release
    from dp_ops.sources.search_activity import read_symptoms, symptom_list
    from dp_ops.steps.charts import charted_regions
    from dp_ops.steps.noise_request import NoiseRequest
    from dp_ops.steps.release_contract import require_contract

    at = sorted({int(x) for x in args.at.split(",")})
    base, root, url = fresh_root(args.input, "gate-parts-")
    cfg = REPORT.load_config()
    symptoms = bind(REPORT, cfg, root, url)
    seconds: dict[str, float] = {}
    real_checkpoint = gx_runner.run_checkpoint

    def timed(name: str, fn: Any, *fargs: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*fargs, **kwargs)
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
        return out

    def checkpoint(cp: Any, frame: Any, parameters: Any, run_id: Any) -> Any:
        return timed(f"gx {cp.name}", real_checkpoint, cp, frame, parameters, run_id)

    gx_runner.run_checkpoint = checkpoint  # type: ignore[assignment]  (timing only)
    try:
        for n in range(1, at[-1] + 1):
            day = YEAR_START + timedelta(days=n - 1)
            symptoms.ingest(day)
            symptoms.bound(day)
            symptoms.noise(NoiseRequest(day=day, run_id=f"day-{day}"))
            symptoms.report_day(day)
            if n + 1 in at:
                symptoms.gate(run_id=f"day-{day}")
                symptoms.publish(run_id=f"day-{day}")
            if n not in at:
                continue
            from dp_ops.steps.day_files import release_days
            from dp_ops.steps.ledger_binding import closing_ledger, open_ledger

            with closing_ledger(open_ledger(root, url)) as ledger:
                days, digests = release_days(ledger, "symptoms", cfg.first_public_date)
                scaling = release.read_scaling(root, ledger)[0]
                frozen = release.frozen_resolutions(root, ledger)[0]
            regions = read_regions(root.regions_csv)
            names = read_symptoms(symptom_list(root))
            labels = [d.isoformat() for d in days]
            mondays = [d.isoformat() for d in complete_weeks(days[0], days[-1])]
            charted, _ = charted_regions(regions, cfg.levels)
            for rep in range(args.repeat):
                seconds.clear()
                period = timed("period summary", load_period, root, cfg, days, digests)
                cand = timed("candidate", build_candidate, period, regions, names, cfg,
                             scaling, frozen, None)
                timed("published values", published_values, cand, regions)
                timed("validation (all)", validate_symptoms_release, cand, regions, names,
                      days=labels, mondays=mondays, gx_dir=root.gx_dir, cfg=cfg,
                      run_name=f"parts-{n}-{rep}")
                out = base / f"out-{n}-{rep}"
                timed("charts", write_symptom_charts, cand.daily, cand.weekly, charted, labels,
                      out)
                timed("files", release.write_release_files, cand, "XX", out)
                timed("contract check", require_contract, "symptoms", out, release.CONTRACT)
                shutil.rmtree(out)
            print(f"day {n}: {len(cand.daily)} daily rows, {len(cand.values)} values; "
                  + ", ".join(f"{k} {v:.3f}" for k, v in seconds.items()), flush=True)
    finally:
        gx_runner.run_checkpoint = real_checkpoint  # type: ignore[assignment]
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
