"""The noise step itself (dp_ops.steps.noising.noise_day), in a throwaway data root with a
SQLite ledger and no report around it: what it spends, exactly what it draws (a keyed
generator replaces the secure one so every noisy value can be recomputed), what it stores,
what a rerun reuses and what a re-noise is refused. The reports' pipelines run it too
(tests/integration); these are the fast, exact checks next to its code. No test here is
statistical."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.geography import demo_regions
from support.approvals import approve_renoise

from dp_ops.errors import BadRequest, NoiseNotStored, NoiseRecordConflict, NoiseTampered
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import ALL_REGIONS, Slot, Spend, SpendRequest
from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
from dp_ops.privacy.plan import MetricBudget
from dp_ops.regions import write_regions
from dp_ops.steps import noising
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.noising import NoisePlan

DAY = date(2020, 3, 2)
KEY = 5  # the keyed generator standing in for the secure one
PLAN = NoisePlan(
    report="mobility",
    budgets=(MetricBudget("a", 0.5, 1, 2), MetricBudget("b", 0.25, 3)),
    group_cells={"a": ("x", "y"), "b": ("z",)},
    levels=(0, 1, 2),
    cap=10.0,
    method_version="v1",
    first_public_date=date(2020, 2, 15),
)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[DataRoot, str]:
    """A data root with the demo's regions and one day's bounded sums; the noise step's
    generator keyed (each call the same stream, as a fresh secure one would be fresh)."""
    root = DataRoot(tmp_path / "data")
    root.regions_csv.parent.mkdir(parents=True)
    write_regions(demo_regions(), root.regions_csv)
    bounded = root.bounded_file("mobility", DAY)
    bounded.parent.mkdir(parents=True)
    # a few cells only: every other cell of the domain is a true zero
    pq.write_table(pa.table({
        "level": pa.array([0, 1, 2, 2], pa.int8()),
        "region_id": ["DM", "DM-01", "DM-01-001", "DM-01-002"],
        "metric": ["x", "z", "y", "x"],
        "value": pa.array([1000, 40, 7, None], pa.int64()),
    }), bounded)
    monkeypatch.setattr(noising, "noise_generator", lambda: noise_generator(key=KEY))
    return root, f"sqlite:///{tmp_path / 'ledger.sqlite'}"


def _spends(root: DataRoot, url: str) -> list[Spend]:
    with closing_ledger(open_ledger(root, url)) as led:
        return led.spends("mobility", DAY)


def _true(level: int, region: str, metric: str) -> int:
    return {(0, "DM", "x"): 1000, (1, "DM-01", "z"): 40,
            (2, "DM-01-001", "y"): 7}.get((level, region, metric), 0)


def test_a_day_spends_each_slot_once_and_stores_exactly_its_draw(
        home: tuple[DataRoot, str]) -> None:
    root, url = home
    result = noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    spends = _spends(root, url)
    # every level x metric group, whole day, in that order; each costs its ledger epsilon
    assert [(s.slot.level, s.slot.metric, s.slot.region_scope, s.kind, s.epsilon)
            for s in spends] == [(lvl, m, ALL_REGIONS, "noise", e) for lvl in (0, 1, 2)
                                 for m, e in (("a", 1.0), ("b", 0.25))]
    assert result.summary == (f"noise for {DAY}: 6 slot(s) spent (epsilon 3.7500), 0 reused; "
                              f"composed epsilon per user-day for {DAY} is now 3.7500 "
                              "(cap 10.0000)")
    assert result.paths == tuple(str(noising.noise_file(root, s)) for s in spends)
    regions = demo_regions()
    rng = noise_generator(key=KEY)  # the draws, recomputed in the step's order
    for s in spends:
        table = pq.read_table(noising.noise_file(root, s))
        assert table.schema == noising.NOISE_SCHEMA
        assert (s.stored_sha256, s.stored_cells) == noising.file_digest(
            noising.noise_file(root, s))
        ids = regions.loc[regions["level"] == s.slot.level, "region_id"].tolist()
        metrics = list(PLAN.group_cells[s.slot.metric])
        # the public domain, region-major, zeros included
        assert table["region_id"].to_pylist() == [r for r in ids for _ in metrics]
        assert table["metric"].to_pylist() == metrics * len(ids)
        assert set(table["level"].to_pylist()) == {s.slot.level}
        b = PLAN.budget(s.slot.metric)
        true = np.array([_true(s.slot.level, r, m) for r in ids for m in metrics], np.int64)
        expected = add_discrete_laplace(true, epsilon=b.cell_epsilon,
                                        sensitivity=b.sensitivity, rng=rng)
        assert table["noisy_value"].to_pylist() == expected.tolist()
        assert set(table["cell_epsilon"].to_pylist()) == {b.cell_epsilon}
        assert set(table["sensitivity"].to_pylist()) == {b.sensitivity}
        assert set(table["spend_id"].to_pylist()) == {s.id}


def test_a_rerun_reuses_every_spend_and_never_redraws(home: tuple[DataRoot, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    before = {p: p.read_bytes() for p in root.noise_dir("mobility", DAY).iterdir()}

    def no_draw() -> np.random.Generator:
        raise AssertionError("a stored spend was drawn again")

    monkeypatch.setattr(noising, "noise_generator", no_draw)
    result = noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-2"), ledger_url=url)
    assert result.summary.startswith(f"noise for {DAY}: 0 slot(s) spent (epsilon 0.0000), "
                                     "6 reused;")
    assert {p: p.read_bytes() for p in root.noise_dir("mobility", DAY).iterdir()} == before


def test_a_rerun_refuses_an_edited_stored_file(home: tuple[DataRoot, str]) -> None:
    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    victim = noising.noise_file(root, _spends(root, url)[2])
    table = pq.read_table(victim)
    zeros = table.set_column(3, "noisy_value", pa.array([0] * len(table), pa.int64()))
    pq.write_table(zeros, victim)
    with pytest.raises(NoiseTampered, match=r"ledger spend 3 .* is not the file stored"):
        noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-2"), ledger_url=url)


def test_a_file_planted_before_the_draw_is_replaced_not_adopted(
        home: tuple[DataRoot, str]) -> None:
    root, url = home
    with closing_ledger(open_ledger(root, url)) as led:  # spent, then the run died
        led.reserve(noising.plan_requests(PLAN, demo_regions(), DAY), run_id="run-1",
                    kind="noise", cap=PLAN.cap, method_version="v1", terms=PLAN.ledger_terms)
        spends = led.spends("mobility", DAY)
    planted = noising.noise_file(root, spends[0])
    planted.parent.mkdir(parents=True, exist_ok=True)
    keys = noising.domain_keys(PLAN, demo_regions(), spends[0])
    cells = noising.domain_table(*keys)
    n = len(cells)
    pq.write_table(pa.table({**{c: cells[c] for c in cells.column_names},
                             "noisy_value": pa.array(np.zeros(n, np.int64)),
                             "cell_epsilon": pa.array(np.full(n, 0.5)),
                             "sensitivity": pa.array(np.ones(n, np.int64)),
                             "spend_id": pa.array(np.full(n, spends[0].id))},
                            schema=noising.NOISE_SCHEMA), planted)
    planted_bytes = planted.read_bytes()
    result = noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    assert "0 slot(s) spent" in result.summary and "6 reused" in result.summary
    assert planted.read_bytes() != planted_bytes  # drawn, recorded, moved over it
    assert _spends(root, url)[0].stored_sha256 == noising.file_digest(planted)[0]
    assert list(planted.parent.glob("*.pending*")) == []


@pytest.mark.parametrize("kw, message", [
    ({"renoise": True}, "renoise=True needs a region: re-noising a whole day is a new "
                        "release of it; rerun one region at a time"),
    ({"renoise": True, "region": "DM-01", "reason": "  "},
     "renoise=True needs a reason; it is recorded in the ledger"),
])
def test_a_renoise_without_region_or_reason_is_refused(home: tuple[DataRoot, str],
                                                       kw: dict[str, object],
                                                       message: str) -> None:
    root, url = home
    with pytest.raises(BadRequest) as err:
        noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="r", **kw), ledger_url=url)
    assert str(err.value) == message
    assert not Path(url.removeprefix("sqlite:///")).exists()  # refused before the ledger


def test_a_renoise_of_an_unpublished_day_is_refused(home: tuple[DataRoot, str]) -> None:
    root, url = home
    day = date(2020, 2, 14)
    with pytest.raises(BadRequest) as err:
        noising.noise_day(root, PLAN, NoiseRequest(day=day, run_id="r", region="DM-01",
                                                   renoise=True, reason="why"), ledger_url=url)
    assert str(err.value) == (
        "date=2020-02-14: before the first public date 2020-02-15; its values are never "
        "published (at most a baseline frozen once is built from them), so a re-noise "
        "would spend budget for nothing")
    # the first public date itself may be re-noised (refused later, for want of approval)
    with pytest.raises(Exception) as later:
        noising.noise_day(root, PLAN, NoiseRequest(day=date(2020, 2, 15), run_id="r",
                                                   region="DM-01", renoise=True, reason="why"),
                                                   ledger_url=url)
    assert not isinstance(later.value, BadRequest)


def test_an_unknown_region_is_refused_before_the_ledger(home: tuple[DataRoot, str]) -> None:
    root, url = home
    with pytest.raises(ValueError, match=r"^region='XX': not in the region table$"):
        noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="r", region="XX"),
                                                   ledger_url=url)
    assert not Path(url.removeprefix("sqlite:///")).exists()


def test_an_approved_renoise_redraws_one_region_and_its_ancestors(
        home: tuple[DataRoot, str]) -> None:
    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    approve_renoise(root, url, PLAN, DAY, "DM-01-001", "outlier", run_id="run-2")
    result = noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-2", region="DM-01-001",
                                                        renoise=True, reason="outlier"),
                                                        ledger_url=url)
    new = [s for s in _spends(root, url) if s.kind == "renoise"]
    assert [(s.slot.level, s.slot.region_scope, s.slot.metric, s.reason) for s in new] == [
        (lvl, rid, m, "outlier") for lvl, rid in ((2, "DM-01-001"), (1, "DM-01"), (0, "DM"))
        for m in ("a", "b")]
    assert result.summary.startswith(f"noise for {DAY}: 6 slot(s) spent (epsilon 3.7500), "
                                     "0 reused;")
    for s in new:  # each re-noise covers its one region only
        assert set(pq.read_table(noising.noise_file(root, s))["region_id"].to_pylist()) == {
            s.slot.region_scope}


def test_a_repeated_renoise_is_marked_in_the_ledger(home: tuple[DataRoot, str]) -> None:
    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    approve_renoise(root, url, PLAN, DAY, "DM", "first", run_id="run-2")
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-2", region="DM", renoise=True,
                                               reason="first"), ledger_url=url)
    approve_renoise(root, url, PLAN, DAY, "DM", "again", run_id="run-3", repeat=True)
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-3", region="DM", renoise=True,
                                               reason="again", repeat_renoise=True), ledger_url=url)
    assert [s.reason for s in _spends(root, url) if s.run_id == "run-3"] == [
        "[repeat re-noise] again"] * 2


def test_missing_bounded_sums_are_named(home: tuple[DataRoot, str]) -> None:
    root, url = home
    path = root.bounded_file("mobility", DAY)
    path.unlink()
    with pytest.raises(FileNotFoundError) as err:
        noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="r"), ledger_url=url)
    assert str(err.value) == (f"no bounded aggregates for {DAY} at {path}: run the "
                              "bound_contributions step first")


def test_a_draw_that_loses_the_record_race_leaves_the_winner(
        home: tuple[DataRoot, str]) -> None:
    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    spend = _spends(root, url)[0]
    target = noising.noise_file(root, spend)
    winner = target.read_bytes()
    with closing_ledger(open_ledger(root, url)) as led:
        with pytest.raises(NoiseRecordConflict):
            led.record_stored(spend.id, "0" * 64, 1)
        booked = SpendRequest(spend.slot, PLAN.budget(spend.slot.metric))
        noising.draw_and_store(root, led, PLAN, demo_regions(), spend, booked, {},
                               noise_generator(key=9))
    assert target.read_bytes() == winner
    assert sorted(p.name for p in target.parent.iterdir()) == sorted(
        noising.noise_file(root, s).name for s in _spends(root, url))


def test_the_domain_and_its_true_values() -> None:
    assert noising.domain_table(2, ["r1", "r2"], ["m", "n"]).to_pydict() == {
        "level": [2, 2, 2, 2], "region_id": ["r1", "r1", "r2", "r2"],
        "metric": ["m", "n", "m", "n"]}
    true = {(2, "m"): {"r2": 5}, (2, "n"): {"r1": 3}, (1, "m"): {"r1": 9}}
    assert noising.domain_true_values(2, ["r1", "r2"], ["m", "n"], true).tolist() == [
        0, 3, 5, 0]
    spend = Spend(1, Slot("mobility", DAY, 1, "a", "DM-02"), 0, 1.0, "renoise", "v1", "r",
                  "", "t")
    assert noising.domain_keys(PLAN, demo_regions(), spend) == (1, ["DM-02"], ["x", "y"])


def test_region_chain_and_plan_requests() -> None:
    regions = demo_regions()
    assert noising.region_chain(regions, "DM-01-003") == [(2, "DM-01-003"), (1, "DM-01"),
                                                          (0, "DM")]
    two_levels = NoisePlan(**{**PLAN.__dict__, "levels": (1, 2)})
    assert [(r.slot.level, r.slot.region_scope, r.slot.metric, r.epsilon)
            for r in noising.plan_requests(two_levels, regions, DAY, "DM-01-003")] == [
        (2, "DM-01-003", "a", 1.0), (2, "DM-01-003", "b", 0.25),
        (1, "DM-01", "a", 1.0), (1, "DM-01", "b", 0.25)]
    with pytest.raises(KeyError, match="unknown metric group 'c' for report 'mobility'"):
        PLAN.budget("c")


def test_load_noisy_cells_keeps_the_latest_value_of_the_day(
        home: tuple[DataRoot, str]) -> None:
    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    approve_renoise(root, url, PLAN, DAY, "DM", "why", run_id="run-2")
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-2", region="DM", renoise=True,
                                               reason="why"), ledger_url=url)
    spends = _spends(root, url)
    cells = noising.load_noisy_cells(root, "mobility", DAY, spends)
    assert len(cells) == len(cells.drop_duplicates(["level", "region_id", "metric"]))
    by_cell = cells.set_index(["level", "region_id", "metric"])["spend_id"]
    renoised = {s.slot.metric: s.id for s in spends if s.kind == "renoise"}
    assert by_cell[(0, "DM", "x")] == renoised["a"] and by_cell[(0, "DM", "z")] == renoised["b"]
    assert by_cell[(1, "DM-01", "z")] == spends[3].id  # not re-noised: the day's draw
    # another day's or another report's spends are not read (and need no file)
    other = [Spend(99, Slot("mobility", date(2020, 3, 3), 0, "a"), 0, 1.0, "noise", "v1",
                   "r", "", "t"),
             Spend(98, Slot("symptoms", DAY, 0, "a"), 0, 1.0, "noise", "v1", "r", "", "t")]
    pd.testing.assert_frame_equal(noising.load_noisy_cells(root, "mobility", DAY,
                                                           spends + other), cells)
    with pytest.raises(NoiseNotStored) as err:
        noising.load_noisy_cells(root, "mobility", DAY, other)
    assert str(err.value) == f"no noisy values for {DAY}: run the noise step first"


def test_a_recorded_draw_left_pending_is_moved_into_place(home: tuple[DataRoot, str]) -> None:
    """A writer that crashed between the ledger record and the move left its file under
    its pending name (with the MAC of the recorded sha256): the reader takes the recorded
    one and moves it into place."""
    from dp_ops.engine.files import pending_path

    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    spend = _spends(root, url)[0]
    target = noising.noise_file(root, spend)
    data = target.read_bytes()
    tag = noising._noise_tag(target, spend.id, str(spend.stored_sha256))
    stray = pending_path(target, noising._noise_tag(target, spend.id, "b" * 64))
    stray.write_bytes(data + b"not this one")   # another writer's unrecorded draw
    target.rename(pending_path(target, tag))
    assert noising.read_stored(target, spend).num_rows == 2 * 1  # level 0: DM x {x, y}
    assert target.read_bytes() == data


def test_stored_noise_that_does_not_verify_is_named_with_its_remedy(
        home: tuple[DataRoot, str]) -> None:
    root, url = home
    long_run = "scheduled__2020-03-03T00:00:00+00:00__and_more_than_forty"
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id=long_run), ledger_url=url)
    spend = _spends(root, url)[0]
    target = noising.noise_file(root, spend)
    what = (f"ledger spend {spend.id} (mobility/2020-03-02/level 0/a/region *, noise, run "
            f"{long_run[:40]!r})")
    remedy = ("noise is never redrawn silently (a redraw would be a free second release): "
              "restore the file from a backup of the data root, or re-noise that region-day "
              "explicitly with a reason (it is paid again); OPERATIONS.md, 'stored noise does "
              "not verify'")
    pq.write_table(pq.read_table(target).slice(0, 1), target)  # one cell fewer
    sha, cells = noising.file_digest(target)
    with pytest.raises(NoiseTampered) as err:
        noising.read_stored(target, spend)
    assert str(err.value) == (
        f"{what}: {target} is not the file stored for it (sha256 {sha[:16]}..., {cells} "
        f"cells; recorded {spend.stored_sha256[:16]}..., {spend.stored_cells} cells); "
        f"{remedy}")
    target.write_bytes(b"garbage")
    with pytest.raises(NoiseTampered, match=r"\(sha256 [0-9a-f]{16}\.\.\., not a Parquet file;"):
        noising.read_stored(target, spend)
    target.unlink()
    with pytest.raises(NoiseTampered) as err:
        noising.read_stored(target, spend)
    assert str(err.value) == f"{what}: its stored noise {target} is missing; {remedy}"


def test_a_region_without_renoise_runs_the_whole_day_and_records_the_policy(
        home: tuple[DataRoot, str]) -> None:
    """``region`` alone (no re-noise) is validated but spends the whole day, as a daily run;
    the plan's policy terms are recorded with the first spend; a daily run records no
    reason."""
    root, url = home
    plan = NoisePlan(**{**PLAN.__dict__, "policy_terms": {"max_places": 4.0}})
    noising.noise_day(root, plan, NoiseRequest(day=DAY, run_id="run-1", region="DM-01-001"),
                                               ledger_url=url)
    spends = _spends(root, url)
    assert {s.slot.region_scope for s in spends} == {ALL_REGIONS} and len(spends) == 6
    assert {s.reason for s in spends} == {""}
    with closing_ledger(open_ledger(root, url)) as led:
        policy = led.policy("mobility")
    assert policy is not None and policy.terms == {
        "max_places": 4.0, "epsilon.a": 1.0, "sensitivity.a": 1.0, "cells.a": 2.0,
        "epsilon.b": 0.25, "sensitivity.b": 3.0, "cells.b": 1.0}


def test_load_noisy_cells_reads_in_any_order(home: tuple[DataRoot, str]) -> None:
    """Spends of other days first, a superseded generation listed after the one that
    replaced it: neither stops nor misleads the reading."""
    root, url = home
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    for run, repeat in (("run-2", False), ("run-3", True)):
        approve_renoise(root, url, PLAN, DAY, "DM", "why", run_id=run, repeat=repeat)
        noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id=run, region="DM", renoise=True,
                                                   reason="why", repeat_renoise=repeat),
                                                   ledger_url=url)
    spends = _spends(root, url)

    def canonical(cells: pd.DataFrame) -> pd.DataFrame:
        assert list(cells.columns) == noising.NOISE_SCHEMA.names
        assert list(cells.index) == list(range(len(cells)))
        return cells.sort_values(["level", "region_id", "metric"]).reset_index(drop=True)

    expected = canonical(noising.load_noisy_cells(root, "mobility", DAY, spends))
    latest = {s.slot.metric: s.id for s in spends if s.run_id == "run-3"}
    by_cell = expected.set_index(["level", "region_id", "metric"])["spend_id"]
    assert by_cell[(0, "DM", "x")] == latest["a"] and by_cell[(0, "DM", "z")] == latest["b"]
    later = [Spend(99, Slot("mobility", date(2020, 3, 3), 0, "a"), 0, 1.0, "noise", "v1",
                   "r", "", "t")]
    got = noising.load_noisy_cells(root, "mobility", DAY, later + list(reversed(spends)))
    pd.testing.assert_frame_equal(canonical(got), expected)
    # generation 0 as if its run had died before storing, listed after generation 1: it
    # was paid for and never seen, so it is skipped, not an error
    unstored = [Spend(s.id, s.slot, s.generation, s.epsilon, s.kind, s.method_version,
                      s.run_id, s.reason, s.created_at) if s.run_id == "run-2" else s
                for s in spends]
    got = noising.load_noisy_cells(root, "mobility", DAY, unstored + [
        s for s in unstored if s.run_id == "run-2"])
    assert set(got["spend_id"]) == set(expected["spend_id"])


def _shard_the_bounded_file(root: DataRoot, shards: int) -> pd.DataFrame:
    """Split the day's bounded sums into ``shards`` partial files (as mapped bounding
    tasks write them) and remove the whole file; return the whole."""
    from dp_ops.steps.bound import shard_file

    bounded = root.bounded_file("mobility", DAY)
    whole = pq.read_table(bounded)
    for k in range(shards):
        pq.write_table(whole.slice(k * 2, 2), shard_file(root, "mobility", DAY, k, shards))
    bounded.unlink()
    return whole.to_pandas()


def test_the_noise_step_adds_up_the_bounding_shards_itself(
        home: tuple[DataRoot, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A report's noise function needs no call of its own to combine the shards: the
    shared noise step makes the day's file whole before it reads it."""
    root, url = home
    whole = _shard_the_bounded_file(root, 2)
    monkeypatch.setenv("DP_BOUNDING_SHARDS", "2")
    noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    combined = pq.read_table(root.bounded_file("mobility", DAY)).to_pandas()
    keys = ["level", "region_id", "metric"]
    pd.testing.assert_frame_equal(
        combined.sort_values(keys).reset_index(drop=True)[whole.columns],
        whole.sort_values(keys).reset_index(drop=True), check_dtype=False)
    assert len(_spends(root, url)) == 6


def test_a_missing_bounding_shard_is_refused_before_any_spend(
        home: tuple[DataRoot, str], monkeypatch: pytest.MonkeyPatch) -> None:
    from dp_ops.errors import BoundingError
    from dp_ops.steps.bound import shard_file

    root, url = home
    _shard_the_bounded_file(root, 2)
    shard_file(root, "mobility", DAY, 1, 2).unlink()
    monkeypatch.setenv("DP_BOUNDING_SHARDS", "2")
    with pytest.raises(BoundingError, match="1 of 2 shard file"):
        noising.noise_day(root, PLAN, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    assert _spends(root, url) == []


@pytest.mark.parametrize("weekday, refused, allowed", [
    (2, [date(2020, 2, 26), date(2020, 3, 3)], [date(2020, 2, 25), date(2020, 3, 4)]),
    (0, [date(2020, 3, 3), date(2020, 3, 8)], [date(2020, 3, 1), date(2020, 3, 9)]),
    (None, [], [date(2020, 3, 3)]),
])
def test_a_week_starts_on_the_plans_weekday(
        home: tuple[DataRoot, str], weekday: int | None, refused: list[date],
        allowed: list[date]) -> None:
    """Monday 2020-03-02 noised under the plan's budgets: a new draw under other budgets is
    refused on every other day of the week that holds it (starting on the plan's
    ``terms_change_weekday``), and taken on the days just outside it."""
    from dataclasses import replace

    root, url = home
    plan = replace(PLAN, terms_change_weekday=weekday)
    noising.noise_day(root, plan, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    other = replace(plan, budgets=(MetricBudget("a", 0.25, 1, 2), MetricBudget("b", 0.25, 3)))
    with closing_ledger(open_ledger(root, url)) as ledger:
        for day in refused:
            with pytest.raises(BadRequest, match=f"date={day}: its week"):
                noising.week_law_refusal(ledger, other, NoiseRequest(day=day, run_id="r"))
        for day in allowed:
            noising.week_law_refusal(ledger, other, NoiseRequest(day=day, run_id="r"))
        # the same budgets as the week's: never refused
        noising.week_law_refusal(ledger, plan, NoiseRequest(day=refused[0] if refused
                                                            else DAY, run_id="r"))
