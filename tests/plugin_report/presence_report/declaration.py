"""The presence report, declared: its bounding query, one count per region, published
where the region is large enough and the noisy count reaches ``min_users``."""

from __future__ import annotations

from datetime import date

from dp_ops.api import BoundingSql, Report, TableRelease, package_sql, region_values
from presence_report.spec import METRIC, SPEC, PresenceConfig


def bounding_params(cfg: PresenceConfig, day: date) -> dict[str, object]:
    return {"day": day.isoformat(), "salt": cfg.bounding_salt, "levels": list(cfg.levels)}


def min_users(cfg: PresenceConfig) -> float:
    return cfg.min_users


REPORT = Report[PresenceConfig](
    spec=SPEC,
    load_config=lambda: PresenceConfig.load("DP_PRESENCE_CONFIG"),
    bounding=BoundingSql.of(package_sql("presence_report", "presence_bound_contributions"),
                            relation="stays"),
    bounding_params=bounding_params,
    cells=lambda root, cfg: {METRIC: (METRIC,)},
    report_day=region_values(SPEC.name, min_users),
    release=TableRelease[PresenceConfig](
        report=SPEC.name, title=SPEC.title, stem="Presence_Counts", value_column=METRIC,
        threshold=min_users, parameters=lambda cfg: {"epsilon_per_level": cfg.epsilon},
        what="For each region and day, the number of users with at least one stay in it "
             "(a noisy count).",
        bounds="Each user-day counts once per level, in one region."),
)
