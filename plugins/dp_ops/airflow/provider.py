"""The package as an Airflow provider: what ``airflow providers list`` shows.

Registered through the ``apache_airflow_provider`` entry point (``pyproject.toml``):
Airflow reads :func:`get_provider_info` to learn the ledger's connection type and its
hook, and the alert notifier. The "Privacy budget" UI plugin is registered through the
``airflow.plugins`` entry point rather than listed here: Airflow loads a provider's
plugins only when provider discovery is not lazy (``[core] lazy_discover_providers``,
true by default), and with both it would find the plugin twice.
"""

from __future__ import annotations

from typing import Any

PACKAGE_NAME = "dp-report-factory"


def get_provider_info() -> dict[str, Any]:
    """The provider's description, in Airflow's ``provider_info`` schema."""
    from dp_ops import __version__

    return {
        "package-name": PACKAGE_NAME,
        "name": "DP report factory",
        "description": "Differentially private public reports from private logs: a "
                       "privacy-budget ledger, budget-checked noise, Great Expectations "
                       "gates, atomic releases; each report a plug-in.",
        "versions": [__version__],
        "connection-types": [{"connection-type": "dp_ledger",
                              "hook-class-name": "dp_ops.airflow.hooks.ledger.LedgerHook",
                              "hook-name": "DP privacy-budget ledger"}],
        "notifications": ["dp_ops.airflow.alerts.FailureAlert"],
    }
