"""What a symptoms release needs of its period, kept up to date one day at a time.

A release covers every day from the first public date, but its assembly needs only:

- per series (cell): how many of its daily values fail the reliability rule (the
  daily-or-weekly decision) and, per region, the sum of its daily noisy B (its volume);
- the daily values that pass the rule (only those can be published: about 3% of them);
- per complete week, the weekly values that pass the rule (sums of seven daily noisy A
  and B, tested with the 7-fold law), and how many weekly values there are.

:func:`summarize` computes that from a whole (days x cells) matrix (tests, small
periods). :func:`load_period` keeps it in a state file under ``work/period/symptoms/``
and brings it up to date by reading only the per-day files that are new or changed since
(compared by size, mtime and inode, as ``make`` and git's index do: a rerun rewrites its
day's file, which changes all three) and recomputing only the weeks that contain them. A
daily run therefore reads one day (seven on a Sunday) whatever the length of the release,
instead of every day of it. The state is a cache of post-processed noisy values: deleting
it costs one full rebuild and nothing else; a state written for another domain (region
table, symptom list) or another reliability rule is ignored and rebuilt. It is written
atomically (one file, temp + rename), so concurrent runs each leave a consistent state.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from numpy.typing import NDArray

from dp_ops.layout import DataRoot
from dp_ops.reports.symptoms.config import REPORT, SymptomsConfig
from dp_ops.reports.symptoms.matrix import KEYS, DailyMatrix, complete_weeks, long_frame, weekly
from dp_ops.reports.symptoms.schema import NOISE_PARAMETERS

__all__ = ["PeriodSummary", "VALUE_COLUMNS", "load_period", "state_file", "summarize"]

# The columns of a passing value (daily or weekly); ``cell`` indexes ``PeriodSummary.cells``.
VALUE_COLUMNS: tuple[str, ...] = ("cell", "date", "a_noisy", "b_noisy", "n_days",
                                  *NOISE_PARAMETERS, "ratio", "lower", "upper")
# Bumped when the state's layout or meaning changes: an older state is then rebuilt.
STATE_VERSION = 1
_FILE_COLUMNS = [*KEYS, "a_noisy", "b_noisy", *NOISE_PARAMETERS, "ratio", "lower", "upper",
                 "reliable"]


@dataclass(frozen=True)
class PeriodSummary:
    """A release period, as much of it as the assembly reads.

    ``cells`` (level, region_id, symptom) in the per-day files' order; ``failed[i]`` the
    number of days on which cell ``i``'s daily value fails the rule; ``b_sum[i]`` the sum
    of its daily noisy B; ``daily`` the passing daily values and ``weekly`` the passing
    weekly values of the complete weeks (``mondays``), both with :data:`VALUE_COLUMNS`
    (``date`` a :class:`datetime.date`)."""

    days: list[date]
    cells: pd.DataFrame
    failed: NDArray[np.int64]
    b_sum: NDArray[np.int64]
    daily: pd.DataFrame
    mondays: list[date]
    weekly: pd.DataFrame

    def select(self, mask: NDArray[np.bool_]) -> PeriodSummary:
        """The same period restricted to the cells where ``mask`` is true."""
        new_index = np.full(len(mask), -1, dtype=np.int64)
        new_index[mask] = np.arange(int(mask.sum()))

        def keep(values: pd.DataFrame) -> pd.DataFrame:
            part = values[mask[values["cell"].to_numpy(np.int64)]].copy()
            part["cell"] = new_index[part["cell"].to_numpy(np.int64)]
            return part.reset_index(drop=True)

        return PeriodSummary(self.days, self.cells.loc[mask].reset_index(drop=True),
                             self.failed[mask], self.b_sum[mask], keep(self.daily),
                             self.mondays, keep(self.weekly))


def _passing(frame: pd.DataFrame, cfg: SymptomsConfig) -> pd.DataFrame:
    """The values of ``frame`` (a long table from :func:`long_frame` with its ``cell``)
    that pass the reliability rule, with :data:`VALUE_COLUMNS`."""
    from dp_ops.reports.symptoms.daily import with_reliability

    tested = with_reliability(frame, cfg)
    return tested.loc[tested["reliable"].to_numpy(bool),
                      list(VALUE_COLUMNS)].reset_index(drop=True)


def _with_cell(frame: pd.DataFrame, n_cells: int, n_dates: int) -> pd.DataFrame:
    frame.insert(0, "cell", np.tile(np.arange(n_cells, dtype=np.int64), n_dates))
    return frame


def _weekly_passing(m: DailyMatrix, cfg: SymptomsConfig) -> tuple[list[date], pd.DataFrame]:
    mondays, a_w, b_w, params_w = weekly(m)
    frame = _with_cell(long_frame(m.cells, mondays, a_w, b_w, params_w, 7), len(m.cells),
                       len(mondays))
    return mondays, _passing(frame, cfg)


def summarize(m: DailyMatrix, cfg: SymptomsConfig) -> PeriodSummary:
    """The summary of a whole (days x cells) matrix: the daily values are tested afresh
    (a matrix built in a test need not carry ratios), the decisions count its
    ``reliable`` flags, as the per-day files' own flags are counted in production."""
    daily = _with_cell(long_frame(m.cells, m.days, m.a, m.b, m.params, 1), len(m.cells),
                       len(m.days))
    mondays, weekly_values = _weekly_passing(m, cfg)
    return PeriodSummary(
        days=list(m.days), cells=m.cells.reset_index(drop=True),
        failed=(~m.reliable).sum(axis=0).astype(np.int64),
        b_sum=m.b.sum(axis=0).astype(np.int64),
        daily=_passing(daily, cfg), mondays=mondays, weekly=weekly_values)


# ----------------------------------------------------------------- the incremental state --
def state_file(root: DataRoot) -> Path:
    return root.root / "work" / "period" / REPORT / "state.npz"


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _fingerprint(cells: pd.DataFrame, cfg: SymptomsConfig) -> str:
    h = hashlib.sha256(json.dumps({
        "version": STATE_VERSION,
        "rule": [cfg.reliability_tolerance, cfg.reliability_probability,
                 cfg.reliability_test_level],
    }).encode())
    for k in KEYS:
        h.update(np.ascontiguousarray(cells[k].astype(str).to_numpy(str)).tobytes())
    return h.hexdigest()


@dataclass
class _Day:
    """One day as read from its per-day file."""

    a: NDArray[np.int64]
    b: NDArray[np.int64]
    reliable: NDArray[np.bool_]
    params: dict[str, NDArray[np.float64]]
    passing: pd.DataFrame


@dataclass
class _State:
    fingerprint: str
    cells: pd.DataFrame
    stamps: dict[str, list[int]] = field(default_factory=dict)      # day -> stamp
    failed_bits: dict[str, NDArray[np.uint8]] = field(default_factory=dict)
    b: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    daily: dict[str, pd.DataFrame] = field(default_factory=dict)
    weeks: dict[str, list[list[int]]] = field(default_factory=dict)  # monday -> 7 stamps
    weekly: dict[str, pd.DataFrame] = field(default_factory=dict)


def _read_day(root: DataRoot, day: date, cells: pd.DataFrame | None,
              first: date) -> tuple[pd.DataFrame, _Day]:
    path = root.report_file(REPORT, day)
    table = pq.read_table(path, columns=_FILE_COLUMNS)
    if cells is None:
        cells = table.select(list(KEYS)).to_pandas()
    elif len(table) != len(cells) or not all(
            np.array_equal(table.column(k).to_numpy(zero_copy_only=False),
                           cells[k].to_numpy()) for k in ("region_id", "symptom")):
        raise ValueError(f"{path}: its cells differ from those of {first}; a release "
                         "period must share one region table and symptom list")

    def col(name: str) -> NDArray[Any]:
        values: NDArray[Any] = table.column(name).to_numpy(zero_copy_only=False)
        return values

    reliable = col("reliable").astype(bool)
    idx = np.flatnonzero(reliable)
    passing = pd.DataFrame({"cell": idx.astype(np.int64), "date": day})
    for c in ("a_noisy", "b_noisy"):
        passing[c] = col(c)[idx].astype(np.int64)
    passing["n_days"] = np.int64(1)
    for p in NOISE_PARAMETERS:
        values = col(p)[idx]
        passing[p] = values.astype(np.int64) if p.endswith("sensitivity") else values
    for c in ("ratio", "lower", "upper"):
        passing[c] = col(c)[idx].astype(np.float64)
    return cells, _Day(a=col("a_noisy").astype(np.int64), b=col("b_noisy").astype(np.int64),
                       reliable=reliable,
                       params={p: col(p).astype(np.float64) for p in NOISE_PARAMETERS},
                       passing=passing[list(VALUE_COLUMNS)])


def _frames_to_arrays(prefix: str, frames: dict[str, pd.DataFrame]) -> dict[str, Any]:
    keys = sorted(frames)
    whole = (pd.concat([frames[k] for k in keys], ignore_index=True) if keys
             else pd.DataFrame({c: [] for c in VALUE_COLUMNS}))
    out = {f"{prefix}_keys": np.array(keys, dtype=str),
           f"{prefix}_sizes": np.array([len(frames[k]) for k in keys], dtype=np.int64)}
    for c in VALUE_COLUMNS:
        values = whole[c]
        out[f"{prefix}.{c}"] = (np.array([d.isoformat() for d in values], dtype=str)
                                if c == "date" else values.to_numpy())
    return out


def _arrays_to_frames(prefix: str, z: Any) -> dict[str, pd.DataFrame]:
    keys = [str(k) for k in z[f"{prefix}_keys"]]
    sizes = z[f"{prefix}_sizes"]
    whole = pd.DataFrame({c: z[f"{prefix}.{c}"] for c in VALUE_COLUMNS})
    if len(whole):
        labels = whole["date"].to_numpy(str)
        uniq, inverse = np.unique(labels, return_inverse=True)
        whole["date"] = np.array([date.fromisoformat(u) for u in uniq], dtype=object)[inverse]
    out: dict[str, pd.DataFrame] = {}
    start = 0
    for k, n in zip(keys, sizes, strict=True):
        out[k] = whole.iloc[start:start + int(n)].reset_index(drop=True)
        start += int(n)
    return out


def _save(path: Path, state: _State) -> None:
    days = sorted(state.stamps)
    mondays = sorted(state.weeks)
    arrays: dict[str, Any] = {
        "meta": np.array(json.dumps({"fingerprint": state.fingerprint,
                                     "stamps": state.stamps, "weeks": state.weeks})),
        "bits": (np.stack([state.failed_bits[d] for d in days]) if days
                 else np.zeros((0, 0), np.uint8)),
        "b": (np.stack([state.b[d] for d in days]) if days else np.zeros((0, 0), np.int64)),
        "cells.level": state.cells["level"].to_numpy(np.int64),
        **{f"cells.{k}": state.cells[k].to_numpy(str) for k in ("region_id", "symptom")},
        **_frames_to_arrays("daily", {d: state.daily[d] for d in days}),
        **_frames_to_arrays("weekly", {m: state.weekly[m] for m in mondays}),
    }
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path) -> _State | None:
    """The stored state, or None when there is none or it cannot be read (rebuilt)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            days = sorted(meta["stamps"])
            cells = pd.DataFrame({"level": z["cells.level"].astype(np.int8),
                                  **{k: z[f"cells.{k}"].astype(object)
                                     for k in ("region_id", "symptom")}})
            bits, b = z["bits"], z["b"]
            return _State(
                fingerprint=meta["fingerprint"], cells=cells, stamps=meta["stamps"],
                failed_bits={d: bits[i] for i, d in enumerate(days)},
                b={d: b[i] for i, d in enumerate(days)},
                daily=_arrays_to_frames("daily", z), weeks=meta["weeks"],
                weekly=_arrays_to_frames("weekly", z))
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None


def load_period(root: DataRoot, cfg: SymptomsConfig, days: list[date]) -> PeriodSummary:
    """The summary of ``days`` (an unbroken run), from the stored state brought up to
    date: only new or changed per-day files are read, only the weeks holding them are
    summed and tested again. Raises ValueError naming a day whose cells differ from the
    first day's."""
    path = state_file(root)
    stamps = {d.isoformat(): list(_stamp(root.report_file(REPORT, d))) for d in days}
    state = _load(path)
    read: dict[str, _Day] = {}
    cells = state.cells if state is not None else None

    def day_data(label: str) -> _Day:
        nonlocal cells
        if label not in read:
            cells, read[label] = _read_day(root, date.fromisoformat(label), cells, days[0])
        return read[label]

    if state is None or len(state.cells) == 0:
        cells, read[days[0].isoformat()] = _read_day(root, days[0], None, days[0])
        state = None
    assert cells is not None
    fingerprint = _fingerprint(cells, cfg)
    if state is None or state.fingerprint != fingerprint:
        state = _State(fingerprint=fingerprint, cells=cells)
    # days gone from the period, or changed since they were summarized
    for label in list(state.stamps):
        if stamps.get(label) != state.stamps[label]:
            for store in (state.stamps, state.failed_bits, state.b, state.daily):
                store.pop(label, None)
    for label, stamp in stamps.items():
        if label in state.stamps:
            continue
        d = day_data(label)
        state.stamps[label] = stamp
        state.failed_bits[label] = np.packbits(~d.reliable)
        state.b[label] = d.b
        state.daily[label] = d.passing
    mondays = complete_weeks(days[0], days[-1]) if days else []
    wanted = {m.isoformat(): [stamps[(m + timedelta(days=i)).isoformat()] for i in range(7)]
              for m in mondays}
    for label in list(state.weeks):
        if wanted.get(label) != state.weeks[label]:
            state.weeks.pop(label)
            state.weekly.pop(label, None)
    for label, week_stamps in wanted.items():
        if label in state.weeks:
            continue
        monday = date.fromisoformat(label)
        week = [day_data((monday + timedelta(days=i)).isoformat()) for i in range(7)]
        m = DailyMatrix(days=[monday + timedelta(days=i) for i in range(7)], cells=cells,
                        a=np.stack([w.a for w in week]), b=np.stack([w.b for w in week]),
                        reliable=np.stack([w.reliable for w in week]),
                        params={p: np.stack([w.params[p] for w in week])
                                for p in NOISE_PARAMETERS})
        _, passing = _weekly_passing(m, cfg)
        state.weeks[label] = week_stamps
        state.weekly[label] = passing
    if read or set(state.weeks) != set(wanted):
        _save(path, state)
    labels = [d.isoformat() for d in days]
    n = len(cells)
    failed = np.zeros(n, dtype=np.int64)
    b_sum = np.zeros(n, dtype=np.int64)
    for label in labels:
        failed += np.unpackbits(state.failed_bits[label], count=n).astype(np.int64)
        b_sum += state.b[label]
    empty = pd.DataFrame({c: pd.Series(dtype=object if c == "date" else "float64")
                          for c in VALUE_COLUMNS})

    def stack(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else empty

    return PeriodSummary(days=list(days), cells=cells, failed=failed, b_sum=b_sum,
                         daily=stack([state.daily[x] for x in labels]), mondays=mondays,
                         weekly=stack([state.weekly[m.isoformat()] for m in mondays]))
