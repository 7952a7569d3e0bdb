"""Reports are found by name and bound to their config, data root and ledger."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.mobility.declaration import REPORT as MOBILITY
from dp_ops.reports.registry import load_report
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.declaration import REPORT as SYMPTOMS


def test_every_report_name_loads_its_own_declaration_and_config(dp_data_root: Path) -> None:
    mobility = load_report("mobility")
    symptoms = load_report("symptoms")
    assert mobility.report is MOBILITY and isinstance(mobility.cfg, MobilityConfig)
    assert symptoms.report is SYMPTOMS and isinstance(symptoms.cfg, SymptomsConfig)
    assert (mobility.name, symptoms.name) == ("mobility", "symptoms")
    assert (mobility.daily_dag_id, symptoms.daily_dag_id) == ("mobility_report",
                                                              "symptoms_dataset")
    assert mobility.root.root == symptoms.root.root == dp_data_root
    assert mobility.ledger_url.startswith("sqlite:///")
    assert mobility.cap == MobilityConfig().cap


def test_an_unknown_report_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"report='mobilty'.*\['mobility', 'symptoms'\]"):
        load_report("mobilty")


def test_what_differs_between_reports_comes_from_the_report(dp_data_root: Path) -> None:
    mobility, symptoms = load_report("mobility"), load_report("symptoms")
    assert mobility.first_noised_date() == MobilityConfig().first_metric_date
    assert symptoms.first_noised_date() == SymptomsConfig().first_public_date
    assert mobility.needs_baseline(date(2020, 2, 15))
    assert not mobility.needs_baseline(date(2020, 2, 14))
    assert not symptoms.needs_baseline(date(2020, 6, 1))


def test_the_execution_settings_are_read_once_where_the_report_is_bound(
        dp_data_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step of a bound report sees the settings read when it was bound, even if the
    environment changes meanwhile; outside a bound report a step reads them afresh."""
    from dataclasses import replace

    from dp_ops.reports.declared import MethodUpdates
    from dp_ops.reports.protocol import MethodUpdateForm
    from dp_ops.settings import execution_settings
    from dp_ops.steps.result import StepResult

    monkeypatch.setenv("DP_BOUNDING_SHARDS", "3")
    bound = load_report("symptoms")
    monkeypatch.setenv("DP_BOUNDING_SHARDS", "5")
    seen: list[int] = []

    def step(*_: object, **__: object) -> StepResult:
        seen.append(execution_settings().bounding_shards)
        return StepResult("ok")

    updates = MethodUpdates(run=step, request=step, spends=step)  # type: ignore[arg-type]
    twin = replace(bound, report=replace(bound.report, report_day=step,
                                         method_updates=updates))
    twin.report_day(date(2020, 1, 1))
    twin.method_update(MethodUpdateForm("v2", date(2020, 3, 2), [], 1.0, "why"), run_id="r")
    assert seen == [3, 3] and bound.settings.bounding_shards == 3
    assert execution_settings().bounding_shards == 5
