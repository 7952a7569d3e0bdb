"""
# Example consumer of the mobility release

An example for downstream teams: this DAG is scheduled on the `mobility_release` asset, so
it runs once each time `published/mobility/latest` moves to a new release (never for a
rerun that reproduces the current release). The asset event's extra names the release:
`release_id`, `last_date`, `manifest_sha256` and `epsilon_per_user_day_max`.

- `verify_release`: checks that the announced release is published and that its
  `manifest.json` has the announced sha256 (then verify the files against the manifest's
  checksums before use; docs/release-contract.md).

Copy it, keep the check, and replace the rest with your own tasks. Created paused.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow.sdk import dag, task

from dp_ops.airflow.assets import report_asset
from dp_ops.airflow.defaults import DEFAULT_ARGS
from dp_ops.airflow.tags import Tag, tags

REPORT = "mobility"
MOBILITY_RELEASE = report_asset(REPORT)


@dag(
    dag_id="mobility_release_consumer_example",
    schedule=[MOBILITY_RELEASE],
    start_date=datetime(2020, 1, 1, tzinfo=UTC),
    catchup=False,
    is_paused_upon_creation=True,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=tags(REPORT, Tag.CONSUMER),
)
def mobility_release_consumer_example() -> None:
    @task
    def verify_release(*, triggering_asset_events: Any = None) -> list[str]:
        from dp_ops.airflow.consumer import check_announced_releases

        events = triggering_asset_events[MOBILITY_RELEASE] if triggering_asset_events else []
        return check_announced_releases(REPORT, [e.extra for e in events])

    verify_release()


mobility_release_consumer_example()
