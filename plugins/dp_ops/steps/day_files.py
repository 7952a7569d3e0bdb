"""Per-day report files bound to the ledger.

A report's per-day file (``report/<report>/date=<day>/rows.parquet``: the day's noisy
values and reliability decisions) is what every release of that day is assembled from.
Anyone who can write the data root could otherwise replace it with the true sums, and the
next gate would publish them. So:

- :func:`write_day_file` writes the rows to a pending file (its name carries a MAC under
  the ledger key of the record and the sha256: dp_ops.steps.pending), records its sha256
  in the ledger (``derived_state``, name ``day/<day>``; a rewrite, after a re-noise or a
  method update, records the next version), then moves it into place, under a per-report
  lock;
- :func:`read_day_files` reads each file once, checks those very bytes against the version
  the ledger recorded last, and parses them (no second open a swapped file could slip
  into). A missing or different file is refused, naming it and the remedy; a pending file
  holding the recorded version under the name its MAC gives (a writer between its record
  and its move, or crashed there) is moved into place first, and no other;
- :func:`recorded_days` says which days have a report at all: the ledger's records, not
  the files present, so a planted file for another day is never picked up.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.engine.files import (
    exclusive_lock,
    make_dirs,
    pending_path,
    read_as_recorded,
    write_parquet_beside,
)
from dp_ops.errors import DerivedStateTampered
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.steps.pending import pending_tag

DAY_RECORD = "day/"
_NAME_DAY = len(DAY_RECORD)


def day_record(day: date) -> str:
    return f"{DAY_RECORD}{day.isoformat()}"


def _day_tag(target: Path, report: str, day: date, sha256: str) -> str:
    return pending_tag(target, f"derived_state/{report}/{day_record(day)}", sha256)


def recorded_days(ledger: Ledger, report: str) -> dict[date, str]:
    """The sha256 the ledger recorded last for each day's report file of ``report``."""
    return {date.fromisoformat(name[_NAME_DAY:]): sha
            for name, sha in ledger.derived_current(report, DAY_RECORD).items()}


def write_day_file(root: DataRoot, ledger: Ledger, report: str, day: date,
                   table: pa.Table) -> Path:
    """Record, then store, ``day``'s report rows (see the module docstring)."""
    target = root.report_file(report, day)
    make_dirs(target.parent)
    tmp = write_parquet_beside(table, target)
    pending = tmp
    try:
        digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
        pending = pending_path(target, _day_tag(target, report, day, digest))
        os.replace(tmp, pending)
        # one writer of a report's day files at a time: the record and the move in the
        # same order for every writer, so the file in place is the version recorded last
        with exclusive_lock(root.root / "report" / f".{report}.write.lock"):
            name = day_record(day)
            ledger.record_derived(report, name, digest,
                                  replaces=ledger.derived_sha256(report, name))
            os.replace(pending, target)
    finally:
        tmp.unlink(missing_ok=True)
        pending.unlink(missing_ok=True)
    return target


def read_day_bytes(root: DataRoot, report: str, day: date, recorded: str | None) -> bytes:
    """The bytes of ``day``'s report file, checked against ``recorded`` (the sha256 the
    ledger holds for it); :class:`DerivedStateTampered` when there is no record, the file
    is missing, or it differs."""
    path = root.report_file(report, day)
    if recorded is None:
        raise DerivedStateTampered(
            f"{path}: the ledger recorded no report file for {report} {day}; a file there "
            "was not written by the pipeline and is never read. Run the report step for "
            "that day (it rebuilds the rows from the stored noise)")
    data = read_as_recorded(path, lambda b: hashlib.sha256(b).hexdigest() == recorded,
                            lambda: _day_tag(path, report, day, recorded))
    if data is None:
        raise DerivedStateTampered(
            f"{path} is missing; the ledger recorded sha256 {recorded[:16]}... for it. Run "
            "the report step for that day (it rebuilds the rows from the stored noise)")
    actual = hashlib.sha256(data).hexdigest()
    if actual != recorded:
        raise DerivedStateTampered(
            f"{path} has sha256 {actual[:16]}..., not the {recorded[:16]}... the ledger "
            f"recorded when the pipeline wrote it: it was edited or replaced. Nothing is "
            "published from it; run the report step for that day to rebuild it from the "
            "stored noise")
    return data


def read_day_files(root: DataRoot, report: str, days: Iterable[date],
                   recorded: Mapping[date, str],
                   columns: list[str] | None = None) -> list[pa.Table]:
    """Each of ``days``' report rows, verified (:func:`read_day_bytes`)."""
    return [pq.read_table(pa.BufferReader(read_day_bytes(root, report, d, recorded.get(d))),
                          columns=columns) for d in days]


def consecutive_days(recorded: Mapping[date, str], first: date) -> list[date]:
    """The unbroken run of recorded days from ``first`` (what a release covers)."""
    days = []
    day = first
    while day in recorded:
        days.append(day)
        day = date.fromordinal(day.toordinal() + 1)
    return days


def release_days(ledger: Ledger, report: str, first: date) -> tuple[list[date], dict[date, str]]:
    """The days a release from ``first`` covers (the unbroken run of recorded days) and the
    sha256 recorded for each."""
    recorded = recorded_days(ledger, report)
    days = consecutive_days(recorded, first)
    return days, {d: recorded[d] for d in days}


def read_release_days(root: DataRoot, ledger: Ledger, report: str, first: date,
                      columns: list[str] | None = None
                      ) -> tuple[list[date], dict[date, str], list[pa.Table]]:
    """:func:`release_days` and each day's verified rows. A report step recording a new
    version of a day while this reads is a race, not an attack: read again (three tries)."""
    for attempt in range(3):
        days, digests = release_days(ledger, report, first)
        try:
            return days, digests, read_day_files(root, report, days, digests, columns)
        except DerivedStateTampered:
            if attempt == 2 or release_days(ledger, report, first)[1] == digests:
                raise
    raise AssertionError("unreachable")
