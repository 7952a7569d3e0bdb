"""The assets the report DAGs produce, for downstream DAGs to schedule on.

- ``mobility_baseline``: the frozen baseline; exactly one event, when it is frozen.
- ``mobility_release`` / ``symptoms_release``: one event each time ``latest`` moves to a
  new release, with ``release_id``, ``last_date``, ``manifest_sha256`` and
  ``epsilon_per_user_day_max`` in its extra. A run that reproduces the current release
  byte for byte (a retry, a rerun that changes nothing) adds none.

The tasks do not list the assets themselves as outlets (Airflow would record an event on
every success); they list an :class:`AssetAlias` and add an event to the asset through it
only when the step says something happened (``StepResult.event``). Imported at DAG-parse
time: the Airflow SDK only.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

MOBILITY_BASELINE = Asset(name="mobility_baseline", group="mobility")
MOBILITY_RELEASE = Asset(name="mobility_release", group="mobility")
SYMPTOMS_RELEASE = Asset(name="symptoms_release", group="symptoms")

MOBILITY_BASELINE_EVENTS = AssetAlias(name="mobility_baseline_events", group="mobility")
RELEASE_EVENTS = {
    "mobility": AssetAlias(name="mobility_release_events", group="mobility"),
    "symptoms": AssetAlias(name="symptoms_release_events", group="symptoms"),
}

# which asset each alias adds its events to
ALIAS_TARGETS: dict[str, Asset] = {
    MOBILITY_BASELINE_EVENTS.name: MOBILITY_BASELINE,
    RELEASE_EVENTS["mobility"].name: MOBILITY_RELEASE,
    RELEASE_EVENTS["symptoms"].name: SYMPTOMS_RELEASE,
}
