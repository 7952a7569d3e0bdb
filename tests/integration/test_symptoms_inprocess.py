"""The symptoms chain end to end in-process (the CLI's path), on small synthetic data:
Google's header, the ledger's 1.68 per user-day, reruns that spend nothing, and an
on-call re-noise of one region that leaves the rest of the release untouched."""

from __future__ import annotations

import json
import math
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest
from support.approvals import approve_renoise
from support.cached_roots import GeneratedRoots
from support.dates import date_range
from support.pipeline_helpers import verify_release
from support.report_steps import SYMPTOMS_STEPS as steps
from support.report_steps import run_days

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import read_regions
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.steps.noise_request import RunRequest
from dp_ops.steps.noising import region_chain

pytestmark = [pytest.mark.slow, pytest.mark.integration]

START, END = date(2020, 1, 1), date(2020, 1, 21)
HEADER_FILE = Path(__file__).resolve().parents[1] / "data" / "google_weekly_symptoms_header.csv"
DAILY = "2020_DM_daily_symptoms_dataset.csv"
WEEKLY = "2020_DM_weekly_symptoms_dataset.csv"


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory,
             generated_roots: GeneratedRoots) -> dict[str, object]:
    root = DataRoot(generated_roots.copy(tmp_path_factory.mktemp("symptoms_inprocess") / "data",
                                         users=30000, seed=11, start=START, end=END))
    cfg = SymptomsConfig()
    url = f"sqlite:///{root.root / 'ledger.sqlite'}"
    run_days(steps, root, cfg,
             date_range(START, END), RunRequest(run_id="first"), ledger_url=url)
    return {"root": root, "cfg": cfg, "url": url}


def _latest(pipeline: dict[str, object]) -> Path:
    root = pipeline["root"]
    assert isinstance(root, DataRoot)
    return root.latest_release("symptoms")


def _spends(pipeline: dict[str, object]) -> list:
    ledger = Ledger(str(pipeline["url"]))
    try:
        return ledger.spends("symptoms")
    finally:
        ledger.dispose()


def test_release_files_have_googles_header(pipeline: dict[str, object]) -> None:
    google = HEADER_FILE.read_text(encoding="utf-8").strip()
    latest = _latest(pipeline)
    for name in (DAILY, WEEKLY):
        assert (latest / name).read_text(encoding="utf-8").splitlines()[0] == google
        assert (latest / name.replace(".csv", ".parquet")).is_file()
    weekly = pd.read_csv(latest / WEEKLY, dtype=str, keep_default_na=False)
    assert len(weekly) > 0
    assert sorted(weekly["date"].unique()) == ["2020-01-06", "2020-01-13"]  # whole weeks
    values = weekly.iloc[:, 8:].replace("", float("nan")).astype(float).stack().dropna()
    assert len(values) > 0
    assert (values >= 0).all()
    # two decimals at most
    text = weekly.iloc[:, 8:].stack()
    assert text[text != ""].str.fullmatch(r"\d+(\.\d{1,2})?").all()


def test_ledger_spends_exactly_the_configured_total(pipeline: dict[str, object]) -> None:
    spends = _spends(pipeline)
    per_day: dict[date, list[float]] = {}
    for s in spends:
        per_day.setdefault(s.slot.day, []).append(s.epsilon)
    assert sorted(per_day) == date_range(START, END)
    for eps in per_day.values():
        assert len(eps) == 6  # A and B at three levels
        assert math.isclose(math.fsum(eps), 1.68, rel_tol=1e-12)
    manifest = json.loads((_latest(pipeline) / "manifest.json").read_text())
    assert manifest["epsilon"]["per_user_day_max"] == 1.68
    assert manifest["epsilon"]["delta"] == 0
    assert set(manifest["files"]) >= {DAILY, WEEKLY, "series_resolution.parquet",
                                      "index.html", "charts/DM.png"}
    verify_release(_latest(pipeline).resolve())  # every file listed, with its checksum
    page = (_latest(pipeline) / "index.html").read_text(encoding="utf-8")
    assert "1.68" in page and '<img src="charts/DM.png"' in page


def test_every_cell_of_the_domain_was_noised(pipeline: dict[str, object]) -> None:
    root = pipeline["root"]
    assert isinstance(root, DataRoot)
    rows = pd.read_parquet(root.report_file("symptoms", END))
    regions = read_regions(root.regions_csv)
    assert len(rows) == len(regions) * 422
    assert rows["a_noisy"].notna().all() and rows["b_noisy"].notna().all()


def test_rerun_spends_nothing_and_gives_the_same_files(pipeline: dict[str, object]) -> None:
    root, cfg, url = pipeline["root"], pipeline["cfg"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, SymptomsConfig)
    before = _spends(pipeline)
    csvs = {n: (_latest(pipeline) / n).read_bytes() for n in (DAILY, WEEKLY)}
    run_days(steps, root, cfg, date_range(END - timedelta(days=2), END),
             RunRequest(run_id="second"), ledger_url=str(url))
    assert _spends(pipeline) == before
    for name, content in csvs.items():
        assert (_latest(pipeline) / name).read_bytes() == content


def test_region_renoise_spends_through_the_ledger_and_touches_only_that_region(
        pipeline: dict[str, object]) -> None:
    root, cfg, url = pipeline["root"], pipeline["cfg"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, SymptomsConfig)
    regions = read_regions(root.regions_csv)
    region = "DM-01-001"  # the capital city
    chain_codes = set(regions.set_index("region_id").loc[
        [rid for _, rid in region_chain(regions, region)], "open_covid_region_code"])
    before_spends = _spends(pipeline)
    before = {n: pd.read_csv(_latest(pipeline) / n, dtype=str, keep_default_na=False)
              for n in (DAILY, WEEKLY)}
    scaling = pd.read_parquet(root.scaling_file("symptoms"))
    reason = "integration test: corrected raw data"
    approve_renoise(root, str(url), steps.noise_plan(root, cfg), END, region, reason,
                    run_id="oncall")
    run_days(steps, root, cfg,
             [END], RunRequest(run_id="oncall", region=region, renoise=True,
                                                reason=reason), ledger_url=str(url))
    new = [s for s in _spends(pipeline) if s not in before_spends]
    assert len(new) == 6 and all(s.kind == "renoise" and s.reason == reason for s in new)
    assert {s.slot.region_scope for s in new} == {rid for _, rid in region_chain(regions, region)}
    assert pd.read_parquet(root.scaling_file("symptoms")).equals(scaling)
    for name, old in before.items():
        now = pd.read_csv(_latest(pipeline) / name, dtype=str, keep_default_na=False)
        others_old = old[~old["open_covid_region_code"].isin(chain_codes)]
        others_now = now[~now["open_covid_region_code"].isin(chain_codes)]
        pd.testing.assert_frame_equal(others_old.reset_index(drop=True),
                                      others_now.reset_index(drop=True))
    manifest = json.loads((_latest(pipeline) / "manifest.json").read_text())
    assert math.isclose(manifest["epsilon"]["per_user_day_max"], 1.68 + 1.68, rel_tol=1e-9)
    assert manifest["epsilon"]["dates_over_normal_run"] == [END.isoformat()]


def test_evaluation_against_the_truth(pipeline: dict[str, object]) -> None:
    """Realised accuracy of the published values on this 30,000-user population.

    The rule's promise is per value and unconditional (P(published and off by more than
    25%) <= 50%). What a reader sees is the share of *published* values within 25%,
    which also depends on how many near-empty cells pass by luck. Measured here (fresh
    noise each run): daily ~81% (~660 values), weekly 63-66% at levels 0-1 (~250
    values), and 39% at level 2, where near-empty municipality cells dominate (a known
    limitation of a per-value rule: docs/design.md, Not yet built; printed, not
    asserted). The asserted shares sit at least 4 standard errors above 50% (SE <= 0.032
    for >= 240 values), so a correct pipeline fails with probability < 1e-4."""
    from dp_demo.evaluation import evaluate_symptoms

    root = pipeline["root"]
    assert isinstance(root, DataRoot)
    result = evaluate_symptoms(root)
    print(result.describe())
    assert result.published["weekly"] >= 200
    assert result.within_25["daily"] >= 0.5
    cov = result.coverage
    weekly = cov.xs("weekly", level="resolution")
    upper = weekly.loc[weekly.index.isin([0, 1])]
    shares = (upper["published"] * upper["within_25_truth"]).sum() / upper["published"].sum()
    assert upper["published"].sum() >= 150
    assert shares >= 0.5
    every = (cov["published"] * cov["within_25_truth"]).sum() / cov["published"].sum()
    assert every >= 0.5
    assert result.series["weekly"] + result.series.get("daily", 0) == 74 * 422 - 422
    text = result.describe()
    assert "within +/-25%" in text
