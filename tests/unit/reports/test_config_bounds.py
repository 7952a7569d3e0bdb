"""Every epsilon a report's config takes is refused, naming the field, when it is not a
finite number in (0, 700]: above 700 per unit of sensitivity the discrete Laplace noise is
zero at any precision (exp(-700) is near the smallest double), so no privacy at all."""

from __future__ import annotations

import math

import pytest

from dp_ops.errors import ConfigError
from dp_ops.privacy.plan import MAX_EPSILON_PER_SENSITIVITY
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.symptoms.config import SymptomsConfig

MOBILITY_EPSILONS = ["place_epsilon", "workplace_epsilon", "residential_sum_epsilon",
                     "residential_count_epsilon", "contributors_epsilon"]


@pytest.mark.parametrize("name", MOBILITY_EPSILONS)
@pytest.mark.parametrize("bad,why", [
    (0.0, "must be a finite number > 0"), (-1.0, "must be a finite number > 0"),
    (math.inf, "must be a finite number > 0"), (math.nan, "must be a finite number > 0"),
    (700.5, "must be at most 700 (beyond it the noise is zero: no privacy)")])
def test_mobility_epsilons_outside_the_range_are_refused(name: str, bad: float,
                                                          why: str) -> None:
    with pytest.raises(ConfigError) as err:
        MobilityConfig(**{name: bad})  # type: ignore[arg-type]
    assert str(err.value) == f"config field {name}={bad!r}: {why}"


@pytest.mark.parametrize("name", MOBILITY_EPSILONS)
def test_mobility_epsilon_at_the_bound_is_taken(name: str) -> None:
    cfg = MobilityConfig(**{name: MAX_EPSILON_PER_SENSITIVITY})  # type: ignore[arg-type]
    assert getattr(cfg, name) == 700.0


@pytest.mark.parametrize("bad,why", [
    (0.0, "must be a finite number > 0"), (math.inf, "must be a finite number > 0"),
    (701.0, "must be at most 700 (beyond it the noise is zero: no privacy)")])
def test_symptoms_total_epsilon_outside_the_range_is_refused(bad: float, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        SymptomsConfig(total_epsilon=bad)
    assert str(err.value) == f"config field total_epsilon={bad!r}: {why}"
    assert SymptomsConfig(total_epsilon=700.0).total_epsilon == 700.0
