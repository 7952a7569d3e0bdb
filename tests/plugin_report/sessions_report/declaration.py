"""The sessions report, declared: each user-day's session minutes, capped, in the region
where the user spent most of them; published where the noisy sum reaches ``min_minutes``."""

from __future__ import annotations

from datetime import date

from dp_ops.api import BoundingSql, Report, TableRelease, package_sql, region_values
from sessions_report.spec import METRIC, SPEC, SessionsConfig


def bounding_params(cfg: SessionsConfig, day: date) -> dict[str, object]:
    return {"day": day.isoformat(), "salt": cfg.bounding_salt, "levels": list(cfg.levels),
            "max_minutes": cfg.max_minutes}


def min_minutes(cfg: SessionsConfig) -> float:
    return cfg.min_minutes


REPORT = Report[SessionsConfig](
    spec=SPEC,
    load_config=lambda: SessionsConfig.load("DP_SESSIONS_CONFIG"),
    bounding=BoundingSql.of(package_sql("sessions_report", "sessions_bound_contributions"),
                            relation="sessions"),
    bounding_params=bounding_params,
    cells=lambda root, cfg: {METRIC: (METRIC,)},
    report_day=region_values(SPEC.name, min_minutes),
    release=TableRelease[SessionsConfig](
        report=SPEC.name, title=SPEC.title, stem="Session_Minutes", value_column=METRIC,
        threshold=min_minutes, parameters=lambda cfg: {"max_minutes": cfg.max_minutes},
        what="For each region and day, the minutes users spent in app sessions there "
             "(a noisy sum).",
        bounds="Each user-day adds at most max_minutes, to one region per level."),
)
