"""A report is one declared value: what the factory refuses to build from it, and that its
budget has one statement (the config's), booked and sampled alike."""

from __future__ import annotations

import sys
import types
from dataclasses import fields, replace
from pathlib import Path

import pytest

from dp_ops.layout import DataRoot
from dp_ops.reports.declared import Baseline, Report
from dp_ops.reports.mobility.config import GROUP_CELLS, MobilityConfig
from dp_ops.reports.mobility.declaration import REPORT as MOBILITY
from dp_ops.reports.registry import declared_report
from dp_ops.reports.spec import report_spec, report_specs
from dp_ops.reports.symptoms.declaration import REPORT as SYMPTOMS
from dp_ops.sources.search_activity import symptom_list


@pytest.fixture()
def root(tmp_path: Path) -> DataRoot:
    root = DataRoot(tmp_path)
    symptom_list(root).parent.mkdir(parents=True)
    symptom_list(root).write_text("Cough\nFever\n")
    return root


def test_every_installed_report_declares_its_own_spec() -> None:
    for spec in report_specs().values():
        report = declared_report(spec)
        assert report.spec is spec and report.release.report == spec.name


def test_the_noise_plan_books_and_samples_the_configs_budgets(root: DataRoot) -> None:
    """The one statement of the budget is the config's: the plan's budgets (the sampler's
    law) are those, and what a slot books is derived from them."""
    for report in (MOBILITY, SYMPTOMS):
        cfg = report.load_config()
        plan = report.noise_plan(root, cfg)
        assert plan.budgets == cfg.metric_budgets
        assert plan.ledger_epsilons == cfg.ledger_epsilons
        assert dict(plan.policy_terms) == cfg.policy_terms
    assert SYMPTOMS.noise_plan(root, SYMPTOMS.load_config()).group_cells[
        "symptom_searches"] == ("symptom:Cough", "symptom:Fever")


def test_a_report_has_no_epsilon_of_its_own_to_book() -> None:
    """Nothing in a declaration states a budget: the cells it declares are noised at the
    config's budgets or not at all. A report that tries to book another epsilon beside
    them is refused when it is built (and by mypy before)."""
    assert not [f.name for f in fields(Report) if "epsilon" in f.name or "budget" in f.name]
    with pytest.raises(TypeError, match="ledger_epsilons"):
        replace(MOBILITY, ledger_epsilons={"places": 9.9})  # type: ignore[call-arg]


def test_policy_terms_that_state_another_epsilon_than_the_budgets_are_refused(
        root: DataRoot) -> None:
    """The other way to book another epsilon, a config whose recorded policy terms
    disagree with its budgets, is refused when the noise plan is built."""
    class Lying(MobilityConfig):
        @property
        def policy_terms(self) -> dict[str, float]:
            return {**super().policy_terms, "epsilon.places": 9.9}

    with pytest.raises(ValueError, match="derived from the budgets"):
        MOBILITY.noise_plan(root, Lying())


def test_cells_without_a_budget_or_a_budget_without_cells_are_refused(root: DataRoot) -> None:
    extra = replace(MOBILITY, cells=lambda root, cfg: {**GROUP_CELLS, "visits": ("visits",)})
    with pytest.raises(ValueError, match="must name the same groups"):
        extra.noise_plan(root, MobilityConfig())
    fewer = {k: v for k, v in GROUP_CELLS.items() if k != "contributors"}
    with pytest.raises(ValueError, match="must name the same groups"):
        replace(MOBILITY, cells=lambda root, cfg: fewer).noise_plan(root, MobilityConfig())


@pytest.mark.parametrize("changes,message", [
    ({"spec": replace(MOBILITY.spec, sources=("location_history", "search_activity"))},
     "reads one source"),
    ({"baseline": None}, "declares the 'baseline' asset"),
    ({"release": SYMPTOMS.release}, "release parts are those of 'symptoms'"),
])
def test_a_declaration_that_contradicts_itself_cannot_be_built(changes: dict[str, object],
                                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(MOBILITY, **changes)  # type: ignore[arg-type]


def test_a_baseline_without_its_asset_cannot_be_built() -> None:
    baseline = Baseline(needed=lambda cfg, day: True,
                        build=MOBILITY.baseline.build)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="declares the 'baseline' asset"):
        replace(SYMPTOMS, baseline=baseline)


@pytest.mark.parametrize("value,message", [
    ("not a report", "is a str, not a Report"),
    (SYMPTOMS, "declares the spec of 'symptoms'"),
])
def test_a_declaration_module_must_export_the_spec_s_own_report(
        monkeypatch: pytest.MonkeyPatch, value: object, message: str) -> None:
    module = types.ModuleType("elsewhere_declaration")
    module.REPORT = value  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "elsewhere_declaration", module)
    spec = replace(report_spec("mobility"), declaration="elsewhere_declaration")
    with pytest.raises((TypeError, ValueError), match=message):
        declared_report(spec)
