#!/usr/bin/env python
"""Where a pytest run's workers spent their time, from its timeline.

    DP_TEST_TIMELINE=/tmp/timeline.jsonl make test
    python benchmarks/test_timeline.py /tmp/timeline.jsonl [--top 15]

``tests/conftest.py`` writes one line per test phase when ``DP_TEST_TIMELINE`` names a
file. Prints, per xdist worker: when it finished after the first test started, its busy
seconds, and its slowest modules (set-up, call and tear-down summed); then the last tests
each worker ran. A worker that finishes well before the other is work the scheduler could
have moved. Test ids and seconds only.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("timeline", type=Path)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    rows = [json.loads(line) for line in args.timeline.read_text().splitlines() if line]
    rows = [r for r in rows if r["start"] is not None and r["stop"] is not None]
    t0 = min(r["start"] for r in rows)
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append(r)
    for worker, mine in sorted(by_worker.items()):
        end = max(r["stop"] for r in mine) - t0
        busy = sum(r["stop"] - r["start"] for r in mine)
        modules: dict[str, float] = defaultdict(float)
        for r in mine:
            modules[r["test"].split("::", 1)[0]] += r["stop"] - r["start"]
        print(f"{worker}: finished at {end:.0f} s, busy {busy:.0f} s, "
              f"{len({r['test'] for r in mine})} tests")
        for module, secs in sorted(modules.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {secs:7.1f} s  {module}")
        last = sorted(mine, key=lambda r: r["stop"])[-5:]
        print("  last: " + "; ".join(f"{r['test']} ({r['phase']}, until "
                                     f"{r['stop'] - t0:.0f} s)" for r in last))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
