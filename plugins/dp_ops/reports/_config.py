"""What both reports' configuration objects share: field checks whose errors name the field
and the bad value, and building a config from a plain mapping (a JSON file)."""

from __future__ import annotations

from dataclasses import fields
from datetime import date
from typing import Any

from dp_ops.errors import ConfigError


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
