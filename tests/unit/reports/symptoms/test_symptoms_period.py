"""The symptoms release's period summary, kept up to date one day at a time: the
incremental state gives exactly what a summary of the whole period gives, reads only new
or changed per-day files, and rebuilds when it is deleted, unreadable or stale."""

from __future__ import annotations

import os
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from dp_demo.geography import demo_regions
from support.dates import date_range
from support.day_records import digests, write_days
from support.symptoms_rows import CFG, SYMPTOMS, constructed_rows

from dp_ops.layout import DataRoot
from dp_ops.reports.symptoms import period
from dp_ops.reports.symptoms.assemble import build_candidate
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.matrix import from_rows
from dp_ops.reports.symptoms.period import PeriodSummary, load_period, state_file, summarize

START = date(2020, 1, 1)  # a Wednesday


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    # Wed 1 Jan .. Fri 17 Jan: two complete weeks
    return constructed_rows(demo_regions(), date_range(START, date(2020, 1, 17)))


def _write(root: DataRoot, rows: pd.DataFrame, days: list[date]) -> None:
    """Write (and record in the ledger) the days' per-day files."""
    write_days(root, rows, days)


def _load(root: DataRoot, cfg: SymptomsConfig, days: list[date]) -> PeriodSummary:
    return load_period(root, cfg, days, digests(root))


def _same(a: PeriodSummary, b: PeriodSummary) -> None:
    assert a.days == b.days and a.mondays == b.mondays
    pd.testing.assert_frame_equal(a.cells.reset_index(drop=True), b.cells.reset_index(drop=True),
                                  check_dtype=False)
    np.testing.assert_array_equal(a.failed, b.failed)
    np.testing.assert_array_equal(a.b_sum, b.b_sum)
    for x, y in ((a.daily, b.daily), (a.weekly, b.weekly)):
        key = ["date", "cell"]
        pd.testing.assert_frame_equal(x.sort_values(key).reset_index(drop=True),
                                      y.sort_values(key).reset_index(drop=True),
                                      check_dtype=False)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[date]:
    """The days whose per-day file load_period reads (a spy: the real reader runs)."""
    seen: list[date] = []
    real = period._read_day

    def spy(root: DataRoot, day: date, *args: object) -> object:
        seen.append(day)
        return real(root, day, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(period, "_read_day", spy)
    return seen


def test_incremental_state_equals_the_whole_period(rows: pd.DataFrame, tmp_path: Path,
                                                   reads: list[date]) -> None:
    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 17)))
    for n in (1, 5, 12, 13, 17):  # day by day, across the end of each week
        summary = _load(root, CFG, date_range(START, date(2020, 1, n)))
        whole = summarize(from_rows(rows[rows["date"] < START + timedelta(days=n)]), CFG)
        _same(summary, whole)
    # each day read once; a week's seven days are read again only if the week completed
    # after they were summarized (here: the Sundays 12 and 19 Jan with their weeks)
    assert sorted(set(reads)) == date_range(START, date(2020, 1, 17))
    reads.clear()
    again = _load(root, CFG, date_range(START, date(2020, 1, 17)))
    assert reads == [], "an up-to-date state reads no per-day file"
    _same(again, summarize(from_rows(rows), CFG))


def test_a_rewritten_day_is_read_again_and_its_week_recomputed(
        rows: pd.DataFrame, tmp_path: Path, reads: list[date]) -> None:
    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 17)))
    _load(root, CFG, date_range(START, date(2020, 1, 17)))
    reads.clear()
    # an on-call rerun re-noised 8 Jan (in the week of Monday 6 Jan): its file is rewritten
    changed = rows.copy()
    on_day = changed["date"] == date(2020, 1, 8)
    changed.loc[on_day, "a_noisy"] += 500
    from dp_ops.reports.symptoms.daily import with_reliability

    changed = with_reliability(changed.drop(columns=["ratio", "lower", "upper", "reliable"]),
                               CFG)
    _write(root, changed, [date(2020, 1, 8)])
    summary = _load(root, CFG, date_range(START, date(2020, 1, 17)))
    assert set(reads) == {date(2020, 1, 6) + timedelta(days=i) for i in range(7)}
    _same(summary, summarize(from_rows(changed), CFG))


def test_a_deleted_or_unreadable_state_is_rebuilt(rows: pd.DataFrame, tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 10)))
    first = _load(root, CFG, date_range(START, date(2020, 1, 10)))
    path = state_file(root)
    path.write_bytes(b"not a state")
    _same(_load(root, CFG, date_range(START, date(2020, 1, 10))), first)
    path.unlink()
    _same(_load(root, CFG, date_range(START, date(2020, 1, 10))), first)
    assert path.is_file()


def test_another_reliability_rule_rebuilds_the_state(rows: pd.DataFrame, tmp_path: Path,
                                                     reads: list[date]) -> None:
    from dataclasses import replace

    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 10)))
    _load(root, CFG, date_range(START, date(2020, 1, 10)))
    reads.clear()
    stricter = replace(CFG, reliability_tolerance=0.2)
    _load(root, stricter, date_range(START, date(2020, 1, 10)))
    assert sorted(set(reads)) == date_range(START, date(2020, 1, 10))


def test_a_shorter_period_forgets_the_days_after_it(rows: pd.DataFrame,
                                                    tmp_path: Path) -> None:
    """A day's file deleted (the period now ends before it): the summary is that of the
    days that remain."""
    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 17)))
    _load(root, CFG, date_range(START, date(2020, 1, 17)))
    _same(_load(root, CFG, date_range(START, date(2020, 1, 9))),
          summarize(from_rows(rows[rows["date"] < date(2020, 1, 10)]), CFG))


def test_the_release_from_the_state_equals_the_release_from_the_rows(
        rows: pd.DataFrame, tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 17)))
    regions = demo_regions()
    scaling = pd.DataFrame({"region_id": pd.Series(dtype="str"),
                            "resolution": pd.Series(dtype="str"),
                            "c": pd.Series(dtype="float64"),
                            "first_release_last_date": pd.Series(dtype="str")})
    a = build_candidate(_load(root, CFG, date_range(START, date(2020, 1, 17))), regions, SYMPTOMS,
                        CFG, scaling)
    b = build_candidate(rows, regions, SYMPTOMS, CFG, scaling)
    assert len(a.daily) > 0 and len(a.weekly) > 0
    pd.testing.assert_frame_equal(a.daily, b.daily)
    pd.testing.assert_frame_equal(a.weekly, b.weekly)
    assert a.counts == b.counts


def test_an_edited_day_file_is_refused_not_read(rows: pd.DataFrame, tmp_path: Path) -> None:
    """Issue 31, attack 2: a per-day file rewritten behind the pipeline's back (here in
    place, same size and inode, mtime put back: what a stamp cache would have trusted) is
    refused by the next load, naming the file, instead of being summarized."""
    from dp_ops.errors import DerivedStateTampered

    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 3)))
    state_file(root).unlink(missing_ok=True)
    path = root.report_file("symptoms", date(2020, 1, 2))
    before = path.stat()
    changed = rows[rows["date"] == date(2020, 1, 2)].sort_values(
        ["level", "region_id", "symptom"]).reset_index(drop=True)
    changed["reliable"] = ~changed["reliable"]
    import pyarrow.parquet as pq

    data = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(changed, preserve_index=False), data)
    with open(path, "r+b") as fh:  # in place: same inode
        fh.write(data.getvalue().to_pybytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(DerivedStateTampered, match=r"date=2020-01-02.*not the .* the ledger "
                                                   r"recorded"):
        _load(root, CFG, date_range(START, date(2020, 1, 3)))


def test_an_edited_state_is_rebuilt_not_used(rows: pd.DataFrame, tmp_path: Path,
                                            reads: list[date]) -> None:
    """Issue 31: the period state is a cache in the data root. Rewritten with other values
    (here: every failed bit cleared, so every value would pass) its MAC no longer
    verifies: it is rebuilt from the verified per-day files, and the summary is exact."""
    root = DataRoot(tmp_path)
    _write(root, rows, date_range(START, date(2020, 1, 10)))
    first = _load(root, CFG, date_range(START, date(2020, 1, 10)))
    state = period._load(state_file(root))
    assert state is not None
    state.failed_bits = {d: np.zeros_like(v) for d, v in state.failed_bits.items()}
    raw = state_file(root).read_bytes()
    period._save(state_file(root), state)  # a well-formed state...
    forged = state_file(root).read_bytes()[:-64] + raw[-64:]  # ...under the old MAC
    state_file(root).write_bytes(forged)
    reads.clear()
    _same(_load(root, CFG, date_range(START, date(2020, 1, 10))), first)
    assert sorted(set(reads)) == date_range(START, date(2020, 1, 10))  # rebuilt from every day
