"""Synthetic input of the ``app_sessions`` source of the test report ``sessions``
(tests/plugin_report/sessions_report): the public app list and, per day, one Parquet file
of sessions of users living in the finest regions of the data root's region table."""

from __future__ import annotations

from datetime import date

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.layout import DataRoot
from dp_ops.regions import read_regions

APPS = ("Maps", "Messages", "News", "Radio", "Weather")
SCHEMA = pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
                    ("app", pa.string()), ("minutes", pa.float64())])


def write_app_sessions(root: DataRoot, days: list[date], *, users: int, seed: int) -> None:
    """``reference/apps.txt`` and ``raw/app_sessions/date=D/part-0.parquet`` for ``days``:
    each user lives in one finest region (drawn by area) and has 0-4 sessions a day."""
    rng = np.random.default_rng(seed)
    regions = read_regions(root.regions_csv)
    finest = regions[~regions["region_id"].isin(regions["parent_id"])]
    weights = finest["area_km2"].to_numpy(dtype=float)
    home = rng.choice(finest["region_id"].to_numpy(), size=users, p=weights / weights.sum())
    root.reference_file("apps.txt").write_text("\n".join(APPS) + "\n")
    for day in days:
        counts = rng.integers(0, 5, size=users)
        who = np.repeat(np.arange(users), counts)
        table = pa.table({
            "user_id": [f"u{i:05d}" for i in who],
            "region_id": home[who].astype(str).tolist(),
            "app": rng.choice(APPS, size=len(who)).tolist(),
            "minutes": np.round(rng.gamma(2.0, 12.0, size=len(who)), 1),
        }, schema=SCHEMA)
        part = root.raw_partition("app_sessions", day)
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, part / "part-0.parquet")
