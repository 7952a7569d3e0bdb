"""Constructed noisy per-day symptoms rows (not from the generator): known search rates,
the report's configuration and noise, for the release and period-summary tests."""

from __future__ import annotations

from datetime import date

import pandas as pd

from dp_ops.privacy.noise import noise_generator, sample_discrete_laplace
from dp_ops.reports.symptoms.config import SymptomsConfig
from dp_ops.reports.symptoms.daily import with_reliability

CFG = SymptomsConfig()
SYMPTOMS = ["Fever", "Cough", "Anosmia", "Headache"]
# per-user-day search rates of the constructed symptoms: two common, one rare, one medium
RATES = {"Fever": 0.05, "Cough": 0.04, "Anosmia": 0.002, "Headache": 0.01}


def constructed_rows(regions: pd.DataFrame, days: list[date], key: int = 5) -> pd.DataFrame:
    """Per-day rows as the report step writes them: B proportional to the region's area
    share of a 60,000-searcher country, A = rate x B, both with the config's noise."""
    rng = noise_generator(key=key)
    a_cell = CFG.budget("symptom_searches")
    b_cell = CFG.budget("search_users")
    regions = regions[regions["level"].isin(CFG.levels)]
    rows = []
    for day in days:
        for region in regions.itertuples():
            share = 1.0 if region.level == 0 else min(1.0, float(region.area_km2) / 28889.0)
            b_true = int(60000 * share)
            b = b_true + int(sample_discrete_laplace(1, epsilon=b_cell.cell_epsilon,
                                                     sensitivity=1, rng=rng)[0])
            for symptom in SYMPTOMS:
                a = int(RATES[symptom] * b_true) + int(sample_discrete_laplace(
                    1, epsilon=a_cell.cell_epsilon, sensitivity=1, rng=rng)[0])
                rows.append((region.level, region.region_id, symptom, day, a,
                             a_cell.cell_epsilon, 1, b, b_cell.cell_epsilon, 1))
    frame = pd.DataFrame(rows, columns=["level", "region_id", "symptom", "date", "a_noisy",
                                        "a_epsilon", "a_sensitivity", "b_noisy", "b_epsilon",
                                        "b_sensitivity"])
    return with_reliability(frame, CFG, n_days=1)
