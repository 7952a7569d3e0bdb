"""``evaluate mobility|symptoms`` end to end on a tiny generated data root: the oracle's
tables agree with the release's own counts (report rows, manifest) and with each other.

The oracle's decisions depend only on the generator's (seeded) truth and the oracle's
fixed seed, not on the pipeline's noise, so the assertions on them are deterministic.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from dp_demo.evaluation import (
    COVERAGE_COLUMNS,
    MOBILITY_WITHIN,
    SYMPTOMS_WITHIN,
    evaluate_mobility,
    evaluate_symptoms,
)
from dp_demo.generator import generate
from support.dates import date_range
from support.report_steps import MOBILITY_STEPS as mobility_steps
from support.report_steps import SYMPTOMS_STEPS as symptoms_steps
from support.report_steps import run_days

from dp_ops.layout import DataRoot
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.estimates import CATEGORIES, COUNT_CATEGORY_CELLS
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.steps.noise_request import RunRequest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

START, MOBILITY_END, SYMPTOMS_END = date(2020, 1, 1), date(2020, 2, 18), date(2020, 1, 21)
DRAWS = 300


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> DataRoot:
    root = DataRoot(tmp_path_factory.mktemp("evaluation"))
    generate(root, START, MOBILITY_END, users=6000, seed=3)
    url = f"sqlite:///{root.root / 'ledger.sqlite'}"
    run_days(mobility_steps, root, MobilityConfig(), date_range(START, MOBILITY_END),
             RunRequest(run_id="eval"), ledger_url=url)
    run_days(symptoms_steps, root, SymptomsConfig(), date_range(START, SYMPTOMS_END),
             RunRequest(run_id="eval"), ledger_url=url)
    return root


def _shares_consistent(table: pd.DataFrame, within: tuple[str, ...]) -> None:
    assert list(table.columns) == [*COVERAGE_COLUMNS, *within]
    pd.testing.assert_series_equal(table["release_coverage"],
                                   table["published"] / table["eligible"], check_names=False)
    pd.testing.assert_series_equal(table["oracle_coverage"],
                                   table["oracle"] / table["eligible"], check_names=False)
    has_oracle = table["oracle"] > 0
    pd.testing.assert_series_equal(table.loc[has_oracle, "coverage_ratio"],
                                   (table["published"] / table["oracle"])[has_oracle],
                                   check_names=False)
    for col in ("release_of_oracle", *within):
        assert table[col].dropna().between(0, 1).all(), col


def test_mobility_oracle_tables(root: DataRoot) -> None:
    result = evaluate_mobility(root, draws=DRAWS)
    release = root.latest_release("mobility")
    manifest = json.loads((release / "manifest.json").read_text())
    days = date_range(date.fromisoformat(manifest["first_date"]),
                      date.fromisoformat(manifest["last_date"]))
    rows = pd.concat([pq.read_table(root.report_file("mobility", d)).to_pandas() for d in days])
    eligible = rows[rows["row_reason"].isin(["published", "all_values_unreliable"])]
    per_level = eligible.groupby("level").size()

    coverage = result.coverage
    _shares_consistent(coverage, MOBILITY_WITHIN)
    assert coverage.index.names == ["level", "category"]
    for (level, category), row in coverage.iterrows():
        assert category in CATEGORIES
        assert row["eligible"] == per_level.loc[level]
        column = eligible.loc[eligible["level"] == level,
                              f"{category}_percent_change_from_baseline"]
        assert row["published"] == column.notna().sum()
    # every published value is an eligible cell
    assert coverage["published"].sum() == result.published_values

    pooled = result.pooled
    _shares_consistent(pooled, MOBILITY_WITHIN)
    counts = coverage[coverage.index.get_level_values("category").isin(
        list(COUNT_CATEGORY_CELLS))]
    assert list(pooled.index) == ["all", *sorted(per_level.index)]
    for col in ("eligible", "published", "oracle"):
        assert pooled.loc["all", col] == counts[col].sum()
        for level in per_level.index:
            assert pooled.loc[level, col] == counts.loc[level, col].sum()
    # the national cells of 6,000 users are large: the oracle publishes them all, and
    # the smallest municipalities are not all publishable
    assert pooled.loc[0, "oracle_coverage"] == 1.0
    assert pooled.loc[2, "oracle_coverage"] < 1.0

    # the oracle's simulation has a fixed seed: the same decisions every time
    again = evaluate_mobility(root, draws=DRAWS)
    pd.testing.assert_frame_equal(again.coverage, coverage)
    text = result.describe()
    assert "oracle" in text and "pooled over the five count categories" in text


def test_symptoms_oracle_tables(root: DataRoot) -> None:
    result = evaluate_symptoms(root)
    release = root.latest_release("symptoms")
    manifest = json.loads((release / "manifest.json").read_text())
    series = pq.read_table(release / "series_resolution.parquet").to_pandas()
    n_days = len(date_range(START, SYMPTOMS_END))
    weeks = 2  # Monday 2020-01-06 and 2020-01-13: the complete weeks of 01-01..01-21

    coverage, pooled = result.coverage, result.pooled
    _shares_consistent(coverage, SYMPTOMS_WITHIN)
    _shares_consistent(pooled, SYMPTOMS_WITHIN)
    daily_series = int((series["resolution"] == "daily").sum())
    assert pooled.loc["weekly", "eligible"] == len(series) * weeks
    assert pooled.loc["weekly", "eligible"] == manifest["suppression"]["values"]["weekly"][
        "values"]
    if daily_series:
        assert pooled.loc["daily", "eligible"] == daily_series * n_days
    for res in ("daily", "weekly"):
        published = manifest["suppression"]["values"][res]["published"]
        assert pooled["published"].get(res, 0) == published == result.published[res]
    for res in pooled.index:
        part = coverage.xs(res, level="resolution")
        for col in ("eligible", "published", "oracle"):
            assert part[col].sum() == pooled.loc[res, col]
    # the national weekly values of the most searched symptoms are publishable
    assert coverage.loc[(0, "weekly"), "oracle"] > 0
    assert "oracle" in result.describe()


def test_cli_prints_the_oracle(root: DataRoot, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    from dp_ops import cli

    monkeypatch.setenv("DP_DATA_ROOT", str(root.root))
    assert cli.main(["evaluate", "mobility", "--draws", "100"]) == 0
    out = capsys.readouterr().out
    assert "pooled over the five count categories" in out and "evaluated in" in out
    assert cli.main(["evaluate", "symptoms"]) == 0
    out = capsys.readouterr().out
    assert "per resolution, every level" in out and "evaluated in" in out


def test_cli_writes_the_figures_as_json(root: DataRoot, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """``--json`` writes what ``describe`` prints as numbers (the demo's results file reads
    them): the same published count and shares, NaN as null."""
    from dp_ops import cli

    monkeypatch.setenv("DP_DATA_ROOT", str(root.root))
    out = tmp_path / "mobility.json"
    assert cli.main(["evaluate", "mobility", "--draws", "100", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    expected = evaluate_mobility(root, draws=100)
    assert figures["published_values"] == expected.published_values > 0
    assert figures["within_10_points"] == pytest.approx(expected.within_10_points)
    assert "all" in figures["pooled"][0].values()  # the first row pools every level
    assert figures["pooled"][0]["eligible"] == int(expected.pooled["eligible"].iloc[0])
    out = tmp_path / "symptoms.json"
    assert cli.main(["evaluate", "symptoms", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    sym = evaluate_symptoms(root)
    assert figures["published"] == sym.published
    assert figures["within_25"] == pytest.approx(sym.within_25)
    assert len(figures["coverage"]) == len(sym.coverage)


@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_a_release_past_the_truth_is_refused(
        root: DataRoot, report: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A release that covers days the truth does not (an earlier, longer demo on the same
    data root, then a shorter one regenerating the truth) is not evaluated: the
    comparison would count those days as misses. The command says which file and day."""
    import shutil

    from dp_demo.evaluation import SYMPTOMS_TRUTH_FILE, TRUTH_FILE, TruthMismatch

    from dp_ops import cli

    short = DataRoot(tmp_path / "root")
    shutil.copytree(root.root, short.root, symlinks=True)
    name = TRUTH_FILE if report == "mobility" else SYMPTOMS_TRUTH_FILE
    release = short.latest_release(report)
    last = date.fromisoformat(json.loads((release / "manifest.json").read_text())["last_date"])
    truth = pq.read_table(short.truth_dir / name).to_pandas()
    before = truth[pd.to_datetime(truth["date"]).dt.date < last]
    before.to_parquet(short.truth_dir / name, index=False)

    evaluate = evaluate_mobility if report == "mobility" else evaluate_symptoms
    with pytest.raises(TruthMismatch, match=f"no truth for 1 of its days \\(first {last}\\)"):
        evaluate(short)
    monkeypatch.setenv("DP_DATA_ROOT", str(short.root))
    assert cli.main(["evaluate", report]) == 2
    assert name in capsys.readouterr().err
