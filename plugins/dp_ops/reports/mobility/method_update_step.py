"""The mobility method-update step: reserve the update's budget in the ledger, estimate and
store the scaling factors of :mod:`dp_ops.reports.mobility.method_update`, then re-report
the days from the effective date.

The maths, the request model and why the spend is what it is are in
:mod:`dp_ops.reports.mobility.method_update`; the new method the DAG's form drives is
:class:`dp_ops.reports.mobility.new_methods.ScaledCounts`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.api import (
    DataRoot,
    MethodUpdateForm,
    StepResult,
    closing_ledger,
    load_noisy_cells,
    open_ledger,
    read_regions,
)
from dp_ops.errors import MethodUpdateError, PolicyMismatch
from dp_ops.privacy.ledger import EPS_TOLERANCE, ApprovalRequest, Ledger, Spend, SpendRequest
from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
from dp_ops.reports.mobility.config import REPORT, MobilityConfig
from dp_ops.reports.mobility.estimates import strictly_below
from dp_ops.reports.mobility.method_update import (
    COMPARISON_WEEKS,
    FACTOR_SHARE,
    KIND,
    MethodUpdate,
    category_cells,
    cell_group,
    comparison_window,
    group_sums,
    method_update_name,
    plan_requests,
    scaling_factors,
    to_categories,
    update_budgets,
)
from dp_ops.reports.mobility.new_methods import ScaledCounts
from dp_ops.reports.mobility.report import report_day
from dp_ops.requests import shown
from dp_ops.steps.day_files import recorded_days
from dp_ops.steps.derived import store_recorded, verify_recorded


def _noise_key(cells: pd.DataFrame, categories: Sequence[str], prefix: str,
               draws_per_cell: int) -> pd.DataFrame:
    """Per (category): the noise key of its group sums (cells summed, smallest epsilon,
    largest sensitivity), from the noise parameters of the cells used."""
    rows = []
    for cat in categories:
        part = cells[cells["metric"].isin(category_cells(cat))]
        rows.append({"category": cat,
                     f"{prefix}_cells": draws_per_cell * len(category_cells(cat)),
                     f"{prefix}_epsilon": float(part["cell_epsilon"].min()),
                     f"{prefix}_sensitivity": int(part["sensitivity"].max())})
    return pd.DataFrame(rows)


def _noisy_s_g(root: DataRoot, ledger: Ledger, window: list[date], update: MethodUpdate
               ) -> pd.DataFrame:
    """Per group: s_g from the stored noisy cells (current values) and its noise key."""
    frames = {}
    for day in window:
        cells = load_noisy_cells(root, REPORT, day, ledger.spends(REPORT, day))
        frames[day] = cells[cells["metric"].isin(update.cells)].copy()
    sums = group_sums(frames, "noisy_value").rename(columns={"noisy_value": "s_g"})
    out = to_categories(sums, update.categories, "s_g")
    key = _noise_key(pd.concat(frames.values(), ignore_index=True), update.categories, "g",
                     len(window))
    return out.merge(key, on="category", how="left")


def _noisy_s_n(root: DataRoot, cfg: MobilityConfig, window: list[date],
               update: MethodUpdate, requests: Sequence[SpendRequest], regions: pd.DataFrame,
               rng: np.random.Generator) -> pd.DataFrame:
    """Per group: s_n, the new method's 4-day sums from the bounded aggregates, noised once
    per (cell, group) over the whole public domain (zeros included), and its noise key.
    Each cell's epsilon is that of the request booked for its group (its budget's cell
    epsilon times the fraction); its sensitivity the new method's bound on the budget's."""
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
    cells["cell_epsilon"] = np.nan
    cells["sensitivity"] = 0
    booked = update_budgets(requests)
    for cell in update.cells:
        request = booked[cell_group(cell)]
        eps = request.cell_epsilon
        sens = update.method.sensitivity(cell, request.sensitivity)
        mask = (cells["metric"] == cell).to_numpy()
        noisy[mask] = add_discrete_laplace(cells.loc[mask, "value"].to_numpy(), epsilon=eps,
                                           sensitivity=sens, rng=rng)
        cells.loc[mask, "cell_epsilon"] = eps
        cells.loc[mask, "sensitivity"] = sens
    cells = cells.drop(columns=["value"])
    cells["s_n"] = noisy
    out = to_categories(cells, update.categories, "s_n")
    return out.merge(_noise_key(cells, update.categories, "n", 1), on="category", how="left")


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
    for col in ("s_g", "s_n", "g_cells", "g_sensitivity", "n_cells", "n_sensitivity"):
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


def approval_request(cfg: MobilityConfig, update: MethodUpdate) -> ApprovalRequest:
    """The update as its approver approves it and as :func:`run_method_update` reserves it
    (the approval task and this step build it here, so their digests agree)."""
    return ApprovalRequest(
        report=REPORT, kind=KIND, days=tuple(comparison_window(update.effective_date)),
        reason=update.reason, method_version=update.method_version,
        parameters=(("categories", ",".join(update.categories)),
                    ("effective_date", update.effective_date.isoformat()),
                    ("method", update.method.describe())))


def _reserved_before(ledger: Ledger, cfg: MobilityConfig, update: MethodUpdate,
                     requests: list[SpendRequest]) -> list[Spend] | None:
    """Spends of this version already in the ledger (a crash before the store), if any.
    Their s_n is drawn afresh with ``requests``' budgets, so a budget asking more than a
    spend booked (the policy raised since) is refused (:class:`PolicyMismatch`)."""
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
    asked = {r.slot: r.epsilon for r in requests}
    over = [s for s in found if asked[s.slot] > s.epsilon + EPS_TOLERANCE]
    if over:
        raise PolicyMismatch(
            f"method_version={update.method_version!r}: ledger spend {over[0].id} "
            f"({over[0].slot.describe()}) was booked at epsilon {over[0].epsilon!r}; the "
            f"budget in force asks {asked[over[0].slot]!r}, more than was paid. Nothing was "
            "drawn: run the update as a new method version (it is paid at the policy in "
            "force)")
    return found


def run_method_update(root: DataRoot, cfg: MobilityConfig, update: MethodUpdate, *,
                      run_id: str, ledger_url: str) -> StepResult:
    """Reserve (or reuse), compute and store the scaling factors of ``update``, then
    re-report the days from the effective date that already have report rows."""
    if not update.reason.strip():
        raise MethodUpdateError("reason='': say why the method changed; it is recorded in "
                                "the ledger")
    window = comparison_window(update.effective_date)
    if window[0] <= cfg.baseline_end:
        earliest = cfg.baseline_end + timedelta(days=7 * COMPARISON_WEEKS + 1)
        raise MethodUpdateError(
            f"effective_date={update.effective_date}: its comparison window starts "
            f"{window[0]}, not after the baseline window (which ends {cfg.baseline_end}): "
            "the factor would be estimated from days that also make the baseline; the "
            f"earliest effective date is {earliest}")
    target = root.method_update_file(REPORT, update.method_version)
    spent_now = 0.0
    name = method_update_name(update.method_version)
    ledger = open_ledger(root, ledger_url)
    try:
        stored = verify_recorded(ledger, REPORT, name, target)
    finally:
        ledger.dispose()
    if stored:
        _check_stored(target, update)
        state = "reused the stored factors"
    else:
        requests = plan_requests(cfg, update)
        ledger = open_ledger(root, ledger_url)
        try:
            # s_g reads only stored noisy values: check them before spending anything
            s_g = _noisy_s_g(root, ledger, window, update)
            missing = [d for d in window if not root.bounded_file(REPORT, d).is_file()]
            if missing:
                raise FileNotFoundError(
                    f"no bounded aggregates for {len(missing)} comparison-window day(s) "
                    f"(first {missing[0]}): rerun the bound step for them first")
            approval = approval_request(cfg, update)
            spends = _reserved_before(ledger, cfg, update, requests)
            if spends is None:
                reservation = ledger.reserve(
                    requests, run_id=run_id, kind=KIND, cap=cfg.cap, terms=cfg.policy_terms,
                    method_version=update.method_version, reason=update.reason,
                    approval=approval)
                spends = list(reservation.spends)
                spent_now = reservation.spent_now
            else:
                # paid by an earlier run of this version (which crashed before the store):
                # this run draws s_n afresh only with an approval of its own
                ledger.require_approval(approval, run_id=run_id)
        finally:
            ledger.dispose()
        regions = read_regions(root.regions_csv)
        s_n = _noisy_s_n(root, cfg, window, update, requests, regions, noise_generator())
        alpha_f = FACTOR_SHARE * strictly_below(cfg.max_error_probability)
        table = _update_table(update, window, scaling_factors(s_g, s_n, alpha=alpha_f),
                              spends)
        ledger = open_ledger(root, ledger_url)
        try:
            won = store_recorded(ledger, REPORT, name, table, target, frozen=True)
        finally:
            ledger.dispose()
        state = "stored new factors" if won else "found factors another run stored first"
    # every recorded report day from the effective date (its rows change with the factors)
    with closing_ledger(open_ledger(root, ledger_url)) as ledger:
        recorded = recorded_days(ledger, REPORT)
    day = max(update.effective_date, cfg.first_public_date)
    rereport = [d for d in sorted(recorded) if d >= day]
    for d in rereport:
        report_day(root, cfg, d, ledger_url=ledger_url)
    rereported = len(rereport)
    return StepResult(
        f"method update {update.method_version} from {update.effective_date} "
        f"({', '.join(update.categories)}): {state} at {target}; spent epsilon "
        f"{spent_now / len(window):.4f} per user-day on each of the {len(window)} window "
        f"days {window[0]}..{window[-1]}; re-reported {rereported} day(s)",
        (str(target),))


# -- the operator's form ----------------------------------------------------------------------
def update_from_form(cfg: MobilityConfig, form: MethodUpdateForm) -> MethodUpdate:
    """The update an operator's form asks for. The new method here is the demo's
    stand-in: the counts of the ``categories``' source cells are ``factor`` times the old
    ones, ``factor`` within ``method_update_factor_range``."""
    low, high = cfg.method_update_factor_range
    if not (math.isfinite(form.factor) and low <= form.factor <= high):
        raise MethodUpdateError(
            f"factor={shown(form.factor)}: the demo method scales counts by a factor in "
            f"[{low:g}, {high:g}] (method_update_factor_range); a factor outside it is not "
            "a plausible change of method")
    return MethodUpdate(method_version=form.method_version,
                        effective_date=form.effective_date,
                        categories=tuple(form.categories),
                        method=ScaledCounts.for_categories(form.categories, form.factor),
                        reason=form.reason)


def run_form(root: DataRoot, cfg: MobilityConfig, form: MethodUpdateForm, *, run_id: str,
             ledger_url: str) -> StepResult:
    """Scaling factors for a method update from ``form.effective_date`` (ledger kind
    ``method_update``, refused past the cap before any draw; a rerun reuses the stored
    factors and spends nothing), then re-report the days from the effective date that
    already have report rows."""
    return run_method_update(root, cfg, update_from_form(cfg, form), run_id=run_id,
                             ledger_url=ledger_url)


def form_request(cfg: MobilityConfig, form: MethodUpdateForm) -> ApprovalRequest:
    """The update as its approver approves it and as :func:`run_form` reserves it."""
    return approval_request(cfg, update_from_form(cfg, form))


def form_spends(cfg: MobilityConfig, form: MethodUpdateForm) -> tuple[str, list[SpendRequest]]:
    """What the update spends, on every date of its comparison window (the preview)."""
    what = (f"method update {form.method_version} of {REPORT} from {form.effective_date} "
            f"({', '.join(form.categories)})")
    return what, plan_requests(cfg, update_from_form(cfg, form))
