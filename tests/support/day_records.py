"""Per-day report files written as the pipeline writes them: recorded in the ledger
(:mod:`dp_ops.steps.day_files`), for tests that build report days by hand."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

import pandas as pd
import pyarrow as pa

from dp_ops.layout import DataRoot
from dp_ops.steps.day_files import recorded_days, write_day_file
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger


def ledger_url(root: DataRoot) -> str:
    """The ledger these helpers use: the data root's default one."""
    return root.default_ledger_url


def write_days(root: DataRoot, rows: pd.DataFrame, days: Iterable[date] | None = None, *,
               report: str = "symptoms", url: str | None = None) -> None:
    """Write (and record) the per-day files of ``days`` (default: every date of ``rows``),
    each day's rows sorted as the report step sorts them."""
    keys = ["level", "region_id", "symptom"] if report == "symptoms" else ["level", "region_id"]
    wanted = sorted(set(rows["date"])) if days is None else list(days)
    root.root.mkdir(parents=True, exist_ok=True)
    with closing_ledger(open_ledger(root, url or ledger_url(root))) as ledger:
        for day in wanted:
            part = rows[rows["date"] == day].sort_values(keys).reset_index(drop=True)
            write_day_file(root, ledger, report, day,
                           pa.Table.from_pandas(part, preserve_index=False))


def digests(root: DataRoot, *, report: str = "symptoms",
            url: str | None = None) -> dict[date, str]:
    with closing_ledger(open_ledger(root, url or ledger_url(root))) as ledger:
        return recorded_days(ledger, report)
