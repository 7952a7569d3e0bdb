"""The Community Mobility Report, declared: what the factory runs for it
(:class:`~dp_ops.reports.declared.Report`; docs/design.md, Mobility report).

Per day the factory ingests the location history, bounds it (``bounding``), noises the
cells of :data:`~dp_ops.reports.mobility.config.GROUP_CELLS`, freezes the baseline once
its window is noised, and reports the day against it (``report.report_day``); the release
parts stage, gate and publish the whole release. Method updates keep the published
series continuous across a change of method.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

from dp_ops.api import Baseline, DataRoot, MethodUpdates, Report
from dp_ops.reports.mobility import method_update_step
from dp_ops.reports.mobility.baseline import build_baseline_once
from dp_ops.reports.mobility.bounding import BOUNDING, bounding_params
from dp_ops.reports.mobility.config import (
    GROUP_CELLS,
    MobilityConfig,
    load_mobility_config,
)
from dp_ops.reports.mobility.config import (
    REPORT as NAME,
)
from dp_ops.reports.mobility.release import PARTS
from dp_ops.reports.mobility.report import report_day
from dp_ops.reports.mobility.spec import SPEC


def cells(root: DataRoot, cfg: MobilityConfig) -> Mapping[str, tuple[str, ...]]:
    return GROUP_CELLS


def first_metric_date(cfg: MobilityConfig) -> date:
    """The first date noised: the baseline window comes before the public series."""
    return cfg.first_metric_date


def needs_baseline(cfg: MobilityConfig, day: date) -> bool:
    """The public series (from ``first_public_date``) is a change against the baseline."""
    return day >= cfg.first_public_date


def skipped_after_noise(root: DataRoot, cfg: MobilityConfig, day: date) -> frozenset[str]:
    """Before the first public date every task after noise (a window day is noised for
    the baseline only); once the baseline is frozen, the wait for it."""
    if not needs_baseline(cfg, day):
        return frozenset({"baseline", "report", "gate", "publish"})
    if root.baseline_file(NAME).exists():
        return frozenset({"baseline"})
    return frozenset()


REPORT = Report[MobilityConfig](
    spec=SPEC,
    load_config=load_mobility_config,
    bounding=BOUNDING,
    bounding_params=bounding_params,
    cells=cells,
    report_day=report_day,
    release=PARTS,
    first_noised_date=first_metric_date,
    skipped_after_noise=skipped_after_noise,
    # regions are computed independently: an on-call rerun stages the whole release
    gate_sees_rerun_region=False,
    baseline=Baseline(needed=needs_baseline, build=build_baseline_once),
    method_updates=MethodUpdates(run=method_update_step.run_form,
                                 request=method_update_step.form_request,
                                 spends=method_update_step.form_spends),
)
