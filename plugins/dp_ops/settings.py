"""Runtime settings: where data lives, which ledger, which report configuration.

All of it comes from the environment so that the DAGs, the CLI and the tests agree:
``DP_DATA_ROOT``, ``DP_LEDGER_URL`` and ``DP_MOBILITY_CONFIG`` (optional JSON file with
:class:`~dp_ops.config.MobilityConfig` fields).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dp_ops.config import ConfigError, MobilityConfig
from dp_ops.paths import DataRoot, ledger_url


def data_root() -> DataRoot:
    return DataRoot.from_env()


def ledger(root: DataRoot | None = None) -> str:
    return ledger_url(root or data_root())


def load_mobility_config() -> MobilityConfig:
    """Defaults, overridden by the JSON file named in ``DP_MOBILITY_CONFIG`` if set."""
    path = os.environ.get("DP_MOBILITY_CONFIG")
    if not path:
        return MobilityConfig()
    try:
        values = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"DP_MOBILITY_CONFIG={path!r}: cannot read JSON: {exc}") from exc
    if not isinstance(values, dict):
        raise ConfigError(f"DP_MOBILITY_CONFIG={path!r}: expected a JSON object")
    return MobilityConfig.from_mapping(values)
