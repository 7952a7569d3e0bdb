"""``python -m dp_ops prune``: remove private intermediate files past their retention.

What it removes: the per-date partitions of ``work/clean`` (clean raw rows),
``work/bounded`` (true aggregates) and ``quarantine`` (rejected raw rows) whose newest file
was written more than ``retention_days`` ago (default ``RETENTION_DAYS``, 30). Nothing
else: never ``raw/`` (the input, owned by whoever delivers it), ``noise/`` (the stored
noisy values the ledger paid for), the ledger, the baseline, reports or releases.

Why that is safe: every pruned file can be rebuilt from ``raw/``, and every step that
needs one rebuilds it first (a rerun of a day runs ``ingest`` and ``bound_contributions``
again; their output is the same). What needs them later: a method update reads the
bounded aggregates of its 4-week comparison window (``run_method_update`` names the days
to re-bound when they are gone); the demo's evaluation reads bounded aggregates. The
quarantine is kept for operators to read the rejected rows of recent days.

A dry run is the default: it lists what would go and how much; ``--apply`` removes it.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from dp_ops.layout import DataRoot

RETENTION_DAYS = 30


@dataclass(frozen=True)
class Candidate:
    path: Path
    age_days: float
    bytes: int


def private_partitions(root: DataRoot) -> list[Path]:
    """Every ``date=...`` partition under the prunable private areas."""
    out: list[Path] = []
    for area in (root.root / "work" / "clean", root.root / "work" / "bounded",
                 root.root / "quarantine"):
        if area.is_dir():
            out.extend(sorted(p for p in area.glob("*/date=*") if p.is_dir()))
    return out


def candidates(root: DataRoot, retention_days: float, now: float | None = None
               ) -> list[Candidate]:
    """Partitions whose newest file is older than ``retention_days``."""
    if not retention_days >= 0:
        raise ValueError(f"retention_days={retention_days!r}: must be >= 0")
    now = time.time() if now is None else now
    out = []
    for part in private_partitions(root):
        files = [f for f in part.rglob("*") if f.is_file()]
        newest = max((f.stat().st_mtime for f in files), default=part.stat().st_mtime)
        age = (now - newest) / 86400
        if age > retention_days:
            out.append(Candidate(part, age, sum(f.stat().st_size for f in files)))
    return out


def prune(root: DataRoot, retention_days: float = RETENTION_DAYS, *, apply: bool = False,
          now: float | None = None) -> list[Candidate]:
    """The candidates; removed when ``apply``."""
    found = candidates(root, retention_days, now)
    if apply:
        for c in found:
            shutil.rmtree(c.path)
    return found


def describe(found: list[Candidate], root: DataRoot, retention_days: float,
             applied: bool) -> str:
    total = sum(c.bytes for c in found)
    verb = "removed" if applied else "would remove (dry run; --apply to remove)"
    lines = [f"{verb} {len(found)} partition(s), {total / 1e6:.1f} MB, of work/clean, "
             f"work/bounded and quarantine written more than {retention_days:g} days ago"]
    for c in found:
        lines.append(f"  {c.path.relative_to(root.root)}  ({c.age_days:.0f} days, "
                     f"{c.bytes / 1e6:.2f} MB)")
    return "\n".join(lines)
