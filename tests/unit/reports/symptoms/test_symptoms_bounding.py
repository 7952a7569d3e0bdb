"""Symptoms contribution bounding (include/sql/symptoms/bound_contributions.sql) keeps
every user-day within the bounds the noise step's sensitivities assume: per level one
region, once in B, at most once per symptom and in at most k symptoms."""

from __future__ import annotations

from datetime import date

import duckdb
import pandas as pd
import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dp_ops.engine.duckdb import register_ancestors
from dp_ops.reports.symptoms.bounding import (
    bounded_contributions_sql,
    bounding_params,
    cell_aggregates_sql,
)
from dp_ops.reports.symptoms.config import SYMPTOM_CELL_PREFIX, VOLUME_CELL, SymptomsConfig

DAY = date(2020, 3, 2)
CFG = SymptomsConfig()
ANCESTORS = pd.DataFrame(
    [(f, 2, f) for f in ("A1", "A2", "B1")]
    + [(f, 1, f[0]) for f in ("A1", "A2", "B1")]
    + [(f, 0, "C") for f in ("A1", "A2", "B1")],
    columns=["finest_region_id", "level", "region_id"],
)
SYMPTOMS = ["Fever", "Cough", "Anosmia", "Ageusia", "Headache", "Nausea"]

search = st.tuples(
    st.sampled_from([f"u{i}" for i in range(5)]),
    st.sampled_from(["A1", "A2", "B1"]),
    st.one_of(st.none(), st.sampled_from(SYMPTOMS)),
)


def run_bounding(searches: list[tuple[str, str, str | None]], cfg: SymptomsConfig = CFG,
                 aggregate: bool = False) -> pd.DataFrame:
    con = duckdb.connect()
    register_ancestors(con, ANCESTORS)
    con.register("searches", pa.table({
        "user_id": pa.array([s[0] for s in searches], pa.string()),
        "region_id": pa.array([s[1] for s in searches], pa.string()),
        "symptom": pa.array([s[2] for s in searches], pa.string()),
    }))
    sql = cell_aggregates_sql("searches") if aggregate else bounded_contributions_sql("searches")
    return con.execute(sql, bounding_params(cfg, DAY)).df()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(search, min_size=0, max_size=60), st.integers(min_value=1, max_value=4))
# always tried, whatever the random draws: one user-day searching every symptom in one
# region, each bound k from 1 to 4 exceeded (a bound one too large must fail every run)
@example([("u0", "A1", s) for s in SYMPTOMS], 3)
@example([("u0", "A1", s) for s in SYMPTOMS] + [("u1", "B1", s) for s in SYMPTOMS[:2]], 1)
def test_no_user_day_exceeds_a_bound(searches: list[tuple[str, str, str | None]],
                                     k: int) -> None:
    cfg = SymptomsConfig(max_symptoms_per_day=k)
    out = run_bounding(searches, cfg)
    assert (out["value"] == 1).all()
    volume = out[out["metric"] == VOLUME_CELL]
    symptoms = out[out["metric"] != VOLUME_CELL]
    # once in B per level
    assert not volume.duplicated(["user_id", "level"]).any()
    # at most once per symptom cell, in at most k symptoms, and only in the B region
    assert not symptoms.duplicated(["user_id", "level", "metric"]).any()
    assert (symptoms.groupby(["user_id", "level"]).size() <= k).all()
    regions = volume.set_index(["user_id", "level"])["region_id"]
    for row in symptoms.itertuples():
        assert regions[(row.user_id, row.level)] == row.region_id
    # L1 change of one user-day per level: at most k in A and 1 in B
    per_user = out.groupby(["user_id", "level", out["metric"] == VOLUME_CELL])["value"].sum()
    assert (per_user <= k).all()
    # every searching user is in B at each level; nobody else is
    users = {s[0] for s in searches}
    assert set(volume["user_id"]) == users
    assert (volume.groupby("level").size() == len(users)).all() if users else volume.empty


def test_keeps_everything_within_the_bounds() -> None:
    searches = [("u1", "A1", "Fever"), ("u1", "A1", "Fever"), ("u1", "A1", None),
                ("u1", "A1", "Cough"), ("u2", "A2", None), ("u3", "B1", "Anosmia")]
    cells = run_bounding(searches, aggregate=True)
    got = {(r.level, r.region_id, r.metric): r.value for r in cells.itertuples()}
    assert got[(2, "A1", SYMPTOM_CELL_PREFIX + "Fever")] == 1  # repeated search counts once
    assert got[(2, "A1", SYMPTOM_CELL_PREFIX + "Cough")] == 1
    assert got[(1, "A", VOLUME_CELL)] == 2
    assert got[(0, "C", VOLUME_CELL)] == 3
    assert got[(0, "C", SYMPTOM_CELL_PREFIX + "Anosmia")] == 1


def test_drops_extra_symptoms_and_is_deterministic() -> None:
    searches = [("u1", "A1", s) for s in SYMPTOMS]
    first = run_bounding(searches)
    kept = first[(first["metric"] != VOLUME_CELL) & (first["level"] == 2)]
    assert len(kept) == CFG.max_symptoms_per_day
    second = run_bounding(list(reversed(searches)))
    assert first.sort_values(list(first.columns)).reset_index(drop=True).equals(
        second.sort_values(list(second.columns)).reset_index(drop=True))


def test_a_user_searching_in_two_regions_counts_in_the_busier_one() -> None:
    searches = [("u1", "A1", None), ("u1", "A1", "Fever"), ("u1", "B1", "Cough")]
    out = run_bounding(searches)
    level2 = out[out["level"] == 2]
    assert set(level2["region_id"]) == {"A1"}
    assert set(level2["metric"]) == {VOLUME_CELL, SYMPTOM_CELL_PREFIX + "Fever"}
    # at the country level both searches are in one region and both symptoms count
    level0 = out[out["level"] == 0]
    assert set(level0["metric"]) == {VOLUME_CELL, SYMPTOM_CELL_PREFIX + "Fever",
                                     SYMPTOM_CELL_PREFIX + "Cough"}
