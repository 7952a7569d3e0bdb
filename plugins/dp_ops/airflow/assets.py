"""The assets the report DAGs produce, for downstream DAGs to schedule on, from the specs.

- ``<report>_release`` (every report): one event each time ``latest`` moves to a new
  release, with ``release_id``, ``last_date``, ``manifest_sha256`` and
  ``epsilon_per_user_day_max`` in its extra. A run that reproduces the current release
  byte for byte (a retry, a rerun that changes nothing) adds none.
- ``<report>_<name>`` for each name a report's spec declares in ``assets`` (the mobility
  report's ``mobility_baseline``: exactly one event, when the baseline is frozen).

The tasks do not list the assets themselves as outlets (Airflow would record an event on
every success); they list an :class:`AssetAlias` (``<asset>_events``) and add an event to
the asset through it only when the step says something happened (``StepResult.event``).
Imported at DAG-parse time: the Airflow SDK and the light report specs only.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

from dp_ops.reports.spec import report_spec, report_specs

RELEASE = "release"


def _asset_name(report: str, what: str) -> str:
    spec = report_spec(report)  # an unknown report is a ValueError naming the known ones
    return spec.release_asset if what == RELEASE else spec.asset(what)


def report_asset(report: str, what: str = RELEASE) -> Asset:
    """The asset ``<report>_<what>`` (``what``: ``release`` or one of the spec's assets)."""
    return Asset(name=_asset_name(report, what), group=report)


def events_alias(report: str, what: str = RELEASE) -> AssetAlias:
    """The alias a task lists as its outlet to add events to :func:`report_asset`."""
    return AssetAlias(name=f"{_asset_name(report, what)}_events", group=report)


def alias_targets() -> dict[str, Asset]:
    """Which asset each alias adds its events to, for every installed report."""
    out: dict[str, Asset] = {}
    for name, spec in report_specs().items():
        for what in (RELEASE, *spec.assets):
            out[events_alias(name, what).name] = report_asset(name, what)
    return out


def release_assets() -> list[Asset]:
    """Every installed report's release asset."""
    return [report_asset(name) for name in report_specs()]
