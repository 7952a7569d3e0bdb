"""A method update end to end in-process: the new method counts parks 1.3 times as high from
an effective date; after the update the published parks series has no jump there."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.approvals import approve_method_update
from support.cached_roots import GeneratedRoots
from support.dates import date_range
from support.report_steps import MOBILITY_STEPS as steps
from support.report_steps import run_days

from dp_ops.engine.files import write_parquet_atomic
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.method_update import (
    MethodUpdate,
    comparison_window,
    read_method_updates,
)
from dp_ops.reports.mobility.new_methods import ScaledCounts
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.reports.registry import BoundReport
from dp_ops.steps.noise_request import RunRequest
from dp_ops.steps.result import StepResult

pytestmark = [pytest.mark.slow, pytest.mark.integration]

START, END = date(2020, 1, 1), date(2020, 4, 19)
# a Monday whose comparison window (2020-03-16..04-12) is after the baseline window and
# whose week before and week after both fall in the generator's lockdown (from 2020-03-11)
EFFECTIVE = date(2020, 4, 13)
FACTOR = 1.3
NEW_METHOD = ScaledCounts.for_categories(["parks"], FACTOR)


@pytest.fixture(scope="module")
def updated(tmp_path_factory: pytest.TempPathFactory,
            generated_roots: GeneratedRoots) -> dict[str, object]:
    root = DataRoot(generated_roots.copy(tmp_path_factory.mktemp("method_update") / "data",
                                         users=20_000, seed=5, start=START, end=END))
    cfg = MobilityConfig()
    url = f"sqlite:///{root.root / 'ledger.sqlite'}"
    original = BoundReport.bound

    def bound_with_new_method(self: BoundReport[MobilityConfig], day: date, *,
                              shard: int | None = None) -> StepResult:
        # Production from the effective date runs the new method: its bounded aggregates
        # are the old ones recomputed by the new method (the same recomputation the update
        # applies to the comparison window).
        result = original(self, day, shard=shard)
        if day >= EFFECTIVE:
            path = self.root.bounded_file("mobility", day)
            new = NEW_METHOD.recompute(pq.read_table(path).to_pandas())
            write_parquet_atomic(pa.Table.from_pandas(new, preserve_index=False), path)
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BoundReport, "bound", bound_with_new_method)
        run_days(steps, root, cfg,
                 date_range(START, EFFECTIVE - timedelta(days=1)),
                 RunRequest(run_id="daily-1"), ledger_url=url)
        last_old = root.report_file("mobility", EFFECTIVE - timedelta(days=1)).read_bytes()
        ledger = Ledger(url)
        before_update = ledger.spends()
        approve_method_update(
            root, url, cfg, MethodUpdate(
                method_version="v2", effective_date=EFFECTIVE, categories=("parks",),
                method=ScaledCounts.for_categories(["parks"], FACTOR),
                reason="parks classifier v2"), run_id="update")
        form = MethodUpdateForm("v2", EFFECTIVE, ["parks"], FACTOR, "parks classifier v2")
        result = steps.method_update(root, cfg, form, run_id="update", ledger_url=url)
        after_update = ledger.spends()
        rerun = steps.method_update(root, cfg, form, run_id="update-again", ledger_url=url)
        after_rerun = ledger.spends()
        ledger.dispose()
        run_days(steps, root, cfg,
                 date_range(EFFECTIVE, END), RunRequest(run_id="daily-2"),
                 ledger_url=url)
    return {"root": root, "cfg": cfg, "url": url, "last_old": last_old,
            "before": before_update, "after": after_update, "after_rerun": after_rerun,
            "summaries": (result.summary, rerun.summary)}


def _country_parks(root: DataRoot) -> pd.Series:
    release = pd.read_csv(root.latest_release("mobility") / "Global_Mobility_Report.csv",
                          dtype={"sub_region_1": str}, keep_default_na=False)
    country = release[release["sub_region_1"] == ""].set_index("date")
    return pd.to_numeric(country["parks_percent_change_from_baseline"], errors="coerce")


def test_published_parks_series_has_no_jump_at_the_effective_date(
        updated: dict[str, object]) -> None:
    root = updated["root"]
    assert isinstance(root, DataRoot)
    parks = _country_parks(root)
    week_before = [d.isoformat() for d in date_range(EFFECTIVE - timedelta(days=7),
                                                     EFFECTIVE - timedelta(days=1))]
    week_after = [d.isoformat() for d in date_range(EFFECTIVE, EFFECTIVE + timedelta(days=6))]
    assert parks.loc[week_before + week_after].notna().all()
    jump = parks.loc[week_after].mean() - parks.loc[week_before].mean()
    # Without the update the week after would sit ~30 points higher (the country's
    # factors below are ~1.3). With it, the change of the week means is sampling and noise
    # only: country parks counts are in the thousands a day, so the synthetic day-to-day
    # variation of a weekly mean is about 1 point, the factor's (4-day sums, noise scale
    # ~45 against sums of >10,000) well under 1, and the daily noise (epsilon 0.44) is
    # negligible; a jump over 8 points is more than 5 standard deviations out (false
    # failure < 1e-6), while a missing or wrong scaling fails by ~30.
    assert abs(jump) < 8, (jump, parks.loc[week_before + week_after].tolist())

    factors = read_method_updates(root, Ledger(str(updated["url"])))
    assert factors is not None
    country = factors[(factors["level"] == 0) & (factors["category"] == "parks")]
    assert len(country) == 7
    assert country["factor"].between(FACTOR - 0.1, FACTOR + 0.1).all()
    # the release says which update scales it
    manifest = json.loads((root.latest_release("mobility") / "manifest.json").read_text())
    (applied,) = manifest["method_updates"]
    assert applied["effective_date"] == EFFECTIVE.isoformat()
    assert applied["categories"] == ["parks"]


def test_update_spends_a_tenth_on_the_window_once_and_leaves_earlier_days(
        updated: dict[str, object]) -> None:
    root, cfg = updated["root"], updated["cfg"]
    assert isinstance(root, DataRoot) and isinstance(cfg, MobilityConfig)
    before, after, after_rerun = updated["before"], updated["after"], updated["after_rerun"]
    assert isinstance(before, list) and isinstance(after, list)
    new = [s for s in after if s not in before]
    assert {s.kind for s in new} == {"method_update"}
    assert {s.slot.day for s in new} == set(comparison_window(EFFECTIVE))
    assert sum(s.epsilon for s in new) == pytest.approx(
        28 * len(cfg.levels) * cfg.method_update_fraction * cfg.budget("places").epsilon)
    assert after_rerun == after  # the rerun reused the stored factors
    summaries = updated["summaries"]
    assert isinstance(summaries, tuple) and "reused" in summaries[1]
    # the update did not touch days before the effective date
    last_old = root.report_file("mobility", EFFECTIVE - timedelta(days=1)).read_bytes()
    assert last_old == updated["last_old"]
    # every date's composed epsilon stays under the cap
    url = updated["url"]
    assert isinstance(url, str)
    ledger = Ledger(url)
    assert max(ledger.totals("mobility").values()) <= cfg.cap
    ledger.dispose()
