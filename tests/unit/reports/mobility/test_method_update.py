"""Method updates (dp_ops.reports.mobility.method_update): grouping, s_g / s_n arithmetic, ledger
spends, reuse on rerun, refusal past the cap, and how reports apply the factors."""

from __future__ import annotations

import shutil
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.geography import demo_regions
from support.approvals import approve_method_update, approve_renoise
from support.report_steps import MOBILITY_STEPS as steps

from dp_ops.engine.files import write_parquet_atomic
from dp_ops.errors import (
    ApprovalMissing,
    BadRequest,
    BudgetExceeded,
    DerivedStateTampered,
    LedgerError,
    MethodUpdateError,
    NoiseNotStored,
    NoiseTampered,
    PolicyMismatch,
)
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.privacy.noise import noise_generator, sample_discrete_laplace
from dp_ops.regions import write_regions
from dp_ops.reports.mobility import method_update_step
from dp_ops.reports.mobility.config import GROUP_CELLS, MobilityConfig
from dp_ops.reports.mobility.method_update import (
    GROUP_KEYS,
    MethodUpdate,
    apply_method_updates,
    comparison_window,
    group_sums,
    plan_requests,
    read_method_updates,
    scaling_factors,
    to_categories,
)
from dp_ops.reports.mobility.method_update_step import run_method_update
from dp_ops.reports.mobility.new_methods import ScaledCounts
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.steps import noising as core_noising
from dp_ops.steps.noise_request import NoiseRequest

EFFECTIVE = date(2020, 3, 9)  # a Monday; window 2020-02-10 .. 2020-03-08 (after the baseline)
FACTOR = 1.3


def parks_update(version: str = "v2", factor: float = FACTOR,
                 categories: tuple[str, ...] = ("parks",)) -> MethodUpdate:
    return MethodUpdate(method_version=version, effective_date=EFFECTIVE,
                        categories=categories,
                        method=ScaledCounts.for_categories(categories, factor),
                        reason="parks classifier v2")


# -- pure parts ---------------------------------------------------------------------------

def test_comparison_window_is_four_whole_weeks_before_the_effective_date() -> None:
    window = comparison_window(EFFECTIVE)
    assert len(window) == 28
    assert window[-1] == EFFECTIVE - timedelta(days=1)
    assert window == sorted(window) and len(set(window)) == 28
    assert sorted(pd.Series([d.weekday() for d in window]).value_counts().tolist()) == [4] * 7


def test_group_sums_and_factors_on_constructed_data() -> None:
    # two regions, parks and the three retail-and-recreation cells; known values per day
    frames = {}
    for i, day in enumerate(comparison_window(EFFECTIVE)):
        frames[day] = pd.DataFrame({
            "level": [0, 0, 0, 0, 1],
            "region_id": ["DM", "DM", "DM", "DM", "DM-01"],
            "metric": ["places_parks", "places_retail", "places_recreation",
                       "places_eateries", "places_parks"],
            "noisy_value": [100 + i, 10, 20, 30, -5],
        })
    sums = group_sums(frames, "noisy_value")
    # one row per (level, region, metric, weekday); each sums that weekday's 4 days
    assert len(sums) == 5 * 7
    monday = sums[(sums["region_id"] == "DM") & (sums["metric"] == "places_parks")
                  & (sums["weekday"] == 0)]
    mondays = [i for i, d in enumerate(comparison_window(EFFECTIVE)) if d.weekday() == 0]
    assert int(monday["noisy_value"].iloc[0]) == sum(100 + i for i in mondays)
    cats = to_categories(sums.rename(columns={"noisy_value": "s_g"}),
                          ["parks", "retail_and_recreation"], "s_g")
    retail = cats[(cats["category"] == "retail_and_recreation") & (cats["level"] == 0)]
    assert set(retail["s_g"]) == {4 * (10 + 20 + 30)}

    s_g = cats.assign(g_cells=4, g_epsilon=0.44, g_sensitivity=1)
    s_n = cats.rename(columns={"s_g": "s_n"}).assign(n_cells=1, n_epsilon=0.044,
                                                     n_sensitivity=1)
    s_n["s_n"] = np.where(s_n["category"] == "parks", s_n["s_n"] * 13 // 10, s_n["s_n"])
    out = scaling_factors(s_g, s_n, alpha=0.0125)
    country_parks = out[(out["category"] == "parks") & (out["level"] == 0)]
    np.testing.assert_allclose(country_parks["factor"],
                               country_parks["s_n"] / country_parks["s_g"])
    assert (country_parks["factor_lo"] < country_parks["factor"]).all()
    assert (country_parks["factor"] < country_parks["factor_hi"]).all()
    assert (out["factor_alpha"] == 0.0125).all()
    np.testing.assert_allclose(out.loc[out["category"] == "retail_and_recreation", "factor"], 1)
    # a non-positive sum has no factor (the group is suppressed from the effective date)
    assert out.loc[out["region_id"] == "DM-01", "factor"].isna().all()


def test_factor_interval_by_test_inversion_covers_the_true_factor() -> None:
    """The factor's hull at level alpha covers the true factor in >= 1 - alpha of draws
    (module docstring, Intervals). 2000 draws at alpha = 5% (a looser level than the
    pipeline's, so misses are observable): a correct hull misses at most 5%, so the
    observed rate exceeds 7% with probability < 1e-4 (binomial); fixed key."""
    rng = noise_generator(key=77)
    n = 2000
    key = {"level": np.zeros(n, np.int8), "region_id": [f"R{i}" for i in range(n)],
           "category": "parks", "weekday": np.zeros(n, np.int8)}
    true_g, true_n = 400, 520  # 4 days x 100 visits; the new method counts 30% more
    s_g = pd.DataFrame(key | {"s_g": true_g + sample_discrete_laplace(
        n, epsilon=0.44, sensitivity=1, rng=rng) + sample_discrete_laplace(
        n, epsilon=0.44, sensitivity=1, rng=rng) + sample_discrete_laplace(
        n, epsilon=0.44, sensitivity=1, rng=rng) + sample_discrete_laplace(
        n, epsilon=0.44, sensitivity=1, rng=rng), "g_cells": 4, "g_epsilon": 0.44,
        "g_sensitivity": 1})
    s_n = pd.DataFrame(key | {"s_n": true_n + sample_discrete_laplace(
        n, epsilon=0.044, sensitivity=1, rng=rng), "n_cells": 1, "n_epsilon": 0.044,
        "n_sensitivity": 1})
    out = scaling_factors(s_g, s_n, alpha=0.05)
    covered = (out["factor_lo"] <= true_n / true_g) & (true_n / true_g <= out["factor_hi"])
    assert covered.mean() >= 0.93
    assert out["factor_hi"].lt(np.inf).all()


def test_factor_without_positive_sums_is_nan() -> None:
    key = {"level": [0, 0], "region_id": ["DM", "DM"], "category": ["parks", "parks"],
           "weekday": [0, 1]}
    s_g = pd.DataFrame(key | {"s_g": [0, 100], "g_cells": 4, "g_epsilon": 0.44,
                              "g_sensitivity": 1})
    s_n = pd.DataFrame(key | {"s_n": [130, -3], "n_cells": 1, "n_epsilon": 0.044,
                              "n_sensitivity": 1})
    out = scaling_factors(s_g, s_n, alpha=0.0125)
    assert out[["factor", "factor_lo", "factor_hi"]].isna().all(axis=None)


def test_scaled_counts_recompute_and_sensitivity() -> None:
    method = ScaledCounts.for_categories(["parks"], 1.3)
    bounded = pd.DataFrame({"level": [0, 0], "region_id": ["DM", "DM"],
                            "metric": ["places_parks", "workplaces"], "value": [10, 10]})
    assert method.recompute(bounded)["value"].tolist() == [13, 10]
    assert method.sensitivity("places_parks", 1) == 2  # round(1.3 (x + 1)) - round(1.3 x)
    assert method.sensitivity("workplaces", 1) == 1
    assert ScaledCounts.for_categories(["parks"], 0.8).sensitivity("places_parks", 1) == 1


def test_update_request_is_validated() -> None:
    with pytest.raises(MethodUpdateError, match="residential"):
        parks_update(categories=("residential",))
    with pytest.raises(MethodUpdateError, match="method_version"):
        parks_update(version="../v2")
    with pytest.raises(MethodUpdateError, match="factor"):
        parks_update(factor=0.0)


def test_plan_spends_a_tenth_of_the_group_epsilon_on_every_window_date_and_level() -> None:
    cfg = MobilityConfig()
    requests = plan_requests(cfg, parks_update(categories=("parks", "workplaces")))
    window = comparison_window(EFFECTIVE)
    assert {r.slot.day for r in requests} == set(window)
    assert len(requests) == len(window) * len(cfg.levels) * 2
    by_group = {r.slot.metric: r.epsilon for r in requests}
    # places: a user-day touches at most 4 place cells per level, each at 0.1 x 0.44
    assert by_group["places"] == pytest.approx(0.1 * 4 * 0.44)
    assert by_group["workplaces"] == pytest.approx(0.1 * 0.44)


def _baseline() -> pd.DataFrame:
    rows = [{"level": 0, "region_id": "DM", "category": cat, "weekday": wd,
             "baseline": 100.0, "baseline_lo": 90.0, "baseline_hi": 110.0}
            for cat in ("parks", "workplaces") for wd in range(7)]
    return pd.DataFrame(rows).astype({"level": np.int8, "weekday": np.int8})


def _updates(version: str, effective: date, factor_by_weekday: dict[int, float]) -> pd.DataFrame:
    return pd.DataFrame([{"method_version": version, "effective_date": effective.isoformat(),
                          "level": 0, "region_id": "DM", "category": "parks", "weekday": wd,
                          "factor": f, "factor_lo": f - 0.1, "factor_hi": f + 0.1,
                          "factor_alpha": 0.0125}
                         for wd, f in factor_by_weekday.items()])


def test_reports_scale_the_baseline_only_from_the_effective_date() -> None:
    baseline = _baseline()
    frozen = baseline.copy()
    updates = _updates("v2", EFFECTIVE, {wd: 1.0 + wd / 10 for wd in range(7)})
    before = apply_method_updates(baseline, updates, EFFECTIVE - timedelta(days=1))
    assert (before[["factor", "factor_lo", "factor_hi"]] == 1.0).all(axis=None)
    assert (before["factor_alpha"] == 0.0).all()
    for day in (EFFECTIVE, EFFECTIVE + timedelta(days=3)):
        after = apply_method_updates(baseline, updates, day)
        parks = after[after["category"] == "parks"].set_index("weekday")
        wd = day.weekday()
        assert parks.loc[wd, "factor"] == pytest.approx(1 + wd / 10)
        assert parks.loc[wd, "factor_lo"] == pytest.approx(1 + wd / 10 - 0.1)
        assert parks.loc[wd, "factor_hi"] == pytest.approx(1 + wd / 10 + 0.1)
        assert parks.loc[wd, "factor_alpha"] == pytest.approx(0.0125)
        assert parks.loc[wd, "baseline"] == 100.0  # the baseline itself is not rescaled
        work = after[after["category"] == "workplaces"]
        assert (work[["factor", "factor_lo", "factor_hi"]] == 1.0).all(axis=None)
    pd.testing.assert_frame_equal(baseline, frozen)  # the stored baseline is never changed


def test_a_scaled_group_without_a_factor_is_suppressed() -> None:
    after = apply_method_updates(_baseline(), _updates("v2", EFFECTIVE, {0: 1.2}), EFFECTIVE)
    parks = after[after["category"] == "parks"].set_index("weekday")
    assert parks.loc[0, "factor"] == pytest.approx(1.2)
    assert parks.loc[1:, "factor"].isna().all()


# -- the step, on a small data root --------------------------------------------------------

TRUE_PARKS = 50_000  # large counts: the noise is tiny against them (see the bound below)


@pytest.fixture(scope="module")
def noised_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root whose comparison window is bounded (known true cells) and noised, with
    its ledger inside; built once, copied per test."""
    base = tmp_path_factory.mktemp("method_update") / "data"
    root = DataRoot(base)
    regions = demo_regions()
    write_regions(regions, root.regions_csv)
    cfg = MobilityConfig()
    url = f"sqlite:///{base / 'ledger.sqlite'}"
    metrics = [m for cells in GROUP_CELLS.values() for m in cells]
    for day in comparison_window(EFFECTIVE):
        cells = regions[["level", "region_id"]].merge(pd.DataFrame({"metric": metrics}),
                                                      how="cross")
        cells["value"] = np.where(cells["metric"] == "places_parks",
                                  TRUE_PARKS + 1000 * day.weekday(), 5000).astype(np.int64)
        cells["level"] = cells["level"].astype(np.int32)
        write_parquet_atomic(pa.Table.from_pandas(cells, preserve_index=False),
                             root.bounded_file("mobility", day))
        steps.noise(root, cfg, NoiseRequest(day=day, run_id="daily"), ledger_url=url)
    return base


@pytest.fixture
def noised_window(noised_template: Path, tmp_path: Path) -> dict[str, object]:
    base = tmp_path / "data"
    shutil.copytree(noised_template, base)
    return {"root": DataRoot(base), "cfg": MobilityConfig(),
            "url": f"sqlite:///{base / 'ledger.sqlite'}"}


def _approved_update(root: DataRoot, cfg: MobilityConfig, update: MethodUpdate, *,
                     run_id: str, url: str) -> object:
    """``run_method_update`` with an approval of this run's update recorded first."""
    approve_method_update(root, url, cfg, update, run_id=run_id)
    return run_method_update(root, cfg, update, run_id=run_id, ledger_url=url)


def _unpack(env: dict[str, object]) -> tuple[DataRoot, MobilityConfig, str]:
    root, cfg, url = env["root"], env["cfg"], env["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, MobilityConfig)
    assert isinstance(url, str)
    return root, cfg, url


def test_update_spends_method_update_on_every_window_date_and_stores_factors(
        noised_window: dict[str, object]) -> None:
    root, cfg, url = _unpack(noised_window)
    ledger = Ledger(url)
    _approved_update(root, cfg, parks_update(), run_id="mu", url=url)
    window = comparison_window(EFFECTIVE)
    for day in window:
        spends = [s for s in ledger.spends("mobility", day) if s.kind == "method_update"]
        assert sorted(s.slot.level for s in spends) == list(cfg.levels)
        assert {s.slot.metric for s in spends} == {"places"}
        assert {s.method_version for s in spends} == {"v2"}
        assert {s.reason for s in spends} == {"parks classifier v2"}
        for s in spends:
            assert s.epsilon == pytest.approx(cfg.method_update_fraction
                                              * cfg.budget("places").epsilon)
        assert ledger.spent("mobility", day) == pytest.approx(
            cfg.run_epsilon + 0.1 * 4 * 0.44 * len(cfg.levels))
        assert ledger.spent("mobility", day) <= cfg.cap
    assert not [s for s in ledger.spends("mobility", EFFECTIVE)]  # nothing after the window

    stored = read_method_updates(root, Ledger(url))
    assert stored is not None
    n_regions = len(demo_regions())
    assert len(stored) == n_regions * 7
    assert not stored.duplicated(GROUP_KEYS).any()
    assert set(stored["effective_date"]) == {EFFECTIVE.isoformat()}
    # Every group sums 4 days of >= 50,000 true parks visits. s_g's noise (4 draws at
    # epsilon 0.44, scale ~2.3) and s_n's (one draw at epsilon 0.044, sensitivity 2, scale
    # ~45) exceed 1,000 in absolute value with probability < exp(-1000/45.5) < 3e-10 per
    # group; over ~30 x 7 groups that is < 1e-7, and otherwise the factor is within
    # (1000 + 1.3 x 1000) / 200,000 < 0.02 of 1.3 (rounding of 1.3 x counts adds < 1e-5).
    np.testing.assert_allclose(stored["factor"], FACTOR, atol=0.02)
    true_g = 4 * (TRUE_PARKS + 1000 * stored["weekday"].to_numpy(dtype=np.int64))
    assert (np.abs(stored["s_g"] - true_g) < 1000).all()
    assert (np.abs(stored["s_n"] - np.floor(true_g * FACTOR / 4 + 0.5) * 4) < 1000).all()
    assert (stored["factor_lo"] <= stored["factor"]).all()
    assert (stored["factor"] <= stored["factor_hi"]).all()


def test_rerun_reuses_the_stored_factors_and_spends_nothing(
        noised_window: dict[str, object]) -> None:
    root, cfg, url = _unpack(noised_window)
    ledger = Ledger(url)
    _approved_update(root, cfg, parks_update(), run_id="mu", url=url)
    before = ledger.spends()
    stored = root.method_update_file("mobility", "v2").read_bytes()
    result = run_method_update(root, cfg, parks_update(), run_id="mu-retry", ledger_url=url)
    assert "reused" in result.summary
    assert ledger.spends() == before
    assert root.method_update_file("mobility", "v2").read_bytes() == stored
    # the same version with another update is refused rather than silently reused
    with pytest.raises(MethodUpdateError, match="already stored"):
        run_method_update(root, cfg, parks_update(factor=1.5), run_id="x", ledger_url=url)


@pytest.mark.slow
def test_a_crash_before_the_store_reuses_the_reserved_spends(
        noised_window: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    root, cfg, url = _unpack(noised_window)
    ledger = Ledger(url)

    def die(*_args: object, **_kwargs: object) -> bool:  # fault injection: the process dies
        raise SystemExit("killed after reserving, before the factors were recorded")

    monkeypatch.setattr(method_update_step, "store_recorded", die)
    with pytest.raises(SystemExit):
        _approved_update(root, cfg, parks_update(), run_id="mu", url=url)
    monkeypatch.undo()
    before = ledger.spends()
    assert any(s.kind == "method_update" for s in before)
    assert not root.method_update_file("mobility", "v2").exists()
    # another run draws s_n for the paid spends only with an approval of its own
    with pytest.raises(ApprovalMissing, match="no approval is recorded"):
        run_method_update(root, cfg, parks_update(), run_id="mu-retry", ledger_url=url)
    assert not root.method_update_file("mobility", "v2").exists()
    _approved_update(root, cfg, parks_update(), run_id="mu-retry", url=url)
    assert ledger.spends() == before
    assert root.method_update_file("mobility", "v2").is_file()


def test_a_deleted_or_edited_method_update_is_refused(noised_window: dict[str, object]) -> None:
    """Finding 6 (derived state): a method update's stored factors are recorded in the
    ledger; deleting or rewriting them is refused, never silently recomputed."""
    root, cfg, url = _unpack(noised_window)
    _approved_update(root, cfg, parks_update(), run_id="mu", url=url)
    target = root.method_update_file("mobility", "v2")
    table = pq.read_table(target).to_pandas()
    table["factor"] = table["factor"] * 10
    write_parquet_atomic(pa.Table.from_pandas(table, preserve_index=False), target)
    with pytest.raises(DerivedStateTampered, match="edited or swapped"):
        read_method_updates(root, Ledger(url))
    with pytest.raises(DerivedStateTampered):
        run_method_update(root, cfg, parks_update(), run_id="mu-2", ledger_url=url)
    target.unlink()
    with pytest.raises(DerivedStateTampered, match="is missing"):
        read_method_updates(root, Ledger(url))


def test_refused_past_the_cap_with_nothing_stored(noised_window: dict[str, object]) -> None:
    root, cfg, url = _unpack(noised_window)
    ledger = Ledger(url)
    tight = MobilityConfig(cap_override=cfg.run_epsilon + 0.1)  # less than the 0.528 needed
    approve_method_update(root, url, tight, parks_update(), run_id="mu")
    before = ledger.spends()
    # a configured cap alone changes nothing: the ledger's recorded policy rules
    with pytest.raises(PolicyMismatch, match="cap: recorded"):
        run_method_update(root, tight, parks_update(), run_id="mu", ledger_url=url)
    ledger.set_policy("mobility", cap=tight.cap, reason="test: a tight cap", run_id="test")
    with pytest.raises(BudgetExceeded, match="cap"):
        run_method_update(root, tight, parks_update(), run_id="mu", ledger_url=url)
    assert ledger.spends() == before
    assert not root.method_update_file("mobility", "v2").exists()
    assert read_method_updates(root, Ledger(url)) is None


def test_a_window_that_is_not_noised_is_refused_before_any_spend(tmp_path: Path) -> None:
    root = DataRoot(tmp_path / "data")
    write_regions(demo_regions(), root.regions_csv)
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(NoiseNotStored):
        run_method_update(root, MobilityConfig(), parks_update(), run_id="mu", ledger_url=url)
    assert Ledger(url).spends() == []


# -- requests refused before any spend (issue 14, findings 7, 8, 10) -----------------------

def _spend_count(url: str) -> int:
    ledger = Ledger(url)
    try:
        return len(ledger.spends("mobility"))
    finally:
        ledger.dispose()


@pytest.mark.parametrize("factor", [1e10, 1e308, 0.01, float("nan")])
def test_an_implausible_factor_is_refused_before_any_spend(
        noised_window: dict[str, object], factor: float) -> None:
    """Finding 7: factor 1e10 published -100 everywhere, 1e308 crashed after spending."""
    root, cfg, url = _unpack(noised_window)
    before = _spend_count(url)
    with pytest.raises(MethodUpdateError, match="method_update_factor_range"):
        steps.method_update(root, cfg, MethodUpdateForm("v9", EFFECTIVE, ["parks"], factor,
                                                        "test"), run_id="mu", ledger_url=url)
    assert _spend_count(url) == before
    assert not root.method_update_file("mobility", "v9").exists()


def test_the_demo_method_says_it_is_a_demo() -> None:
    assert ScaledCounts.for_categories(["parks"], 1.2).describe().startswith("demo method")


def _renoise(env: dict[str, object], day: date, *, run_id: str, repeat: bool = False,
             cfg: MobilityConfig | None = None) -> str:
    """A re-noise of DM-01 on ``day`` by ``run_id``, approved."""
    root, default, url = _unpack(env)
    approve_renoise(root, url, steps.noise_plan(root, cfg or default), day, "DM-01",
                    "test: bad source file", run_id=run_id, repeat=repeat)
    return steps.noise(root, cfg or default, NoiseRequest(day=day, run_id=run_id,
                                                                region="DM-01", renoise=True,
                                                                repeat_renoise=repeat,
                                                                reason="test: bad source file"),
                                                                ledger_url=url).summary


def test_a_renoise_of_a_day_never_published_is_refused(noised_window: dict[str, object]
                                                       ) -> None:
    """Finding 8: a re-noise inside the baseline window spent 8.58 for values that are
    never published. Any day before the first public date is refused, nothing spent."""
    _, _, url = _unpack(noised_window)
    before = _spend_count(url)
    with pytest.raises(BadRequest, match="before the first public date"):
        _renoise(noised_window, date(2020, 2, 3), run_id="oncall-1")
    assert _spend_count(url) == before


def test_a_second_renoise_of_a_region_day_needs_the_recorded_override(
        noised_window: dict[str, object]) -> None:
    """Finding 8: the country was re-noised 3 times on one day. The second re-noise of a
    region-day is refused unless asked for explicitly, and the override is recorded."""
    _, _, url = _unpack(noised_window)
    day = EFFECTIVE - timedelta(days=7)
    _renoise(noised_window, day, run_id="oncall-1")
    after_first = _spend_count(url)
    _renoise(noised_window, day, run_id="oncall-1")  # a retry of the same run: reused
    assert _spend_count(url) == after_first
    with pytest.raises(BadRequest, match="already re-noised"):
        _renoise(noised_window, day, run_id="oncall-2")
    assert _spend_count(url) == after_first
    # the override passes the check; the cap (room for one re-noise by default) still
    # applies, so this test records a cap with room for two, then configures it
    roomier = MobilityConfig(cap_renoises=2)
    ledger = Ledger(url)
    try:
        ledger.set_policy("mobility", cap=roomier.cap, reason="test: room for 2 re-noises",
                          run_id="test")
        _renoise(noised_window, day, run_id="oncall-2", repeat=True, cfg=roomier)
        second = [s for s in ledger.spends("mobility", day) if s.run_id == "oncall-2"]
    finally:
        ledger.dispose()
    assert second and all(s.reason.startswith("[repeat re-noise] ") for s in second)


def test_the_ledger_refuses_forged_run_ids_and_reasons(noised_window: dict[str, object]
                                                       ) -> None:
    """Finding 10: a run id with a newline forged lines in `ledger --spends`; a reason
    could hold escapes and 100 KB. The ledger refuses them before writing anything,
    whoever calls it."""
    _, _, url = _unpack(noised_window)
    before = _spend_count(url)
    day = EFFECTIVE - timedelta(days=6)
    root, cfg, _ = _unpack(noised_window)
    for run_id, reason in (("daily\n2 | forged", "ok"), ("oncall", "\x1b[2Jcleared"),
                           ("oncall", "x" * 100_000)):
        with pytest.raises(BadRequest, match="run_id|reason"):
            steps.noise(root, cfg, NoiseRequest(day=day, run_id=run_id, region="DM-01",
                                                      renoise=True, reason=reason), ledger_url=url)
    assert _spend_count(url) == before


def test_an_effective_date_whose_window_overlaps_the_baseline_is_refused(
        noised_window: dict[str, object]) -> None:
    """Finding 7: an effective date whose 4-week comparison window overlaps the baseline
    window (2020-01-03..02-06) was accepted. Refused before any spend, naming the earliest
    effective date."""
    root, cfg, url = _unpack(noised_window)
    before = _spend_count(url)
    with pytest.raises(MethodUpdateError, match="earliest effective date is 2020-03-06"):
        form = MethodUpdateForm("v8", date(2020, 3, 2), ["parks"], 1.2, "test")
        steps.method_update(root, cfg, form, run_id="mu", ledger_url=url)
    assert _spend_count(url) == before


# -- stored noise bound to the ledger (issue 14, findings 1 and 2) ---------------------------

def test_deleted_noise_is_never_redrawn(noised_window: dict[str, object]) -> None:
    """Finding 1: deleting a date's noise files and running the pipeline drew fresh noise
    with no new spend. Now the noise step and every reader refuse, nothing is drawn or
    spent, and the message names the remedy."""
    root, cfg, url = _unpack(noised_window)
    day = EFFECTIVE - timedelta(days=3)
    files = sorted(root.noise_dir("mobility", day).glob("spend-*.parquet"))
    assert files
    before = _spend_count(url)
    for f in files:
        f.unlink()
    with pytest.raises(NoiseTampered, match="is missing; noise is never redrawn"):
        steps.noise(root, cfg, NoiseRequest(day=day, run_id="daily"), ledger_url=url)
    assert not any(root.noise_dir("mobility", day).glob("spend-*.parquet"))
    assert _spend_count(url) == before
    ledger = Ledger(url)
    try:
        with pytest.raises(NoiseTampered):
            core_noising.load_noisy_cells(root, "mobility", day, ledger.spends("mobility", day))
    finally:
        ledger.dispose()


def test_overwritten_noise_is_refused(noised_window: dict[str, object]) -> None:
    """Finding 2: overwriting the stored noise with the true bounded sums published
    them. Now any file that is not the one stored for the spend is refused on read."""
    root, cfg, url = _unpack(noised_window)
    day = EFFECTIVE - timedelta(days=3)
    target = sorted(root.noise_dir("mobility", day).glob("spend-*.parquet"))[0]
    table = pq.read_table(target).to_pandas()
    bounded = pq.read_table(root.bounded_file("mobility", day)).to_pandas()
    swapped = table.drop(columns=["noisy_value"]).merge(
        bounded.rename(columns={"value": "noisy_value"}).astype({"level": "int8"}),
        on=["level", "region_id", "metric"], how="left")
    swapped["noisy_value"] = swapped["noisy_value"].fillna(0).astype("int64")
    pq.write_table(pa.Table.from_pandas(swapped[table.columns], preserve_index=False),
                   target)
    ledger = Ledger(url)
    try:
        with pytest.raises(NoiseTampered, match="is not the file stored for it"):
            core_noising.load_noisy_cells(root, "mobility", day, ledger.spends("mobility", day))
    finally:
        ledger.dispose()
    with pytest.raises(NoiseTampered):
        steps.noise(root, cfg, NoiseRequest(day=day, run_id="daily"), ledger_url=url)


def test_the_ledger_records_each_stored_noise_once(noised_window: dict[str, object]) -> None:
    _, _, url = _unpack(noised_window)
    ledger = Ledger(url)
    try:
        spends = ledger.spends("mobility")
        assert spends and all(s.stored_sha256 and s.stored_cells for s in spends
                              if s.kind == "noise")
        first = spends[0]
        ledger.record_stored(first.id, str(first.stored_sha256), int(first.stored_cells or 0))
        with pytest.raises(LedgerError, match="never replaced"):
            ledger.record_stored(first.id, "0" * 64, 1)
    finally:
        ledger.dispose()
