"""The privacy budget ledger (dp_ops.privacy.ledger; docs/design.md, Privacy budget ledger): a
slot is noised at most once,
re-noises are explicit and charged, the per-user-day cap is enforced before anything is
written, rows are never changed, and all of this holds when real processes race.

Every test runs on SQLite (a file under tmp_path) and, when ``DP_TEST_POSTGRES_URL`` holds a
SQLAlchemy URL of a PostgreSQL database with a libpq driver (e.g.
``postgresql+psycopg://user:pw@host/db``), on PostgreSQL too: each test then works in a
schema of its own, created and dropped around it. ``make test`` sets the variable
(scripts/with_test_postgres.sh starts a throwaway server); without it the PostgreSQL cases
are skipped.

None of these tests is statistical; the race tests are repeated so that a ledger which
only serialises by luck is unlikely to pass them all.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import pytest
import sqlalchemy as sa

# The race workers are spawned interpreters that import their target by module name and
# inherit sys.path; pytest.ini puts tests/ (the package support) on it.
from support.approvals import approve, request_of, reserve_approved
from support.ledger_race_worker import RacePool
from support.spend_requests import spend_request

from dp_ops.errors import BudgetExceeded
from dp_ops.ledger_text import format_ledger, format_ledger_summary
from dp_ops.privacy.ledger import (
    ALL_REGIONS,
    Ledger,
    Reservation,
    Slot,
    Spend,
    SpendRequest,
    budget_spend,
    set_wal_mode,
)

REPORT = "mobility"
DAY = date(2020, 3, 1)
CAP = 1.0
VERSION = "v1"


def raw_rows(url: str) -> list[tuple[Any, ...]]:
    """Every row of budget_spend, read through an engine of our own (not the ledger's)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(
                sa.select(budget_spend).order_by(budget_spend.c.id))]
    finally:
        engine.dispose()


def slot(metric: str = "retail", *, day: date = DAY, level: int = 1,
         region: str = ALL_REGIONS, report: str = REPORT) -> Slot:
    return Slot(report, day, level, metric, region)


def reserve_noise(led: Ledger, requests: list[SpendRequest], *, run_id: str = "run-1",
                  cap: float = CAP) -> Reservation:
    return led.reserve(requests, run_id=run_id, kind="noise", cap=cap, method_version=VERSION)


def floats_in(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+\.\d+", text)]


# -- spending a slot -----------------------------------------------------------------------


def test_spend_is_recorded_with_all_fields(ledger: Ledger, ledger_url: str) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    (s,) = ledger.reserve([spend_request(slot("parks", level=2), 0.25)],
                          run_id="manual__2020-03-02", kind="noise", cap=CAP,
                          method_version="v3", reason="first run").spends
    after = datetime.now(UTC)
    assert s.slot == Slot(REPORT, DAY, 2, "parks", ALL_REGIONS)
    assert (s.generation, s.epsilon, s.kind) == (0, 0.25, "noise")
    assert (s.method_version, s.run_id, s.reason) == ("v3", "manual__2020-03-02", "first run")
    created = datetime.fromisoformat(s.created_at)
    assert created.utcoffset() is not None, "created_at must carry its time zone"
    assert before <= created <= after
    # what is stored is what was returned, and a fresh Ledger on the same URL reads it back
    assert ledger.spends() == [s]
    reopened = Ledger(ledger_url)
    assert reopened.spends() == [s]
    reopened.dispose()
    assert len(raw_rows(ledger_url)) == 1
    assert ledger.spent(REPORT, DAY) == 0.25


def test_reserve_respects_the_cap(ledger: Ledger, ledger_url: str) -> None:
    reserve_noise(ledger, [spend_request(slot("retail"), 0.75)], run_id="r")
    rows = raw_rows(ledger_url)
    with pytest.raises(BudgetExceeded):
        reserve_noise(ledger, [spend_request(slot("parks"), 0.5)], run_id="r")
    assert raw_rows(ledger_url) == rows


# -- noise reservations are idempotent -----------------------------------------------------


@pytest.mark.parametrize("retry_run_id", ["run-1", "run-2"])
def test_noise_retry_reuses_the_spends(ledger: Ledger, ledger_url: str,
                                       retry_run_id: str) -> None:
    requests = [spend_request(slot(m), 0.1) for m in ("retail", "parks", "transit")]
    first = reserve_noise(ledger, requests)
    assert len(first.spends) == 3
    assert first.new_ids == {s.id for s in first.spends}
    assert first.spent_now == pytest.approx(0.3)
    rows = raw_rows(ledger_url)

    again = reserve_noise(ledger, list(reversed(requests)), run_id=retry_run_id)
    assert [s.id for s in again.spends] == [s.id for s in first.spends]
    assert again.spends == first.spends  # the original run's rows, run id included
    assert again.new_ids == frozenset()
    assert again.spent_now == 0
    assert raw_rows(ledger_url) == rows
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.3)


def test_noise_retry_succeeds_when_the_budget_is_used_up(ledger: Ledger) -> None:
    # A retry spends nothing, so it must not be refused by a cap the first run filled.
    requests = [spend_request(slot("retail"), 0.5), spend_request(slot("parks"), 0.5)]
    first = reserve_noise(ledger, requests)
    assert ledger.spent(REPORT, DAY) == pytest.approx(CAP)
    again = reserve_noise(ledger, requests, run_id="retry")
    assert again.spends == first.spends and not again.new_ids


def test_noise_reserve_spends_only_the_slots_not_yet_noised(ledger: Ledger) -> None:
    first = reserve_noise(ledger, [spend_request(slot(m), 0.1) for m in ("retail", "parks")])
    more = reserve_noise(ledger, [spend_request(slot(m), 0.1)
                                  for m in ("retail", "parks", "transit")], run_id="run-2")
    reused = {s.id for s in first.spends}
    assert reused < {s.id for s in more.spends}
    assert len(more.new_ids) == 1 and not more.new_ids & reused
    assert more.spent_now == pytest.approx(0.1)
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.3)


# -- explicit re-noise ---------------------------------------------------------------------


def test_renoise_spends_a_new_generation(ledger: Ledger, ledger_url: str) -> None:
    original = reserve_noise(ledger, [spend_request(slot(), 0.2)]).spends[0]
    rows = raw_rows(ledger_url)
    res = reserve_approved(ledger, [spend_request(slot(), 0.15)], run_id="oncall-1",
                           kind="renoise", cap=CAP, method_version="v2",
                           reason="raw data of EE-37 corrected")
    (renoised,) = res.spends
    assert res.new_ids == {renoised.id} and renoised.id != original.id
    assert renoised.slot == original.slot
    assert (renoised.generation, renoised.kind, renoised.epsilon) == (1, "renoise", 0.15)
    assert (renoised.run_id, renoised.method_version) == ("oncall-1", "v2")
    assert renoised.reason == "raw data of EE-37 corrected"
    assert ledger.spends()[-1] == renoised
    assert raw_rows(ledger_url)[:1] == rows  # generation 0 untouched
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.35)

    second = reserve_approved(ledger, [spend_request(slot(), 0.15)], run_id="oncall-2",
                              kind="renoise", cap=CAP, method_version="v2", reason="again")
    assert second.spends[0].generation == 2
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.5)
    # a plain noise reservation of the slot still reuses, and spends nothing
    retry = reserve_noise(ledger, [spend_request(slot(), 0.2)], run_id="run-9")
    assert retry.new_ids == frozenset()
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.5)


def test_a_retry_of_the_same_renoise_run_reuses_its_spend(ledger: Ledger) -> None:
    """An Airflow retry keeps the run id: a renoise task killed between its reservation and
    the store must not pay again when it is retried; a new run does pay again."""
    reserve_noise(ledger, [spend_request(slot(), 0.2)])
    first = reserve_approved(ledger, [spend_request(slot(), 0.15)], run_id="oncall-1",
                             kind="renoise", cap=CAP, method_version=VERSION, reason="fix")
    retry = reserve_approved(ledger, [spend_request(slot(), 0.15)], run_id="oncall-1",
                             kind="renoise", cap=CAP, method_version=VERSION, reason="fix")
    assert retry.new_ids == frozenset() and retry.spends == first.spends
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.35)
    other = reserve_approved(ledger, [spend_request(slot(), 0.15)], run_id="oncall-2",
                             kind="renoise", cap=CAP, method_version=VERSION,
                             reason="fix again")
    assert other.spends[0].generation == 2 and len(other.new_ids) == 1
    # the retry reuses only the slot's latest spend, never an older generation
    late = reserve_approved(ledger, [spend_request(slot(), 0.15)], run_id="oncall-1",
                            kind="renoise", cap=CAP, method_version=VERSION, reason="fix")
    assert late.spends[0].generation == 3
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.65)


def test_renoise_is_capped(ledger: Ledger, ledger_url: str) -> None:
    reserve_noise(ledger, [spend_request(slot(), 0.9)])
    rows = raw_rows(ledger_url)
    with pytest.raises(BudgetExceeded):
        reserve_approved(ledger, [spend_request(slot(), 0.2)], run_id="oncall", kind="renoise",
                         cap=CAP, method_version=VERSION, reason="fix")
    assert raw_rows(ledger_url) == rows


# -- the cap -------------------------------------------------------------------------------


def test_budget_exceeded_names_date_slot_spent_requested_and_cap(ledger: Ledger,
                                                                 ledger_url: str) -> None:
    reserve_noise(ledger, [spend_request(slot("retail"), 0.4),
                           spend_request(slot("parks"), 0.25)], cap=0.9)
    rows = raw_rows(ledger_url)
    refused = slot("residential", level=2, region="EE-37")
    with pytest.raises(BudgetExceeded) as info:
        reserve_noise(ledger, [spend_request(refused, 0.45)], cap=0.9)
    msg = str(info.value)
    assert DAY.isoformat() in msg
    assert refused.describe() in msg
    numbers = floats_in(msg)
    for value, what in ((0.65, "spent"), (0.45, "requested"), (0.9, "cap")):
        assert any(abs(x - value) < 1e-9 for x in numbers), f"{what} {value} not in: {msg}"
    assert raw_rows(ledger_url) == rows


def test_cap_is_inclusive_and_per_report_and_date(ledger: Ledger) -> None:
    reserve_noise(ledger, [spend_request(slot("retail"), 0.6)])
    reserve_noise(ledger, [spend_request(slot("parks"), 0.4)])  # exactly the cap: allowed
    assert ledger.spent(REPORT, DAY) == pytest.approx(CAP)
    with pytest.raises(BudgetExceeded):
        reserve_noise(ledger, [spend_request(slot("transit"), 0.01)])
    # other dates and other reports have budgets of their own
    reserve_noise(ledger, [spend_request(slot("transit", day=date(2020, 3, 2)), 0.9)])
    reserve_noise(ledger, [spend_request(slot("fever", report="symptoms"), 0.9)])
    assert ledger.totals() == pytest.approx({
        (REPORT, DAY): 1.0, (REPORT, date(2020, 3, 2)): 0.9, ("symptoms", DAY): 0.9})
    assert ledger.totals(REPORT) == pytest.approx({
        (REPORT, DAY): 1.0, (REPORT, date(2020, 3, 2)): 0.9})
    # exactly the fsum of the spends of each (report, day), in (report, day) order
    by_day: dict[tuple[str, date], list[float]] = {}
    for s in ledger.spends():
        by_day.setdefault((s.slot.report, s.slot.day), []).append(s.epsilon)
    exact = {k: math.fsum(v) for k, v in sorted(by_day.items())}
    assert list(ledger.totals().items()) == list(exact.items())


def test_multi_slot_reservation_is_all_or_nothing(ledger: Ledger, ledger_url: str) -> None:
    reserve_noise(ledger, [spend_request(slot("grocery"), 0.1)])
    rows = raw_rows(ledger_url)
    requests = [spend_request(slot(m), 0.4) for m in ("retail", "parks", "transit")]
    with pytest.raises(BudgetExceeded) as info:  # 0.1 + 0.4 + 0.4 fits, + 0.4 does not
        reserve_noise(ledger, requests)
    assert requests[2].slot.describe() in str(info.value)
    assert raw_rows(ledger_url) == rows
    assert ledger.spent(REPORT, DAY) == pytest.approx(0.1)


def test_multi_date_reservation_is_all_or_nothing(ledger: Ledger, ledger_url: str) -> None:
    day2 = date(2020, 3, 2)
    reserve_noise(ledger, [spend_request(slot("grocery", day=day2), 0.8)])
    rows = raw_rows(ledger_url)
    with pytest.raises(BudgetExceeded) as info:
        reserve_noise(ledger, [spend_request(slot("retail"), 0.5),
                               spend_request(slot("retail", day=day2), 0.5)])
    assert day2.isoformat() in str(info.value)
    assert raw_rows(ledger_url) == rows
    assert ledger.spent(REPORT, DAY) == 0


@pytest.mark.parametrize("bad", [0.0, -0.1, float("nan"), float("inf")])
def test_reserve_rejects_bad_epsilon(ledger: Ledger, ledger_url: str, bad: float) -> None:
    with pytest.raises(ValueError, match="epsilon"):
        reserve_noise(ledger, [spend_request(slot("retail"), 0.1),
                               spend_request(slot("parks"), bad)])
    assert raw_rows(ledger_url) == []


def test_reserve_rejects_unknown_kind(ledger: Ledger, ledger_url: str) -> None:
    with pytest.raises(ValueError, match="kind"):
        ledger.reserve([spend_request(slot(), 0.1)], run_id="r", kind="refund", cap=CAP,
                       method_version=VERSION)
    assert raw_rows(ledger_url) == []


def test_empty_reservation_spends_nothing(ledger: Ledger, ledger_url: str) -> None:
    res = reserve_noise(ledger, [])
    assert res.spends == () and res.new_ids == frozenset() and res.spent_now == 0
    assert raw_rows(ledger_url) == []


# -- append-only ---------------------------------------------------------------------------


def test_rows_are_only_ever_appended(ledger: Ledger, ledger_url: str) -> None:
    """After every operation, successful or refused, the earlier rows are unchanged
    (value for value, floats and timestamps included) and the count never falls; and the
    ledger never even sends a statement that could change or remove a row."""
    history: list[tuple[Any, ...]] = []
    statements: list[str] = []
    sa.event.listen(ledger.engine, "before_cursor_execute",
                    lambda _c, _cur, stmt, *_a: statements.append(" ".join(stmt.split())))

    def check() -> None:
        rows = raw_rows(ledger_url)
        assert rows[:len(history)] == history
        history[:] = rows

    def attempt(fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except BudgetExceeded:
            pass
        check()

    a, b, c = (spend_request(slot(m), 0.2) for m in ("retail", "parks", "transit"))
    attempt(reserve_noise, ledger, [a, b])
    attempt(reserve_noise, ledger, [a, b], run_id="retry")
    attempt(reserve_noise, ledger, [a], run_id="r")  # already noised: reused, no row
    attempt(reserve_noise, ledger, [c], run_id="r")
    attempt(reserve_approved, ledger, [a], run_id="oncall", kind="renoise", cap=CAP,
            method_version=VERSION, reason="fix")
    attempt(reserve_approved, ledger, [b], run_id="update", kind="method_update", cap=CAP,
            method_version="v2", reason="new baseline")
    attempt(reserve_noise, ledger, [spend_request(slot("grocery"), 0.5)])  # refused by the cap
    attempt(reserve_approved, ledger, [a], run_id="oncall", kind="renoise", cap=CAP,
            method_version=VERSION)  # refused
    assert len(history) == 5
    assert [r.generation for r in ledger.spends()] == [0, 0, 0, 1, 1]
    assert ledger.spent(REPORT, DAY) == pytest.approx(1.0)
    assert any(st.upper().startswith("INSERT INTO BUDGET_SPEND") for st in statements)
    rewriting = re.compile(r"^\s*(UPDATE|DELETE|TRUNCATE|DROP|ALTER|REPLACE)\b"
                           r"|\bOR\s+REPLACE\b|\bDO\s+UPDATE\b", re.IGNORECASE)
    assert [st for st in statements if rewriting.search(st)] == []


# -- printing ------------------------------------------------------------------------------


def test_format_ledger_lists_spends_and_composed_epsilon_per_report_and_date(
        ledger: Ledger) -> None:
    day2 = date(2020, 3, 2)
    reserve_noise(ledger, [spend_request(slot("retail"), 0.1), spend_request(slot("parks"), 0.2)],
                  run_id="scheduled__2020-03-03")
    reserve_approved(ledger, [spend_request(slot("parks", region="EE-37"), 0.05)],
                     run_id="oncall-7", kind="renoise", cap=CAP, method_version=VERSION,
                     reason="fix")
    reserve_noise(ledger, [spend_request(slot("retail", day=day2), 0.3)])
    reserve_noise(ledger, [spend_request(slot("fever", report="symptoms"), 0.5)])
    spends = ledger.spends()
    text = format_ledger(spends)
    lines = text.splitlines()

    for s in spends:  # one line per spend, carrying its fields
        (line,) = [ln for ln in lines if ln.split() and ln.split()[0] == str(s.id)]
        for field in (s.slot.report, s.slot.day.isoformat(), s.slot.metric,
                      s.slot.region_scope, s.kind, s.run_id):
            assert field in line
        assert any(abs(x - s.epsilon) < 5e-5 for x in floats_in(line))

    header = next(i for i, ln in enumerate(lines) if "composed" in ln)
    composed = [ln for ln in lines[header + 1:] if ln.strip()]
    expected = {(REPORT, DAY): 0.35, (REPORT, day2): 0.3, ("symptoms", DAY): 0.5}
    assert len(composed) == len(expected)
    for (report, day), total in expected.items():
        (line,) = [ln for ln in composed if report in ln and day.isoformat() in ln]
        assert abs(floats_in(line)[0] - total) < 5e-5, line
    assert format_ledger([]) == "(no spends)"


def test_spends_filters_by_report_and_day(ledger: Ledger) -> None:
    day2 = date(2020, 3, 2)
    reserve_noise(ledger, [spend_request(slot("retail"), 0.1),
                           spend_request(slot("retail", day=day2), 0.2),
                           spend_request(slot("fever", report="symptoms"), 0.3)])
    assert [s.epsilon for s in ledger.spends(REPORT)] == [0.1, 0.2]
    assert [s.epsilon for s in ledger.spends(REPORT, day2)] == [0.2]
    assert [s.slot.report for s in ledger.spends()] == [REPORT, REPORT, "symptoms"]
    assert all(isinstance(s, Spend) for s in ledger.spends())


# -- races between real processes ----------------------------------------------------------

# Marked slow: they start eight interpreters and run 13 races (make test runs them; make
# test-fast leaves them out).
N_WORKERS = 8
ROUNDS = 3


@pytest.fixture(scope="module")
def race_pool() -> Iterator[RacePool]:
    with RacePool(N_WORKERS) as pool:
        yield pool


def _describe(results: list[dict[str, Any]]) -> str:
    start = min(r.get("released", 0.0) for r in results)
    return "\n".join(
        f"  worker {i}: " + (f"ok ids={r['spend_ids']} new={r['new_ids']}" if r["ok"]
                             else f"{r['error']}: {r['message'][:160]}")
        + (f" (+{1000 * (r['released'] - start):.1f} ms)" if "released" in r else "")
        for i, r in enumerate(results))


def _op(method: str, **kw: Any) -> dict[str, Any]:
    return {"method": method, "cap": CAP, "method_version": VERSION, **kw}


def _approved_op(led: Ledger, **kw: Any) -> dict[str, Any]:
    """A reserve op of a spend that needs an approval, recorded here before the race."""
    kw["reason"] = kw.get("reason") or "test spend"
    request = request_of(kw["requests"], kind=kw["kind"], reason=kw["reason"],
                         method_version=VERSION)
    return _op("reserve", approval=approve(led, request, kw["run_id"]), **kw)


@pytest.mark.slow
def test_race_for_one_slot_noises_it_once(race_pool: RacePool, ledger: Ledger,
                                          ledger_url: str) -> None:
    for rnd in range(ROUNDS):
        day = date(2020, 4, 1 + rnd)
        if rnd % 2:  # also race on a date the ledger already knows (its lock row exists)
            reserve_noise(ledger, [spend_request(slot("grocery", day=day), 0.1)])
        req = spend_request(slot("retail", day=day), 0.3)
        results = race_pool.race(ledger_url, [
            _op("reserve", requests=[req], kind="noise", run_id=f"run-{i}")
            for i in range(N_WORKERS)])
        report = _describe(results)
        assert all(r["ok"] for r in results), report
        assert len({r["spend_ids"] for r in results}) == 1, report
        assert sum(bool(r["new_ids"]) for r in results) == 1, report
        rows = ledger.spends(REPORT, day)
        assert [s.id for s in rows if s.slot == req.slot] == list(results[0]["spend_ids"]), \
            report
        assert ledger.spent(REPORT, day) == pytest.approx(0.3 + 0.1 * (rnd % 2))


@pytest.mark.slow
def test_race_for_the_last_of_the_budget_has_one_winner(race_pool: RacePool, ledger: Ledger,
                                                        ledger_url: str) -> None:
    # cap 1.0, 0.7 spent, eight region re-noises of 0.2 each: exactly one fits.
    for rnd in range(ROUNDS):
        day = date(2020, 6, 1 + rnd)
        reserve_noise(ledger, [spend_request(slot("retail", day=day), 0.7)])
        results = race_pool.race(ledger_url, [
            _approved_op(ledger, kind="renoise", run_id=f"oncall-{i}", reason="corrected",
                         requests=[spend_request(slot("retail", day=day, region=f"EE-{i}"),
                                                0.2)])
            for i in range(N_WORKERS)])
        report = _describe(results)
        winners = [r for r in results if r["ok"]]
        assert len(winners) == 1, report
        assert sorted(r["error"] for r in results if not r["ok"]) == \
            ["BudgetExceeded"] * (N_WORKERS - 1), report
        assert len(ledger.spends(REPORT, day)) == 2, report
        assert ledger.spent(REPORT, day) == pytest.approx(0.9)
        assert ledger.spent(REPORT, day) <= CAP


@pytest.mark.slow
def test_racing_renoises_of_one_slot_get_distinct_generations(
        race_pool: RacePool, ledger: Ledger, ledger_url: str) -> None:
    # Budget for all: every re-noise must succeed, serialised into generations 1..8.
    for rnd in range(ROUNDS):
        day = date(2020, 7, 1 + rnd)
        req = spend_request(slot("transit", day=day), 0.1)
        reserve_noise(ledger, [req])
        results = race_pool.race(ledger_url, [
            _approved_op(ledger, requests=[req], kind="renoise", run_id=f"oncall-{i}")
            for i in range(N_WORKERS)])
        report = _describe(results)
        assert all(r["ok"] for r in results), report
        assert sorted(r["generations"][0] for r in results) == \
            list(range(1, N_WORKERS + 1)), report
        assert ledger.spent(REPORT, day) == pytest.approx(0.1 * (N_WORKERS + 1))


@pytest.mark.slow
def test_race_on_a_new_ledger_creates_it_once(race_pool: RacePool, ledger_url: str) -> None:
    # The first scheduled run: parallel tasks open a ledger that does not exist yet (schema
    # creation races too) and reserve the same slot. One round: the database must be new.
    req = spend_request(slot("retail", day=date(2020, 8, 1)), 0.3)
    results = race_pool.race(ledger_url, [
        _op("reserve", requests=[req], kind="noise", run_id=f"run-{i}", open_after_start=True)
        for i in range(N_WORKERS)])
    report = _describe(results)
    assert all(r["ok"] for r in results), report
    assert len({r["spend_ids"] for r in results}) == 1, report
    assert sum(bool(r["new_ids"]) for r in results) == 1, report
    assert len(raw_rows(ledger_url)) == 1


def test_ledger_summary_groups_dates_and_composes_per_user_day(ledger: Ledger) -> None:
    days = [date(2020, 3, d) for d in range(1, 6)]
    for d in days:
        reserve_noise(ledger, [spend_request(slot("retail", day=d), 0.3),
                               spend_request(slot("parks", day=d, level=2), 0.2)])
    # a re-noise on 3 March breaks the run of identical days
    reserve_approved(ledger,
                     [spend_request(slot("parks", day=days[2], level=2, region="EE-37"), 0.2)],
                     run_id="oncall", kind="renoise", cap=CAP, method_version=VERSION,
                     reason="fix")
    text = format_ledger_summary(ledger.spends(), caps={REPORT: 0.6})
    lines = text.splitlines()
    totals = lines[lines.index(next(ln for ln in lines if ln.startswith("composed"))) + 1:]
    assert [ln.split()[1] for ln in totals] == ["2020-03-01..2020-03-02", "2020-03-03",
                                                "2020-03-04..2020-03-05"]
    assert [floats_in(ln)[0] for ln in totals] == [0.5, 0.7, 0.5]
    assert "OVER THE CAP" in totals[1] and "OVER THE CAP" not in totals[0]
    (renoise,) = [ln for ln in lines if "renoise" in ln]
    assert "EE-37" in renoise and "2020-03-03" in renoise and floats_in(renoise)[-1] == 0.2
    assert format_ledger_summary([]) == "(no spends)"


class _LockedThenFree:
    """Injects the fault seen in CI: PRAGMA journal_mode=WAL answered "database is locked"
    at once (no busy handler) while another process opens the same new ledger."""

    def __init__(self, failures: int, message: str = "database is locked") -> None:
        self.failures, self.message, self.calls = failures, message, 0

    def execute(self, sql: str) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise sqlite3.OperationalError(self.message)


def test_switching_to_wal_waits_out_a_concurrent_opener() -> None:
    conn = _LockedThenFree(failures=3)
    set_wal_mode(conn, wait_s=5)
    assert conn.calls == 4
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        set_wal_mode(_LockedThenFree(failures=10**9), wait_s=0.05)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        set_wal_mode(_LockedThenFree(failures=1, message="disk I/O error"), wait_s=5)
