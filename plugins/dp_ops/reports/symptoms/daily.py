"""One day of the symptoms dataset: noisy A and B per region and symptom, their ratio and
the reliability rule (post-processing of stored noisy values only).

The output, ``report/symptoms/date=D/rows.parquet``, keeps the whole domain (every region
of the table at the configured levels x every symptom) so that the release step can decide
daily or weekly resolution and build weekly sums from it. It holds noisy values only.
"""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pyarrow as pa

from dp_ops.api import DataRoot, StepResult, load_noisy_cells, open_ledger, write_day_file
from dp_ops.reports.symptoms.config import REPORT, SYMPTOM_CELL_PREFIX, VOLUME_CELL, SymptomsConfig
from dp_ops.reports.symptoms.schema import NOISE_PARAMETERS


def pair_cells(cells: pd.DataFrame) -> pd.DataFrame:
    """Noisy cells (level, region_id, metric, noisy_value, cell_epsilon, sensitivity) ->
    one row per (level, region_id, symptom) with A, B and their noise parameters."""
    volume = cells[cells["metric"] == VOLUME_CELL][
        ["level", "region_id", "noisy_value", "cell_epsilon", "sensitivity"]].rename(
        columns={"noisy_value": "b_noisy", "cell_epsilon": "b_epsilon",
                 "sensitivity": "b_sensitivity"})
    searches = cells[cells["metric"].str.startswith(SYMPTOM_CELL_PREFIX)]
    out = pd.DataFrame({
        "level": searches["level"].to_numpy(),
        "region_id": searches["region_id"].to_numpy(),
        "symptom": searches["metric"].str.slice(len(SYMPTOM_CELL_PREFIX)).to_numpy(),
        "a_noisy": searches["noisy_value"].to_numpy(np.int64),
        "a_epsilon": searches["cell_epsilon"].to_numpy(np.float64),
        "a_sensitivity": searches["sensitivity"].to_numpy(np.int64),
    })
    out = out.merge(volume, on=["level", "region_id"], how="left", validate="many_to_one")
    if out["b_noisy"].isna().any():
        missing = out.loc[out["b_noisy"].isna(), "region_id"].iloc[0]
        raise ValueError(f"no noisy volume B for region {missing!r}: the noise step did not "
                         "cover it")
    out["b_noisy"] = out["b_noisy"].astype(np.int64)
    out["b_sensitivity"] = out["b_sensitivity"].astype(np.int64)
    return out


def with_reliability(rows: pd.DataFrame, cfg: SymptomsConfig, n_days: int | None = None
                     ) -> pd.DataFrame:
    """Add ratio, lower, upper (the hull of the ratio test, NaN where the value is
    rejected without it) and reliable (docs/design.md, Symptoms dataset;
    :func:`dp_ops.reports.symptoms.reliability.reliability`) to rows holding a_noisy,
    b_noisy, the noise parameters and, unless ``n_days`` is given, an ``n_days`` column
    (how many daily noises each value sums)."""
    from dp_ops.reports.symptoms.reliability import reliability

    out = rows.copy()
    for col in ("ratio", "lower", "upper"):
        out[col] = np.nan
    out["reliable"] = False
    if n_days is not None:
        out["n_days"] = n_days
    for key, idx in out.groupby([*NOISE_PARAMETERS, "n_days"], sort=False).groups.items():
        a_eps, a_sens, b_eps, b_sens, n = key
        part = out.loc[idx]
        res = pd.DataFrame(reliability(
            part["a_noisy"].to_numpy(np.int64), part["b_noisy"].to_numpy(np.int64),
            a_epsilon=float(a_eps), a_sensitivity=int(a_sens), b_epsilon=float(b_eps),
            b_sensitivity=int(b_sens), n_days=int(n), cfg=cfg))
        for col in ("ratio", "lower", "upper", "reliable"):
            out.loc[idx, col] = res[col].to_numpy()
    out["reliable"] = out["reliable"].astype(bool)
    return out


def with_interval(rows: pd.DataFrame) -> pd.DataFrame:
    """Add ``low`` and ``high``, the published interval of each value's true ratio
    (:func:`dp_ops.reports.symptoms.reliability.ratio_interval`), to rows holding
    a_noisy, b_noisy, the noise parameters and ``n_days``."""
    from dp_ops.reports.symptoms.reliability import ratio_interval

    out = rows.copy()
    out["low"] = np.nan
    out["high"] = np.nan
    if out.empty:
        return out
    for key, idx in out.groupby([*NOISE_PARAMETERS, "n_days"], sort=False).groups.items():
        a_eps, a_sens, b_eps, b_sens, n = key
        part = out.loc[idx]
        low, high = ratio_interval(
            part["a_noisy"].to_numpy(np.int64), part["b_noisy"].to_numpy(np.int64),
            a_epsilon=float(a_eps), a_sensitivity=int(a_sens), b_epsilon=float(b_eps),
            b_sensitivity=int(b_sens), n_days=int(n))
        out.loc[idx, "low"] = low
        out.loc[idx, "high"] = high
    return out


def report_day(root: DataRoot, cfg: SymptomsConfig, day: date, *, ledger_url: str
               ) -> StepResult:
    """Pair A and B for ``day``, apply the reliability rule, write the day's rows."""
    target = root.report_file(REPORT, day)
    if day < cfg.first_public_date:
        return StepResult(f"no symptoms rows for {day}: the dataset starts "
                          f"{cfg.first_public_date}")
    ledger = open_ledger(root, ledger_url)
    try:
        cells = load_noisy_cells(root, REPORT, day, ledger.spends(REPORT, day))
        rows = with_reliability(pair_cells(cells), cfg, n_days=1)
        rows.insert(3, "date", pd.Timestamp(day).date())
        rows = rows.sort_values(["level", "region_id", "symptom"]).reset_index(drop=True)
        write_day_file(root, ledger, REPORT, day,
                       pa.Table.from_pandas(rows, preserve_index=False))
    finally:
        ledger.dispose()
    reliable = float(rows["reliable"].mean()) if len(rows) else 0.0
    return StepResult(f"symptoms for {day}: {reliable:.1%} of {len(rows)} daily values pass "
                      f"the reliability rule; rows in {target}", (str(target),))
