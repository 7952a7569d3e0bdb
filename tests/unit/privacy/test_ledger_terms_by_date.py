"""The ledger's per-date record of the noise terms (issue 48, routes 7 and 8), on SQLite and
PostgreSQL: each spend with the policy terms in force when it was booked (what the data
statement prints), and the weekday rule of a terms change, checked under the write lock."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from dp_ops.errors import BadRequest
from dp_ops.privacy.ledger import Ledger, Slot, SpendRequest
from dp_ops.privacy.plan import MetricBudget

MONDAY = date(2020, 3, 2)
OLD, NEW = MetricBudget("a", 0.5, 1, 2), MetricBudget("a", 0.25, 1, 2)
TERMS = {"epsilon.a": 1.0, "sensitivity.a": 1.0, "cells.a": 2.0,
         "method_update_fraction": 0.1}


def _noise(led: Ledger, budget: MetricBudget, day: date, terms: dict[str, float]) -> None:
    led.reserve([SpendRequest(Slot("weekly", day, 0, "a"), budget)], run_id=f"d_{day}",
                kind="noise", cap=5.0, method_version="v1", terms=terms)


def test_each_spend_comes_with_the_terms_it_was_booked_under(ledger_url: str) -> None:
    led = Ledger(ledger_url)
    try:
        _noise(led, OLD, MONDAY, TERMS)
        _noise(led, OLD, MONDAY + timedelta(days=1), TERMS)
        led.set_policy("weekly", terms={"epsilon.a": 0.5}, reason="less noise", run_id="cli")
        _noise(led, NEW, MONDAY + timedelta(days=2), {**TERMS, "epsilon.a": 0.5})
        booked = led.spends_with_terms("weekly")
        assert [(s.slot.day.day, s.epsilon, terms["epsilon.a"]) for s, terms in booked] == [
            (2, 1.0, 1.0), (3, 1.0, 1.0), (4, 0.5, 0.5)]
        assert led.spends_with_terms("other") == []
    finally:
        led.dispose()


def test_a_terms_change_off_the_weekday_is_refused_and_records_nothing(
        ledger_url: str) -> None:
    led = Ledger(ledger_url)
    try:
        _noise(led, OLD, MONDAY, TERMS)  # the next date noised is a Tuesday
        with pytest.raises(BadRequest, match=r"2020-03-03 \(a Tuesday.*Monday 2020-03-09"):
            led.set_policy("weekly", terms={"epsilon.a": 0.5}, reason="r", run_id="cli",
                           change_weekday=0)
        assert len(led.policies()) == 1
        for day in range(2, 8):  # Tuesday .. Sunday
            _noise(led, OLD, MONDAY + timedelta(days=day - 1), TERMS)
        led.set_policy("weekly", terms={"epsilon.a": 0.5}, reason="r", run_id="cli",
                       change_weekday=0)
        assert led.policy("weekly").terms["epsilon.a"] == 0.5  # type: ignore[union-attr]
        assert led.verify().ok
    finally:
        led.dispose()


def test_the_largest_daily_epsilon_of_a_period_is_read_as_booked(ledger_url: str) -> None:
    """The symptoms manifest's ``split_per_level`` reads this: after an epsilon change the
    period's dates differ, and the figure is the largest booked in the period (never the
    process's config); dates outside the period do not count."""
    from dp_ops.reports.symptoms.config import SymptomsConfig
    from dp_ops.reports.symptoms.release import epsilon_accounting

    def noise(budget: MetricBudget, day: date, terms: dict[str, float]) -> None:
        led.reserve([SpendRequest(Slot("symptoms", day, 0, "a"), budget)],
                    run_id=f"d_{day}", kind="noise", cap=5.0, method_version="v1",
                    terms=terms)

    led = Ledger(ledger_url)
    try:
        for day in range(7):
            noise(OLD, MONDAY + timedelta(days=day), TERMS)
        led.set_policy("symptoms", terms={"epsilon.a": 0.5}, reason="r", run_id="cli",
                       change_weekday=0)
        for day in range(7, 9):
            noise(NEW, MONDAY + timedelta(days=day), {**TERMS, "epsilon.a": 0.5})
        week2 = MONDAY + timedelta(days=7)
        assert led.largest_daily_epsilons("symptoms", MONDAY, week2) == {"a": 1.0}
        assert led.largest_daily_epsilons("symptoms", week2, week2 + timedelta(days=1)) == {
            "a": 0.5}
        assert led.largest_daily_epsilons("symptoms", date(2020, 1, 1),
                                          date(2020, 1, 31)) == {}
        assert led.largest_daily_epsilons("other", MONDAY, week2) == {}
        # the manifest's figure: the ledger's, not SymptomsConfig's defaults
        assert epsilon_accounting(led, SymptomsConfig(), week2, week2)[
            "split_per_level"] == {"a": 0.5}
        assert epsilon_accounting(led, SymptomsConfig(), MONDAY, week2)[
            "split_per_level"] == {"a": 1.0}
    finally:
        led.dispose()
