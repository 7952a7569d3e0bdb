"""What a report noises, as the ledger sees it: metric groups with their per-cell epsilon
and sensitivity (:class:`MetricBudget`). No files, no engine, no Airflow."""

from __future__ import annotations

from dataclasses import dataclass

# Beyond this epsilon per unit of sensitivity a = exp(-epsilon / sensitivity) is below the
# smallest normal double: the noise would be zero at any precision carried (no privacy at
# all), and the exact sampler's expansions grow with it. Configs and the noise refuse it.
MAX_EPSILON_PER_SENSITIVITY = 700.0
EPSILON_TOO_LARGE = (f"must be at most {MAX_EPSILON_PER_SENSITIVITY:g} (beyond it the noise "
                     "is zero: no privacy)")


@dataclass(frozen=True)
class MetricBudget:
    """One ledger metric group: its per-user-day epsilon and per-cell sensitivity.

    ``cell_epsilon`` is the epsilon of each noisy cell of the group and ``sensitivity`` the
    most one user-day can change one cell (in the cell's integer unit). ``contributions``
    is how many cells of the group one user-day can touch, so the group costs
    ``cell_epsilon * contributions`` per user-day and level (basic composition).
    """

    name: str
    cell_epsilon: float
    sensitivity: int
    contributions: int = 1

    @property
    def epsilon(self) -> float:
        return self.cell_epsilon * self.contributions
