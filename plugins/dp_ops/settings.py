"""Runtime settings: where data lives, which ledger, which report configuration.

All of it comes from the environment so that the DAGs, the CLI and the tests agree:
``DP_DATA_ROOT``, ``DP_LEDGER_URL``, ``DP_MOBILITY_CONFIG`` and ``DP_SYMPTOMS_CONFIG``
(optional JSON files with :class:`~dp_ops.config.MobilityConfig` /
:class:`~dp_ops.config.SymptomsConfig` fields).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dp_ops.config import ConfigError, MobilityConfig, SymptomsConfig
from dp_ops.paths import DataRoot, ledger_url


def data_root() -> DataRoot:
    return DataRoot.from_env()


def ledger(root: DataRoot | None = None) -> str:
    return ledger_url(root or data_root())


def json_object(variable: str, environ: Mapping[str, str] | None = None
                ) -> dict[str, Any] | None:
    """The JSON object in the file named by environment ``variable``, or ``None`` if unset."""
    path = (os.environ if environ is None else environ).get(variable)
    if not path:
        return None
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{variable}={path!r}: cannot read JSON: {exc}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"{variable}={path!r}: expected a JSON object")
    return values


def load_mobility_config() -> MobilityConfig:
    """Defaults, overridden by the JSON file named in ``DP_MOBILITY_CONFIG`` if set."""
    values = json_object("DP_MOBILITY_CONFIG")
    return MobilityConfig() if values is None else MobilityConfig.from_mapping(values)


def load_symptoms_config() -> SymptomsConfig:
    """Defaults, overridden by the JSON file named in ``DP_SYMPTOMS_CONFIG`` if set."""
    values = json_object("DP_SYMPTOMS_CONFIG")
    return SymptomsConfig() if values is None else SymptomsConfig.from_mapping(values)


def load_config(report: str) -> MobilityConfig | SymptomsConfig:
    if report == "mobility":
        return load_mobility_config()
    if report == "symptoms":
        return load_symptoms_config()
    raise ConfigError(f"report={report!r}: must be 'mobility' or 'symptoms'")
