"""An on-call rerun request (:func:`dp_ops.reports.rerun.check_rerun_request`, the first
task of the ``*_region_rerun`` DAGs) is refused, before anything is ingested or spent,
for each field that cannot be served, with a :class:`RerunRequestError` that names the
field; a request that can be served is accepted.

The region is checked against the public region table of the data root: a region id not
in it (another report's or country's code, a typo, a malformed id) is refused. A region of
any level in the table, even one under ``min_area_km2`` whose own values are never
published, is accepted: a re-noise of a region re-noises its chain (the region and its
ancestors, :func:`dp_ops.steps.noising.region_chain`), whose larger regions are published.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest
from dp_demo.geography import demo_regions

from dp_ops import requests
from dp_ops.errors import BadRequest, RerunRequestError
from dp_ops.layout import DataRoot
from dp_ops.regions import write_regions
from dp_ops.reports.registry import AnyReport, load_report
from dp_ops.reports.rerun import check_rerun_request

PUBLIC_DAY = date(2020, 3, 2)  # after the mobility config's first public date
REASON = "raw data corrected upstream"


@pytest.fixture
def mobility(dp_data_root: Path, monkeypatch: pytest.MonkeyPatch) -> AnyReport:
    """Mobility bound to a data root with the demo region table, the baseline frozen and
    noise stored for PUBLIC_DAY and for the first metric date."""
    monkeypatch.delenv("DP_EXECUTION_CONFIG", raising=False)
    report = load_report("mobility")
    root: DataRoot = report.root
    write_regions(demo_regions(), root.regions_csv)
    for day in (PUBLIC_DAY, report.first_noised_date()):
        root.noise_dir("mobility", day).mkdir(parents=True)
        (root.noise_dir("mobility", day) / "cells.parquet").write_bytes(b"noise")
    root.baseline_file("mobility").parent.mkdir(parents=True)
    root.baseline_file("mobility").write_bytes(b"baseline")
    return report


def _refused(report: AnyReport, field: str, *, day: date = PUBLIC_DAY,
             region: str | None = "DM-01", renoise: bool = True,
             reason: str = REASON) -> str:
    """The refusal of the request, which must name ``field`` first."""
    with pytest.raises(RerunRequestError) as err:
        check_rerun_request(report, day, region, renoise, reason)
    assert str(err.value).startswith(f"{field}="), str(err.value)
    return str(err.value)


def test_a_request_that_can_be_served_is_accepted(mobility: AnyReport) -> None:
    assert check_rerun_request(mobility, PUBLIC_DAY, "DM-01-001", True, REASON) == (
        "rerun mobility 2020-03-02 region DM-01-001: re-noise (spends budget again)")
    assert check_rerun_request(mobility, PUBLIC_DAY, "DM", False, REASON).endswith(
        "region DM: reuse stored noise")


@pytest.mark.parametrize("region", [
    "DM-99",          # the country's pattern, not in the table
    "US-CA",          # another country's code
    "dm-01",          # a known id in the wrong case
    "DM-01-001 ",     # a known id with a trailing space
    "DM-01\nforged",  # a malformed id
    "../DM-01",
])
def test_a_region_not_in_the_public_table_is_refused(mobility: AnyReport, region: str
                                                    ) -> None:
    message = _refused(mobility, "region", region=region)
    assert str(mobility.root.regions_csv) in message and "\n" not in message


def test_a_region_named_by_another_column_of_the_table_is_refused(mobility: AnyReport
                                                                    ) -> None:
    """Only the region_id column names a region: a name, a parent id or a code held by
    another column of the same table is no region id."""
    region = demo_regions().set_index("region_id").loc["DM-01-001"]
    for other in (str(region["sub_region_1"]), str(region["sub_region_2"]),
                  str(region["country_region"]), str(region["place_id"])):
        assert other not in set(demo_regions()["region_id"]), other
        _refused(mobility, "region", region=other)


def test_no_region_is_refused(mobility: AnyReport) -> None:
    assert "required" in _refused(mobility, "region", region=None)


def test_every_level_of_the_table_and_a_region_under_the_minimum_area_are_accepted(
        mobility: AnyReport) -> None:
    """Their chains hold published regions (module docstring)."""
    regions = demo_regions()
    small = regions[regions["area_km2"] < mobility.cfg.min_area_km2]
    assert len(small) > 0, "the demo table should hold a region under the minimum area"
    for region in [*regions.groupby("level")["region_id"].first(), small["region_id"].iloc[0]]:
        assert f"region {region}:" in check_rerun_request(mobility, PUBLIC_DAY, region, True,
                                                          REASON)


def test_a_missing_region_table_is_refused(mobility: AnyReport) -> None:
    mobility.root.regions_csv.unlink()
    with pytest.raises(RerunRequestError, match="region table .* is missing"):
        check_rerun_request(mobility, PUBLIC_DAY, "DM-01", True, REASON)


def test_a_date_before_the_first_noised_date_is_refused(mobility: AnyReport) -> None:
    first = mobility.first_noised_date()
    assert "before the first metric date" in _refused(
        mobility, "date", day=first - timedelta(days=1), renoise=False)


def test_a_date_not_noised_yet_is_refused(mobility: AnyReport) -> None:
    assert "not noised yet" in _refused(mobility, "date", day=PUBLIC_DAY + timedelta(days=1))
    # a noise directory with nothing in it is not noised either
    empty = PUBLIC_DAY + timedelta(days=2)
    mobility.root.noise_dir("mobility", empty).mkdir(parents=True)
    assert "not noised yet" in _refused(mobility, "date", day=empty)


def test_a_date_that_needs_the_baseline_before_it_is_frozen_is_refused(
        mobility: AnyReport) -> None:
    mobility.root.baseline_file("mobility").unlink()
    assert "baseline is not frozen" in _refused(mobility, "date")


def test_a_renoise_of_a_date_never_published_is_refused(mobility: AnyReport) -> None:
    """Before the first public date, a re-noise would spend for nothing; reusing the
    stored noise is allowed."""
    first = mobility.first_noised_date()
    assert "spend budget for nothing" in _refused(mobility, "date", day=first)
    assert check_rerun_request(mobility, first, "DM-01", False, REASON).endswith(
        "reuse stored noise")


@pytest.mark.parametrize("reason", ["", "  ", "ab", "fix\nforged ledger line",
                                    "x" * 10_000])
def test_a_reason_that_says_nothing_or_forges_lines_is_refused(mobility: AnyReport,
                                                               reason: str) -> None:
    message = _refused(mobility, "reason", reason=reason)
    assert len(message) < 200 and "\n" not in message


def test_a_malformed_region_is_refused_before_anything_is_read() -> None:
    """The rerun DAG's form and the CLI parse the region first
    (:func:`dp_ops.airflow.runtime.parse_region` and ``dp-ops run --region`` call
    :func:`dp_ops.requests.region_id`); a well-formed id passes unchanged."""
    for region in ("DM-01\nforged", "../DM-01", "DM 01", "-DM", "R" * 65, ""):
        with pytest.raises(BadRequest, match=r"^region="):
            requests.region_id(region)
    assert requests.region_id("DM-01-001") == "DM-01-001"
