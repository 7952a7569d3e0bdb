"""What every report's configuration shares: :class:`BudgetedConfig` (the levels, the method
version and the per-user-day cap with its headroom), field checks whose errors name the
field and the bad value, and building a config from a plain mapping (a JSON file)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import date
from typing import Any, Self

from dp_ops.contract import LEVELS
from dp_ops.errors import ConfigError
from dp_ops.privacy.plan import METHOD_UPDATE_FRACTION_TERM, MetricBudget, group_terms
from dp_ops.settings import json_object


def check(cond: bool, name: str, value: Any, why: str) -> None:
    if not cond:
        raise ConfigError(f"config field {name}={value!r}: {why}")


def mapping_kwargs(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for config ``cls`` from a plain mapping: unknown keys are errors,
    ISO strings become dates for the date fields, lists become tuples for tuple fields."""
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(f"config field {key}={value!r}: unknown field")
        if isinstance(known[key].default, date) and isinstance(value, str):
            try:
                value = date.fromisoformat(value)
            except ValueError as exc:
                raise ConfigError(f"config field {key}={value!r}: not a date") from exc
        if isinstance(known[key].default, tuple) and isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    return kwargs


@dataclass(frozen=True)
class BudgetedConfig:
    """The part of a report's configuration the factory reads: the levels it publishes,
    the regions' minimum area, the method version, and the per-user-day cap (docs/design.md,
    Privacy budget ledger): a normal run plus headroom for ``cap_renoises`` region re-noises
    and ``cap_method_updates`` method updates at ``method_update_fraction`` of a normal
    run's cost, unless ``cap_override`` sets it.

    A report's config subclasses it (frozen too) and provides :attr:`metric_budgets`, the
    one statement of its budgets: what the ledger books (:attr:`ledger_epsilons`) and the
    policy terms it records (:attr:`policy_terms`) are derived from them."""

    min_area_km2: float = 3.0
    method_version: str = "v1"
    method_update_fraction: float = 0.10
    cap_renoises: int = 1
    cap_method_updates: int = 1
    cap_override: float | None = None
    levels: tuple[int, ...] = field(default=LEVELS)

    def __post_init__(self) -> None:
        check(self.min_area_km2 >= 0, "min_area_km2", self.min_area_km2, "must be >= 0")
        check(0 < self.method_update_fraction <= 1, "method_update_fraction",
              self.method_update_fraction, "must be in (0, 1]")
        check(self.cap_renoises >= 0 and self.cap_method_updates >= 0, "cap_renoises",
              (self.cap_renoises, self.cap_method_updates), "headroom counts must be >= 0")
        check(tuple(sorted(set(self.levels))) == tuple(self.levels) and len(self.levels) > 0
              and set(self.levels) <= set(LEVELS), "levels", self.levels,
              "must be a non-empty sorted subset of (0, 1, 2)")
        if self.cap_override is not None:
            check(self.cap_override > 0, "cap_override", self.cap_override, "must be > 0")

    @property
    def metric_budgets(self) -> tuple[MetricBudget, ...]:
        """The ledger metric groups noised per level and date."""
        raise NotImplementedError(f"{type(self).__name__} defines no metric budgets")

    def budget(self, name: str) -> MetricBudget:
        for b in self.metric_budgets:
            if b.name == name:
                return b
        raise ConfigError(f"unknown metric group {name!r}")

    @property
    def ledger_epsilons(self) -> dict[str, float]:
        """What each ledger slot (a metric group at one level) costs per user-day, derived
        from its budget (``MetricBudget.epsilon``); not a separate setting."""
        return {b.name: b.epsilon for b in self.metric_budgets}

    @property
    def run_epsilon(self) -> float:
        """Composed epsilon of one normal daily run per user-day (every level and group)."""
        return math.fsum(self.ledger_epsilons.values()) * len(self.levels)

    @property
    def cap(self) -> float:
        """Per-user-day cap: a normal run plus headroom."""
        if self.cap_override is not None:
            return self.cap_override
        return self.run_epsilon * (
            1 + self.cap_renoises + self.cap_method_updates * self.method_update_fraction
        )

    @property
    def policy_terms(self) -> dict[str, float]:
        """What the ledger records of this configuration besides the cap, at the first
        spend: each metric group's epsilon, sensitivity and cells per user-day, and the
        method-update fraction; a process whose terms differ, or a spend whose budget
        differs, is refused (docs/design.md, Privacy budget ledger). Changing them is
        `python -m dp_ops ledger set-epsilon`."""
        terms = group_terms(self.metric_budgets)
        terms[METHOD_UPDATE_FRACTION_TERM] = self.method_update_fraction
        return terms

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Self:
        """Build from a plain mapping (e.g. a JSON file); unknown keys are errors."""
        return cls(**mapping_kwargs(cls, values))

    @classmethod
    def load(cls, variable: str) -> Self:
        """Defaults, overridden by the JSON file named in the environment ``variable``."""
        values = json_object(variable)
        return cls() if values is None else cls.from_mapping(values)
