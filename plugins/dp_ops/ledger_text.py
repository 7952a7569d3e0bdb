"""The ledger as text for the command line (``python -m dp_ops ledger``): the spends one
by one, or per report, date, level and metric with the composed epsilon per user-day of
each date against the report's cap. Reads :class:`~dp_ops.privacy.ledger.Spend` values
only; the ledger itself knows no formatting."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date

from dp_ops.privacy.ledger import EPS_TOLERANCE, Spend, date_range_label


def format_ledger(spends: Sequence[Spend]) -> str:
    """A human-readable table of spends and the composed epsilon per user-day."""
    if not spends:
        return "(no spends)"
    lines = [f"{'id':>6} {'report':<10} {'date':<10} {'lvl':>3} {'metric':<18} "
             f"{'scope':<12} {'gen':>3} {'epsilon':>8} {'kind':<13} {'version':<8} run_id"]
    per_day: dict[tuple[str, date], list[float]] = {}
    for s in spends:
        lines.append(f"{s.id:>6} {s.slot.report:<10} {s.slot.day.isoformat():<10} "
                     f"{s.slot.level:>3} {s.slot.metric:<18} {s.slot.region_scope:<12} "
                     f"{s.generation:>3} {s.epsilon:>8.4f} {s.kind:<13} "
                     f"{s.method_version:<8} {s.run_id}")
        per_day.setdefault((s.slot.report, s.slot.day), []).append(s.epsilon)
    lines.append("")
    lines.append("composed epsilon per user-day (basic composition over metrics and levels):")
    for (report, day), eps in sorted(per_day.items()):
        lines.append(f"  {report:<10} {day.isoformat()}  {math.fsum(eps):.4f}  "
                     f"({len(eps)} spends)")
    return "\n".join(lines)


def format_ledger_summary(spends: Sequence[Spend],
                          caps: dict[str, float] | None = None) -> str:
    """What was spent per report, date, level and metric, and the composed epsilon per
    user-day of each date against the report's cap. Consecutive dates with the same
    spends are shown as one range, so a 91-day backfill stays a few lines."""
    if not spends:
        return "(no spends)"
    caps = caps or {}
    # per report and date: the (level, metric, scope, kind) -> epsilon breakdown
    breakdown: dict[tuple[str, date], dict[tuple[int, str, str, str], list[float]]] = {}
    for s in spends:
        key = (s.slot.level, s.slot.metric, s.slot.region_scope, s.kind)
        breakdown.setdefault((s.slot.report, s.slot.day), {}).setdefault(key, []).append(
            s.epsilon)
    lines = ["spent per report, date, level and metric (epsilon per user-day of the date):",
             f"  {'report':<10} {'dates':<22} {'lvl':>3} {'metric':<18} {'scope':<12} "
             f"{'kind':<13} {'spends':>6} {'epsilon':>8}"]
    totals: list[str] = []
    for report in sorted({r for r, _ in breakdown}):
        days = sorted(d for r, d in breakdown if r == report)
        # group consecutive dates whose breakdown is identical
        groups: list[tuple[date, date, dict[tuple[int, str, str, str], list[float]]]] = []
        for d in days:
            rows = breakdown[(report, d)]
            if (groups and (d - groups[-1][1]).days == 1
                    and _signature(groups[-1][2]) == _signature(rows)):
                groups[-1] = (groups[-1][0], d, groups[-1][2])
            else:
                groups.append((d, d, rows))
        cap = caps.get(report)
        for first, last, rows in groups:
            label = date_range_label(first, last)
            for (level, metric, scope, kind), eps in sorted(rows.items()):
                lines.append(f"  {report:<10} {label:<22} {level:>3} {metric:<18} {scope:<12} "
                             f"{kind:<13} {len(eps):>6} {math.fsum(eps):>8.4f}")
            total = math.fsum(math.fsum(e) for e in rows.values())
            # at the cap within float rounding: no headroom, printed as 0.0000, not -0.0000
            headroom = 0.0 if cap is None or abs(cap - total) <= EPS_TOLERANCE else cap - total
            cap_text = "" if cap is None else (
                f"  cap {cap:.4f}, headroom {headroom:.4f}"
                + ("  OVER THE CAP" if total > cap + EPS_TOLERANCE else ""))
            totals.append(f"  {report:<10} {label:<22} {total:>8.4f}{cap_text}")
    lines.append("")
    lines.append("composed epsilon per user-day (basic composition over metrics and levels; "
                 "delta = 0):")
    lines.extend(totals)
    return "\n".join(lines)


def _signature(rows: dict[tuple[int, str, str, str], list[float]]) -> tuple[object, ...]:
    return tuple(sorted((k, round(math.fsum(v), 12), len(v)) for k, v in rows.items()))
