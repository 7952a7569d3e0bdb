"""Validation of an on-call rerun request (the ``*_region_rerun`` DAGs' first task)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowFailException

from dp_ops.operators._runtime import parse_bool, parse_day, parse_region, resolve

_DAILY_DAG = {"mobility": "mobility_report", "symptoms": "symptoms_dataset"}


class RerunRequestError(ValueError):
    """The rerun request cannot be served; the message says which field and why."""


def check_rerun_request(root: Any, cfg: Any, report: str, day: date, region: str | None,
                        renoise: bool, reason: str) -> str:
    """Check a rerun request against the public region table and what was already noised.

    Pure (no Airflow): reads only the public region table and lists the noise directory.
    Returns a log-safe summary; raises :class:`RerunRequestError` naming the bad field.
    """
    if region is None:
        raise RerunRequestError("region='': a region_id from reference/regions.csv is required")
    regions_csv: Path = root.regions_csv
    if not regions_csv.exists():
        raise RerunRequestError(f"region table {regions_csv} is missing")
    with regions_csv.open(newline="") as f:
        known = {row["region_id"] for row in csv.DictReader(f)}
    if region not in known:
        raise RerunRequestError(
            f"region={region!r}: not a region_id of {regions_csv} ({len(known)} regions)")
    # mobility noises from its first metric date (the baseline window comes before the
    # public series); symptoms from its first public date
    first = getattr(cfg, "first_metric_date", cfg.first_public_date)
    if day < first:
        raise RerunRequestError(f"date={day}: before the first metric date {first}")
    noise_dir: Path = root.noise_dir(report, day)
    if not noise_dir.is_dir() or not any(noise_dir.iterdir()):
        raise RerunRequestError(
            f"date={day}: not noised yet ({noise_dir} is empty); run the daily "
            f"{_DAILY_DAG.get(report, report)} DAG (or its backfill) for that date first")
    needs_baseline = hasattr(cfg, "baseline_end")
    if needs_baseline and day >= cfg.first_public_date and not root.baseline_file(report).exists():
        raise RerunRequestError(
            f"date={day}: the {report} baseline is not frozen yet, nothing to report against")
    if len(reason.strip()) < 3:
        raise RerunRequestError(f"reason={reason!r}: say why (at least 3 characters)")
    action = "re-noise (spends budget again)" if renoise else "reuse stored noise"
    return f"rerun {report} {day} region {region}: {action}"


class ValidateRerunRequestOperator(BaseOperator):
    """Fail fast, without retry, on a rerun request that cannot be served.

    :param day: the requested date, ``YYYY-MM-DD`` (templated, from the trigger form).
    :param region: the requested region_id (templated).
    :param renoise: whether fresh noise is asked for (templated; ``"True"``/``"False"`` ok).
    :param reason: why the rerun is needed (templated).
    :param report: which report (``mobility`` or ``symptoms``).
    """

    template_fields: Sequence[str] = ("day", "region", "renoise", "reason")

    def __init__(self, *, day: str, region: str, renoise: bool | str = False, reason: str = "",
                 report: str = "mobility", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.day = day
        self.region = region
        self.renoise = renoise
        self.reason = reason
        self.report = report

    def execute(self, context: Context) -> str:
        rt = resolve(self.report)
        try:
            summary = check_rerun_request(
                rt.root, rt.cfg, self.report, parse_day(self.day, field="date"),
                parse_region(self.region), parse_bool(self.renoise, field="renoise"),
                str(self.reason or ""))
        except (RerunRequestError, ValueError) as exc:
            # A bad request does not get better by retrying.
            raise AirflowFailException(f"rerun request refused: {exc}") from exc
        self.log.info("%s", summary)
        return summary
