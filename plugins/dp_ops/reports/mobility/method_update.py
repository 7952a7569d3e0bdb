r"""Method updates for the mobility report (SPEC section 4, the mobility paper's section 5).

When the metric computation changes from an ``effective_date`` (a new method version),
changes published against the frozen baseline would jump at that date. The baseline is
never recomputed; instead, for each group of metrics that share the update's effect, a
scaling factor ``s_n / s_g`` is estimated once, stored, and applied to the baseline of the
later days.

Grouping
--------
A group is ``(level, region_id, category, weekday)`` over the *comparison window*: the
``COMPARISON_WEEKS`` (4) whole weeks just before the effective date, so each group holds
the 4 days of one weekday. Weekday groups follow the baseline, which is per weekday, and
keep weekday-dependent effects of the change (parks at weekends) apart.

- ``s_g``: the sum over the group's days of the stored noisy metric (the published
  category: the sum of its noisy source cells). Post-processing, no budget.
- ``s_n``: the same sum recomputed with the new method from the bounded (true, private)
  aggregates of the window days, then noised. For each source cell of a chosen category
  (e.g. ``places_parks``) and each group, the 4-day sum of the recomputed cell gets one
  discrete Laplace draw with ``epsilon = method_update_fraction x cell_epsilon`` and the
  new method's per-cell sensitivity (``NewMethod.sensitivity``); ``s_n`` of a category is
  the sum of its cells' noisy sums.

Privacy of ``s_n`` (unit: one user-day). A user-day touches one day of the window, so it
changes each 4-day group sum by at most what it changes that day's cell: the cell's
sensitivity. At one level it touches at most as many cells of a ledger metric group as in
the daily noise (``MetricBudget.contributions``: 4 place pairs, 1 workplace region), so
the update costs every user-day of every window date, per level and metric group touched,
``method_update_fraction x`` the group's daily ledger epsilon (for places: 0.1 x 1.76 =
0.176; an upper bound when fewer place categories are chosen). That spend is reserved in
the ledger (kind ``method_update``, the new method version) on each window date before
anything is drawn; the cap (which holds headroom for one method update) refuses it
otherwise, and nothing is stored then.

Intervals. ``s_g`` and ``s_n`` each get a ``1 - alpha_f / 2`` interval from their noise
(union bound over their cells, ``alpha_f = (1 - interval_confidence) / 2``), so the factor
lies in ``[max(s_n - m_n, 0) / (s_g + m_g), (s_n + m_n) / (s_g - m_g)]`` with probability
``>= 1 - alpha_f`` (the upper end is infinite when ``s_g - m_g <= 0``). The report scales
the baseline's interval ends by the factor's interval ends and, for the scaled
categories, computes the day's metric interval at ``alpha / 2``: metric (1.25%), baseline
(2.5%) and factor (1.25%) keep the reliability rule's joint coverage at 95% (union bound).
That holds for one update in effect per category, which is what the cap's headroom
allows. The interval covers the window's true ratio; that the same ratio holds in the
baseline window is the paper's modelling assumption. A non-positive ``s_g`` or ``s_n``
gives a NaN factor, which suppresses the group's changes from the effective date.

Storage. One file per method version, ``baseline/mobility/method_updates/<version>.parquet``
(one row per group: keys, ``s_g``, ``s_n``, margins, ``factor``, its interval, the
effective date and what the update was), written first-writer-wins. A rerun reuses the
stored file and spends nothing; a rerun after a crash between the reservation and the
store reuses the reserved spends (the lost draw was never seen, so drawing again for the
paid spends costs nothing more). The baseline file is never touched.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.engine.files import store_first_wins
from dp_ops.errors import MethodUpdateError
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot, Spend, SpendRequest
from dp_ops.privacy.noise import add_discrete_laplace, discrete_laplace_margin, noise_generator
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.estimates import COUNT_CATEGORY_CELLS, cell_margins
from dp_ops.reports.mobility.noising import GROUP_CELLS, REPORT, load_noisy_cells
from dp_ops.steps.result import StepResult

COMPARISON_WEEKS = 4
KIND = "method_update"
GROUP_KEYS = ["level", "region_id", "category", "weekday"]
_VERSION_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

__all__ = ["COMPARISON_WEEKS", "GROUP_KEYS", "MethodUpdate", "MethodUpdateError",
           "NewMethod", "ScaledCounts", "apply_method_updates", "comparison_window",
           "group_sums", "plan_requests", "read_method_updates", "run_method_update",
           "scaling_factors", "updates_dir"]


class NewMethod(Protocol):
    """The new metric computation, applied to one day's bounded (true) cell aggregates."""

    def recompute(self, bounded: pd.DataFrame) -> pd.DataFrame:
        """Long cells (level, region_id, metric, value) under the new method."""
        ...

    def sensitivity(self, metric: str, old_sensitivity: int) -> int:
        """Most one user-day changes one recomputed cell (its integer unit)."""
        ...

    def describe(self) -> str:
        ...


@dataclass(frozen=True)
class ScaledCounts:
    """The demo's new method: the counts of some source cells are ``factor`` times the
    old method's (rounded to integers), everything else unchanged.

    A user-day moves an old count by at most ``s``, so the rounded scaled count moves by at
    most ``ceil(factor x s)``: that is the recomputed cell's sensitivity.
    """

    factors: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        for metric, factor in self.factors:
            if not (math.isfinite(factor) and factor > 0):
                raise MethodUpdateError(f"factor={factor!r} for {metric}: must be > 0")

    @classmethod
    def for_categories(cls, categories: Iterable[str], factor: float) -> ScaledCounts:
        cells = sorted({c for cat in categories for c in _category_cells(cat)})
        return cls(tuple((c, float(factor)) for c in cells))

    def _factor(self, metric: str) -> float:
        return dict(self.factors).get(metric, 1.0)

    def recompute(self, bounded: pd.DataFrame) -> pd.DataFrame:
        out = bounded[["level", "region_id", "metric", "value"]].copy()
        scale = out["metric"].map(lambda m: self._factor(str(m))).to_numpy(dtype=float)
        out["value"] = np.floor(out["value"].to_numpy(dtype=float) * scale + 0.5).astype(np.int64)
        return out

    def sensitivity(self, metric: str, old_sensitivity: int) -> int:
        return max(1, math.ceil(self._factor(metric) * old_sensitivity - 1e-12))

    def describe(self) -> str:
        return "scaled counts: " + ", ".join(f"{m} x {f:g}" for m, f in self.factors)


@dataclass(frozen=True)
class MethodUpdate:
    """An update request: the new version, from when, which published categories."""

    method_version: str
    effective_date: date
    categories: tuple[str, ...]
    method: NewMethod
    reason: str = ""

    def __post_init__(self) -> None:
        if not _VERSION_PATTERN.fullmatch(self.method_version):
            raise MethodUpdateError(f"method_version={self.method_version!r}: use 1-64 "
                                    "letters, digits, '.', '_' or '-'")
        if not self.categories:
            raise MethodUpdateError("categories=[]: name at least one published category")
        for cat in self.categories:
            _category_cells(cat)
        if len(set(self.categories)) != len(self.categories):
            raise MethodUpdateError(f"categories={list(self.categories)!r}: duplicates")

    @property
    def cells(self) -> tuple[str, ...]:
        return tuple(sorted({c for cat in self.categories for c in _category_cells(cat)}))


def _category_cells(category: str) -> tuple[str, ...]:
    if category not in COUNT_CATEGORY_CELLS:
        raise MethodUpdateError(
            f"category={category!r}: method updates scale count categories "
            f"{sorted(COUNT_CATEGORY_CELLS)} (residential is a ratio of two noisy values; "
            "not supported)")
    return COUNT_CATEGORY_CELLS[category]


def _category_size(cell: str) -> int:
    """How many source cells the published category of ``cell`` sums (categories are
    disjoint)."""
    for cells in COUNT_CATEGORY_CELLS.values():
        if cell in cells:
            return len(cells)
    raise KeyError(cell)


def _cell_group(cell: str) -> str:
    for group, cells in GROUP_CELLS.items():
        if cell in cells:
            return group
    raise KeyError(cell)


def comparison_window(effective_date: date) -> list[date]:
    """The ``COMPARISON_WEEKS`` whole weeks just before the effective date."""
    n = 7 * COMPARISON_WEEKS
    return [effective_date - timedelta(days=n - i) for i in range(n)]


def plan_requests(cfg: MobilityConfig, update: MethodUpdate) -> list[SpendRequest]:
    """One spend per window date, level and ledger metric group the chosen cells touch, at
    ``method_update_fraction`` of the group's daily ledger epsilon (module docstring)."""
    groups = sorted({_cell_group(c) for c in update.cells})
    return [SpendRequest(Slot(REPORT, day, level, group, ALL_REGIONS),
                         cfg.method_update_fraction * cfg.budget(group).epsilon)
            for day in comparison_window(update.effective_date)
            for level in cfg.levels for group in groups]


def group_sums(frames: dict[date, pd.DataFrame], value: str) -> pd.DataFrame:
    """Sum ``value`` of long cells (level, region_id, metric, ...) per (level, region_id,
    metric, weekday) over the given days."""
    parts = []
    for day, cells in frames.items():
        part = cells[["level", "region_id", "metric", value]].copy()
        part["weekday"] = day.weekday()
        parts.append(part)
    long = pd.concat(parts, ignore_index=True)
    long["level"] = long["level"].astype(np.int8)
    out = long.groupby(["level", "region_id", "metric", "weekday"], as_index=False)[value].sum()
    out["weekday"] = out["weekday"].astype(np.int8)
    return out


def _to_categories(sums: pd.DataFrame, categories: Sequence[str], value: str) -> pd.DataFrame:
    """Per-cell sums -> per published category sums (category = sum of its cells)."""
    parts = []
    for cat in categories:
        part = sums[sums["metric"].isin(COUNT_CATEGORY_CELLS[cat])]
        agg = part.groupby(["level", "region_id", "weekday"], as_index=False)[value].sum()
        agg["category"] = cat
        parts.append(agg)
    return pd.concat(parts, ignore_index=True)


def scaling_factors(s_g: pd.DataFrame, s_n: pd.DataFrame) -> pd.DataFrame:
    """Join ``s_g`` and ``s_n`` (with margins ``m_g``, ``m_n``) per group and form the
    factor and its interval; NaN factor when either sum is not positive."""
    out = s_g.merge(s_n, on=GROUP_KEYS, how="outer", validate="one_to_one")
    if out[["s_g", "s_n"]].isna().any().any():
        raise ValueError("s_g and s_n cover different groups")
    g, n = out["s_g"].to_numpy(dtype=float), out["s_n"].to_numpy(dtype=float)
    mg, mn = out["m_g"].to_numpy(dtype=float), out["m_n"].to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ok = (g > 0) & (n > 0)
        out["factor"] = np.where(ok, n / g, np.nan)
        out["factor_lo"] = np.where(ok, np.maximum(n - mn, 0) / (g + mg), np.nan)
        out["factor_hi"] = np.where(ok, np.where(g - mg > 0, (n + mn) / (g - mg), np.inf),
                                    np.nan)
    return out.sort_values(GROUP_KEYS).reset_index(drop=True)


def updates_dir(root: DataRoot) -> Path:
    return root.baseline_file(REPORT).parent / "method_updates"


def update_file(root: DataRoot, version: str) -> Path:
    return updates_dir(root) / f"{version}.parquet"


def read_method_updates(root: DataRoot) -> pd.DataFrame | None:
    """Every stored update's factors, or ``None`` when there are none."""
    files = sorted(updates_dir(root).glob("*.parquet")) if updates_dir(root).is_dir() else []
    if not files:
        return None
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def apply_method_updates(baseline: pd.DataFrame, updates: pd.DataFrame | None,
                         day: date) -> tuple[pd.DataFrame, frozenset[str]]:
    """The baseline for ``day``: every update in effect on ``day`` (effective date <= day)
    scales its groups' baseline by ``factor`` and interval ends by ``factor_lo`` and
    ``factor_hi``. Returns the scaled copy and the categories scaled; the stored baseline
    is not changed. Days before every effective date get the baseline as it is."""
    if updates is None or updates.empty:
        return baseline, frozenset()
    effective = pd.to_datetime(updates["effective_date"]).dt.date
    in_effect = updates[effective <= day].sort_values(["effective_date", "method_version"])
    if in_effect.empty:
        return baseline, frozenset()
    out = baseline.copy()
    for _, upd in in_effect.groupby(["effective_date", "method_version"], sort=True):
        cols = GROUP_KEYS + ["factor", "factor_lo", "factor_hi"]
        factors = upd[cols].astype({"level": np.int8, "weekday": np.int8})
        merged = out.merge(factors, on=GROUP_KEYS, how="left", validate="one_to_one")
        hit = merged["category"].isin(set(upd["category"])).to_numpy()
        for col, f in (("baseline", "factor"), ("baseline_lo", "factor_lo"),
                       ("baseline_hi", "factor_hi")):
            scaled = merged[col].to_numpy(dtype=float) * merged[f].to_numpy(dtype=float)
            # a group of a scaled category missing from the file has no factor: NaN
            out[col] = np.where(hit, scaled, merged[col].to_numpy(dtype=float))
    return out, frozenset(str(c) for c in in_effect["category"].unique())


# -- the step ---------------------------------------------------------------------------

def _noisy_s_g(root: DataRoot, ledger: Ledger, window: list[date], update: MethodUpdate,
               alpha: float) -> pd.DataFrame:
    """Per group: s_g from the stored noisy cells (current values) and its margin m_g."""
    frames = {}
    for day in window:
        cells = load_noisy_cells(root, day, ledger.spends(REPORT, day))
        frames[day] = cells[cells["metric"].isin(update.cells)].copy()
    for day, cells in frames.items():
        # a category's s_g sums len(window) x (its cell count) noisy cells
        per_cell_alpha = cells["metric"].map(
            lambda m: alpha / (len(window) * _category_size(str(m))))
        cells["margin"] = cell_margins(cells, per_cell_alpha.to_numpy(dtype=float))
        frames[day] = cells
    values = group_sums(frames, "noisy_value")
    margins = group_sums(frames, "margin")
    sums = values.merge(margins, on=["level", "region_id", "metric", "weekday"])
    out = _to_categories(sums.rename(columns={"noisy_value": "s_g"}), update.categories, "s_g")
    m = _to_categories(sums.rename(columns={"margin": "m_g"}), update.categories, "m_g")
    return out.merge(m, on=GROUP_KEYS)


def _noisy_s_n(root: DataRoot, cfg: MobilityConfig, window: list[date],
               update: MethodUpdate, regions: pd.DataFrame, alpha: float,
               rng: np.random.Generator) -> pd.DataFrame:
    """Per group: s_n, the new method's 4-day sums from the bounded aggregates, noised once
    per (cell, group) over the whole public domain (zeros included), and its margin m_n."""
    frames = {}
    for day in window:
        path = root.bounded_file(REPORT, day)
        if not path.is_file():
            raise FileNotFoundError(f"no bounded aggregates for {day} at {path}: rerun the "
                                    "bound step for the comparison window first")
        bounded = pq.read_table(path).to_pandas()
        new = update.method.recompute(bounded)
        frames[day] = new[new["metric"].isin(update.cells)]
    true_sums = group_sums(frames, "value")
    domain = regions.loc[regions["level"].isin(cfg.levels), ["level", "region_id"]].copy()
    domain["level"] = domain["level"].astype(np.int8)
    domain = (domain.merge(pd.DataFrame({"metric": list(update.cells)}), how="cross")
              .merge(pd.DataFrame({"weekday": np.arange(7, dtype=np.int8)}), how="cross"))
    cells = domain.merge(true_sums, on=["level", "region_id", "metric", "weekday"], how="left")
    del true_sums, frames
    cells["value"] = cells["value"].fillna(0).astype(np.int64)
    noisy = np.empty(len(cells), dtype=np.int64)
    margin = np.empty(len(cells), dtype=np.int64)
    for cell in update.cells:
        budget = cfg.budget(_cell_group(cell))
        eps = cfg.method_update_fraction * budget.cell_epsilon
        sens = update.method.sensitivity(cell, budget.sensitivity)
        mask = (cells["metric"] == cell).to_numpy()
        noisy[mask] = add_discrete_laplace(cells.loc[mask, "value"].to_numpy(), epsilon=eps,
                                           sensitivity=sens, rng=rng)
        margin[mask] = discrete_laplace_margin(alpha / _category_size(cell), epsilon=eps,
                                               sensitivity=sens)
    cells = cells.drop(columns=["value"])
    cells["s_n"] = noisy
    cells["m_n"] = margin
    out = _to_categories(cells, update.categories, "s_n")
    return out.merge(_to_categories(cells, update.categories, "m_n"), on=GROUP_KEYS)


def _update_table(update: MethodUpdate, window: list[date], factors: pd.DataFrame,
                  spends: Sequence[Spend]) -> pa.Table:
    df = factors.copy()
    df.insert(0, "method_version", update.method_version)
    df.insert(1, "effective_date", update.effective_date.isoformat())
    df["categories"] = ",".join(update.categories)
    df["method"] = update.method.describe()
    df["window_start"] = window[0].isoformat()
    df["window_end"] = window[-1].isoformat()
    df["spend_ids"] = ",".join(str(s.id) for s in spends)
    df["level"] = df["level"].astype(np.int8)
    df["weekday"] = df["weekday"].astype(np.int8)
    for col in ("s_g", "s_n", "m_g", "m_n"):
        df[col] = df[col].astype(np.int64)
    return pa.Table.from_pandas(df, preserve_index=False)


def _check_stored(path: Path, update: MethodUpdate) -> None:
    stored = pq.read_table(path, columns=["effective_date", "categories", "method"]).to_pandas()
    want = (update.effective_date.isoformat(), ",".join(update.categories),
            update.method.describe())
    have = tuple(stored.iloc[0]) if len(stored) else ()
    if have != want:
        raise MethodUpdateError(
            f"method_version={update.method_version!r} is already stored at {path} with "
            f"effective_date, categories, method = {have}, not {want}; use a new version")


def _reserved_before(ledger: Ledger, cfg: MobilityConfig, update: MethodUpdate,
                     requests: list[SpendRequest]) -> list[Spend] | None:
    """Spends of this version already in the ledger (a crash before the store), if any."""
    found = [s for day in comparison_window(update.effective_date)
             for s in ledger.spends(REPORT, day)
             if s.kind == KIND and s.method_version == update.method_version]
    if not found:
        return None
    if sorted(s.slot for s in found) != sorted(r.slot for r in requests):
        raise MethodUpdateError(
            f"method_version={update.method_version!r} already has {len(found)} ledger "
            "spend(s) for other slots (another effective date or categories); use a new "
            "version")
    return found


def run_method_update(root: DataRoot, cfg: MobilityConfig, update: MethodUpdate, *,
                      run_id: str, ledger_url: str) -> StepResult:
    """Reserve (or reuse), compute and store the scaling factors of ``update``, then
    re-report the days from the effective date that already have report rows."""
    from dp_ops.regions import read_regions
    from dp_ops.reports.mobility.report import report_day

    if not update.reason.strip():
        raise MethodUpdateError("reason='': say why the method changed; it is recorded in "
                                "the ledger")
    window = comparison_window(update.effective_date)
    if window[0] < cfg.first_metric_date:
        raise MethodUpdateError(
            f"effective_date={update.effective_date}: its comparison window starts "
            f"{window[0]}, before the first metric date {cfg.first_metric_date}")
    target = update_file(root, update.method_version)
    spent_now = 0.0
    if target.exists():
        _check_stored(target, update)
        state = "reused the stored factors"
    else:
        requests = plan_requests(cfg, update)
        alpha = (1 - cfg.interval_confidence) / 2 / 2  # s_g and s_n each (docstring)
        ledger = Ledger(ledger_url)
        try:
            # s_g reads only stored noisy values: check them before spending anything
            s_g = _noisy_s_g(root, ledger, window, update, alpha)
            missing = [d for d in window if not root.bounded_file(REPORT, d).is_file()]
            if missing:
                raise FileNotFoundError(
                    f"no bounded aggregates for {len(missing)} comparison-window day(s) "
                    f"(first {missing[0]}): rerun the bound step for them first")
            spends = _reserved_before(ledger, cfg, update, requests)
            if spends is None:
                reservation = ledger.reserve(
                    requests, run_id=run_id, kind=KIND, cap=cfg.cap,
                    method_version=update.method_version, reason=update.reason)
                spends = list(reservation.spends)
                spent_now = reservation.spent_now
        finally:
            ledger.dispose()
        regions = read_regions(root.regions_csv)
        s_n = _noisy_s_n(root, cfg, window, update, regions, alpha, noise_generator())
        table = _update_table(update, window, scaling_factors(s_g, s_n), spends)
        won = store_first_wins(table, target)
        state = "stored new factors" if won else "found factors another run stored first"
    rereported = 0
    day = max(update.effective_date, cfg.first_public_date)
    while root.report_file(REPORT, day).is_file():
        report_day(root, cfg, day, ledger_url=ledger_url)
        rereported += 1
        day += timedelta(days=1)
    return StepResult(
        f"method update {update.method_version} from {update.effective_date} "
        f"({', '.join(update.categories)}): {state} at {target}; spent epsilon "
        f"{spent_now / len(window):.4f} per user-day on each of the {len(window)} window "
        f"days {window[0]}..{window[-1]}; re-reported {rereported} day(s)",
        (str(target),))
