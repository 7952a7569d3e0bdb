"""Method updates for the mobility report (docs/design.md, Mobility report; the mobility
paper's section 5).

When the metric computation changes from an ``effective_date`` (a new method version),
changes published against the frozen baseline would jump at that date. The baseline is
never recomputed; instead, for each group ``(level, region_id, category, weekday)`` of the
``COMPARISON_WEEKS`` whole weeks before the effective date, a scaling factor ``s_n / s_g``
is estimated once (``s_g`` from the stored noisy metric, ``s_n`` from the new method's
recomputation of the bounded aggregates, noised at ``method_update_fraction`` of the cell
epsilon), stored, and applied to the baseline of the later days. The grouping, the
privacy of ``s_n`` and the factor's interval are derived in docs/design.md, Derivations."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache
from typing import Protocol

import numpy as np
import pandas as pd

from dp_ops.api import DataRoot
from dp_ops.errors import MethodUpdateError
from dp_ops.privacy.inference import RatioTest, discrete_laplace_sum, ratio_edges, ratio_test
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot, SpendRequest
from dp_ops.reports.mobility.config import GROUP_CELLS, REPORT, MobilityConfig
from dp_ops.reports.mobility.estimates import (
    COUNT_CATEGORY_CELLS,
    RATIO_HIGHEST,
    RATIO_START,
    NoiseKey,
    noise_law_cells,
)
from dp_ops.steps.derived import read_recorded

COMPARISON_WEEKS = 4
# The factor's share of the rule's probability (module docstring, Intervals).
FACTOR_SHARE = 0.25
KIND = "method_update"
GROUP_KEYS = ["level", "region_id", "category", "weekday"]
_VERSION_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

__all__ = ["COMPARISON_WEEKS", "FACTOR_SHARE", "GROUP_KEYS", "KIND", "MethodUpdate", "NewMethod",
           "apply_method_updates", "category_cells", "category_size", "cell_group",
           "comparison_window", "group_sums", "plan_requests", "read_method_updates",
           "scaling_factors", "to_categories"]


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
            category_cells(cat)
        if len(set(self.categories)) != len(self.categories):
            raise MethodUpdateError(f"categories={list(self.categories)!r}: duplicates")

    @property
    def cells(self) -> tuple[str, ...]:
        return tuple(sorted({c for cat in self.categories for c in category_cells(cat)}))


def category_cells(category: str) -> tuple[str, ...]:
    if category not in COUNT_CATEGORY_CELLS:
        raise MethodUpdateError(
            f"category={category!r}: method updates scale count categories "
            f"{sorted(COUNT_CATEGORY_CELLS)} (residential is a ratio of two noisy values; "
            "not supported)")
    return COUNT_CATEGORY_CELLS[category]


def category_size(cell: str) -> int:
    """How many source cells the published category of ``cell`` sums (categories are
    disjoint)."""
    for cells in COUNT_CATEGORY_CELLS.values():
        if cell in cells:
            return len(cells)
    raise KeyError(cell)


def cell_group(cell: str) -> str:
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
    ``method_update_fraction`` of the group's daily budget (module docstring): the s_n
    draws are built from these requests (:func:`update_budgets`), so they draw what is
    booked."""
    groups = sorted({cell_group(c) for c in update.cells})
    return [SpendRequest(Slot(REPORT, day, level, group, ALL_REGIONS), cfg.budget(group),
                         cfg.method_update_fraction)
            for day in comparison_window(update.effective_date)
            for level in cfg.levels for group in groups]


def update_budgets(requests: Sequence[SpendRequest]) -> dict[str, SpendRequest]:
    """Per ledger metric group, the request its s_n draws are parameterised from (every
    window slot of a group carries the same budget and fraction)."""
    by_group: dict[str, SpendRequest] = {}
    for r in requests:
        first = by_group.setdefault(r.slot.metric, r)
        if (first.budget, first.fraction) != (r.budget, r.fraction):
            raise ValueError(f"metric group {r.slot.metric!r}: the method update's slots "
                             "carry different budgets")
    return by_group


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


def to_categories(sums: pd.DataFrame, categories: Sequence[str], value: str) -> pd.DataFrame:
    """Per-cell sums -> per published category sums (category = sum of its cells)."""
    parts = []
    for cat in categories:
        part = sums[sums["metric"].isin(COUNT_CATEGORY_CELLS[cat])]
        agg = part.groupby(["level", "region_id", "weekday"], as_index=False)[value].sum()
        agg["category"] = cat
        parts.append(agg)
    return pd.concat(parts, ignore_index=True)


@lru_cache(maxsize=64)
def factor_test(n_key: NoiseKey, g_key: NoiseKey, alpha: float) -> RatioTest:
    """The level-``alpha`` test of a factor ``s_n / s_g`` with these noise keys (module
    docstring, Intervals); built once per key, as it depends on nothing else."""
    return ratio_test(discrete_laplace_sum(noise_law_cells(n_key)),
                      discrete_laplace_sum(noise_law_cells(g_key)), alpha=alpha,
                      edges=ratio_edges(0.0, RATIO_START, RATIO_HIGHEST), bounded=False)


def scaling_factors(s_g: pd.DataFrame, s_n: pd.DataFrame, *, alpha: float) -> pd.DataFrame:
    """Join ``s_g`` and ``s_n`` per group and form the factor ``s_n / s_g`` and its
    level-``alpha`` hull (module docstring, Intervals); NaN factor when either sum is not
    positive.

    ``s_g`` columns: GROUP_KEYS, ``s_g`` and its noise key ``g_cells``, ``g_epsilon``,
    ``g_sensitivity``; ``s_n`` likewise with ``n_``.
    """
    out = s_g.merge(s_n, on=GROUP_KEYS, how="outer", validate="one_to_one")
    if out[["s_g", "s_n"]].isna().any().any():
        raise ValueError("s_g and s_n cover different groups")
    g, n = out["s_g"].to_numpy(dtype=float), out["s_n"].to_numpy(dtype=float)
    ok = (g > 0) & (n > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["factor"] = np.where(ok, n / g, np.nan)
    lo = np.full(len(out), np.nan)
    hi = np.full(len(out), np.nan)
    key_cols = ["n_cells", "n_epsilon", "n_sensitivity", "g_cells", "g_epsilon",
                "g_sensitivity"]
    live = np.flatnonzero(ok)
    for key, idx in out.iloc[live].groupby(key_cols, sort=False).indices.items():
        rows = live[idx]
        n_key = (int(key[0]), float(key[1]), int(key[2]))
        g_key = (int(key[3]), float(key[4]), int(key[5]))
        lo[rows], hi[rows] = factor_test(n_key, g_key, alpha).hull(n[rows], g[rows])
    empty = ~(lo <= hi)
    out["factor_lo"] = np.where(ok & ~empty, np.maximum(lo, 0.0), np.nan)
    out["factor_hi"] = np.where(ok & ~empty, hi, np.nan)
    out["factor_alpha"] = alpha
    return out.sort_values(GROUP_KEYS).reset_index(drop=True)


def method_update_name(version: str) -> str:
    """A method update's name in the ledger's derived_state."""
    return f"method_update/{version}"


def read_method_updates(root: DataRoot, ledger: Ledger) -> pd.DataFrame | None:
    """Every stored update's factors, or ``None`` when there are none. Each file is
    verified against the sha256 the ledger recorded for it; a file with no record, or a
    recorded one that is missing, is refused (DerivedStateTampered)."""
    updates = root.method_updates_dir(REPORT)
    files = sorted(updates.glob("*.parquet")) if updates.is_dir() else []
    recorded = {n.removeprefix("method_update/") for n in ledger.derived_names(REPORT)
                if n.startswith("method_update/")}
    tables = []
    for version in sorted(recorded | {f.stem for f in files}):
        table = read_recorded(ledger, REPORT, method_update_name(version),
                              root.method_update_file(REPORT, version))
        if table is not None:
            tables.append(table.to_pandas())
    if not tables:
        return None
    return pd.concat(tables, ignore_index=True)


def apply_method_updates(baseline: pd.DataFrame, updates: pd.DataFrame | None,
                         day: date) -> pd.DataFrame:
    """The baseline for ``day`` with the factor columns the report needs: ``factor``,
    ``factor_lo``, ``factor_hi`` (products over the updates in effect on ``day``, i.e.
    effective date <= day) and ``factor_alpha`` (their summed share of the rule's
    probability); 1, 1, 1, 0 where no update is in effect. The stored baseline is not
    changed. A group of a scaled category missing from an update's file gets NaN (its
    changes are suppressed)."""
    out = baseline.copy()
    out["factor"] = 1.0
    out["factor_lo"] = 1.0
    out["factor_hi"] = 1.0
    out["factor_alpha"] = 0.0
    if updates is None or updates.empty:
        return out
    effective = pd.to_datetime(updates["effective_date"]).dt.date
    in_effect = updates[effective <= day].sort_values(["effective_date", "method_version"])
    for _, upd in in_effect.groupby(["effective_date", "method_version"], sort=True):
        cols = GROUP_KEYS + ["factor", "factor_lo", "factor_hi", "factor_alpha"]
        factors = upd[cols].astype({"level": np.int8, "weekday": np.int8}).rename(
            columns={c: f"new_{c}" for c in cols[len(GROUP_KEYS):]})
        merged = out.merge(factors, on=GROUP_KEYS, how="left", validate="one_to_one")
        hit = merged["category"].isin(set(upd["category"])).to_numpy()
        for col in ("factor", "factor_lo", "factor_hi"):
            scaled = merged[col].to_numpy(dtype=float) * merged[f"new_{col}"].to_numpy(float)
            out[col] = np.where(hit, scaled, merged[col].to_numpy(dtype=float))
        share = merged["factor_alpha"].to_numpy(float) + merged["new_factor_alpha"].to_numpy(
            float)
        out["factor_alpha"] = np.where(hit, share, merged["factor_alpha"].to_numpy(float))
    return out
