"""The mobility report's task functions: the DAGs and ``python -m dp_ops run mobility`` call
exactly these, in this order for each day, once the factory has ingested the sources its
spec names:

    bound -> noise (budget-checked) -> build_baseline -> report -> gate -> publish

Every function takes the data root and the config, writes its outputs to files under the
data root, and returns a :class:`StepResult` whose ``summary`` is safe to log: it never
holds raw rows, user ids or un-noised aggregates (it names paths and counts of cells).
Every step is idempotent: rerunning it after a crash gives the same files, and the noise
step spends budget at most once per slot.
"""

from __future__ import annotations

import math
from datetime import date
from typing import TYPE_CHECKING

from dp_ops import requests
from dp_ops.layout import DataRoot
from dp_ops.reports.mobility.config import REPORT, MobilityConfig, load_mobility_config
from dp_ops.reports.mobility.spec import SPEC
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.privacy.ledger import ApprovalRequest, SpendRequest
    from dp_ops.reports.mobility.method_update import MethodUpdate
    from dp_ops.steps.noising import NoisePlan

DAILY_DAG_ID = SPEC.daily_dag_id

__all__ = ["DAILY_DAG_ID", "REPORT", "bound_contributions", "build_baseline",
           "first_noised_date", "gate", "load_config", "method_update",
           "method_update_request", "method_update_spends", "needs_baseline", "noise",
           "noise_plan", "prepare", "publish", "report", "skipped_after_noise"]


def load_config() -> MobilityConfig:
    """Defaults, overridden by the JSON file named in ``DP_MOBILITY_CONFIG``."""
    return load_mobility_config()


def prepare(cfg: MobilityConfig) -> int:
    """Build the exact noise sampler of every metric group once, in
    this process (the Airflow processes that fork tasks call it at start)."""
    from dp_ops.privacy.noise import prepare_samplers

    return prepare_samplers((b.cell_epsilon, b.sensitivity) for b in cfg.metric_budgets)


def first_noised_date(cfg: MobilityConfig) -> date:
    """The first date this report noises: the first metric date (the baseline window
    comes before the public series)."""
    return cfg.first_metric_date


def needs_baseline(cfg: MobilityConfig, day: date) -> bool:
    """Whether reporting ``day`` needs the frozen baseline: the public series (from
    ``first_public_date``) is a change against it."""
    return day >= cfg.first_public_date


def skipped_after_noise(root: DataRoot, cfg: MobilityConfig, day: date) -> frozenset[str]:
    """The daily DAG's tasks after ``noise`` with nothing to do for ``day``: before the
    first public date all of them (nothing of the day is published: a window day is
    noised for the baseline only), and once the baseline is frozen the wait for it."""
    if not needs_baseline(cfg, day):
        return frozenset({"baseline", "report", "gate", "publish"})
    if root.baseline_file(REPORT).exists():
        return frozenset({"baseline"})
    return frozenset()


def bound_contributions(root: DataRoot, cfg: MobilityConfig, day: date, *,
          shard: int | None = None) -> StepResult:
    """Contribution bounding and true partial aggregates (private, ``work/bounded``)."""
    from dp_ops.reports.mobility.bounding import bound_day

    return bound_day(root, cfg, day, shard=shard)


def noise(root: DataRoot, cfg: MobilityConfig, request: NoiseRequest, *,
          ledger_url: str) -> StepResult:
    """Reserve budget in the ledger (refusing past the cap before any draw), then draw and
    store noisy values for every cell of the public domain, or reuse stored ones."""
    from dp_ops.reports.mobility.noising import noise_plan
    from dp_ops.steps.noising import noise_day

    return noise_day(root, noise_plan(cfg), request, ledger_url=ledger_url)


def build_baseline(root: DataRoot, cfg: MobilityConfig, *, ledger_url: str) -> StepResult:
    """Freeze the baseline once the whole window is noised; afterwards a no-op."""
    from dp_ops.reports.mobility.baseline import build_baseline_once

    return build_baseline_once(root, cfg, ledger_url=ledger_url)


def report(root: DataRoot, cfg: MobilityConfig, day: date, *, ledger_url: str) -> StepResult:
    """Percent changes and suppression for ``day`` from noisy values and the baseline."""
    from dp_ops.reports.mobility.report import report_day

    return report_day(root, cfg, day, ledger_url=ledger_url)


def noise_plan(root: DataRoot, cfg: MobilityConfig) -> NoisePlan:
    """What the noise step spends per day (metric groups, epsilons, levels, cap)."""
    from dp_ops.reports.mobility.noising import noise_plan as plan

    return plan(cfg)


def _update(cfg: MobilityConfig, form: MethodUpdateForm) -> MethodUpdate:
    """The update an operator's form asks for. The new method here is the demo's
    stand-in: the counts of the ``categories``' source cells are ``factor`` times the old
    ones, ``factor`` within ``method_update_factor_range``."""
    from dp_ops.errors import MethodUpdateError
    from dp_ops.reports.mobility.method_update import MethodUpdate
    from dp_ops.reports.mobility.new_methods import ScaledCounts

    low, high = cfg.method_update_factor_range
    if not (math.isfinite(form.factor) and low <= form.factor <= high):
        raise MethodUpdateError(
            f"factor={requests.shown(form.factor)}: the demo method scales counts by a "
            f"factor in [{low:g}, {high:g}] (method_update_factor_range); a factor outside "
            "it is not a plausible change of method")
    return MethodUpdate(method_version=form.method_version,
                        effective_date=form.effective_date,
                        categories=tuple(form.categories),
                        method=ScaledCounts.for_categories(form.categories, form.factor),
                        reason=form.reason)


def method_update(root: DataRoot, cfg: MobilityConfig, form: MethodUpdateForm, *,
                  run_id: str, ledger_url: str) -> StepResult:
    """Scaling factors for a method update from ``form.effective_date`` (ledger kind
    ``method_update``, refused past the cap before any draw; a rerun reuses the stored
    factors and spends nothing), then re-report the days from the effective date that
    already have report rows."""
    from dp_ops.reports.mobility.method_update_step import run_method_update

    return run_method_update(root, cfg, _update(cfg, form), run_id=run_id,
                             ledger_url=ledger_url)


def method_update_request(cfg: MobilityConfig, form: MethodUpdateForm) -> ApprovalRequest:
    """The update as its approver approves it and as :func:`method_update` reserves it."""
    from dp_ops.reports.mobility.method_update_step import approval_request

    return approval_request(cfg, _update(cfg, form))


def method_update_spends(cfg: MobilityConfig, form: MethodUpdateForm,
                         ) -> tuple[str, list[SpendRequest]]:
    """What the update spends, on every date of its comparison window (the preview)."""
    from dp_ops.reports.mobility.method_update import plan_requests

    what = (f"method update {form.method_version} of mobility from {form.effective_date} "
            f"({', '.join(form.categories)})")
    return what, plan_requests(cfg, _update(cfg, form))


def gate(root: DataRoot, cfg: MobilityConfig, *, run_id: str, ledger_url: str,
         region: str | None = None) -> StepResult:
    """Assemble the candidate release in a staging directory and validate it with Great
    Expectations; raises :class:`dp_ops.errors.GateFailed` (naming the Data Docs) if not.
    Mobility regions are computed independently, so an on-call rerun's ``region`` changes
    nothing here: the whole release is staged from the report days present."""
    from dp_ops.reports.mobility.release import stage_and_validate

    return stage_and_validate(root, cfg, run_id=run_id, ledger_url=ledger_url)


def publish(root: DataRoot, cfg: MobilityConfig, *, run_id: str, ledger_url: str) -> StepResult:
    """Atomically promote the validated staged release to ``published/mobility/latest``."""
    from dp_ops.reports.mobility.release import publish_staged

    return publish_staged(root, cfg, run_id=run_id, ledger_url=ledger_url)
