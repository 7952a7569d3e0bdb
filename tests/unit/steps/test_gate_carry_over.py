"""The gate carries over what the gate of the release now published validated
(:mod:`dp_ops.gx.carried`): the same release bytes and the same expectations as a gate
that validates every row, GX on the new and changed rows only, and nothing carried from
a published release or a record that does not verify. Constructed noisy rows (fixed
seeds); nothing here is statistical."""

from __future__ import annotations

import os

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

import hashlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import great_expectations.expectations as gxe  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from dp_demo.geography import demo_regions  # noqa: E402
from support.dates import date_range  # noqa: E402
from support.day_records import write_days  # noqa: E402
from support.symptoms_rows import CFG, SYMPTOMS, constructed_rows  # noqa: E402

from dp_ops.errors import GateFailed, PublishRefused  # noqa: E402
from dp_ops.gx import carried, runner  # noqa: E402
from dp_ops.gx.result import require_pass  # noqa: E402
from dp_ops.gx.suites import suite  # noqa: E402
from dp_ops.layout import DataRoot  # noqa: E402
from dp_ops.regions import write_regions  # noqa: E402
from dp_ops.reports.symptoms import release  # noqa: E402
from dp_ops.sources.search_activity import symptom_list
from dp_ops.steps import release_flow  # noqa: E402
from dp_ops.steps.day_files import release_days  # noqa: E402
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger  # noqa: E402
from dp_ops.steps.release import checksums, read_staged, staging_dir  # noqa: E402

START = date(2020, 1, 1)
LAST = date(2020, 1, 13)  # the published release's last day; the gate adds the 14th


@pytest.fixture(scope="module")
def two_weeks() -> tuple[pd.DataFrame, pd.DataFrame]:
    regions = demo_regions()
    return regions, constructed_rows(regions, date_range(START, date(2020, 1, 14)), key=11)


def _build_published_root(tmp_path: Path, two_weeks: tuple[pd.DataFrame, pd.DataFrame]
                          ) -> tuple[DataRoot, str]:
    """A data root whose release of 1..13 January is published (its gate recorded its
    rows), with the 14th reported since."""
    regions, rows = two_weeks
    root = DataRoot(tmp_path / "data")
    write_regions(regions, root.regions_csv)
    symptom_list(root).write_text("\n".join(SYMPTOMS) + "\n")
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    write_days(root, rows[rows["date"] <= LAST], url=url)
    release_flow.stage_and_validate(release.PARTS, root, CFG, run_id="day-13", ledger_url=url)
    release_flow.publish_staged(release.PARTS, root, CFG, run_id="day-13", ledger_url=url)
    write_days(root, rows[rows["date"] == date(2020, 1, 14)], url=url)
    return root, url


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory,
              two_weeks: tuple[pd.DataFrame, pd.DataFrame]) -> Path:
    """Built once for the module (tests take copies: :func:`_published_root`): the data
    root and ledger of :func:`_build_published_root`."""
    base = tmp_path_factory.mktemp("published")
    _build_published_root(base, two_weeks)
    return base


@pytest.fixture(scope="module")
def published_and_full(tmp_path_factory: pytest.TempPathFactory, published: Path) -> Path:
    """The same, then the release of every recorded day built into ``full`` by a gate that
    validates every row (which records its rows too)."""
    base = tmp_path_factory.mktemp("published-and-full")
    root, url = _published_root(base, published)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(release_flow, "carried_gate_rows", lambda *a, **k: None)
        _build(root, url, base / "full")
    return base


def _published_root(tmp_path: Path, template: Path) -> tuple[DataRoot, str]:
    """A copy of a module-built ``template`` (data root, ledger, builds) in ``tmp_path``;
    ``latest`` is a relative link, so the copy's points into the copy."""
    shutil.copytree(template, tmp_path, symlinks=True, dirs_exist_ok=True)
    return DataRoot(tmp_path / "data"), f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def _gx_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many rows each gate handed to GX (summed over its tables)."""
    from dp_ops.reports.symptoms import suites

    seen: list[int] = []
    real = runner.run_suites

    def counting(runs: Any, **kwargs: Any) -> Any:
        seen.append(sum(len(frame) for _, _, frame in runs))
        return real(runs, **kwargs)

    monkeypatch.setattr(runner, "run_suites", counting)
    monkeypatch.setattr(suites, "run_suites", counting)
    return seen


def _build(root: DataRoot, url: str, target: Path) -> release_flow.Built:
    """The build of the release of every recorded day into ``target`` (the gate's own
    build and its record of the rows it validated, without its staging)."""
    with closing_ledger(open_ledger(root, url)) as ledger:
        days, digests = release_days(ledger, "symptoms", CFG.first_public_date)
        plan = release.PARTS.plan(root, CFG, ledger, days, digests, run_id=target.name,
                                  region=None)
        built = plan.build(target)
        assert built.gate_rows is not None
        release_flow.record_gate_rows(root, ledger, "symptoms", built.gate_rows,
                                      checksums(target))
        return built


@pytest.mark.slow
def test_a_carried_gate_writes_the_bytes_of_a_full_gate(
        tmp_path: Path, published: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the same ledger and stored noise, the release built on the published one (GX on
    the new and changed rows) and the release validated whole are the same files, byte for
    byte, under the same count of expectations; GX saw fewer rows."""
    root, url = _published_root(tmp_path, published)
    gx_rows = _gx_rows(monkeypatch)
    carried_built = _build(root, url, tmp_path / "carried")
    with monkeypatch.context() as m:
        m.setattr(release_flow, "carried_gate_rows", lambda *a, **k: None)
        full_built = _build(root, url, tmp_path / "full")
    assert checksums(tmp_path / "carried") == checksums(tmp_path / "full")
    assert carried_built.gate == full_built.gate  # passed, the same count, the same site
    assert (carried_built.rows, carried_built.suppression, carried_built.charts) == (
        full_built.rows, full_built.suppression, full_built.charts)
    carried_rows, full_rows = gx_rows
    assert 0 < carried_rows < full_rows / 3, (carried_rows, full_rows)
    # and the staged release of the day's gate is the same files again
    release_flow.stage_and_validate(release.PARTS, root, CFG, run_id="day-14", ledger_url=url)
    staged = read_staged(staging_dir(root, "symptoms", "day-14"))
    assert staged is not None and staged.files == checksums(tmp_path / "full")


@pytest.mark.parametrize("planted", ["csv", "parquet", "chart", "digests", "record"])
def test_a_planted_edit_is_never_carried(
        tmp_path: Path, published_and_full: Path, monkeypatch: pytest.MonkeyPatch,
        planted: str) -> None:
    """An edit to the published release (a data file, a chart) or to the record of what its
    gate validated: the next gate validates every row with GX and stages the files built
    from the recorded inputs; an edited release is refused at publish."""
    root, url = _published_root(tmp_path, published_and_full)  # "full" built already
    latest = root.latest_release("symptoms")
    records = root.gx_dir / carried.ROWS_DIR / "symptoms-rows"
    if planted == "csv":
        path = latest / "2020_DM_daily_symptoms_dataset.csv"
        text = path.read_text()
        first = text.splitlines()[1]
        path.write_text(text.replace(first, first.rstrip("0123456789.") + "99.5", 1))
    elif planted == "parquet":
        path = latest / "2020_DM_weekly_symptoms_dataset.parquet"
        path.write_bytes(path.read_bytes() + b"\0")
    elif planted == "chart":
        path = next((latest / "charts").glob("*.png"))
        path.write_bytes(path.read_bytes()[:-4] + b"\0\0\0\0")
    else:
        # the published release's record made to name digests that cover the 14th's rows
        # too (those of the "full" build): a gate that trusted it would hand GX nothing
        published_rows, full_rows = sorted(records.glob("*.parquet"),
                                           key=lambda p: len(pd.read_parquet(p)))
        published_rows.write_bytes(full_rows.read_bytes())
        if planted == "record":  # ... and the record rewritten to name them: its MAC fails
            path = published_rows.with_suffix(".json")
            record = json.loads(path.read_text())
            record["digests_sha256"] = hashlib.sha256(published_rows.read_bytes()).hexdigest()
            path.write_text(json.dumps(record))
    gx_rows = _gx_rows(monkeypatch)
    release_flow.stage_and_validate(release.PARTS, root, CFG, run_id="day-14", ledger_url=url)
    staged = read_staged(staging_dir(root, "symptoms", "day-14"))
    assert staged is not None and staged.files == checksums(tmp_path / "full")
    # every row went through GX: as many as a full gate hands it
    with monkeypatch.context() as m:
        m.setattr(release_flow, "carried_gate_rows", lambda *a, **k: None)
        _build(root, url, tmp_path / "full-again")
    assert gx_rows[0] == gx_rows[1]
    if planted in ("csv", "parquet", "chart"):
        with pytest.raises(PublishRefused, match="does not match the release's manifest"):
            release_flow.publish_staged(release.PARTS, root, CFG, run_id="day-14", ledger_url=url)
    else:
        release_flow.publish_staged(release.PARTS, root, CFG, run_id="day-14", ledger_url=url)


def test_rows_are_recorded_only_for_a_release_that_passed_the_contract(
        tmp_path: Path, published: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate whose release fails the column contract after its rows passed GX records
    nothing (fault injected: the contract check refuses); once it passes, the record names
    the staged files."""
    root, url = _published_root(tmp_path, published)
    records = root.gx_dir / carried.ROWS_DIR / "symptoms-rows"
    before = sorted(p.name for p in records.iterdir())

    def refuse(*_: Any, **__: Any) -> None:
        raise GateFailed("injected: the release does not match its column contract")

    with monkeypatch.context() as m:
        m.setattr(release_flow, "require_contract", refuse)
        with pytest.raises(GateFailed, match="injected"):
            release_flow.stage_and_validate(release.PARTS, root, CFG, run_id="day-14",
                                            ledger_url=url)
    assert sorted(p.name for p in records.iterdir()) == before
    release_flow.stage_and_validate(release.PARTS, root, CFG, run_id="day-14b",
                                    ledger_url=url)
    staged = read_staged(staging_dir(root, "symptoms", "day-14b"))
    assert staged is not None
    files = {name: str(meta["sha256"]) for name, meta in staged.files.items()}
    added = [json.loads(p.read_text()) for p in records.glob("*.json")
             if p.name not in before]
    assert [r["files"] for r in added] == [files]


def test_a_bad_new_row_fails_and_a_carried_row_is_not_revalidated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The row rules run on the rows not carried (an identical row carried is not handed
    to GX), the whole-table rules on the whole table in pandas, with the same failures
    named and the same count of expectations as a gate without carry-over."""
    def table() -> Any:
        return suite("carry_test", [
            gxe.ExpectTableColumnsToMatchOrderedList(column_list=["key", "day", "value"]),
            gxe.ExpectTableRowCountToEqual(value={"$PARAMETER": "rows"}),
            gxe.ExpectColumnValuesToNotBeNull(column="key"),
            gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0),
            gxe.ExpectCompoundColumnsToBeUnique(column_list=["key", "day"]),
            gxe.ExpectColumnValuesToBeInSet(column="day", value_set={"$PARAMETER": "days"}),
            gxe.ExpectColumnUniqueValueCountToBeBetween(
                column="day", min_value={"$PARAMETER": "n"}, max_value={"$PARAMETER": "n"}),
        ])
    old = pd.DataFrame({"key": ["AA", "BB"], "day": ["2020-01-01"] * 2, "value": [1.0, 2.0]})
    previous = carried.table_digests([(table(), "t", old)])
    assert previous is not None
    days = ["2020-01-01", "2020-01-02"]

    def gate(frame: pd.DataFrame, name: str) -> Any:
        runs = [(table(), "t", frame)]
        return carried.validate_carrying(
            runs, gx_dir=tmp_path / "gx", run_name=name, digests=carried.table_digests(runs),
            carried=previous, parameters={"rows": len(frame), "days": days,
                                          "n": frame["day"].nunique()})

    good = pd.concat([old, pd.DataFrame({"key": ["AA"], "day": ["2020-01-02"],
                                         "value": [3.0]})], ignore_index=True)
    seen = _gx_rows(monkeypatch)
    passed = gate(good, "good")
    negative = good.assign(value=[1.0, -2.0, 3.0])  # a carried row changed: checked again
    failed = gate(negative, "negative")
    twice = pd.concat([good, good.iloc[[2]]], ignore_index=True)
    duplicated = gate(twice, "duplicated")
    outside = good.assign(day=["2020-01-01", "2020-01-01", "2020-01-09"])
    undated = gate(outside, "outside")
    assert passed.success and passed.evaluated == len(table().expectations), passed.failed
    assert seen[0] == 1  # the new row alone
    assert not failed.success and seen[1] == 2
    assert any("expect_column_values_to_be_between [value]" in f for f in failed.failed)
    assert not duplicated.success
    assert any("expect_compound_columns_to_be_unique [(key, day)]" in f
               for f in duplicated.failed)
    assert not undated.success
    assert any("expect_column_values_to_be_in_set [day]" in f for f in undated.failed)
    with pytest.raises(GateFailed, match="expect_column_values_to_be_in_set"):
        require_pass(undated)


def test_a_record_under_another_key_or_for_other_files_is_not_carried(tmp_path: Path) -> None:
    """The record is found only for the release's files with their sha256, and only under
    the ledger key that sealed it."""
    frame = pd.DataFrame({"key": ["AA"], "value": [1.0]})
    digests = carried.row_digests(frame)
    assert digests is not None
    key = b"the ledger key of this test, 32b"
    files = {"a.csv": "0" * 64}
    carried.record_rows(tmp_path, "r", "rules", files,
                        {"t": (digests, carried.schema_of(frame))}, key=key)
    release_files = {"a.csv": {"sha256": "0" * 64}, "index.html": {"sha256": "1" * 64}}
    found = carried.recorded_rows(tmp_path, "r", "rules", release_files, key=key)
    assert found is not None and found["t"][0].equals(digests)
    assert carried.recorded_rows(tmp_path, "r", "rules", release_files,
                                 key=b"another key of 32 bytes, not it!") is None
    assert carried.recorded_rows(tmp_path, "r", "other rules", release_files, key=key) is None
    assert carried.recorded_rows(tmp_path, "r", "rules", {"a.csv": {"sha256": "2" * 64}},
                                 key=key) is None


def test_rows_that_could_hash_alike_are_not_digested() -> None:
    """An object column mixing kinds (1 and True hash alike) is not digested: its table is
    validated whole."""
    assert carried.row_digests(pd.DataFrame({"x": ["a", None]})) is not None
    assert carried.row_digests(pd.DataFrame({"x": pd.Series([1, True], dtype=object)})) is None


def test_nulls_digest_alike_and_apart_from_the_text_none() -> None:
    """None, NaN and pd.NA in an object column are one null to the digest (GX's null
    checks treat them alike), and a null is not the text "None"; a text cell digests the
    same whatever else its column holds (in an object or a string column alike)."""
    import numpy as np

    def digest(value: object, other: object = "a", dtype: object = object) -> tuple[int, int]:
        frame = pd.DataFrame({"x": pd.Series([other, value], dtype=dtype), "y": [1.5, 2.5]})
        d = carried.row_digests(frame)
        assert d is not None
        return int(d["d0"][1]), int(d["d1"][1])

    assert digest(None) == digest(np.nan) == digest(pd.NA)
    assert digest(None) != digest("None")
    assert digest("b") != digest("c") and digest("b") == digest("b")
    assert digest("b") == digest("b", other="zzz") == digest("b", other=None)
    assert digest("b", dtype="str") == digest("b") and digest(None, dtype="str") == digest(None)


def _cells() -> pd.DataFrame:
    """Rows of every kind of column a gate table has (fixed seed)."""
    import numpy as np

    rng = np.random.default_rng(7)
    n = 300
    return pd.DataFrame({
        "code": pd.Series(rng.choice(["US", "US-CA", "DM", "True"], n), dtype="str"),
        "flag": pd.Series(rng.choice([True, False], n), dtype=object),
        "day": pd.Series(rng.integers(0, 7, n), dtype="int32"),
        "when": pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 400, n), "D"),
        **{f"s{i}": rng.choice([0.0, -0.0, 1.0, np.nan, np.inf, 2.5, 1e-300], n)
           for i in range(12)}})


def test_a_change_to_any_one_cell_changes_both_lanes() -> None:
    """The two 64-bit lanes are two digests of every cell, numeric ones included (lane 1
    is not lane 0 again): a row with any one cell changed differs from the original in
    both lanes, as do rows with two cells swapped; a row's digest depends on its cells
    alone, not on its place or the rows beside it."""
    import numpy as np

    frame = _cells()
    d = carried.row_digests(frame)
    assert d is not None and not d.duplicated().any()
    numeric = frame.filter(like="s")
    lanes = carried.row_digests(numeric)
    assert lanes is not None and not (lanes["d0"] == lanes["d1"]).any()
    replacements = {"code": "US-NY", "flag": None, "day": 7,
                    "when": pd.Timestamp("2021-06-01"), **{c: 3.25 for c in numeric}}
    for column, value in replacements.items():
        changed = frame.copy()
        changed[column] = changed[column].astype(object).where(
            changed.index != 5, value).astype(frame[column].dtype)
        e = carried.row_digests(changed)
        assert e is not None
        assert e["d0"][5] != d["d0"][5] and e["d1"][5] != d["d1"][5], column
        assert e.drop(index=5).equals(d.drop(index=5)), column
    swapped = frame.copy()
    swapped[["s0", "s1"]] = frame[["s1", "s0"]].to_numpy()
    moved = carried.row_digests(swapped)
    assert moved is not None
    differs = frame["s0"].to_numpy().view(np.uint64) != frame["s1"].to_numpy().view(np.uint64)
    assert (moved["d0"][differs] != d["d0"][differs]).all()
    assert (moved["d1"][differs] != d["d1"][differs]).all()
    order = np.random.default_rng(8).permutation(len(frame))
    shuffled = carried.row_digests(frame.iloc[order[:100]].reset_index(drop=True))
    assert shuffled is not None
    assert shuffled.equals(d.iloc[order[:100]].reset_index(drop=True))


def test_new_rows_looks_both_lanes_up() -> None:
    """A row is carried only when both lanes match one carried row; carried rows that share
    a lane, or repeat, are looked up as well; nothing carried: every row is new."""
    d = pd.DataFrame({"d0": [1, 2, 3, 4], "d1": [10, 20, 30, 40]}, dtype="uint64")
    carried_rows = pd.DataFrame({"d0": [1, 2, 3, 3], "d1": [10, 21, 30, 30]}, dtype="uint64")
    assert carried.new_rows(d, carried_rows).tolist() == [False, True, False, True]
    shared = pd.DataFrame({"d0": [1, 1, 4], "d1": [11, 10, 40]}, dtype="uint64")
    assert carried.new_rows(d, shared).tolist() == [False, True, True, False]
    assert carried.new_rows(d, d.iloc[:0]).tolist() == [True] * 4
    assert carried.new_rows(d, None).tolist() == [True] * 4
