"""Unit tests of the mobility release gate (``dp_ops.gx``), run with Great Expectations.

Each validation runs two checkpoints and renders Data Docs, which is slow, so the frames
are small: 3 regions x 4 public days, plus unpublished baseline-window days
where a test needs them.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from support.dates import date_range  # noqa: E402

from dp_ops.errors import GateFailed
from dp_ops.gx import project, runner, validated  # noqa: E402
from dp_ops.gx.result import GateResult, require_pass  # noqa: E402
from dp_ops.reports.mobility import suites  # noqa: E402
from dp_ops.reports.mobility.config import MobilityConfig  # noqa: E402
from dp_ops.reports.mobility.report import (  # noqa: E402
    CHANGE_COLUMNS,
    INTERVAL_COLUMNS,
    PUBLISHED_COLUMNS,
)
from dp_ops.reports.mobility.suites import validate_mobility_release  # noqa: E402

CFG = MobilityConfig()
PARKS = "parks_percent_change_from_baseline"


@dataclass
class Release:
    internal: pd.DataFrame
    published: pd.DataFrame


def make_release(
    n_regions: int = 3,
    first: date = date(2020, 2, 16),
    last: date = date(2020, 2, 19),
    public_from: date = CFG.first_public_date,
) -> Release:
    """A valid release: every region on every day, published from ``public_from`` on."""
    days = date_range(first, last)
    rows = []
    for r in range(n_regions):
        for i, day in enumerate(days):
            rows.append(
                {
                    "country_region_code": "EE",
                    "country_region": "Estonia",
                    "sub_region_1": "" if r == 0 else f"County {r}",
                    "sub_region_2": "",
                    "metro_area": "",
                    "iso_3166_2_code": "" if r == 0 else f"EE-{30 + r}",
                    "census_fips_code": "",
                    "place_id": f"ChIJplace{r}",
                    "date": day.isoformat(),
                    **{c: (r + i + k) % 9 - 4 for k, c in enumerate(CHANGE_COLUMNS)},
                    **{f"{c}_{end}": (r + i + k) % 9 - 4 + step
                       for k, c in enumerate(CHANGE_COLUMNS)
                       for end, step in (("low", -3), ("high", 4))},
                    "region_id": f"EE-{r}",
                    "level": 0 if r == 0 else 1,
                    "area_km2": 1000.0 * (r + 1),
                    "noisy_contributors": 400 + 10 * r + i,
                    "residential_hours": 12.0 + (r % 8) / 4,
                    "publish_row": day >= public_from,
                    "date_value": pd.Timestamp(day),
                }
            )
    internal = pd.DataFrame(rows)
    internal = internal.astype(
        {c: "Int64" for c in CHANGE_COLUMNS + INTERVAL_COLUMNS}
        | {"level": "int64", "noisy_contributors": "int64", "area_km2": "float64",
           "residential_hours": "Float64"}
    )
    # A suppressed change and a residential estimate that could not be made are nulls.
    internal.loc[1, [PARKS, f"{PARKS}_low", f"{PARKS}_high"]] = pd.NA
    internal.loc[2, "residential_hours"] = pd.NA
    return Release(internal, published_of(internal))


def published_of(internal: pd.DataFrame) -> pd.DataFrame:
    return internal.loc[internal["publish_row"], list(PUBLISHED_COLUMNS)].reset_index(drop=True)


def run_gate(release: Release, gx_dir: Path, cfg: MobilityConfig = CFG) -> GateResult:
    return validate_mobility_release(
        release.internal, release.published, gx_dir=gx_dir, cfg=cfg,
        run_name="scheduled__2020-02-19T00:00:00+00:00",
    )


@pytest.fixture(scope="module")
def shared_gx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One GX project for the failure tests, as in production where every run shares it."""
    return tmp_path_factory.mktemp("shared") / "gx"


def gate_error(release: Release, gx_dir: Path) -> str:
    result = run_gate(release, gx_dir)
    assert not result.success
    with pytest.raises(GateFailed) as raised:
        require_pass(result)
    message = str(raised.value)
    assert str(result.data_docs_index) in message
    assert Path(str(result.data_docs_index)).is_file()
    return message


def stated_failures(message: str) -> str:
    """The message without its Data Docs and report paths: what the gate says failed.

    The paths hold pytest's temporary directory (``pytest-150``) and a timestamp, so a
    value that must not leak is looked for in the failure lines only.
    """
    return "\n".join(line for line in message.splitlines()
                     if not line.startswith(("Data Docs: ", "validation report: ")))


# -- a valid release --------------------------------------------------------------------
def test_valid_release_passes_and_builds_data_docs(tmp_path: Path) -> None:
    release = make_release()
    result = run_gate(release, tmp_path / "gx")
    assert result.success, result.failed
    assert result.failed == ()
    require_pass(result)
    assert result.evaluated > 30
    index = Path(str(result.data_docs_index))
    assert index.name == "index.html" and index.is_file()
    assert index.is_relative_to(tmp_path / "gx")
    assert len(result.validation_pages) == 4  # row-level and table-level, of each table
    assert all(Path(p).is_file() for p in result.validation_pages)
    assert "mobility_release_published" in index.read_text(encoding="utf-8")


def test_unpublished_rows_are_not_held_to_publication_rules(tmp_path: Path) -> None:
    # The domain holds the baseline window and a small, quiet region; none of it published.
    release = make_release(first=date(2020, 1, 31))
    small = release.internal["region_id"] == "EE-2"
    release.internal.loc[small, "area_km2"] = 2.0
    release.internal.loc[small, "noisy_contributors"] = 50
    release.internal.loc[small, "residential_hours"] = 30.0
    release.internal.loc[small, "publish_row"] = False
    release.published = published_of(release.internal)
    result = run_gate(release, tmp_path / "gx")
    assert result.success, result.failed


def test_repeated_calls_share_the_site_and_bound_stored_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "KEEP_VALIDATIONS", 1)
    monkeypatch.setenv("DP_DOCS_INDEX_SECONDS", "0")  # prune at every gate
    gx_dir = tmp_path / "gx"
    release = make_release()
    first = run_gate(release, gx_dir)
    second = run_gate(release, gx_dir)
    assert first.success and second.success
    assert first.data_docs_index == second.data_docs_index
    assert not any(Path(p).exists() for p in first.validation_pages)
    assert all(Path(p).is_file() for p in second.validation_pages)
    project = gx_dir / "gx"
    assert not (project / "great_expectations.yml").exists()  # the context is built in code
    for suite in (suites.SUITE_INTERNAL, suites.SUITE_PUBLISHED, suites.SUITE_INTERNAL_KEYS,
                  suites.SUITE_PUBLISHED_KEYS):
        stored = list((project / "uncommitted" / "validations" / suite).rglob("*.json"))
        pages = list(
            (project / "uncommitted" / "data_docs" / "local_site" / "validations" / suite)
            .rglob("*.html")
        )
        assert len(stored) == 1
        assert len(pages) == 1


# -- publication rules on published rows ------------------------------------------------
def test_small_published_region_fails(shared_gx: Path) -> None:
    release = make_release()
    release.internal.loc[release.internal["region_id"] == "EE-1", "area_km2"] = 2.718281
    message = gate_error(release, shared_gx)
    assert "area_km2" in message
    assert "expect_column_values_to_be_between" in message
    assert "2.718281" not in stated_failures(message)  # counts, never row values


def test_published_region_day_under_100_contributors_fails(shared_gx: Path) -> None:
    release = make_release()
    release.internal.loc[5, "noisy_contributors"] = 50
    message = gate_error(release, shared_gx)
    assert "noisy_contributors" in message
    assert "1 of 12 rows unexpected" in message


def _at_the_thresholds(below: bool) -> Release:
    """A valid release with one published region of ``min_area_km2`` and one published
    region-day of ``min_contributors``, or (``below``) just under each: 0.01 km^2 and one
    contributor less."""
    release = make_release()
    step_area, step_users = (0.01, 1) if below else (0.0, 0)
    release.internal.loc[release.internal["region_id"] == "EE-2", "area_km2"] = (
        CFG.min_area_km2 - step_area)
    release.internal.loc[5, "noisy_contributors"] = CFG.min_contributors - step_users
    assert release.internal["publish_row"].all()
    return release


def test_area_and_contributor_gates_fail_just_below_their_thresholds(shared_gx: Path) -> None:
    """Issue 35: the gate's own boundaries (2.99 km^2, 99 contributors at the defaults),
    not a value far under them: a gate letting 2 km^2 or 99 users through fails here."""
    result = run_gate(_at_the_thresholds(below=True), shared_gx)
    assert not result.success
    between = "mobility_release_internal: expect_column_values_to_be_between"
    area = [f for f in result.failed if f.startswith(f"{between} [area_km2 ")]
    users = [f for f in result.failed if f.startswith(f"{between} [noisy_contributors ")]
    assert len(area) == 1 and "4 of 12 rows unexpected" in area[0], result.failed
    assert len(users) == 1 and "1 of 12 rows unexpected" in users[0], result.failed
    assert len(result.failed) == 2, result.failed


def test_area_and_contributor_gates_pass_at_their_thresholds(shared_gx: Path) -> None:
    """Issue 35: a published region of exactly ``min_area_km2`` (3.00 km^2) and a region-day
    of exactly ``min_contributors`` (100) pass: the thresholds are inclusive."""
    result = run_gate(_at_the_thresholds(below=False), shared_gx)
    assert result.success, result.failed


def test_residential_hours_over_24_fails(shared_gx: Path) -> None:
    release = make_release()
    release.internal.loc[3, "residential_hours"] = 25.0
    assert "residential_hours" in gate_error(release, shared_gx)


def test_published_date_inside_baseline_window_fails(shared_gx: Path) -> None:
    release = make_release(first=date(2020, 2, 3))
    inside = (release.internal["region_id"] == "EE-1") & (
        release.internal["date"] == CFG.baseline_end.isoformat()
    )
    release.internal.loc[inside, "publish_row"] = True
    release.published = published_of(release.internal)
    message = gate_error(release, shared_gx)
    assert "date_value" in message
    assert "strict_min=True" in message and CFG.baseline_end.isoformat() in message
    # The CSV is checked on its own too, not only through the publish_row flags.
    assert "mobility_release_published: expect_column_values_to_not_be_in_set [date]" in message


# -- the published table ------------------------------------------------------------------
def test_wrong_header_order_fails(shared_gx: Path) -> None:
    release = make_release()
    columns = list(PUBLISHED_COLUMNS)
    columns[0], columns[1] = columns[1], columns[0]
    release.published = release.published[columns]
    message = gate_error(release, shared_gx)
    assert "expect_table_columns_to_match_ordered_list" in message
    assert "out of order" in message


def test_extra_column_fails(shared_gx: Path) -> None:
    release = make_release()
    release.published["noisy_contributors"] = 1
    message = gate_error(release, shared_gx)
    assert "unexpected columns ['noisy_contributors']" in message


def test_change_below_minus_100_fails(shared_gx: Path) -> None:
    release = make_release()
    release.published.loc[4, PARKS] = -150
    message = gate_error(release, shared_gx)
    assert PARKS in message and "1 of" in message
    assert "-150" not in stated_failures(message)


def test_float_change_column_fails(shared_gx: Path) -> None:
    release = make_release()
    release.published[PARKS] = release.published[PARKS].astype("Float64")
    message = gate_error(release, shared_gx)
    assert "expect_column_values_to_be_in_type_list" in message and PARKS in message


def test_published_rows_not_matching_publish_row_fails(shared_gx: Path) -> None:
    release = make_release()
    release.published = release.published.iloc[1:].reset_index(drop=True)
    message = gate_error(release, shared_gx)
    assert "mobility_release_published_keys: expect_table_row_count_to_equal" in message


# -- the release domain --------------------------------------------------------------------
def test_duplicate_region_day_fails(shared_gx: Path) -> None:
    release = make_release()
    release.internal = pd.concat(
        [release.internal, release.internal.iloc[[7]]], ignore_index=True
    )
    message = gate_error(release, shared_gx)
    assert "expect_compound_columns_to_be_unique [(region_id, date)]" in message


def test_missing_date_for_one_region_fails(shared_gx: Path) -> None:
    release = make_release()
    release.internal = release.internal.drop(index=6).reset_index(drop=True)
    release.published = published_of(release.internal)
    message = gate_error(release, shared_gx)
    assert "mobility_release_internal_keys: expect_table_row_count_to_equal" in message
    assert "observed 11" in message


def test_hole_in_the_date_range_fails(shared_gx: Path) -> None:
    release = make_release(last=date(2020, 2, 20))
    release.internal = release.internal[release.internal["date"] != "2020-02-18"]
    release.published = published_of(release.internal)
    message = gate_error(release, shared_gx)
    assert "expect_column_unique_value_count_to_be_between [date_value]" in message


def test_missing_columns_fail_without_crashing(shared_gx: Path) -> None:
    release = make_release()
    release.internal = release.internal.drop(columns=["area_km2"])
    release.published = release.published.drop(columns=[PARKS])
    message = gate_error(release, shared_gx)
    assert "missing columns ['area_km2']" in message
    assert f"missing columns ['{PARKS}']" in message


# -- incremental validation -----------------------------------------------------------------
def test_row_rules_see_only_the_new_days_and_table_rules_the_whole_release(
        shared_gx: Path) -> None:
    # new_dates: the days no earlier gate validated. A row rule broken on the new day is
    # counted among that day's rows only; a duplicate key spanning an old day and the
    # new one is caught by the table-level suite, which reads every day.
    last = "2020-02-19"
    release = make_release()
    on_last = release.internal.index[release.internal["date"] == last]
    release.internal.loc[on_last[0], "noisy_contributors"] = 50
    result = validate_mobility_release(release.internal, release.published, gx_dir=shared_gx,
                                       cfg=CFG, run_name="incremental", new_dates={last})
    assert not result.success
    assert any("noisy_contributors" in f and "1 of 3 rows" in f for f in result.failed)

    release = make_release()
    duplicate = release.internal[release.internal["date"] == "2020-02-16"].iloc[[0]]
    release.internal = pd.concat([release.internal, duplicate.assign(
        date=last, date_value=pd.Timestamp(last))], ignore_index=True)
    message = str(validate_mobility_release(
        release.internal, release.published, gx_dir=shared_gx, cfg=CFG,
        run_name="incremental", new_dates={last}).failed)
    assert "mobility_release_internal_keys: expect_compound_columns_to_be_unique" in message


def test_validated_record_is_keyed_by_rules_and_merges(tmp_path: Path) -> None:
    gx_dir = tmp_path / "gx"
    key = bytes(range(32))  # the ledger key, which seals the record
    rules = suites.row_rules(CFG)
    assert validated.validated_files(gx_dir, "mobility", rules, key=key) == {}
    validated.record_validated(gx_dir, "mobility", rules, {"2020-02-16": "a", "2020-02-17": "b"},
                               key=key)
    validated.record_validated(gx_dir, "mobility", rules, {"2020-02-17": "c", "2020-02-18": "d"},
                               key=key)
    assert validated.validated_files(gx_dir, "mobility", rules, key=key) == {
        "2020-02-16": "a", "2020-02-17": "c", "2020-02-18": "d"}
    # other rules (a changed config) see nothing validated: every day is checked again
    stricter = suites.row_rules(MobilityConfig(min_contributors=CFG.min_contributors + 1))
    assert stricter != rules
    assert validated.validated_files(gx_dir, "mobility", stricter, key=key) == {}
    validated.record_validated(gx_dir, "mobility", stricter, {"2020-02-16": "a"}, key=key)
    assert validated.validated_files(gx_dir, "mobility", rules, key=key) == {}
    # an unreadable record is no record
    (gx_dir / validated.VALIDATED_DIR / "mobility.json").write_text("{not json")
    assert validated.validated_files(gx_dir, "mobility", stricter, key=key) == {}


# -- concurrency ---------------------------------------------------------------------------
def _validate_in_child(gx_dir: str, run_name: str) -> bool:
    release = make_release()
    return validate_mobility_release(
        release.internal, release.published, gx_dir=Path(gx_dir), cfg=CFG, run_name=run_name
    ).success


def test_concurrent_processes_share_one_new_project(tmp_path: Path) -> None:
    # Forked children inherit the imported GX, so this costs two validations, not two GX
    # imports; they race to create the project and to write the same suites and docs.
    gx_dir = tmp_path / "gx"
    with multiprocessing.get_context("fork").Pool(2) as pool:
        outcomes = pool.starmap(_validate_in_child, [(str(gx_dir), f"race-{i}") for i in range(2)])
    assert outcomes == [True, True]
    project = gx_dir / "gx" / "uncommitted"
    stored = list((project / "validations").rglob("*.json"))
    pages = list((project / "data_docs" / "local_site" / "validations").rglob("*.html"))
    assert len(stored) == len(pages) == 8  # 2 runs x 4 suites, none lost to a racing write


@contextmanager
def _lock_held(gx_dir: Path, mode: int) -> Iterator[None]:
    """The project lock held by another open file (another run's gate)."""
    with open(gx_dir / ".gate.lock", "a+") as other:
        fcntl.flock(other, mode)
        try:
            yield
        finally:
            fcntl.flock(other, fcntl.LOCK_UN)


def _gate_process(gx_dir: Path, run_name: str) -> multiprocessing.process.BaseProcess:
    child = multiprocessing.get_context("fork").Process(
        target=_validate_in_child, args=(str(gx_dir), run_name))
    child.start()
    return child


def test_validations_run_under_a_shared_lock(tmp_path: Path) -> None:
    # Another run validating (the shared lock held) does not stop this one: gates of
    # concurrent runs validate side by side.
    gx_dir = tmp_path / "gx"
    assert run_gate(make_release(), gx_dir).success  # the project exists
    with _lock_held(gx_dir, fcntl.LOCK_SH):
        child = _gate_process(gx_dir, "beside")
        child.join(timeout=120)
        # a child blocked on the lock would still be alive; it must have finished
        assert child.exitcode == 0


@pytest.mark.slow
def test_an_exclusive_holder_blocks_a_validation(tmp_path: Path) -> None:
    # ... but a change of the project (exclusive lock) does.
    gx_dir = tmp_path / "gx"
    assert run_gate(make_release(), gx_dir).success
    with _lock_held(gx_dir, fcntl.LOCK_EX):
        child = _gate_process(gx_dir, "blocked")
        child.join(timeout=3)
        assert child.is_alive()
    child.join(timeout=120)
    assert child.exitcode == 0


@pytest.mark.slow
def test_the_site_index_is_rebuilt_on_failure_or_when_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gx_dir = tmp_path / "gx"
    first = run_gate(make_release(), gx_dir)
    index = Path(str(first.data_docs_index))
    stamp = index.stat().st_mtime_ns
    # a pass within the interval: its pages are written, the index left as it was
    second = run_gate(make_release(), gx_dir)
    assert second.success and all(Path(p).is_file() for p in second.validation_pages)
    assert index.stat().st_mtime_ns == stamp
    # a failure always rebuilds it, and so does a pass once the index is due
    bad = make_release()
    bad.internal.loc[0, "residential_hours"] = 25.0
    assert not run_gate(bad, gx_dir).success
    assert index.stat().st_mtime_ns != stamp
    stamp = index.stat().st_mtime_ns
    monkeypatch.setenv("DP_DOCS_INDEX_SECONDS", "0")
    assert run_gate(make_release(), gx_dir).success
    assert index.stat().st_mtime_ns != stamp


@pytest.mark.parametrize(("age", "failed", "due"), [
    (5.0, False, False), (5.0, True, True), (120.0, False, True), (None, False, True)])
def test_index_due(tmp_path: Path, age: float | None, failed: bool, due: bool) -> None:
    index = tmp_path / "index.html"
    if age is not None:
        index.write_text("x")
        os.utime(index, (1000.0, 1000.0))
    path = str(index) if age is not None else None
    assert project.index_due(path, failed=failed, refresh_seconds=120,
                          now=1000.0 + (age or 0.0)) is due


def test_docs_index_seconds_setting() -> None:
    from dp_ops.errors import ConfigError
    from dp_ops.settings import load_execution_settings

    assert load_execution_settings({}).docs_index_seconds == 120
    assert load_execution_settings({"DP_DOCS_INDEX_SECONDS": "0"}).docs_index_seconds == 0
    for bad in ("-1", "soon"):
        with pytest.raises(ConfigError, match="docs_index_seconds|DOCS_INDEX_SECONDS"):
            load_execution_settings({"DP_DOCS_INDEX_SECONDS": bad})


def test_warm_up_validates_in_a_throwaway_project(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # what the processes that fork tasks run at start (airflow_local_settings): a passing
    # validation of every kind of expectation the suites use, leaving nothing behind
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = runner.warm_up()
    assert result.success, result.failed
    assert result.evaluated == 13
    assert list(tmp_path.iterdir()) == []


def test_each_table_is_its_own_data_asset(shared_gx: Path) -> None:
    """Data Docs show which table a result is about: the four tables are the four data
    assets of the gate's data source, each result's page named by its asset."""
    result = run_gate(make_release(), shared_gx)
    assert result.success
    names = {Path(p).stem for p in result.validation_pages}
    assert names == {f"{project.DATA_SOURCE}-{a}"
                     for a in ("internal", "published", "internal_keys", "published_keys")}
