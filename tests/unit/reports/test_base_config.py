"""``BudgetedConfig``: what every report's configuration shares (the levels, the method
version, the cap and its headroom), written once for any report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from dp_ops.errors import ConfigError
from dp_ops.privacy.plan import MetricBudget
from dp_ops.reports.base_config import BudgetedConfig


@dataclass(frozen=True)
class _Visits(BudgetedConfig):
    epsilon: float = 0.5

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        return (MetricBudget("visits", self.epsilon, 1, 2), MetricBudget("users", 0.25, 1))


def test_the_cap_is_a_normal_run_plus_its_headroom() -> None:
    cfg = _Visits()
    # per level: visits 0.5 x 2 cells + users 0.25; three levels
    assert cfg.run_epsilon == pytest.approx(3 * 1.25)
    assert cfg.cap == pytest.approx(3.75 * (1 + 1 + 1 * 0.10))
    assert _Visits(cap_renoises=0, cap_method_updates=0).cap == pytest.approx(3.75)
    assert _Visits(cap_override=9.0).cap == 9.0
    assert _Visits(levels=(0,)).run_epsilon == pytest.approx(1.25)
    assert cfg.policy_terms == {"epsilon.visits": 1.0, "sensitivity.visits": 1.0,
                                "cells.visits": 2.0, "epsilon.users": 0.25,
                                "sensitivity.users": 1.0, "cells.users": 1.0,
                                "method_update_fraction": 0.10}
    assert cfg.budget("users").cell_epsilon == 0.25
    with pytest.raises(ConfigError, match="unknown metric group 'other'"):
        cfg.budget("other")


@pytest.mark.parametrize("kwargs,field", [
    ({"levels": ()}, "levels"), ({"levels": (2, 1)}, "levels"), ({"levels": (0, 3)}, "levels"),
    ({"method_update_fraction": 0.0}, "method_update_fraction"),
    ({"cap_renoises": -1}, "cap_renoises"), ({"cap_override": 0.0}, "cap_override"),
    ({"min_area_km2": -0.5}, "min_area_km2")])
def test_the_common_fields_are_checked_naming_the_field(kwargs: dict[str, object],
                                                        field: str) -> None:
    with pytest.raises(ConfigError, match=f"config field {field}="):
        _Visits(**kwargs)  # type: ignore[arg-type]


def test_from_a_mapping_and_from_the_file_an_environment_variable_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _Visits.from_mapping({"levels": [0, 1], "epsilon": 0.3}) == _Visits(
        levels=(0, 1), epsilon=0.3)
    with pytest.raises(ConfigError, match="config field colour='red': unknown field"):
        _Visits.from_mapping({"colour": "red"})
    monkeypatch.delenv("DP_VISITS_CONFIG", raising=False)
    assert _Visits.load("DP_VISITS_CONFIG") == _Visits()
    path = tmp_path / "visits.json"
    path.write_text(json.dumps({"cap_renoises": 2}))
    monkeypatch.setenv("DP_VISITS_CONFIG", str(path))
    assert _Visits.load("DP_VISITS_CONFIG") == _Visits(cap_renoises=2)
    with pytest.raises(NotImplementedError):
        _ = BudgetedConfig().run_epsilon
