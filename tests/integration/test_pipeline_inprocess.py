"""The mobility chain end to end in-process (the CLI's path), on small synthetic data."""

from __future__ import annotations

import filecmp
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from support.approvals import approve_renoise
from support.cached_roots import GeneratedRoots
from support.dates import date_range
from support.pipeline_helpers import verify_release
from support.report_steps import MOBILITY_STEPS as steps
from support.report_steps import run_days

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.regions import read_regions, write_regions
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.spec import SPEC
from dp_ops.steps.ingest import ingest_sources
from dp_ops.steps.noise_request import NoiseRequest, RunRequest
from dp_ops.steps.noising import load_noisy_cells

pytestmark = [pytest.mark.slow, pytest.mark.integration]

START, END = date(2020, 1, 1), date(2020, 2, 17)
EMPTY_REGION = "DM-01-999"
GOOGLE_HEADER = (
    "country_region_code,country_region,sub_region_1,sub_region_2,metro_area,"
    "iso_3166_2_code,census_fips_code,place_id,date,"
    "retail_and_recreation_percent_change_from_baseline,"
    "grocery_and_pharmacy_percent_change_from_baseline,parks_percent_change_from_baseline,"
    "transit_stations_percent_change_from_baseline,workplaces_percent_change_from_baseline,"
    "residential_percent_change_from_baseline"
)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory,
             generated_roots: GeneratedRoots) -> dict[str, object]:
    root = DataRoot(generated_roots.copy(tmp_path_factory.mktemp("inprocess") / "data",
                                         users=4000, seed=11, start=START, end=END))
    # a public region nobody visits: delta = 0 needs its cells noised all the same
    regions = read_regions(root.regions_csv)
    parent = regions[regions["region_id"] == "DM-01"].iloc[0]
    extra = parent.copy()
    extra["region_id"], extra["parent_id"], extra["level"] = EMPTY_REGION, "DM-01", 2
    extra["sub_region_2"], extra["area_km2"] = "Emptyville", 25.0
    extra["place_id"] = "ChIJemptyvilleemptyvill00"
    write_regions(pd.concat([regions, extra.to_frame().T], ignore_index=True), root.regions_csv)
    cfg = MobilityConfig()
    url = f"sqlite:///{root.root / 'ledger.sqlite'}"
    run_days(steps, root, cfg,
             date_range(START, END), RunRequest(run_id="first"), ledger_url=url)
    return {"root": root, "cfg": cfg, "url": url}


def test_release_has_googles_exact_header(pipeline: dict[str, object]) -> None:
    root = pipeline["root"]
    assert isinstance(root, DataRoot)
    latest = root.latest_release("mobility")
    with open(latest / "Global_Mobility_Report.csv", "rb") as fh:
        assert fh.readline() == (GOOGLE_HEADER + "\n").encode()
    per_country = latest / "Region_Mobility_Report_CSVs" / "2020_DM_Region_Mobility_Report.csv"
    with open(per_country, "rb") as fh:
        assert fh.readline() == (GOOGLE_HEADER + "\n").encode()
    release = pd.read_csv(latest / "Global_Mobility_Report.csv", dtype=str, keep_default_na=False)
    assert set(release["date"]) == {"2020-02-15", "2020-02-16", "2020-02-17"}
    values = release.iloc[:, 9:].stack()
    assert values[values != ""].str.fullmatch(r"-?\d+").all()  # integers or empty


def test_region_without_users_still_gets_noisy_cells(pipeline: dict[str, object]) -> None:
    root, url = pipeline["root"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(url, str)
    ledger = Ledger(url)
    day = date(2020, 2, 3)
    cells = load_noisy_cells(root, "mobility", day, ledger.spends("mobility", day))
    empty = cells[cells["region_id"] == EMPTY_REGION]
    assert len(empty) == 11  # 7 place categories, workplaces, residential x2, contributors
    # it is in the report domain and never published (too few DP-contributing users)
    rows = pq.read_table(root.report_file("mobility", date(2020, 2, 16))).to_pandas()
    row = rows[rows["region_id"] == EMPTY_REGION].iloc[0]
    assert not row["publish_row"] and row["row_reason"] == "contributors_under_minimum"


def test_small_region_never_published(pipeline: dict[str, object]) -> None:
    root = pipeline["root"]
    assert isinstance(root, DataRoot)
    regions = read_regions(root.regions_csv)
    small = regions.loc[regions["area_km2"] < 3, "place_id"]
    assert len(small) >= 1
    release = pd.read_csv(root.latest_release("mobility") / "Global_Mobility_Report.csv",
                          dtype=str, keep_default_na=False)
    assert not release["place_id"].isin(small).any()


def test_rerun_spends_nothing_and_reproduces_the_release(pipeline: dict[str, object],
                                                         tmp_path: Path) -> None:
    root, cfg, url = pipeline["root"], pipeline["cfg"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, MobilityConfig)
    assert isinstance(url, str)
    ledger = Ledger(url)
    before = ledger.spends()
    first = (root.latest_release("mobility") / "Global_Mobility_Report.csv").read_bytes()
    release_dir = root.latest_release("mobility").resolve()
    run_days(steps, root, cfg,
             date_range(date(2020, 2, 14), END), RunRequest(run_id="second"),
             ledger_url=url)
    assert ledger.spends() == before  # nothing spent: stored noise reused
    latest = root.latest_release("mobility")
    # the release id names the staged files' checksums, charts included: same release
    assert latest.resolve() == release_dir
    assert (latest / "Global_Mobility_Report.csv").read_bytes() == first
    assert filecmp.cmp(latest / "Global_Mobility_Report.csv",
                       latest / "Global_Mobility_Report.csv")
    # every date's composed epsilon is one normal run
    for (_, _day), eps in ledger.totals("mobility").items():
        assert eps == pytest.approx(cfg.run_epsilon)


def test_release_page_and_charts_are_listed_in_the_manifest(
        pipeline: dict[str, object]) -> None:
    root = pipeline["root"]
    assert isinstance(root, DataRoot)
    latest = root.latest_release("mobility").resolve()
    manifest = verify_release(latest)  # every file listed, with its checksum
    drawn = sorted(n for n in manifest["files"] if n.startswith("charts/"))
    assert "index.html" in manifest["files"] and "charts/DM.png" in drawn
    page = (latest / "index.html").read_text(encoding="utf-8")
    for name in drawn:
        assert f'<img src="{name}"' in page
    assert 'href="Global_Mobility_Report.csv"' in page
    # the Data Docs site is named under the data root, never linked out of the release
    assert "GX Data Docs" in page and "gx/" in page and 'href="../' not in page


def test_renoise_of_one_region_spends_and_changes_only_its_chain(
        pipeline: dict[str, object]) -> None:
    root, cfg, url = pipeline["root"], pipeline["cfg"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, MobilityConfig)
    assert isinstance(url, str)
    day = END
    ledger = Ledger(url)
    before_cells = load_noisy_cells(root, "mobility", day, ledger.spends("mobility", day))
    regions = read_regions(root.regions_csv)
    region = str(regions.loc[regions["level"] == 2, "region_id"].iloc[3])
    ingest_sources(root, SPEC.sources, day)
    steps.bound_contributions(root, cfg, day)
    approve_renoise(root, url, steps.noise_plan(root, cfg), day, region,
                    "raw data corrected", run_id="oncall")
    steps.noise(root, cfg, NoiseRequest(day=day, run_id="oncall", region=region, renoise=True,
                                        reason="raw data corrected"), ledger_url=url)
    spent = ledger.spent("mobility", day)
    assert spent == pytest.approx(2 * cfg.run_epsilon)  # the region's three levels again
    after_cells = load_noisy_cells(root, "mobility", day, ledger.spends("mobility", day))
    merged = before_cells.merge(after_cells, on=["level", "region_id", "metric"])
    changed = merged[merged["spend_id_x"] != merged["spend_id_y"]]
    parent = regions.set_index("region_id").loc[region, "parent_id"]
    assert set(changed["region_id"]) == {region, parent, "DM"}
    renoises = [s for s in ledger.spends("mobility", day) if s.kind == "renoise"]
    assert {s.reason for s in renoises} == {"raw data corrected"}


def test_gate_records_the_day_files_it_validated(pipeline: dict[str, object]) -> None:
    # what lets the next daily gate check only its new day with GX: each report day's
    # file, by sha256, under the rules it passed
    from dp_ops.gx.validated import validated_files
    from dp_ops.reports.mobility.suites import row_rules
    from dp_ops.steps.day_files import release_days
    from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
    from dp_ops.steps.release import sha256_file

    root, cfg, url = pipeline["root"], pipeline["cfg"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, MobilityConfig)
    assert isinstance(url, str)
    with closing_ledger(open_ledger(root, url)) as ledger:
        recorded = validated_files(root.gx_dir, "mobility", row_rules(cfg), key=ledger.key())
        public, digests = release_days(ledger, "mobility", cfg.first_public_date)
    assert all(digests[d] == sha256_file(root.report_file("mobility", d)) for d in public)
    assert public and set(recorded) == {d.isoformat() for d in public}
    assert all(recorded[d.isoformat()] == sha256_file(root.report_file("mobility", d))
               for d in public)


def test_a_gate_beside_a_twin_copies_its_staged_release(
        pipeline: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 16: backfill gates started together see the same report days; the second
    # copies the first's staged files and gate result instead of validating them again
    import json
    import shutil

    from dp_ops.reports.mobility import release, suites
    from dp_ops.steps import release_flow
    from dp_ops.steps.release import read_staged

    root, cfg, url = pipeline["root"], pipeline["cfg"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, MobilityConfig)
    assert isinstance(url, str)
    validations: list[str] = []
    real = suites.validate_mobility_release

    def counted(*args: object, **kwargs: object) -> object:
        validations.append(str(kwargs["run_name"]))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(suites, "validate_mobility_release", counted)
    try:
        release_flow.stage_and_validate(release.PARTS, root, cfg, run_id="twin-a", ledger_url=url)
        result = release_flow.stage_and_validate(release.PARTS, root, cfg, run_id="twin-b",
                                                 ledger_url=url)
        assert validations == ["mobility-twin-a"]
        assert "is the one run twin-a staged from the same inputs" in result.summary
        a_dir, b_dir = release.staging_dir(root, "twin-a"), release.staging_dir(root, "twin-b")
        a, b = (read_staged(d) for d in (a_dir, b_dir))
        assert a is not None and b is not None
        assert b.reused_from == "twin-a" and b.files == a.files
        assert filecmp.cmpfiles(a_dir / "release", b_dir / "release", list(a.files),
                                shallow=False)[0] == sorted(a.files)
        # the same files under the same accounting are one release: twin-b's publish
        # leaves twin-a's in place
        release_flow.publish_staged(release.PARTS, root, cfg, run_id="twin-a", ledger_url=url)
        latest = (root.latest_release("mobility") / "manifest.json").read_text()
        done = release_flow.publish_staged(release.PARTS, root, cfg, run_id="twin-b",
                                           ledger_url=url)
        assert json.loads(latest)["release_id"] in done.summary and done.event is None
        assert (root.latest_release("mobility") / "manifest.json").read_text() == latest
    finally:
        for run in ("twin-a", "twin-b"):
            shutil.rmtree(release.staging_dir(root, run), ignore_errors=True)


def test_failed_gate_keeps_the_previous_release_and_leaves_data_docs(
        pipeline: dict[str, object]) -> None:
    from dp_ops.errors import GateFailed
    from dp_ops.steps.day_files import write_day_file
    from dp_ops.steps.ledger_binding import closing_ledger, open_ledger

    root, cfg, url = pipeline["root"], pipeline["cfg"], pipeline["url"]
    assert isinstance(root, DataRoot) and isinstance(cfg, MobilityConfig)
    assert isinstance(url, str)
    latest = root.latest_release("mobility")
    before = latest.resolve()
    csv_before = (latest / "Global_Mobility_Report.csv").read_bytes()
    # a faulty report step marks the 1.8 km^2 town as publishable on the last day
    report_file = root.report_file("mobility", END)
    rows = pq.read_table(report_file).to_pandas()
    small = rows["area_km2"] < cfg.min_area_km2
    assert small.any()
    rows.loc[small, "publish_row"] = True
    rows.loc[small, "parks_percent_change_from_baseline"] = 5
    import pyarrow as pa

    # written as the (faulty) step writes: recorded in the ledger, so it is read
    with closing_ledger(open_ledger(root, url)) as ledger:
        write_day_file(root, ledger, "mobility", END,
                       pa.Table.from_pandas(rows, preserve_index=False))
    try:
        with pytest.raises(GateFailed, match="area_km2") as failure:
            steps.gate(root, cfg, run_id="faulty", ledger_url=url)
        docs = str(failure.value).split("Data Docs: ")[1].split()[0]
        assert Path(docs).is_file()
        assert latest.resolve() == before
        assert (latest / "Global_Mobility_Report.csv").read_bytes() == csv_before
        with pytest.raises(Exception, match="gate step must pass"):
            steps.publish(root, cfg, run_id="faulty", ledger_url=url)
        assert latest.resolve() == before
    finally:
        steps.report(root, cfg, END, ledger_url=url)  # the corrected step restores it
