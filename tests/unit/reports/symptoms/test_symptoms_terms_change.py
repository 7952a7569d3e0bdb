"""Issue 48, route 8: a symptoms epsilon change that took effect mid-week made every later
release fail for good (a week under two noise laws has no weekly rule). A change of the
report's noise terms now takes effect on a Monday only: `ledger set-epsilon` refuses
another date, naming the reason and the next Monday, and records nothing; on a Monday it
is accepted and the weeks on both sides sum under one law each. A ledger that already
holds a mid-week change (recorded before the rule) is refused with the week and the
remedy, not a bare error."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support.dates import date_range

from dp_ops.errors import BadRequest, MixedWeekLaws, Refusal
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger, Slot, SpendRequest, terms_change_refusal
from dp_ops.reports.spec import report_spec
from dp_ops.reports.symptoms.config import REPORT, SymptomsConfig, group_cells
from dp_ops.reports.symptoms.declaration import REPORT as SYMPTOMS
from dp_ops.reports.symptoms.matrix import from_rows, weekly
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.noising import NoisePlan, week_law_refusal


def noise_plan(cfg: SymptomsConfig, symptoms: list[str]) -> NoisePlan:
    """The symptoms noise plan over the symptom list ``symptoms``."""
    report = replace(SYMPTOMS, cells=lambda root, c: group_cells(symptoms))
    return report.noise_plan(DataRoot(Path()), cfg)

MONDAY = date(2020, 3, 2)
A_TERM = "epsilon.symptom_searches"


def noise_days(ledger: Ledger, cfg: SymptomsConfig, days: Sequence[date]) -> None:
    """Normal daily runs of ``days``, as the symptoms noise step reserves them."""
    for day in days:
        ledger.reserve([SpendRequest(Slot(REPORT, day, level, b.name), b)
                        for level in cfg.levels for b in cfg.metric_budgets],
                       run_id=f"daily_{day}", kind="noise", cap=cfg.cap,
                       method_version=cfg.method_version, terms=cfg.policy_terms)


@pytest.fixture
def home(tmp_path: Path) -> tuple[str, dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    env = {**os.environ, "DP_LEDGER_URL": url, "DP_DATA_ROOT": str(tmp_path / "data")}
    return url, env


def set_epsilon(env: dict[str, str], value: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dp_ops", "ledger", "set-epsilon", REPORT,
                           A_TERM, repr(value), "--reason", "less noise"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_set_epsilon_for_symptoms_with_a_wednesday_effective_date_is_refused(
        home: tuple[str, dict[str, str]]) -> None:
    url, env = home
    cfg = SymptomsConfig()
    ledger = Ledger(url)
    try:
        noise_days(ledger, cfg, date_range(MONDAY, MONDAY + timedelta(days=1)))  # Mon, Tue
        before = ledger.policies()
    finally:
        ledger.dispose()
    done = set_epsilon(env, 0.3)
    assert done.returncode == 2
    # the reason, the date it would have taken effect on and the next Monday
    for needed in ("2020-03-04 (a Wednesday", "by week", "on a Monday only",
                   "Nothing was recorded", "once 2020-03-08 is noised",
                   "takes effect on Monday 2020-03-09"):
        assert needed in done.stderr, (needed, done.stderr)
    ledger = Ledger(url)
    try:
        assert ledger.policies() == before  # nothing recorded
        assert ledger.verify().ok
    finally:
        ledger.dispose()


def test_set_epsilon_for_symptoms_on_a_monday_is_accepted(
        home: tuple[str, dict[str, str]]) -> None:
    url, env = home
    cfg = SymptomsConfig()
    ledger = Ledger(url)
    try:
        noise_days(ledger, cfg, date_range(MONDAY, MONDAY + timedelta(days=6)))  # to Sunday
    finally:
        ledger.dispose()
    done = set_epsilon(env, 0.3)
    assert done.returncode == 0, done.stderr
    ledger = Ledger(url)
    try:
        policy = ledger.policy(REPORT)
        assert policy is not None and policy.terms[A_TERM] == 0.3
    finally:
        ledger.dispose()


def test_the_monday_rule_is_the_symptoms_specs_and_is_checked_under_the_ledgers_lock(
        tmp_path: Path) -> None:
    """The rule comes from the report's spec (mobility has no weekly values: any date),
    and Ledger.set_policy applies it to noise terms only (not the cap, not the method
    update fraction, not a term set to the value it has)."""
    assert report_spec(REPORT).terms_change_weekday == 0
    assert report_spec("mobility").terms_change_weekday is None
    cfg = SymptomsConfig()
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        noise_days(ledger, cfg, [MONDAY + timedelta(days=2)])  # a Wednesday: next Thursday
        with pytest.raises(BadRequest, match="2020-03-05 .a Thursday.*Monday 2020-03-09"):
            ledger.set_policy(REPORT, terms={A_TERM: 0.3}, reason="r", run_id="cli",
                              change_weekday=0)
        same = cfg.policy_terms[A_TERM]
        ledger.set_policy(REPORT, terms={A_TERM: same}, reason="r", run_id="cli",
                          change_weekday=0)
        ledger.set_policy(REPORT, cap=cfg.cap * 2, reason="r", run_id="cli", change_weekday=0)
        ledger.set_policy(REPORT, terms={A_TERM: 0.3}, reason="r", run_id="cli")  # no rule
    finally:
        ledger.dispose()


@pytest.mark.parametrize(("last", "monday"), [
    (date(2020, 3, 1), None),             # a Sunday: it takes effect on Monday 03-02
    (date(2020, 3, 2), "2020-03-09"),     # a Monday: the next date noised is a Tuesday
    (date(2020, 2, 29), "2020-03-02"),    # a Saturday: the next date is a Sunday
    (None, None),                         # nothing noised yet
])
def test_the_effective_date_is_the_day_after_the_last_date_spent_on(
        last: date | None, monday: str | None) -> None:
    refusal = terms_change_refusal("weekly_report", [A_TERM], last, 0)
    if monday is None:
        assert refusal is None
    else:
        assert refusal is not None and f"takes effect on Monday {monday}" in refusal


def week_rows(a_epsilon: Sequence[float]) -> pd.DataFrame:
    """One cell over 14 days from MONDAY, noised with ``a_epsilon[i]`` on day i."""
    days = date_range(MONDAY, MONDAY + timedelta(days=len(a_epsilon) - 1))
    return pd.DataFrame({
        "level": 0, "region_id": "DM", "symptom": "Cough", "date": days,
        "a_noisy": np.arange(len(days)), "b_noisy": 100, "reliable": True,
        "a_epsilon": list(a_epsilon), "a_sensitivity": 1, "b_epsilon": 0.112,
        "b_sensitivity": 1})


def test_weeks_on_both_sides_of_a_monday_change_each_have_one_law() -> None:
    mondays, a_w, _, params = weekly(from_rows(week_rows([0.1493] * 7 + [0.1] * 7)))
    assert mondays == [MONDAY, MONDAY + timedelta(days=7)]
    assert list(params["a_epsilon"][:, 0]) == [0.1493, 0.1]
    assert list(a_w[:, 0]) == [sum(range(7)), sum(range(7, 14))]


def test_a_ledger_with_a_mid_week_change_is_refused_naming_the_week_and_the_remedy() -> None:
    """A change recorded mid-week before the rule: the release is refused (no retry),
    naming the week, the days of each law and the remedy (a first public date after
    that week)."""
    with pytest.raises(MixedWeekLaws) as caught:
        weekly(from_rows(week_rows([0.1493] * 3 + [0.1] * 11)))
    assert isinstance(caught.value, Refusal)
    message = str(caught.value)
    for needed in ("the week of 2020-03-02", "a_epsilon", "0.1493 on 2020-03-02, 2020-03-03, "
                   "2020-03-04", "0.1 on 2020-03-05", "first_public_date 2020-03-09",
                   "DP_SYMPTOMS_CONFIG"):
        assert needed in message, (needed, message)


def test_a_draw_that_would_mix_a_weeks_laws_is_refused_before_any_spend(
        tmp_path: Path) -> None:
    """After a change on a Monday, a re-noise of a date of the week before, or a backfill
    of a date missing there, would be drawn under the new terms beside the old ones: the
    symptoms noise step refuses it before anything is spent. A rerun that reuses stored
    noise, and a re-noise in the new week, pass."""
    old = SymptomsConfig()
    new = SymptomsConfig(total_epsilon=1.2, cap_override=old.cap)
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        gap = MONDAY + timedelta(days=3)
        noise_days(ledger, old, [d for d in date_range(MONDAY, MONDAY + timedelta(days=6))
                                 if d != gap])
        for term in ("epsilon.symptom_searches", "epsilon.search_users"):
            ledger.set_policy(REPORT, terms={term: new.policy_terms[term]}, reason="r",
                              run_id="cli", change_weekday=0)
        noise_days(ledger, new, [MONDAY + timedelta(days=7)])
        plan = noise_plan(new, ["Cough"])
        before = ledger.spends(REPORT)
        wednesday = MONDAY + timedelta(days=2)
        for refused in (NoiseRequest(day=wednesday, run_id="oncall", region="DM",
                                     renoise=True, reason="late data"),
                        NoiseRequest(day=gap, run_id="backfill")):
            with pytest.raises(BadRequest, match=r"its week \(2020-03-02 to 2020-03-08\) "
                               r"was noised with .* Nothing was spent"):
                week_law_refusal(ledger, plan, refused)
        assert ledger.spends(REPORT) == before
        week_law_refusal(ledger, plan, NoiseRequest(day=wednesday, run_id="rerun"))
        week_law_refusal(ledger, plan, NoiseRequest(day=MONDAY + timedelta(days=7),
                                                    run_id="oncall", region="DM",
                                                    renoise=True, reason="late data"))
    finally:
        ledger.dispose()
