"""Accounting a report cannot falsify (issue 48, route 5).

The attack: a report plug-in drew its noise with cell epsilon 50 and booked 0.01 in the
ledger, because the epsilon booked (``NoisePlan.ledger_epsilons``) was a field of its own
beside the budgets that parameterised the sampler, and ``Ledger.reserve`` never compared a
spend with the recorded policy. Now the booked epsilon is derived from the very
:class:`MetricBudget` the sampler is built from, and the ledger refuses a spend whose
epsilon, sensitivity, cells per user-day or method-update fraction disagrees with the
policy terms in force, on SQLite and on PostgreSQL. No test here is statistical.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dp_demo.geography import demo_regions
from support.approvals import approve, request_of

from dp_ops.errors import BadRequest, PolicyMismatch
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import ALL_REGIONS, Ledger, Slot, Spend, SpendRequest
from dp_ops.privacy.noise import noise_generator
from dp_ops.privacy.plan import MetricBudget
from dp_ops.regions import write_regions
from dp_ops.steps import noising
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.noising import NoisePlan

REPORT = "mobility"
DAY, NEXT_DAY = date(2020, 3, 2), date(2020, 3, 3)
HONEST = (MetricBudget("a", 0.005, 1, 2), MetricBudget("b", 0.25, 3))
# the plug-in's draw: cell epsilon 50 (the noise all but gone), booked as 0.01
GREEDY = (MetricBudget("a", 50.0, 1, 2), MetricBudget("b", 0.25, 3))
CELLS = {"a": ("x", "y"), "b": ("z",)}


# Before this change a plan also stated what the ledger books (``ledger_epsilons``) and
# the policy terms, each a field of its own: on such code (e84c18e) the plans below state
# them as the plug-in did, so that the tests show the attack succeeding there.
STATES_BOOKING = "ledger_epsilons" in {f.name for f in dataclasses.fields(NoisePlan)}


def _plan(budgets: tuple[MetricBudget, ...], booked: dict[str, float] | None = None
          ) -> NoisePlan:
    extra: dict[str, Any] = {}
    if STATES_BOOKING:
        extra["ledger_epsilons"] = booked or {b.name: b.epsilon for b in budgets}
        extra["policy_terms"] = {f"epsilon.{k}": v for k, v in extra["ledger_epsilons"].items()}
    return NoisePlan(report=REPORT, budgets=budgets, group_cells=CELLS, levels=(0, 1, 2),
                     cap=1000.0, method_version="v1", first_public_date=date(2020, 2, 15),
                     **extra)


def _greedy_plan() -> NoisePlan:
    """The plug-in's plan, as far as the public objects let it be stated: what the ledger
    books is no field of a plan, and policy terms that state a group otherwise than its
    budget are refused, so the plan can state only what it draws."""
    booked = {"a": 0.01, "b": 0.25}
    if not STATES_BOOKING:
        with pytest.raises(TypeError, match="ledger_epsilons"):
            NoisePlan(report=REPORT, budgets=GREEDY, group_cells=CELLS, levels=(0, 1, 2),
                      cap=1000.0, method_version="v1", first_public_date=date(2020, 2, 15),
                      ledger_epsilons=booked)  # type: ignore[call-arg]
        with pytest.raises(ValueError, match=r"\['epsilon\.a'\].*derived from the budgets"):
            NoisePlan(report=REPORT, budgets=GREEDY, group_cells=CELLS, levels=(0, 1, 2),
                      cap=1000.0, method_version="v1", first_public_date=date(2020, 2, 15),
                      policy_terms={"epsilon.a": 0.01, "epsilon.b": 0.25})
    return _plan(GREEDY, booked)


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[DataRoot, str]:
    """A data root with the demo's regions and two days of bounded sums (a few cells; the
    rest of the domain is true zeros); a keyed generator stands in for the secure one."""
    root = DataRoot(tmp_path / "data")
    root.regions_csv.parent.mkdir(parents=True)
    write_regions(demo_regions(), root.regions_csv)
    for day in (DAY, NEXT_DAY):
        bounded = root.bounded_file(REPORT, day)
        bounded.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({
            "level": pa.array([0, 1, 2], pa.int8()),
            "region_id": ["DM", "DM-01", "DM-01-001"],
            "metric": ["x", "z", "y"],
            "value": pa.array([1000, 40, 7], pa.int64()),
        }), bounded)
    monkeypatch.setattr(noising, "noise_generator", lambda: noise_generator(key=3))
    return root, f"sqlite:///{tmp_path / 'ledger.sqlite'}"


@pytest.fixture()
def sampler_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """(epsilon, sensitivity) of every draw the noise step makes, in order (the real
    sampler still draws)."""
    calls: list[tuple[float, int]] = []
    real = noising.add_discrete_laplace

    def recording(values: np.ndarray, *, epsilon: float, sensitivity: int,
                  rng: np.random.Generator) -> np.ndarray:
        calls.append((epsilon, sensitivity))
        return real(values, epsilon=epsilon, sensitivity=sensitivity, rng=rng)

    monkeypatch.setattr(noising, "add_discrete_laplace", recording)
    return calls


def _ledger_state(root: DataRoot, url: str) -> tuple[list[Spend], int]:
    with closing_ledger(open_ledger(root, url)) as led:
        return led.spends(REPORT), len(led.policies())


def test_route5_the_sampler_draws_with_exactly_the_budget_the_ledger_books(
        home: tuple[DataRoot, str], sampler_calls: list[tuple[float, int]]) -> None:
    """Every slot's noise is drawn with the cell epsilon and sensitivity of the budget the
    ledger booked for it: booked epsilon = sampler epsilon x cells per user-day, for every
    group and level, also at cell epsilon 50, and the stored noise states the same law."""
    root, url = home
    plan = _greedy_plan()
    noising.noise_day(root, plan, NoiseRequest(day=DAY, run_id="run-1"), ledger_url=url)
    spends = sorted(_ledger_state(root, url)[0], key=lambda s: s.id)
    assert len(spends) == len(sampler_calls) == 6  # 3 levels x 2 groups, one draw each
    for spend, (epsilon, sensitivity) in zip(spends, sampler_calls, strict=True):
        budget = plan.budget(spend.slot.metric)
        assert spend.epsilon == pytest.approx(epsilon * budget.contributions, rel=1e-12)
        assert (epsilon, sensitivity) == (budget.cell_epsilon, budget.sensitivity)
        stored = pq.read_table(noising.noise_file(root, spend)).to_pandas()
        assert set(stored["cell_epsilon"]) == {epsilon}
        assert set(stored["sensitivity"]) == {sensitivity}
    assert {s.slot.metric: s.epsilon for s in spends} == {"a": 100.0, "b": 0.25}
    with closing_ledger(open_ledger(root, url)) as led:
        policy = led.policy(REPORT)
    assert policy is not None and policy.terms == {
        "epsilon.a": 100.0, "sensitivity.a": 1.0, "cells.a": 2.0,
        "epsilon.b": 0.25, "sensitivity.b": 3.0, "cells.b": 1.0}


def test_route5_a_plugin_drawing_past_the_recorded_epsilon_is_refused_before_any_spend(
        home: tuple[DataRoot, str], sampler_calls: list[tuple[float, int]]) -> None:
    """The honest first run records the policy (cell epsilon 0.005 x 2 cells = 0.01 per
    slot); the plug-in's next run asks to draw at cell epsilon 50 while stating 0.01.
    Refused before anything is reserved or drawn: no spend, no policy row, no noise file,
    and the ledger still verifies."""
    root, url = home
    noising.noise_day(root, _plan(HONEST), NoiseRequest(day=DAY, run_id="run-1"),
                      ledger_url=url)
    spends, policies = _ledger_state(root, url)
    draws = len(sampler_calls)
    with pytest.raises(PolicyMismatch) as refused:
        noising.noise_day(root, _greedy_plan(), NoiseRequest(day=NEXT_DAY, run_id="run-2"),
                          ledger_url=url)
    assert "epsilon.a" in str(refused.value) and "set-epsilon" in str(refused.value)
    assert _ledger_state(root, url) == (spends, policies)
    assert len(sampler_calls) == draws
    assert not root.noise_dir(REPORT, NEXT_DAY).exists() or not any(
        root.noise_dir(REPORT, NEXT_DAY).iterdir())
    with closing_ledger(open_ledger(root, url)) as led:
        assert led.verify().ok


# -- the ledger's own check, on both backends ---------------------------------------------

BUDGET = MetricBudget("places", 0.25, 2, 4)  # 1.0 per user-day and level
TERMS = {"epsilon.places": 1.0, "sensitivity.places": 2.0, "cells.places": 4.0,
         "method_update_fraction": 0.1}


def _slot(day: date = DAY, metric: str = "places", region: str = ALL_REGIONS) -> Slot:
    return Slot(REPORT, day, 1, metric, region)


def _recorded(led: Ledger) -> tuple[list[Spend], list[Any], tuple[int, str]]:
    return led.spends(), led.policies(), led.head()


@pytest.mark.parametrize(("budget", "named"), [
    (MetricBudget("places", 12.5, 2, 4), "epsilon.places: asked 50.0, recorded 1.0"),
    (MetricBudget("places", 0.25, 1, 4), "sensitivity.places: asked 1.0, recorded 2.0"),
    (MetricBudget("places", 1.0, 2, 1), "cells.places: asked 1.0, recorded 4.0"),
    (MetricBudget("places", 0.0025, 2, 4), "epsilon.places: asked 0.01, recorded 1.0"),
], ids=["epsilon", "sensitivity", "cells", "epsilon_lower"])
@pytest.mark.parametrize("reused", [False, True], ids=["new_slot", "reused_slot"])
def test_reserve_refuses_a_budget_that_disagrees_with_the_recorded_policy(
        ledger_url: str, budget: MetricBudget, named: str, reused: bool) -> None:
    """Called directly, with the process's terms matching the record, a spend whose own
    budget says otherwise is refused with nothing written: the error names the report,
    the group, what was asked, what is recorded and the remedy. A slot already spent is
    checked too (its noise may still be drawn from the budget asked)."""
    led = Ledger(ledger_url)
    try:
        led.reserve([SpendRequest(_slot(), BUDGET)], run_id="daily", kind="noise",
                    cap=100.0, method_version="v1", terms=TERMS)
        before = _recorded(led)
        day = DAY if reused else NEXT_DAY
        with pytest.raises(PolicyMismatch) as refused:
            led.reserve([SpendRequest(_slot(day), budget)], run_id="plugin", kind="noise",
                        cap=100.0, method_version="v1", terms=TERMS)
        text = str(refused.value)
        assert f"report {REPORT!r}, metric group 'places'" in text and named in text
        assert "python -m dp_ops ledger set-epsilon" in text and "Nothing was spent" in text
        assert _recorded(led) == before
        assert led.verify().ok
    finally:
        led.dispose()


def test_reserve_refuses_a_method_update_at_another_fraction_and_a_group_outside_the_policy(
        ledger_url: str) -> None:
    """A method update spends the recorded fraction of the group's budget, no other; a
    daily spend spends the whole budget; a group the policy does not name is refused."""
    led = Ledger(ledger_url)
    try:
        led.reserve([SpendRequest(_slot(), BUDGET)], run_id="daily", kind="noise",
                    cap=100.0, method_version="v1", terms=TERMS)
        wide = [SpendRequest(_slot(NEXT_DAY), BUDGET, 0.5)]
        approval = approve(led, request_of(wide, kind="method_update", method_version="v2"),
                           "update")
        before = _recorded(led)
        with pytest.raises(PolicyMismatch, match="method_update_fraction: asked 0.5, "
                                                 "recorded 0.1"):
            led.reserve(wide, run_id="update", kind="method_update", cap=100.0,
                        method_version="v2", reason="test spend", terms=TERMS,
                        approval=approval)
        with pytest.raises(PolicyMismatch, match="a noise spends the whole budget"):
            led.reserve([SpendRequest(_slot(NEXT_DAY), BUDGET, 0.1)], run_id="daily-2",
                        kind="noise", cap=100.0, method_version="v1", terms=TERMS)
        with pytest.raises(PolicyMismatch, match="'parks' is not in the recorded policy"):
            led.reserve([SpendRequest(_slot(NEXT_DAY, "parks"),
                                      MetricBudget("parks", 0.25, 2, 4))],
                        run_id="daily-2", kind="noise", cap=100.0, method_version="v1",
                        terms=TERMS)
        assert _recorded(led) == before
        # the recorded fraction passes, and books that fraction of the group's epsilon
        right = [SpendRequest(_slot(NEXT_DAY), BUDGET, 0.1)]
        approval = approve(led, request_of(right, kind="method_update", method_version="v2"),
                           "update")
        (spend,) = led.reserve(right, run_id="update", kind="method_update", cap=100.0,
                               method_version="v2", reason="test spend", terms=TERMS,
                               approval=approval).spends
        assert spend.epsilon == pytest.approx(0.1, rel=1e-12)
        assert right[0].cell_epsilon == pytest.approx(0.025, rel=1e-12)
    finally:
        led.dispose()


def test_a_policy_that_predates_sensitivity_and_cells_records_them_then_enforces_them(
        ledger_url: str) -> None:
    """A ledger whose policy records only each group's epsilon keeps working: the next
    reservation with the full terms records the configured sensitivity and cells (a
    policy row of its own, in the chain), and from then on they are enforced; a policy
    command may also add them."""
    led = Ledger(ledger_url)
    try:
        old_terms = {"epsilon.places": 1.0, "method_update_fraction": 0.1}
        led.reserve([SpendRequest(_slot(), BUDGET)], run_id="daily", kind="noise",
                    cap=100.0, method_version="v1", terms=old_terms)
        led.reserve([SpendRequest(_slot(NEXT_DAY), BUDGET)], run_id="daily-2", kind="noise",
                    cap=100.0, method_version="v1", terms=TERMS)
        history = led.policies()
        assert [p.terms for p in history] == [old_terms, TERMS]
        assert "predates" in history[-1].reason
        before = _recorded(led)
        with pytest.raises(PolicyMismatch, match="sensitivity.places: asked 1.0"):
            led.reserve([SpendRequest(_slot(date(2020, 3, 4)),
                                      MetricBudget("places", 0.25, 1, 4))],
                        run_id="daily-3", kind="noise", cap=100.0, method_version="v1",
                        terms=TERMS)
        assert _recorded(led) == before
        assert led.verify().ok
    finally:
        led.dispose()


def test_set_policy_adds_the_missing_group_terms_and_takes_only_whole_cells(
        tmp_path: Path) -> None:
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        led.reserve([SpendRequest(_slot(), BUDGET)], run_id="daily", kind="noise",
                    cap=100.0, method_version="v1", terms={"epsilon.places": 1.0})
        with pytest.raises(BadRequest, match=r"cells\.places=2\.5: must be a whole number"):
            led.set_policy(REPORT, terms={"cells.places": 2.5}, reason="x", run_id="cli")
        with pytest.raises(BadRequest, match="not a term"):
            led.set_policy(REPORT, terms={"cells.parks": 4.0}, reason="x", run_id="cli")
        after = led.set_policy(REPORT, terms={"sensitivity.places": 2.0, "cells.places": 4.0},
                               reason="record the bounding's terms", run_id="cli")
        assert after.terms == {"epsilon.places": 1.0, "sensitivity.places": 2.0,
                               "cells.places": 4.0}
    finally:
        led.dispose()


def test_a_spend_and_its_budget_are_one_object() -> None:
    """The request books what its budget costs (times the fraction), names its own group's
    budget only, and a budget refuses a meaningless cell count or sensitivity."""
    request = SpendRequest(_slot(), BUDGET, 0.1)
    assert (request.epsilon, request.cell_epsilon, request.sensitivity) == pytest.approx(
        (0.1, 0.025, 2), rel=1e-12)
    with pytest.raises(ValueError, match="budget of metric group 'parks', not its own"):
        SpendRequest(_slot(), MetricBudget("parks", 0.25, 2, 4))
    with pytest.raises(ValueError, match=r"fraction=1\.5"):
        SpendRequest(_slot(), BUDGET, 1.5)
    with pytest.raises(ValueError, match="contributions=0"):
        MetricBudget("places", 0.25, 2, 0)
    with pytest.raises(ValueError, match=r"sensitivity=1\.5"):
        MetricBudget("places", 0.25, 1.5, 1)  # type: ignore[arg-type]
    assert "epsilon" not in {f.name for f in dataclasses.fields(SpendRequest)}
    assert {**BUDGET.terms(), "method_update_fraction": 0.1} == TERMS


def test_a_stored_draw_is_never_made_above_what_its_spend_booked() -> None:
    """A spend reserved and never stored is drawn later with the budget in force; if that
    asks more than the spend booked (the policy raised in between), nothing is drawn."""
    spend = Spend(7, _slot(metric="a"), 0, 0.01, "noise", "v1", "r", "", "t")
    with pytest.raises(PolicyMismatch, match="booked at epsilon 0.01"):
        noising.booked_budget(spend, SpendRequest(spend.slot, GREEDY[0]))
    assert noising.booked_budget(spend, SpendRequest(spend.slot, HONEST[0])) == HONEST[0]


def test_a_method_update_redrawn_for_its_booked_spends_never_draws_above_them(
        tmp_path: Path) -> None:
    """A method update whose run crashed after the reservation draws s_n again for the
    spends it booked, with the requests' budgets: those must cost no more than was
    booked, and the s_n draws take each group's cell epsilon from those requests."""
    from dp_ops.reports.mobility.config import MobilityConfig
    from dp_ops.reports.mobility.method_update import (
        MethodUpdate,
        plan_requests,
        update_budgets,
    )
    from dp_ops.reports.mobility.method_update_step import _reserved_before
    from dp_ops.reports.mobility.new_methods import ScaledCounts

    update = MethodUpdate(method_version="v2", effective_date=date(2020, 3, 9),
                          categories=("parks",),
                          method=ScaledCounts.for_categories(("parks",), 1.3), reason="x")
    cfg = MobilityConfig()
    requests = plan_requests(cfg, update)
    assert {r.slot.metric for r in requests} == {"places"}
    booked = update_budgets(requests)["places"]
    assert booked.cell_epsilon == pytest.approx(cfg.method_update_fraction * cfg.place_epsilon)
    assert booked.epsilon == pytest.approx(booked.cell_epsilon * cfg.max_place_pairs)
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        request = request_of(requests, kind="method_update", method_version="v2", reason="x")
        led.reserve(requests, run_id="update", kind="method_update", cap=1e6,
                    method_version="v2", reason="x", terms=cfg.policy_terms,
                    approval=approve(led, request, "update"))
        assert len(_reserved_before(led, cfg, update, requests) or []) == len(requests)
        raised = MobilityConfig(place_epsilon=2 * cfg.place_epsilon)
        with pytest.raises(PolicyMismatch, match="more than was paid"):
            _reserved_before(led, raised, update, plan_requests(raised, update))
    finally:
        led.dispose()
