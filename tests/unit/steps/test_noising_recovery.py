"""Reading the current noisy values (``load_noisy_cells``): after a crashed re-noise, and
only from the very files the ledger recorded. No test here is statistical."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dp_ops.engine.files import store_first_wins
from dp_ops.errors import NoiseNotStored, NoiseTampered
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import ALL_REGIONS, Slot, Spend
from dp_ops.steps.noising import NOISE_SCHEMA, file_digest, load_noisy_cells, noise_file

DAY = date(2020, 3, 2)


def spend(spend_id: int, scope: str, generation: int, kind: str) -> Spend:
    return Spend(spend_id, Slot("mobility", DAY, 2, "visits", scope), generation, 0.1, kind,
                 "v1", f"run-{spend_id}", "", "2026-11-30T00:00:00+00:00")


def store(root: DataRoot, s: Spend, regions: list[str], value: int) -> Spend:
    """Store ``s``'s values; return ``s`` as the ledger then holds it (with the record)."""
    n = len(regions)
    store_first_wins(pa.table({
        "level": pa.array([2] * n, pa.int8()), "region_id": regions,
        "metric": ["visits"] * n, "noisy_value": pa.array([value] * n, pa.int64()),
        "cell_epsilon": [0.1] * n, "sensitivity": pa.array([1] * n, pa.int64()),
        "spend_id": pa.array([s.id] * n, pa.int64()),
    }, schema=NOISE_SCHEMA), noise_file(root, s))
    return replace(s, **dict(zip(("stored_sha256", "stored_cells"),
                                 file_digest(noise_file(root, s)), strict=True)))


def values(root: DataRoot, spends: list[Spend]) -> dict[str, int]:
    cells = load_noisy_cells(root, "mobility", DAY, spends)
    return dict(zip(cells["region_id"], cells["noisy_value"], strict=True))


def test_a_superseded_unstored_renoise_is_skipped(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    base = spend(1, ALL_REGIONS, 0, "noise")
    crashed = spend(2, "R1", 0, "renoise")  # paid, its run died before storing
    redone = spend(3, "R1", 1, "renoise")   # a new run asked again
    base = store(root, base, ["R1", "R2"], 10)
    redone = store(root, redone, ["R1"], 30)
    assert values(root, [base, crashed, redone]) == {"R1": 30, "R2": 10}


def test_the_latest_spend_without_values_is_an_error_naming_it(tmp_path: Path) -> None:
    root = DataRoot(tmp_path)
    base = spend(1, ALL_REGIONS, 0, "noise")
    crashed = spend(2, "R1", 0, "renoise")
    base = store(root, base, ["R1", "R2"], 10)
    with pytest.raises(NoiseNotStored, match="ledger spend 2 .*Rerun the noise step"):
        values(root, [base, crashed])  # never falls back silently to the older value


def test_an_unrecorded_file_is_never_read(tmp_path: Path) -> None:
    """Issue 31, attack 1's reading side: a file at the path of a spend the ledger holds no
    record for (planted: zeros would publish the true sums) is refused, not read."""
    root = DataRoot(tmp_path)
    base = spend(1, ALL_REGIONS, 0, "noise")
    store(root, base, ["R1", "R2"], 0)  # on disk, but `base` carries no record
    with pytest.raises(NoiseNotStored, match="never read unrecorded"):
        values(root, [base])


def test_an_edited_value_is_refused_though_the_cell_count_is_kept(tmp_path: Path) -> None:
    """A stored noise file with one value edited (a zero would publish a true value) and its
    cell count kept is refused by its sha256: the cell count alone would let it through."""
    root = DataRoot(tmp_path)
    base = store(root, spend(1, ALL_REGIONS, 0, "noise"), ["R1", "R2"], 10)
    path = noise_file(root, base)
    table = pq.read_table(path)
    at = table.schema.get_field_index("noisy_value")
    edited = path.with_name("edited.parquet")
    pq.write_table(table.set_column(at, "noisy_value", pa.array([10, 0], pa.int64())), edited)
    os.replace(edited, path)
    digest, cells = file_digest(path)
    assert cells == base.stored_cells == 2 and digest != base.stored_sha256
    with pytest.raises(NoiseTampered, match=r"ledger spend 1 \(.*is not the file stored for "
                                            r"it \(sha256 [0-9a-f]{16}\.\.\., 2 cells"):
        values(root, [base])
