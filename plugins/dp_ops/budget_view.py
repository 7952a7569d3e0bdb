"""What the "Privacy budget" view of the Airflow UI shows, computed from the ledger and the
published releases (no Airflow here: :mod:`dp_ops.airflow.budget_plugin` serves it).

Per report: the composed epsilon per user-day of every date against the cap recorded in
the ledger (the same totals as ``python -m dp_ops ledger``: :meth:`Ledger.totals`), the
headroom, the dates above a normal run, every spend grouped by date, kind, run and reason,
and the release history with each release's maximum epsilon, suppression and gate
outcome. Nothing here reads a private file: the ledger holds epsilons and ids, the
manifests only public figures.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import _EPS_TOLERANCE, Ledger, Spend


@dataclass(frozen=True)
class DateBudget:
    day: date
    spent: float
    cap: float
    normal_run: float

    @property
    def headroom(self) -> float:
        return self.cap - self.spent

    @property
    def above_normal(self) -> bool:
        return self.spent > self.normal_run + _EPS_TOLERANCE


@dataclass(frozen=True)
class SpendGroup:
    """The spends of one date by one run, of one kind and reason."""

    day: date
    kind: str
    run_id: str
    reason: str
    method_version: str
    slots: int
    epsilon: float


@dataclass(frozen=True)
class ReleaseRow:
    release_id: str
    first_date: str
    last_date: str
    epsilon_max: float | None
    published_share: dict[str, float]
    gate_success: bool | None
    gate_evaluated: int | None
    latest: bool


@dataclass
class ReportBudget:
    report: str
    cap: float
    normal_run: float
    dates: list[DateBudget] = field(default_factory=list)
    spends: list[SpendGroup] = field(default_factory=list)
    releases: list[ReleaseRow] = field(default_factory=list)

    @property
    def totals(self) -> dict[str, float]:
        return {d.day.isoformat(): d.spent for d in self.dates}

    @property
    def above_normal(self) -> list[DateBudget]:
        return [d for d in self.dates if d.above_normal]


def group_spends(spends: Iterable[Spend]) -> list[SpendGroup]:
    groups: dict[tuple[date, str, str, str, str], list[float]] = {}
    for s in spends:
        key = (s.slot.day, s.kind, s.run_id, s.reason, s.method_version)
        groups.setdefault(key, []).append(s.epsilon)
    return [SpendGroup(day, kind, run_id, reason, version, len(eps), math.fsum(eps))
            for (day, kind, run_id, reason, version), eps in sorted(groups.items())]


def _shares(suppression: dict[str, Any]) -> dict[str, float]:
    """The published share of each kind of value a manifest reports (mobility: cells,
    symptoms: daily and weekly values)."""
    out: dict[str, float] = {}
    values = suppression.get("values")
    if isinstance(values, dict):
        for name, part in values.items():
            if isinstance(part, dict) and "published_share" in part:
                out[name] = float(part["published_share"])
    if "published_share" in suppression:
        out["values"] = float(suppression["published_share"])
    return out


def release_history(root: DataRoot, report: str) -> list[ReleaseRow]:
    """Every release of ``report`` under ``published/<report>/releases``, newest first."""
    base = root.root / "published" / report
    releases = base / "releases"
    if not releases.is_dir():
        return []
    latest = (base / "latest").resolve().name if (base / "latest").exists() else None
    rows = []
    for path in sorted(releases.iterdir(), reverse=True):
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            continue
        m = json.loads(manifest_path.read_text())
        gate = m.get("gate") or {}
        rows.append(ReleaseRow(
            release_id=path.name, first_date=str(m.get("first_date", "")),
            last_date=str(m.get("last_date", "")),
            epsilon_max=(m.get("epsilon") or {}).get("per_user_day_max"),
            published_share=_shares(m.get("suppression") or {}),
            gate_success=gate.get("success"), gate_evaluated=gate.get("evaluated"),
            latest=path.name == latest))
    return rows


def report_budget(root: DataRoot, ledger: Ledger, report: str, *, cap: float,
                  normal_run: float) -> ReportBudget:
    """``cap``: the report's configured cap, used only when the ledger has not recorded one
    yet (before its first spend)."""
    policy = ledger.policy(report)
    cap = policy.cap if policy is not None else cap
    totals = ledger.totals(report)
    out = ReportBudget(report=report, cap=cap, normal_run=normal_run)
    out.dates = [DateBudget(day, spent, cap, normal_run) for (_, day), spent in totals.items()]
    out.spends = group_spends(ledger.spends(report))
    out.releases = release_history(root, report)
    return out


def to_json(budgets: Sequence[ReportBudget]) -> dict[str, Any]:
    def default(value: Any) -> Any:
        if isinstance(value, date):
            return value.isoformat()
        raise TypeError(type(value).__name__)

    out = {}
    for b in budgets:
        out[b.report] = json.loads(json.dumps({
            "cap": b.cap, "normal_run": b.normal_run, "totals": b.totals,
            "above_normal": [d.day.isoformat() for d in b.above_normal],
            "headroom_min": min((d.headroom for d in b.dates), default=b.cap),
            "spends": [asdict(s) for s in b.spends],
            "releases": [asdict(r) for r in b.releases]}, default=default))
    return out


# ------------------------------------------------------------------------------ HTML --
def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _chart(b: ReportBudget, width: int = 900, height: int = 180) -> str:
    """Composed epsilon per date as bars against the cap (a dashed line) and a normal
    run (a dotted line); bars above a normal run in amber, over the cap in red."""
    if not b.dates:
        return "<p class='muted'>No spends yet.</p>"
    top = max(b.cap, max(d.spent for d in b.dates)) * 1.08
    n = len(b.dates)
    bar = width / n
    pad = 0.15 * bar if bar > 4 else 0.0

    def y(value: float) -> float:
        return height - value / top * height

    parts = [f"<svg viewBox='0 0 {width} {height + 18}' class='chart' role='img' "
             f"aria-label='composed epsilon per date, {_e(b.report)}'>"]
    for i, d in enumerate(b.dates):
        colour = ("#c0392b" if d.spent > d.cap + _EPS_TOLERANCE
                  else "#e67e22" if d.above_normal else "#2e86c1")
        parts.append(f"<rect x='{i * bar + pad:.2f}' y='{y(d.spent):.2f}' "
                     f"width='{max(bar - 2 * pad, 0.5):.2f}' "
                     f"height='{height - y(d.spent):.2f}' fill='{colour}'>"
                     f"<title>{d.day}: {d.spent:.4f} of {d.cap:.4f} (headroom "
                     f"{d.headroom:.4f})</title></rect>")
    parts.append(f"<line x1='0' x2='{width}' y1='{y(b.cap):.2f}' y2='{y(b.cap):.2f}' "
                 "stroke='#c0392b' stroke-dasharray='6 4'/>")
    parts.append(f"<line x1='0' x2='{width}' y1='{y(b.normal_run):.2f}' "
                 f"y2='{y(b.normal_run):.2f}' stroke='#555' stroke-dasharray='2 3'/>")
    parts.append(f"<text x='4' y='{max(y(b.cap) - 4, 10):.2f}' class='lbl'>cap "
                 f"{b.cap:.4f}</text>")
    parts.append(f"<text x='4' y='{height + 14}' class='lbl'>{b.dates[0].day}</text>")
    parts.append(f"<text x='{width - 4}' y='{height + 14}' class='lbl' "
                 f"text-anchor='end'>{b.dates[-1].day}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _report_section(b: ReportBudget, links: dict[str, str]) -> str:
    tight = min(b.dates, key=lambda d: d.headroom, default=None)
    cards = [("dates with spends", str(len(b.dates))),
             ("cap per user-day", f"{b.cap:.4f}"),
             ("a normal run", f"{b.normal_run:.4f}"),
             ("most spent on a date", f"{max((d.spent for d in b.dates), default=0):.4f}"),
             ("least headroom", f"{tight.headroom:.4f} ({tight.day})" if tight else "-"),
             ("dates above a normal run", str(len(b.above_normal)))]
    out = [f"<section id='{_e(b.report)}'><h2>{_e(b.report)}</h2>",
           "<div class='cards'>" + "".join(
               f"<div class='card'><b>{_e(v)}</b><span>{_e(k)}</span></div>"
               for k, v in cards) + "</div>", _chart(b)]
    if b.above_normal:
        out.append("<h3>Dates above a normal run</h3>")
        out.append(_table(["date", "spent", "normal run", "headroom"], (
            (_e(d.day), f"{d.spent:.4f}", f"{d.normal_run:.4f}", f"{d.headroom:.4f}")
            for d in b.above_normal)))
    out.append("<h3>Spends</h3><p class='muted'>Every ledger spend, grouped by date, kind, "
               "run and reason (a daily run spends one slot per level and metric group).</p>")
    out.append(_table(["date", "kind", "slots", "epsilon", "run id", "reason", "method"], (
        (_e(s.day), _e(s.kind), s.slots, f"{s.epsilon:.4f}", f"<code>{_e(s.run_id)}</code>",
         _e(s.reason), _e(s.method_version)) for s in b.spends), "spends"))
    out.append("<h3>Releases</h3>")
    release_link = links.get("release", "")
    docs_link = links.get("data_docs", "")
    out.append(_table(
        ["release", "dates", "max epsilon per user-day", "published share", "gate"],
        ((f"<a href='{_e(release_link)}'>{_e(r.release_id)}</a> (latest)"
          if r.latest and release_link else _e(r.release_id),
          f"{_e(r.first_date)}..{_e(r.last_date)}",
          "-" if r.epsilon_max is None else f"{r.epsilon_max:.4f}",
          ", ".join(f"{_e(k)} {v:.2%}" for k, v in sorted(r.published_share.items())),
          ("passed" if r.gate_success else "FAILED" if r.gate_success is False else "-")
          + (f" ({r.gate_evaluated} expectations)" if r.gate_evaluated else ""))
         for r in b.releases)))
    if docs_link:
        out.append(f"<p><a href='{_e(docs_link)}'>Great Expectations Data Docs</a></p>")
    out.append("</section>")
    return "".join(out)


PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.4rem} h2{margin-top:2rem;border-bottom:1px solid #ddd}
.cards{display:flex;flex-wrap:wrap;gap:.6rem;margin:.8rem 0}
.card{border:1px solid #ddd;border-radius:6px;padding:.5rem .8rem;min-width:9rem}
.card b{display:block;font-size:1.15rem}.card span{color:#666;font-size:.8rem}
.chart{width:100%;max-width:900px;height:auto;border:1px solid #eee}
.lbl{font-size:11px;fill:#444}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left}
th{background:#f5f5f5}.muted{color:#666;font-size:.85rem}
table.spends{max-height:30rem;display:block;overflow:auto}
"""


def render_page(budgets: Sequence[ReportBudget], links: dict[str, dict[str, str]],
                ledger_check: str) -> str:
    nav = " · ".join(f"<a href='#{_e(b.report)}'>{_e(b.report)}</a>" for b in budgets)
    body = "".join(_report_section(b, links.get(b.report, {})) for b in budgets)
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<title>Privacy budget</title>"
            f"<style>{PAGE_STYLE}</style></head><body><h1>Privacy budget</h1>"
            f"<p class='muted'>Composed epsilon per user-day of each date (basic "
            f"composition over metrics and levels, delta = 0) from the ledger; "
            f"{_e(ledger_check)}. {nav}</p>{body}</body></html>")


def data_docs_index(root: DataRoot) -> Path | None:
    """The Great Expectations Data Docs site of the data root, if it was built."""
    candidates = sorted(root.root.glob("gx/**/data_docs/local_site/index.html"))
    return candidates[0] if candidates else None
