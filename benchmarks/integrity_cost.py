"""What the ledger-binding checks cost a run, on an existing data root.

Every noise step and every publish verifies the ledger's chain (a MAC per entry) and checks
every release in the data root against the ledger (``require_sound``); the gate reads every
per-day report file as the ledger recorded it (one read, one sha256, one parse). This
script times each of those on a data root as it is (e.g. after ``make demo``), with the
unchecked reads it replaced as the peer, measured in the same run:

    .venv/bin/python benchmarks/integrity_cost.py --data-root data [--repeat 5]

It prints a table and writes ``benchmarks/results/integrity_cost.{md,json}``, stamped with
the commit and the date. Nothing is written to the data root.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-root", type=Path, default=REPO / "data")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)

    import pyarrow.parquet as pq

    from dp_ops import settings
    from dp_ops.layout import DataRoot
    from dp_ops.steps.day_files import read_day_files, recorded_days
    from dp_ops.steps.ledger_binding import (
        closing_ledger,
        open_ledger,
        release_problems,
        require_sound,
    )

    root = DataRoot(args.data_root.resolve())
    rows: list[dict[str, Any]] = []
    with closing_ledger(open_ledger(root, settings.ledger(root))) as ledger:
        entries = ledger.head()[0]
        releases = len(list(root.root.glob("published/*/releases/*/manifest.json")))
        rows.append({"check": "ledger.verify (MAC chain, guards)", "size": f"{entries} entries",
                     "seconds": timed(ledger.verify, args.repeat), "peer": None})
        rows.append({"check": "release_problems (every release vs its record)",
                     "size": f"{releases} releases",
                     "seconds": timed(lambda: release_problems(root, ledger), args.repeat),
                     "peer": None})
        rows.append({"check": "require_sound (both, per noise step and publish)",
                     "size": "", "seconds": timed(lambda: require_sound(root, ledger),
                                                  args.repeat), "peer": None})
        for report in ("mobility", "symptoms"):
            recorded = recorded_days(ledger, report)
            days = sorted(recorded)
            if not days:
                continue
            paths = [root.report_file(report, d) for d in days]
            verified = timed(lambda r=report, d=days, rec=recorded: read_day_files(
                root, r, d, rec), args.repeat)
            plain = timed(lambda ps=paths: [pq.read_table(x) for x in ps], args.repeat)
            rows.append({"check": f"{report}: per-day files read as recorded",
                         "size": f"{len(days)} days", "seconds": verified, "peer": plain})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True, check=False).stdout.strip()
    stamp = {"commit": commit, "date": datetime.now(UTC).isoformat(timespec="seconds"),
             "data_root": str(root.root), "repeat": args.repeat}
    lines = [f"integrity checks, commit {commit}, {stamp['date']} (median of "
             f"{args.repeat}; data root {root.root})", "",
             "| check | size | seconds | unchecked peer s | ratio |", "|---|---|---|---|---|"]
    for r in rows:
        peer = r["peer"]
        ratio = f"{r['seconds'] / peer:.2f}" if peer else ""
        lines.append(f"| {r['check']} | {r['size']} | {r['seconds']:.3f} | "
                     f"{'' if peer is None else f'{peer:.3f}'} | {ratio} |")
    text = "\n".join(lines)
    print(text)
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "integrity_cost.md").write_text(text + "\n")
    (out / "integrity_cost.json").write_text(json.dumps({**stamp, "rows": rows}, indent=2)
                                             + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
