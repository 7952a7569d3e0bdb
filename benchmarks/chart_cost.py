#!/usr/bin/env python
"""What drawing a mobility release's region charts costs, on a data root that has report days.

    DP_DATA_ROOT=DIR python benchmarks/chart_cost.py [--repeat 6]

Assembles the release a gate would stage now (every report day from the first public date)
and draws its charts (``write_mobility_charts``) ``--repeat`` times into a temporary
directory; prints the median of the repeats after the first (which also loads fonts) and
the time per chart. Nothing under the data root is written. To compare two commits, run
it from each one's clone on the same data root, back to back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=6)
    args = p.parse_args(argv)
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    from dp_ops import settings
    from dp_ops.layout import DataRoot
    from dp_ops.regions import read_regions
    from dp_ops.reports.mobility import release
    from dp_ops.reports.mobility.charts import write_mobility_charts
    from dp_ops.reports.mobility.config import load_mobility_config
    from dp_ops.steps.charts import charted_regions
    from dp_ops.steps.day_files import read_release_days
    from dp_ops.steps.ledger_binding import closing_ledger, open_ledger

    root = DataRoot(Path(os.environ.get("DP_DATA_ROOT", "data")))
    cfg = load_mobility_config()
    with closing_ledger(open_ledger(root, settings.ledger(root))) as ledger:
        days, _, tables = read_release_days(root, ledger, "mobility", cfg.first_public_date)
    if not days:
        raise SystemExit(f"no mobility report days under {root.root}: run the pipeline first")
    _, published = release.assemble(tables)
    charted, _ = charted_regions(read_regions(root.regions_csv), cfg.levels)
    labels = [d.isoformat() for d in days]
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(max(2, args.repeat)):
            t0 = time.perf_counter()
            entries = write_mobility_charts(published, charted, labels, Path(tmp))
            times.append(time.perf_counter() - t0)
    drawn = sum(1 for e in entries if e.file)
    median = statistics.median(times[1:])
    print(f"{len(days)} report days, {drawn} charts: median {median:.3f} s "
          f"({1000 * median / max(drawn, 1):.1f} ms a chart) over {len(times) - 1} repeats")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
