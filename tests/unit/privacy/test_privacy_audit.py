"""Empirical privacy audit (privacy_audit) of every mechanism as the pipeline runs it.

Neighbours: D = background users + one worst-case user-day, D' = the background only.
Contribution bounding (the real SQL, on a tiny region tree with DuckDB) runs once per
dataset; it is deterministic given its salt, so the true cell vectors x (D) and x' (D') are
fixed. Noise is the pipeline's own ``add_discrete_laplace`` with the config's epsilon and
sensitivity, drawn from ``noise_generator(key=...)`` with fixed keys, so every test here is
deterministic. The audit statistic is the log-likelihood ratio over the cells the user
changes (cells it does not change have the same law under D and D' and carry no signal).

False failures. Every bound is a Clopper-Pearson bound at confidence 1 - ALPHA with
ALPHA = 1e-6 (split over the events it tries): an "eps_lb <= claimed" assertion fails with
probability <= 1e-6 when the mechanism is correct. The "eps_lb >= 0.5 x claimed" checks
catch an audit that always returns 0; at 10^6 draws per half the bound reaches about 0.9x
of the claim, with a standard error near 0.01 nats, so missing 0.5x is a > 10 sigma event.
With fixed keys all of this is deterministic anyway: the rates say how likely another key
would be to fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from numpy.typing import NDArray
from support.privacy_audit import (
    AuditResult,
    clopper_pearson,
    epsilon_lower_bound,
    event_epsilon_lower_bound,
    laplace_log_likelihood_ratio,
)

from dp_ops.engine.duckdb import register_ancestors
from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
from dp_ops.reports.mobility import bounding as mobility_bounding
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.symptoms import bounding as symptoms_bounding
from dp_ops.reports.symptoms.config import (
    SYMPTOM_CELL_PREFIX,
    SYMPTOM_METRIC,
    VOLUME_CELL,
    VOLUME_METRIC,
    SymptomsConfig,
)
from dp_ops.sources.location_history import PLACE_CATEGORIES

pytestmark = [pytest.mark.slow]

ALPHA = 1e-6
DRAWS = 2_000_000        # per dataset: the first half picks the event, the second bounds it
CHUNK = 250_000          # draws per chunk, to keep memory flat for many-cell mechanisms
DAY = date(2020, 3, 2)
MOB = MobilityConfig()
SYM = SymptomsConfig()

# Country C; sub-regions A, B; finest A1, A2, B1, B2, B3 (as tests/unit/steps/test_bound.py).
FINEST = ["A1", "A2", "B1", "B2", "B3"]
ANCESTORS = pd.DataFrame(
    [(f, 2, f) for f in FINEST] + [(f, 1, f[0]) for f in FINEST] + [(f, 0, "C") for f in FINEST]
    + [("A", 1, "A"), ("A", 0, "C"), ("B", 1, "B"), ("B", 0, "C"), ("C", 0, "C")],
    columns=["finest_region_id", "level", "region_id"],
)
REGIONS = ANCESTORS[["level", "region_id"]].drop_duplicates()

SYMPTOMS = ["Fever", "Cough", "Anosmia", "Ageusia", "Headache", "Nausea", "Fatigue"]

# -- neighbouring datasets -------------------------------------------------------------------

Stay = tuple[str, str, str, float]
Search = tuple[str, str, str | None]

BACKGROUND_STAYS: list[Stay] = (
    [(f"u{i}", FINEST[i % 5], PLACE_CATEGORIES[i % 7], 1.0 + i % 3) for i in range(60)]
    + [(f"u{i}", FINEST[(i + 1) % 5], "residential", 6.0 + i % 15) for i in range(60)]
    + [(f"u{i}", FINEST[(i + 2) % 5], "workplace", 0.5 + i % 9) for i in range(0, 60, 2)]
)
# The worst case for every mobility bound at once: 7 categories in two finest regions (14
# (category, region) pairs at level 2 and 1, 7 at level 0; bounding must cut each to 4),
# 24 h at home (residential offset +12 h = +720 minutes, the extreme), 9 h at work.
WORST_STAYS: list[Stay] = (
    [("worst", region, cat, 0.5) for region in ("A1", "B1") for cat in PLACE_CATEGORIES]
    + [("worst", "A2", "residential", 24.0), ("worst", "B2", "workplace", 9.0)]
)

BACKGROUND_SEARCHES: list[Search] = [
    (f"s{i}", FINEST[i % 5], SYMPTOMS[i % 7] if i % 4 else None) for i in range(80)
] + [(f"s{i}", FINEST[i % 5], SYMPTOMS[(i + 3) % 7]) for i in range(0, 80, 3)]
# A user searching 6 symptoms in one region: bounding must cut them to k = 3.
WORST_SEARCHES: list[Search] = [("worst", "A1", s) for s in SYMPTOMS[:6]] + [("worst", "A1", None)]


def mobility_cells(stays: list[Stay], cfg: MobilityConfig = MOB) -> pd.DataFrame:
    con = duckdb.connect()
    register_ancestors(con, ANCESTORS)
    con.register("stays", pa.table({
        "user_id": pa.array([s[0] for s in stays], pa.string()),
        "region_id": pa.array([s[1] for s in stays], pa.string()),
        "place_category": pa.array([s[2] for s in stays], pa.string()),
        "dwell_hours": pa.array([s[3] for s in stays], pa.float64()),
    }))
    return con.execute(mobility_bounding.cell_aggregates_sql("stays"),
                       mobility_bounding.bounding_params(cfg, DAY)).df()


def symptoms_cells(searches: list[Search], cfg: SymptomsConfig = SYM) -> pd.DataFrame:
    con = duckdb.connect()
    register_ancestors(con, ANCESTORS)
    con.register("searches", pa.table({
        "user_id": pa.array([s[0] for s in searches], pa.string()),
        "region_id": pa.array([s[1] for s in searches], pa.string()),
        "symptom": pa.array([s[2] for s in searches], pa.string()),
    }))
    return con.execute(symptoms_bounding.cell_aggregates_sql("searches"),
                       symptoms_bounding.bounding_params(cfg, DAY)).df()


@dataclass(frozen=True)
class Neighbours:
    """True values of the cells one user-day changes: x under D, x' under D'."""

    x_d: NDArray[np.int64]
    x_d_prime: NDArray[np.int64]


def changed_cells(cells_d: pd.DataFrame, cells_d_prime: pd.DataFrame, level: int,
                  metrics: tuple[str, ...]) -> Neighbours:
    """Over the public domain (every region of ``level`` x ``metrics``, zeros included),
    the cells whose true values differ between D and D'."""
    regions = REGIONS.loc[REGIONS["level"] == level, "region_id"]
    domain = pd.MultiIndex.from_product([regions, metrics], names=["region_id", "metric"])

    def values(cells: pd.DataFrame) -> NDArray[np.int64]:
        at = cells[cells["level"] == level].set_index(["region_id", "metric"])["value"]
        return at.reindex(domain, fill_value=0).to_numpy(dtype=np.int64)

    x_d, x_dp = values(cells_d), values(cells_d_prime)
    changed = x_d != x_dp
    return Neighbours(x_d[changed], x_dp[changed])


@pytest.fixture(scope="module")
def mobility() -> tuple[pd.DataFrame, pd.DataFrame]:
    return mobility_cells(BACKGROUND_STAYS + WORST_STAYS), mobility_cells(BACKGROUND_STAYS)


@pytest.fixture(scope="module")
def symptoms() -> tuple[pd.DataFrame, pd.DataFrame]:
    return symptoms_cells(BACKGROUND_SEARCHES + WORST_SEARCHES), symptoms_cells(BACKGROUND_SEARCHES)


PLACES = tuple(f"places_{c}" for c in PLACE_CATEGORIES)
A_CELLS = tuple(SYMPTOM_CELL_PREFIX + s for s in SYMPTOMS)

# -- drawing the pipeline's noise ----------------------------------------------------------


def llr_draws(nb: Neighbours, *, epsilon: float, sensitivity: int, key: int,
              draw_epsilon: float | None = None,
              draws: int = DRAWS) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The log-likelihood-ratio statistic of ``draws`` noisy outputs under D and under D'.

    Noise: the pipeline's ``add_discrete_laplace`` at ``draw_epsilon`` (default: the
    claimed ``epsilon``), keys ``key`` (D) and ``key + 1`` (D')."""
    stats = []
    for offset, x in ((0, nb.x_d), (1, nb.x_d_prime)):
        rng = noise_generator(key=key + offset)
        out = np.empty(draws, dtype=np.float64)
        for start in range(0, draws, CHUNK):
            m = min(CHUNK, draws - start)
            y = add_discrete_laplace(np.broadcast_to(x, (m, x.size)),
                                     epsilon=draw_epsilon or epsilon, sensitivity=sensitivity,
                                     rng=rng)
            out[start:start + m] = laplace_log_likelihood_ratio(
                y, nb.x_d, nb.x_d_prime, epsilon=epsilon, sensitivity=sensitivity)
        stats.append(out)
    return stats[0], stats[1]


def audit(nb: Neighbours, *, epsilon: float, sensitivity: int, key: int,
          draw_epsilon: float | None = None) -> AuditResult:
    stat_d, stat_dp = llr_draws(nb, epsilon=epsilon, sensitivity=sensitivity, key=key,
                                draw_epsilon=draw_epsilon)
    return epsilon_lower_bound(stat_d, stat_dp, alpha=ALPHA)


def report(label: str, claimed: float, result: AuditResult) -> None:
    print(f"\nAUDIT {label}: claimed {claimed:.4f}, eps_lb {result.epsilon_lb:.4f} "
          f"({result.epsilon_lb / claimed:.2f}x) event {result.event} t={result.threshold:.4g} "
          f"counts={result.counts}")


# -- the audit's own machinery -------------------------------------------------------------


@pytest.mark.parametrize("k,n,alpha", [(0, 10**6, 1e-7), (1, 10**6, 1e-7), (5, 100, 0.05),
                                       (3, 10, 0.1), (23_500, 10**6, 2.5e-7),
                                       (600_000, 10**6, 2.5e-7), (999_999, 10**6, 1e-7),
                                       (10**6, 10**6, 1e-7)])
def test_clopper_pearson_matches_scipy(k: int, n: int, alpha: float) -> None:
    beta = pytest.importorskip("scipy.stats").beta
    lo, hi = clopper_pearson(k, n, alpha)
    assert lo == pytest.approx(beta.ppf(alpha, k, n - k + 1) if k > 0 else 0.0, rel=1e-8)
    assert hi == pytest.approx(beta.ppf(1 - alpha, k + 1, n - k) if k < n else 1.0, rel=1e-8)


def test_worst_case_users_hit_every_bound_exactly(
        mobility: tuple[pd.DataFrame, pd.DataFrame],
        symptoms: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    # The audit is only as strong as its neighbours: check they are the extreme ones.
    for level in MOB.levels:
        places = changed_cells(*mobility, level, PLACES)
        assert len(places.x_d) == MOB.max_place_pairs
        assert ((places.x_d - places.x_d_prime) == 1).all()
        res = changed_cells(*mobility, level, ("residential_sum_units",))
        assert list(res.x_d - res.x_d_prime) == [MOB.budget("residential_sum").sensitivity]
        for metric in ("workplaces", "residential_users", "contributors"):
            one = changed_cells(*mobility, level, (metric,))
            assert list(one.x_d - one.x_d_prime) == [1], metric
    for level in SYM.levels:
        a = changed_cells(*symptoms, level, A_CELLS)
        assert len(a.x_d) == SYM.max_symptoms_per_day and ((a.x_d - a.x_d_prime) == 1).all()
        b = changed_cells(*symptoms, level, (VOLUME_CELL,))
        assert list(b.x_d - b.x_d_prime) == [1]


# -- 1. the pipeline's mechanisms pass, and the audit is tight -----------------------------

# (label, report, metrics of the cell, ledger group)
PER_CELL = [
    ("places cell", "mobility", PLACES, "places"),
    ("workplaces", "mobility", ("workplaces",), "workplaces"),
    ("residential_sum", "mobility", ("residential_sum_units",), "residential_sum"),
    ("residential_count", "mobility", ("residential_users",), "residential_count"),
    ("contributors", "mobility", ("contributors",), "contributors"),
    ("symptoms A cell", "symptoms", A_CELLS, SYMPTOM_METRIC),
    ("symptoms B", "symptoms", (VOLUME_CELL,), VOLUME_METRIC),
]


@pytest.mark.parametrize("index", range(len(PER_CELL)), ids=[p[0] for p in PER_CELL])
def test_per_cell_mechanism_passes_and_is_tight(
        index: int, mobility: tuple[pd.DataFrame, pd.DataFrame],
        symptoms: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    label, which, metrics, group = PER_CELL[index]
    budget = (MOB if which == "mobility" else SYM).budget(group)
    cells = changed_cells(*(mobility if which == "mobility" else symptoms), 2, metrics)
    # One noisy cell, the user changing it by the full sensitivity (first of the changed).
    nb = Neighbours(cells.x_d[:1], cells.x_d_prime[:1])
    assert abs(int(nb.x_d[0] - nb.x_d_prime[0])) == budget.sensitivity
    result = audit(nb, epsilon=budget.cell_epsilon, sensitivity=budget.sensitivity,
                   key=1000 + 10 * index)
    report(label, budget.cell_epsilon, result)
    # False failure <= ALPHA = 1e-6 for a correct mechanism (Clopper-Pearson, 1 - ALPHA).
    assert result.epsilon_lb <= budget.cell_epsilon
    # Tightness: expected ~0.9x at 10^6 audit draws; < 0.5x only if the audit is broken.
    assert result.epsilon_lb >= 0.5 * budget.cell_epsilon


def test_fixed_threshold_mode_is_tight_on_a_places_cell(
        mobility: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    # Chosen before the draws: the LLR's top value, i.e. the event {y >= x}, where the
    # discrete Laplace ratio is exactly e^epsilon. All draws audit it; alpha is not split.
    budget = MOB.budget("places")
    cells = changed_cells(*mobility, 2, PLACES)
    nb = Neighbours(cells.x_d[:1], cells.x_d_prime[:1])
    stat_d, stat_dp = llr_draws(nb, epsilon=budget.cell_epsilon, sensitivity=1, key=1900)
    result = epsilon_lower_bound(stat_d, stat_dp, alpha=ALPHA,
                                 thresholds=[budget.cell_epsilon])
    report("places cell, fixed threshold", budget.cell_epsilon, result)
    # {T >= t} has ratio e^epsilon from D to D', and its complement {T < t} has the same
    # ratio from D' to D (the law is symmetric): either may give the larger estimate
    assert result.event in ("T >= t, D/D'", "T < t, D'/D")
    # False failure <= 1e-6 (as above); the 0.7x floor is > 15 standard errors away.
    assert 0.7 * budget.cell_epsilon <= result.epsilon_lb <= budget.cell_epsilon


@pytest.mark.parametrize("level", MOB.levels)
def test_places_group_passes_at_each_level(
        level: int, mobility: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    budget = MOB.budget("places")
    nb = changed_cells(*mobility, level, PLACES)
    result = audit(nb, epsilon=budget.cell_epsilon, sensitivity=1, key=2000 + 10 * level)
    report(f"places group level {level}", budget.epsilon, result)
    # False failure <= 1e-6 for a correct mechanism; >= 0.5x is > 10 sigma for the audit.
    assert budget.epsilon == pytest.approx(1.76)
    assert 0.5 * budget.epsilon <= result.epsilon_lb <= budget.epsilon


@pytest.mark.parametrize("level", SYM.levels)
def test_symptoms_a_group_passes_at_each_level(
        level: int, symptoms: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    budget = SYM.budget(SYMPTOM_METRIC)
    claimed = SYM.ledger_epsilons[SYMPTOM_METRIC]
    nb = changed_cells(*symptoms, level, A_CELLS)
    result = audit(nb, epsilon=budget.cell_epsilon, sensitivity=1, key=3000 + 10 * level)
    report(f"symptoms A group level {level}", claimed, result)
    # False failure <= 1e-6 for a correct mechanism; >= 0.5x is > 10 sigma for the audit.
    assert claimed == pytest.approx(0.448)
    assert 0.5 * claimed <= result.epsilon_lb <= claimed


# -- 2. broken variants fail ---------------------------------------------------------------

HALVED = [
    ("places cell", "mobility", PLACES, "places", 1),
    ("residential_sum", "mobility", ("residential_sum_units",), "residential_sum", 1),
    ("places group", "mobility", PLACES, "places", None),
    ("symptoms A group", "symptoms", A_CELLS, SYMPTOM_METRIC, None),
]


@pytest.mark.parametrize("index", range(len(HALVED)), ids=[h[0] for h in HALVED])
def test_halved_noise_scale_fails(index: int, mobility: tuple[pd.DataFrame, pd.DataFrame],
                                  symptoms: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    label, which, metrics, group, n_cells = HALVED[index]
    cfg = MOB if which == "mobility" else SYM
    budget = cfg.budget(group)
    cells = changed_cells(*(mobility if which == "mobility" else symptoms), 2, metrics)
    nb = Neighbours(cells.x_d[:n_cells], cells.x_d_prime[:n_cells])
    claimed = budget.cell_epsilon * len(nb.x_d)
    # Noise drawn at 2x epsilon (half the scale) while the ledger claims the config's.
    result = audit(nb, epsilon=budget.cell_epsilon, sensitivity=budget.sensitivity,
                   key=4000 + 10 * index, draw_epsilon=2 * budget.cell_epsilon)
    report(f"BROKEN halved scale, {label}", claimed, result)
    # The true epsilon is 2x the claim, and the audit reaches ~0.9x of the truth (~1.8x
    # the claim): the gap is tens of standard errors, so a pass here is not a fluke.
    assert result.epsilon_lb > claimed


@pytest.mark.parametrize("level", [0, 2])
def test_places_without_bounding_fails(level: int,
                                       mobility: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    budget = MOB.budget("places")
    unbounded = MobilityConfig(max_place_pairs=10_000)
    nb = changed_cells(mobility_cells(BACKGROUND_STAYS + WORST_STAYS, unbounded),
                       mobility[1], level, PLACES)
    assert len(nb.x_d) == (7 if level == 0 else 14)  # every pair of the worst-case user
    result = audit(nb, epsilon=budget.cell_epsilon, sensitivity=1, key=5000 + 10 * level)
    report(f"BROKEN no bounding, places level {level}", budget.epsilon, result)
    # True epsilon 7 x 0.44 = 3.08 (level 0) or 14 x 0.44 = 6.16 (level 2) against the
    # claimed 1.76: the margin is many standard errors (~0.05 nats) wide.
    assert result.epsilon_lb > budget.epsilon


def test_symptoms_without_bounding_fails(symptoms: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    budget = SYM.budget(SYMPTOM_METRIC)
    claimed = SYM.ledger_epsilons[SYMPTOM_METRIC]
    unbounded = SymptomsConfig(max_symptoms_per_day=10_000)
    nb = changed_cells(symptoms_cells(BACKGROUND_SEARCHES + WORST_SEARCHES, unbounded),
                       symptoms[1], 2, A_CELLS)
    assert len(nb.x_d) == 6
    result = audit(nb, epsilon=budget.cell_epsilon, sensitivity=1, key=6000)
    report("BROKEN no bounding, symptoms A level 2", claimed, result)
    # True epsilon 6 x 0.149 = 0.896 = 2x the claim 0.448; at 10^6 audit draws the bound's
    # standard error is ~0.02 nats, so the ~0.4 nats margin is > 15 sigma.
    assert result.epsilon_lb > claimed


def _round_trip_differs(y: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Mironov's event: y is not reachable as fl(n + 1.0) for any double n, tested via
    fl(fl(y - 1) + 1) != y. Every output of fl(1 + L) round-trips; most outputs of
    0 + L in (-1, 1) carry low-order bits that fl(y - 1) must drop."""
    return np.asarray((y - 1.0) + 1.0 != y)


def test_floating_point_laplace_fails_and_discrete_laplace_does_not() -> None:
    epsilon = MOB.place_epsilon
    n = 10**6
    # A count cell that is 0 under D and 1 under D' (one user-day, sensitivity 1), noised
    # with textbook float Laplace of scale 1/epsilon, from the pipeline's own CSPRNG: the
    # leak is in the floating-point arithmetic, not in the randomness.
    y_d = 0.0 + noise_generator(key=7000).laplace(0.0, 1.0 / epsilon, n)
    y_dp = 1.0 + noise_generator(key=7001).laplace(0.0, 1.0 / epsilon, n)
    floating = event_epsilon_lower_bound(_round_trip_differs(y_d), _round_trip_differs(y_dp),
                                         alpha=ALPHA, name="(y-1)+1 != y")
    report("BROKEN floating-point Laplace", epsilon, floating)
    # D' never lands in the event (every fl(1 + L) round-trips) and D does ~27% of the
    # time: the bound is limited only by n, ln(0.27 n / ln(4 / ALPHA)) ~ 9.8, i.e. an
    # infinite true epsilon seen through 10^6 draws. The 8.0 floor sits over 100 standard
    # errors of the hit count below that, so a leaking mechanism cannot pass by chance.
    assert floating.counts[2] == 0
    assert math.isfinite(floating.epsilon_lb)
    assert floating.epsilon_lb > 8.0 > 10 * epsilon

    # The pipeline's discrete mechanism: integer outputs, exact in float64, so the event
    # is empty under both datasets and carries no signal at all.
    z_d = add_discrete_laplace(np.zeros(n, dtype=np.int64), epsilon=epsilon, sensitivity=1,
                               rng=noise_generator(key=7002)).astype(np.float64)
    z_dp = add_discrete_laplace(np.ones(n, dtype=np.int64), epsilon=epsilon, sensitivity=1,
                                rng=noise_generator(key=7003)).astype(np.float64)
    discrete = event_epsilon_lower_bound(_round_trip_differs(z_d), _round_trip_differs(z_dp),
                                         alpha=ALPHA, name="(y-1)+1 != y")
    report("discrete Laplace, same event", epsilon, discrete)
    assert not _round_trip_differs(z_d).any() and not _round_trip_differs(z_dp).any()
    assert discrete.epsilon_lb == 0.0
