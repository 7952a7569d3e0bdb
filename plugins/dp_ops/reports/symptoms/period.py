"""What a symptoms release needs of its period, kept up to date one day at a time.

A release covers every day from the first public date, but its assembly needs only:

- per series (cell): how many of its daily values fail the reliability rule (the
  daily-or-weekly decision) and, per region, the sum of its daily noisy B (its volume);
- the daily values that pass the rule (only those can be published: about 3% of them),
  each with its posterior probability of lying outside its tolerance from the fit of its
  whole day and level (:mod:`dp_ops.reports.symptoms.selection`);
- per complete week, the weekly values that pass the rule (sums of seven daily noisy A
  and B, tested with the 7-fold law), likewise with their posterior, and how many weekly
  values there are.

:func:`summarize` computes that from a whole (days x cells) matrix (tests, small
periods). :func:`load_period` keeps it in a state file under ``work/period/symptoms/``
and brings it up to date by reading only the per-day files that are new or changed since
(compared by the sha256 the ledger recorded for each: a rerun records its day's new
version) and recomputing only the weeks that contain them. A daily run therefore reads one
day (seven on a Sunday) whatever the length of the release, instead of every day of it.
Each per-day file read is checked against its record (:mod:`dp_ops.steps.day_files`).

The state is a cache of post-processed noisy values: deleting it costs one full rebuild
and nothing else; a state written for another domain (region table, symptom list) or
another reliability rule is ignored and rebuilt. It lives in the data root, so it carries a
MAC under the ledger key (``state.npz.mac``, over the very bytes written): an edited or
planted state (say, with other passing values) does not verify and is rebuilt from the
verified per-day files, never used. It is written atomically (temp + rename), so
concurrent runs each leave a consistent state.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from dp_ops.api import DataRoot
from dp_ops.privacy import ledger_key
from dp_ops.reports.symptoms.config import REPORT, SymptomsConfig
from dp_ops.reports.symptoms.matrix import (
    KEYS,
    DailyMatrix,
    complete_weeks,
    long_frame,
    same_cells,
    weekly,
)
from dp_ops.reports.symptoms.schema import NOISE_PARAMETERS
from dp_ops.reports.symptoms.selection import family_posteriors, widened
from dp_ops.steps.day_files import read_day_bytes

__all__ = ["PeriodSummary", "VALUE_COLUMNS", "load_period", "state_file", "summarize"]

# The columns of a passing value (daily or weekly); ``cell`` indexes ``PeriodSummary.cells``;
# ``low`` and ``high`` bound the true ratio at the published intervals' level.
# ``off`` is the value's posterior probability of lying outside its tolerance, which the
# assembly's selection reads (dp_ops.reports.symptoms.selection).
VALUE_COLUMNS: tuple[str, ...] = ("cell", "date", "ratio", "lower", "upper", "low", "high",
                                  "off")
_RATIOS = ("ratio", "lower", "upper", "low", "high", "off")
# Bumped when the state's layout or meaning changes: an older state is then rebuilt.
STATE_VERSION = 6
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


def passing_values(tested: pd.DataFrame, cfg: SymptomsConfig) -> pd.DataFrame:
    """The values of ``tested`` (whole families, with the rule's ``reliable`` flags, the
    noisy counts and noise parameters, ``n_days``) the rule passes, with ``off``, their
    posterior probability of lying outside the tolerance, and ``low``/``high``, the
    test's interval widened to hold the posterior one; both from the fit of their whole
    family (:mod:`dp_ops.reports.symptoms.selection`). Which of them a release publishes
    is decided at assembly, among the values it can publish."""
    from dp_ops.reports.symptoms.daily import with_interval

    fit = family_posteriors(tested, tolerance=cfg.reliability_tolerance)
    keep = tested["reliable"].to_numpy(dtype=bool)
    out = widened(with_interval(tested.loc[keep]), fit.low[keep], fit.high[keep])
    out["off"] = fit.off[keep]
    return out


def _passing(frame: pd.DataFrame, cfg: SymptomsConfig) -> pd.DataFrame:
    """The values of ``frame`` (a long table from :func:`long_frame` with its ``cell``)
    that pass the reliability rule (:func:`passing_values`), with :data:`VALUE_COLUMNS`."""
    from dp_ops.reports.symptoms.daily import with_reliability

    passing = passing_values(with_reliability(frame, cfg), cfg)
    return passing[list(VALUE_COLUMNS)].reset_index(drop=True)


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
    passing: pd.DataFrame  # cell, day (ordinal), ratio, lower, upper, low, high


def _empty_values() -> pd.DataFrame:
    return pd.DataFrame({"cell": np.zeros(0, np.int64), "day": np.zeros(0, np.int64),
                         **{c: np.zeros(0) for c in _RATIOS}})


@dataclass
class _State:
    """The stored state: per day its file's stamp, which cells fail the rule (packed
    bits) and each region's B; the passing daily values; per complete week the stamps
    of its seven days and its passing weekly values. Days are ISO labels in the maps and
    proleptic ordinals in the value tables."""

    fingerprint: str
    cells: pd.DataFrame
    stamps: dict[str, str] = field(default_factory=dict)  # day: its file's recorded sha256
    failed_bits: dict[str, NDArray[np.uint8]] = field(default_factory=dict)
    b: dict[str, NDArray[np.int64]] = field(default_factory=dict)
    daily: pd.DataFrame = field(default_factory=_empty_values)
    weeks: dict[str, list[str]] = field(default_factory=dict)
    weekly: pd.DataFrame = field(default_factory=_empty_values)


def _regions(cells: pd.DataFrame) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each region's first cell, and each cell's region (an index into the first)."""
    _, first, inverse = np.unique(cells["region_id"].to_numpy(str), return_index=True,
                                  return_inverse=True)
    return first.astype(np.int64), inverse.astype(np.int64)


def _read_day(root: DataRoot, day: date, recorded: str, cells: pd.DataFrame | None,
              first: date, cfg: SymptomsConfig) -> tuple[pd.DataFrame, _Day]:
    path = root.report_file(REPORT, day)
    table = pq.read_table(pa.BufferReader(read_day_bytes(root, REPORT, day, recorded)),
                          columns=_FILE_COLUMNS)
    cells = same_cells(table, cells, path, first)

    def col(name: str) -> NDArray[Any]:
        values: NDArray[Any] = table.column(name).to_numpy(zero_copy_only=False)
        return values

    reliable = col("reliable").astype(bool)
    passing = passing_values(pd.DataFrame({
        "cell": np.arange(len(cells), dtype=np.int64),
        "day": np.full(len(cells), day.toordinal(), np.int64),
        "level": cells["level"].to_numpy(), "a_noisy": col("a_noisy"),
        "b_noisy": col("b_noisy"), "n_days": 1, "reliable": reliable,
        **{c: col(c).astype(np.float64) for c in ("ratio", "lower", "upper")},
        **{p: col(p) for p in NOISE_PARAMETERS}}), cfg)
    passing = passing[["cell", "day", *_RATIOS]]
    return cells, _Day(a=col("a_noisy").astype(np.int64), b=col("b_noisy").astype(np.int64),
                       reliable=reliable,
                       params={p: col(p).astype(np.float64) for p in NOISE_PARAMETERS},
                       passing=passing)


def _save(path: Path, state: _State) -> None:
    days = sorted(state.stamps)
    arrays: dict[str, Any] = {
        "meta": np.array(json.dumps({"fingerprint": state.fingerprint,
                                     "stamps": state.stamps, "weeks": state.weeks})),
        "bits": (np.stack([state.failed_bits[d] for d in days]) if days
                 else np.zeros((0, 0), np.uint8)),
        "b": (np.stack([state.b[d] for d in days]) if days else np.zeros((0, 0), np.int64)),
        "cells.level": state.cells["level"].to_numpy(np.int64),
        **{f"cells.{k}": state.cells[k].to_numpy(str) for k in ("region_id", "symptom")},
        **{f"daily.{c}": state.daily[c].to_numpy() for c in state.daily.columns},
        **{f"weekly.{c}": state.weekly[c].to_numpy() for c in state.weekly.columns},
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state-", suffix=".npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            # the state's bytes and their MAC travel together: one state, one record
            fh.write(_mac(data).encode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_MAC_CHARS = 64


def _mac(data: bytes) -> str:
    return ledger_key.seal(ledger_key.load_key(), "period-state",
                           {"sha256": hashlib.sha256(data).hexdigest()})


def _load(path: Path) -> _State | None:
    """The stored state, or None when there is none, it cannot be read, or its MAC does not
    verify under the ledger key (then it was not written by the pipeline: rebuilt)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    data, tag = raw[:-_MAC_CHARS], raw[-_MAC_CHARS:].decode(errors="replace")
    if len(raw) <= _MAC_CHARS or not ledger_key.sealed(
            ledger_key.load_key(), "period-state",
            {"sha256": hashlib.sha256(data).hexdigest()}, tag):
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            days = sorted(meta["stamps"])
            cells = pd.DataFrame({"level": z["cells.level"].astype(np.int8),
                                  **{k: z[f"cells.{k}"].astype(object)
                                     for k in ("region_id", "symptom")}})
            bits, b = z["bits"], z["b"]
            columns = _empty_values().columns
            return _State(
                fingerprint=meta["fingerprint"], cells=cells, stamps=meta["stamps"],
                failed_bits={d: bits[i] for i, d in enumerate(days)},
                b={d: b[i] for i, d in enumerate(days)},
                daily=pd.DataFrame({c: z[f"daily.{c}"] for c in columns}),
                weeks=meta["weeks"],
                weekly=pd.DataFrame({c: z[f"weekly.{c}"] for c in columns}))
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None


def _dated(values: pd.DataFrame) -> pd.DataFrame:
    """``values`` (cell, day ordinal, ...) with :data:`VALUE_COLUMNS` (``date`` a date)."""
    ordinals, inverse = np.unique(values["day"].to_numpy(np.int64), return_inverse=True)
    dates = np.array([date.fromordinal(int(o)) for o in ordinals], dtype=object)
    out = values.drop(columns="day")
    out.insert(1, "date", dates[inverse] if len(values) else np.zeros(0, dtype=object))
    return out[list(VALUE_COLUMNS)].reset_index(drop=True)


def load_period(root: DataRoot, cfg: SymptomsConfig, days: list[date],
                digests: Mapping[date, str]) -> PeriodSummary:
    """The summary of ``days`` (an unbroken run), from the stored state brought up to
    date: only new or changed per-day files (by ``digests``, the sha256 the ledger
    recorded for each day: :func:`dp_ops.steps.day_files.release_days`) are read, each
    checked against its digest, and only the weeks holding them are summed and tested
    again. Raises ValueError naming a day whose cells differ from the first day's."""
    path = state_file(root)
    stamps = {d.isoformat(): digests[d] for d in days}
    recorded = stamps
    state = _load(path)
    read: dict[str, _Day] = {}
    cells = state.cells if state is not None and len(state.cells) else None

    def day_data(label: str) -> _Day:
        nonlocal cells
        if label not in read:
            cells, read[label] = _read_day(root, date.fromisoformat(label), stamps[label],
                                           cells, days[0], cfg)
        return read[label]

    if cells is None:
        day_data(days[0].isoformat())
    assert cells is not None
    fingerprint = _fingerprint(cells, cfg)
    if state is None or state.fingerprint != fingerprint:
        state = _State(fingerprint=fingerprint, cells=cells)
    first_cell, region_of = _regions(cells)
    # forget days gone from the period or changed since they were summarized
    stale = [label for label in state.stamps if stamps.get(label) != state.stamps[label]]
    for label in stale:
        for store in (state.stamps, state.failed_bits, state.b):
            store.pop(label, None)
    fresh = [label for label in stamps if label not in state.stamps]
    gone = {date.fromisoformat(x).toordinal() for x in [*stale, *fresh]}
    if gone:
        state.daily = state.daily[~state.daily["day"].isin(gone)]
    new_values = []
    for label in fresh:
        d = day_data(label)
        state.stamps[label] = recorded[label]
        state.failed_bits[label] = np.packbits(~d.reliable)
        state.b[label] = d.b[first_cell]
        new_values.append(d.passing)
    if new_values:
        state.daily = pd.concat([state.daily, *new_values], ignore_index=True)
    mondays = complete_weeks(days[0], days[-1]) if days else []
    wanted = {m.isoformat(): [stamps[(m + timedelta(days=i)).isoformat()] for i in range(7)]
              for m in mondays}
    to_record = {m: [recorded[(date.fromisoformat(m) + timedelta(days=i)).isoformat()]
                     for i in range(7)] for m in wanted}
    redo = [label for label in state.weeks if wanted.get(label) != state.weeks[label]]
    for label in redo:
        state.weeks.pop(label)
    new_weeks = [label for label in wanted if label not in state.weeks]
    gone_weeks = {date.fromisoformat(x).toordinal() for x in [*redo, *new_weeks]}
    if gone_weeks:
        state.weekly = state.weekly[~state.weekly["day"].isin(gone_weeks)]
    weekly_values = []
    for label in new_weeks:
        monday = date.fromisoformat(label)
        week = [day_data((monday + timedelta(days=i)).isoformat()) for i in range(7)]
        m = DailyMatrix(days=[monday + timedelta(days=i) for i in range(7)], cells=cells,
                        a=np.stack([w.a for w in week]), b=np.stack([w.b for w in week]),
                        reliable=np.stack([w.reliable for w in week]),
                        params={p: np.stack([w.params[p] for w in week])
                                for p in NOISE_PARAMETERS})
        _, passing = _weekly_passing(m, cfg)
        state.weeks[label] = to_record[label]
        weekly_values.append(pd.DataFrame({
            "cell": passing["cell"].to_numpy(np.int64),
            "day": np.full(len(passing), monday.toordinal(), np.int64),
            **{c: passing[c].to_numpy(np.float64) for c in _RATIOS}}))
    if weekly_values:
        state.weekly = pd.concat([state.weekly, *weekly_values], ignore_index=True)
    if fresh or stale or redo or new_weeks:
        _save(path, state)
    n = len(cells)
    failed = np.zeros(n, dtype=np.int64)
    b_region = np.zeros(len(first_cell), dtype=np.int64)
    for label in stamps:
        failed += np.unpackbits(state.failed_bits[label], count=n)
        b_region += state.b[label]
    first, last = days[0].toordinal(), days[-1].toordinal()
    daily = state.daily[state.daily["day"].between(first, last)]
    weekly_values_in = state.weekly[state.weekly["day"].isin(
        {m.toordinal() for m in mondays})]
    return PeriodSummary(days=list(days), cells=cells, failed=failed,
                         b_sum=b_region[region_of], daily=_dated(daily), mondays=mondays,
                         weekly=_dated(weekly_values_in))
