"""What every operator resolves in ``execute()``: the data root, the report's configuration
and the ledger URL (all from the environment, see :mod:`dp_ops.settings`), plus the parsing
of rendered template values.

Nothing here runs at DAG-parse time: the operators call it from ``execute()`` so that the
DAG processor never reads the environment's data root, the config file or the ledger.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import date, datetime
from types import ModuleType
from typing import Any

# Report name -> (module with the step functions, dp_ops.settings loader of its config).
# A report plugs in by providing a steps module with the same function names.
_REPORTS: dict[str, tuple[str, str]] = {
    "mobility": ("dp_ops.mobility.steps", "load_mobility_config"),
    "symptoms": ("dp_ops.symptoms.steps", "load_symptoms_config"),
}


@dataclass(frozen=True)
class Runtime:
    """The resolved inputs of a step: data root, config, ledger URL and steps module."""

    root: Any  # dp_ops.paths.DataRoot
    cfg: Any  # the report's frozen config object
    ledger_url: str
    steps: ModuleType


def resolve(report: str) -> Runtime:
    """Build the step inputs for ``report`` from the environment."""
    if report not in _REPORTS:
        raise ValueError(f"report={report!r}: unknown report, expected one of {sorted(_REPORTS)}")
    module_name, loader_name = _REPORTS[report]
    from dp_ops import settings

    steps = importlib.import_module(module_name)
    root = settings.data_root()
    cfg = getattr(settings, loader_name)()
    return Runtime(root=root, cfg=cfg, ledger_url=settings.ledger(root), steps=steps)


def parse_day(value: Any, *, field: str = "day") -> date:
    """A rendered ``YYYY-MM-DD`` (or a date/datetime) as a :class:`date`."""
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value).strip())
    except ValueError as exc:
        raise ValueError(f"{field}={value!r}: expected a date as YYYY-MM-DD") from exc


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def parse_bool(value: Any, *, field: str) -> bool:
    """A rendered boolean param. Jinja renders ``{{ params.renoise }}`` to the string
    ``"True"`` or ``"False"``, and ``bool("False")`` is true, so parse it strictly."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{field}={value!r}: expected true or false")


def parse_region(value: Any) -> str | None:
    """A rendered region id, or ``None`` for "every region"."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None
