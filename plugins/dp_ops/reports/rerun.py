"""Validation of an on-call rerun request of one region and day, for any report.

Pure (no Airflow): reads only the public region table and lists the noise directory. The
``*_region_rerun`` DAGs run it as their first task so that a request that cannot be served
fails at once, before anything is ingested or spent.
"""

from __future__ import annotations

import csv
from datetime import date
from pathlib import Path

from dp_ops import requests
from dp_ops.errors import BadRequest, RerunRequestError
from dp_ops.reports.registry import AnyReport
from dp_ops.requests import shown


def check_rerun_request(report: AnyReport, day: date, region: str | None, renoise: bool,
                        reason: str) -> str:
    """Check a rerun request against the public region table and what was already noised.

    Returns a log-safe summary; raises :class:`RerunRequestError` naming the bad field.
    """
    if region is None:
        raise RerunRequestError("region='': a region_id from reference/regions.csv is required")
    root, name = report.root, report.name
    regions_csv: Path = root.regions_csv
    if not regions_csv.exists():
        raise RerunRequestError(f"region table {regions_csv} is missing")
    with regions_csv.open(newline="") as f:
        known = {row["region_id"] for row in csv.DictReader(f)}
    if region not in known:
        raise RerunRequestError(
            f"region={shown(region)}: not a region_id of {regions_csv} ({len(known)} "
            "regions)")
    first = report.first_noised_date()
    if day < first:
        raise RerunRequestError(f"date={day}: before the first metric date {first}")
    noise_dir: Path = root.noise_dir(name, day)
    if not noise_dir.is_dir() or not any(noise_dir.iterdir()):
        raise RerunRequestError(
            f"date={day}: not noised yet ({noise_dir} is empty); run the daily "
            f"{report.daily_dag_id} DAG (or its backfill) for that date first")
    if report.needs_baseline(day) and not root.baseline_file(name).exists():
        raise RerunRequestError(
            f"date={day}: the {name} baseline is not frozen yet, nothing to report against")
    if len(reason.strip()) < 3:
        raise RerunRequestError(f"reason={shown(reason)}: say why (at least 3 characters)")
    try:
        requests.reason(reason)
    except BadRequest as exc:
        raise RerunRequestError(str(exc)) from exc
    if renoise and day < report.cfg.first_public_date:
        raise RerunRequestError(
            f"date={day}: before the first public date {report.cfg.first_public_date}; its "
            "values are never published, so a re-noise would spend budget for nothing")
    action = "re-noise (spends budget again)" if renoise else "reuse stored noise"
    return f"rerun {name} {day} region {region}: {action}"
