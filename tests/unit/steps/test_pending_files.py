"""Issue 48, route 3 (its last step): a ``.<name>.<x>.pending`` file planted beside a file
bound to the ledger, holding the recorded bytes, was moved into place by the reader. With
a record forged through the ledger's schema that is how the true sums were published.

Now a pending file is adopted only if its name carries the MAC under the ledger key of the
record it is bound to and the recorded sha256 (dp_ops.steps.pending), which nobody without
the key can compute: a planted one is never read, moved or removed, for every user of
pending files (stored noise, per-day report rows, derived state). A pending file the
pipeline wrote gets its area's mode when it is adopted. No test here is statistical.
"""

from __future__ import annotations

import hashlib
import io
import stat
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_ops.errors import DerivedStateTampered, NoiseTampered
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger, Spend
from dp_ops.privacy.ledger_schema import append
from dp_ops.steps import noising
from dp_ops.steps.day_files import read_day_bytes, write_day_file
from dp_ops.steps.derived import store_recorded, verify_recorded

DAY = date(2020, 3, 2)
TABLE = pa.table({"region_id": ["DM", "DM-1"], "noisy_value": [3, -1]})


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[tuple[DataRoot, Ledger]]:
    root = DataRoot(tmp_path / "data")
    root.root.mkdir()
    ledger = Ledger(root.default_ledger_url)
    try:
        yield root, ledger
    finally:
        ledger.dispose()


def _stored_spend(ledger: Ledger, data: bytes) -> Spend:
    """A spend whose stored noise is recorded as ``data`` (appended as the ledger does)."""
    with ledger.engine.begin() as conn:
        spend_id = append(conn, "budget_spend", {
            "report": "mobility", "day": DAY.isoformat(), "level": 0, "metric": "a",
            "region_scope": "*", "generation": 0, "epsilon": 0.5, "kind": "noise",
            "method_version": "v1", "run_id": "daily", "reason": "",
            "created_at": "2026-12-06T00:00:00+00:00"}, ledger.key())
    ledger.record_stored(spend_id, hashlib.sha256(data).hexdigest(), 2)
    (spend,) = ledger.spends()
    return spend


def _planted(target: Path, data: bytes) -> list[Path]:
    """The recorded bytes under pending names that carry no MAC of them: the name the
    writers used before (pid and a random part), and a tag made up by the attacker."""
    names = [f".{target.name}.4242-deadbeef.pending",
             f".{target.name}.{'0' * 32}.4242-deadbeef.pending"]
    for name in names:
        (target.parent / name).write_bytes(data)
    return sorted(target.parent / name for name in names)


def _pending_left(target: Path) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.*.pending"))


def test_route3_planted_pending_noise_is_not_adopted(home: tuple[DataRoot, Ledger]) -> None:
    """The stored noise moved away, the recorded bytes planted under pending names: the
    read is refused as missing, the planted files stay where they are, nothing is moved
    into place."""
    root, ledger = home
    data = _parquet(TABLE)
    spend = _stored_spend(ledger, data)
    target = noising.noise_file(root, spend)
    target.parent.mkdir(parents=True)
    planted = _planted(target, data)
    with pytest.raises(NoiseTampered, match="is missing"):
        noising.read_stored(target, spend)
    assert not target.exists() and _pending_left(target) == planted


def test_route3_planted_pending_day_rows_are_not_adopted(
        home: tuple[DataRoot, Ledger]) -> None:
    root, ledger = home
    target = write_day_file(root, ledger, "symptoms", DAY, TABLE)
    data = target.read_bytes()
    recorded = hashlib.sha256(data).hexdigest()
    target.unlink()
    planted = _planted(target, data)
    with pytest.raises(DerivedStateTampered, match="is missing"):
        read_day_bytes(root, "symptoms", DAY, recorded)
    assert not target.exists() and _pending_left(target) == planted


def test_route3_planted_pending_derived_state_is_not_adopted(
        home: tuple[DataRoot, Ledger]) -> None:
    root, ledger = home
    target = root.baseline_file("mobility")
    assert store_recorded(ledger, "mobility", "baseline", TABLE, target, frozen=True)
    data = target.read_bytes()
    target.unlink()
    planted = _planted(target, data)
    with pytest.raises(DerivedStateTampered, match="is missing"):
        verify_recorded(ledger, "mobility", "baseline", target)
    assert not target.exists() and _pending_left(target) == planted


def test_a_pending_file_the_pipeline_named_is_adopted_with_its_areas_mode(
        home: tuple[DataRoot, Ledger]) -> None:
    """A crash between the record and the move: the pending file named with the MAC of
    the recorded sha256 is moved into place, beside planted ones (left alone), and gets
    the area's mode whatever it was given: 0600 for stored noise (a private area), 0644
    for a day's report rows (public)."""
    from dp_ops.engine.files import pending_path
    from dp_ops.steps.pending import pending_tag

    root, ledger = home
    data = _parquet(TABLE)
    spend = _stored_spend(ledger, data)
    noise = noising.noise_file(root, spend)
    noise.parent.mkdir(parents=True)
    planted = _planted(noise, data)
    pending = pending_path(noise, pending_tag(noise, f"noise_store/{spend.id}",
                                              str(spend.stored_sha256)))
    pending.write_bytes(data)
    pending.chmod(0o644)
    assert noising.read_stored(noise, spend).equals(TABLE)
    assert noise.read_bytes() == data and stat.S_IMODE(noise.stat().st_mode) == 0o600
    assert _pending_left(noise) == planted

    day = write_day_file(root, ledger, "symptoms", DAY, TABLE)
    rows = day.read_bytes()
    recorded = hashlib.sha256(rows).hexdigest()
    day.unlink()
    pending = pending_path(day, pending_tag(day, f"derived_state/symptoms/day/{DAY}",
                                            recorded))
    pending.write_bytes(rows)
    pending.chmod(0o600)
    assert read_day_bytes(root, "symptoms", DAY, recorded) == rows
    assert stat.S_IMODE(day.stat().st_mode) == 0o644 and _pending_left(day) == []
