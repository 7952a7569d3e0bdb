"""New metric computations a method update can introduce (:class:`NewMethod` implementations).

:class:`ScaledCounts` is the one the ``mobility_method_update`` DAG's form drives (its
``factor`` and ``categories``): a stand-in for a real change of the metric computation,
enough to exercise the whole update (ledger spend, scaling factors, re-reporting) and to
show that a shift in a category leaves no jump in the published series.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dp_ops.errors import MethodUpdateError
from dp_ops.reports.mobility.method_update import category_cells


@dataclass(frozen=True)
class ScaledCounts:
    """The demo's new method: the counts of some source cells are ``factor`` times the
    old method's (rounded to integers), everything else unchanged.

    A user-day moves an old count by at most ``s``, so the rounded scaled count moves by at
    most ``ceil(factor x s)``: that is the recomputed cell's sensitivity.
    """

    factors: tuple[tuple[str, float], ...]

    def __post_init__(self) -> None:
        for metric, factor in self.factors:
            if not (math.isfinite(factor) and factor > 0):
                raise MethodUpdateError(f"factor={factor!r} for {metric}: must be > 0")

    @classmethod
    def for_categories(cls, categories: Iterable[str], factor: float) -> ScaledCounts:
        cells = sorted({c for cat in categories for c in category_cells(cat)})
        return cls(tuple((c, float(factor)) for c in cells))

    def _factor(self, metric: str) -> float:
        return dict(self.factors).get(metric, 1.0)

    def recompute(self, bounded: pd.DataFrame) -> pd.DataFrame:
        out = bounded[["level", "region_id", "metric", "value"]].copy()
        scale = out["metric"].map(lambda m: self._factor(str(m))).to_numpy(dtype=float)
        out["value"] = np.floor(out["value"].to_numpy(dtype=float) * scale + 0.5).astype(np.int64)
        return out

    def sensitivity(self, metric: str, old_sensitivity: int) -> int:
        return max(1, math.ceil(self._factor(metric) * old_sensitivity - 1e-12))

    def describe(self) -> str:
        return ("demo method (scaled counts, not a real change of computation): "
                + ", ".join(f"{m} x {f:g}" for m, f in self.factors))
