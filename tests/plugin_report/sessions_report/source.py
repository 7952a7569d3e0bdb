"""The app sessions: one row per session of a user with an app of the public list
(``reference/apps.txt``), ``raw/app_sessions/date=D/*.parquet``."""

from __future__ import annotations

from dp_ops.api import FINEST_REGIONS, DataRoot, Lookup, SourceSchema, SourceSpec, package_sql


def app_names(root: DataRoot) -> list[str]:
    """The public app list, one name a line."""
    path = root.reference_file("apps.txt")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


SOURCE = SourceSpec(
    name="app_sessions", label="app sessions",
    schema=SourceSchema(string_columns=("user_id", "region_id", "app"),
                        numeric_columns=("minutes",)),
    judging_sql=package_sql("sessions_report", "ingest_app_sessions"),
    lookups=(FINEST_REGIONS, Lookup("app_names", "app", app_names)),
    reference_files=("apps.txt",))
