"""The symptoms selection (:mod:`dp_ops.reports.symptoms.selection`) keeps each level, date
and resolution apart, in the fit of a family's law of true ratios and in the choice of
which passing values a release publishes. The data here is built so that pooling two
groups changes the answer: one group of good values beside one of poor values, where the
good ones, pooled, would carry some of the poor ones under the bound.

No test here is statistical: the selection tests use fixed ``off`` values, and the fit's
test uses fixed noise (seeded) whose outcome is checked both ways (apart and pooled).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dp_ops.reports.symptoms.config import SYMPTOM_METRIC, VOLUME_METRIC, SymptomsConfig
from dp_ops.reports.symptoms.selection import (
    family_posteriors,
    select_published,
    select_within_bound,
)

CFG = SymptomsConfig()
A_CELL, B_CELL = CFG.budget(SYMPTOM_METRIC), CFG.budget(VOLUME_METRIC)
BOUND = CFG.reliability_test_level  # 0.45
GOOD, POOR = 0.05, 0.60  # a good group alone keeps all; a poor group alone keeps none
N_GOOD, N_POOR = 30, 10  # pooled: (30 x 0.05 + 10 x 0.6) / 40 = 0.1875 <= 0.45


def _groups(key: str, good: object, poor: object) -> pd.DataFrame:
    """Two groups that differ only in ``key``: ``N_GOOD`` values of ``off`` GOOD and
    ``N_POOR`` of ``off`` POOR, the poor ones first."""
    base = {"resolution": "weekly", "date": "2020-03-02", "level": 2}
    poor_rows = pd.DataFrame({**base, key: [poor] * N_POOR, "off": POOR})
    good_rows = pd.DataFrame({**base, key: [good] * N_GOOD, "off": GOOD})
    return pd.concat([poor_rows, good_rows], ignore_index=True)


def test_the_data_tells_pooled_groups_from_separate_ones() -> None:
    """The premise of the tests below: pooled, every value is selected; apart, only the
    good group's."""
    off = np.array([POOR] * N_POOR + [GOOD] * N_GOOD)
    assert select_within_bound(off, np.ones(off.size, bool), BOUND).all()
    assert not select_within_bound(off[:N_POOR], np.ones(N_POOR, bool), BOUND).any()


@pytest.mark.parametrize(("key", "good", "poor"), [
    ("level", 1, 2), ("date", "2020-03-09", "2020-03-02"), ("resolution", "daily", "weekly")])
def test_select_published_keeps_each_group_apart(key: str, good: object, poor: object
                                                  ) -> None:
    """Poor values of one level (date, resolution) are withheld although good values of
    another level (date, resolution) of the same release would carry them, pooled."""
    values = _groups(key, good, poor)
    keep = select_published(values, BOUND)
    assert not keep[:N_POOR].any(), f"{key}: poor values published on the good ones' credit"
    assert keep[N_POOR:].all()


def _family(a: np.ndarray, b: int, reliable: np.ndarray, level: int) -> pd.DataFrame:
    return pd.DataFrame({"level": level, "a_epsilon": A_CELL.cell_epsilon,
                         "a_sensitivity": A_CELL.sensitivity,
                         "b_epsilon": B_CELL.cell_epsilon,
                         "b_sensitivity": B_CELL.sensitivity, "n_days": 7,
                         "a_noisy": a, "b_noisy": b, "reliable": reliable,
                         "date": "2020-03-02"})


def _weekly_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    """Sums of 7 discrete Laplace draws at the A cell's parameters (simulation only)."""
    p = 1 - np.exp(-A_CELL.cell_epsilon / A_CELL.sensitivity)
    return (rng.geometric(p, (7, n)) - rng.geometric(p, (7, n))).sum(axis=0)


def test_each_level_is_fitted_as_its_own_family() -> None:
    """One week, the same noise parameters, two levels: level 2 holds only empty cells
    (true count 0) whose largest noise draws pass the rule, level 1 only strong signals
    whose ratio (1,000 / 22,000) is about the lucky values' noisy ratio. Fitted apart,
    level 2's law is "all empty" and its lucky values are off; fitted with level 1, the
    law puts mass at that ratio and the lucky values look like signals, each one kept."""
    rng = np.random.default_rng(48)
    n = 2_000
    empty = _weekly_noise(rng, n)
    strong = 1_000 + _weekly_noise(rng, n)
    lucky = empty >= np.sort(empty)[-5]
    frame = pd.concat([_family(empty, 2_000, lucky, level=2),
                       _family(strong, 22_000, np.ones(n, bool), level=1)], ignore_index=True)
    fit = family_posteriors(frame, tolerance=CFG.reliability_tolerance)
    assert (fit.off[:n][lucky] > 0.99).all()
    assert not select_within_bound(fit.off[:n], lucky, BOUND).any()
    assert fit.off[n:].max() < 0.05
    # the premise: the same values fitted as one family keep every lucky value
    pooled = family_posteriors(frame.assign(level=2), tolerance=CFG.reliability_tolerance)
    assert select_within_bound(pooled.off[:n], lucky, BOUND).sum() == lucky.sum() == 5
