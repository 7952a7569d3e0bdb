"""The symptoms dataset's task functions: the DAGs and ``python -m dp_ops run symptoms``
call exactly these, in this order for each day, once the factory has ingested the sources
its spec names:

    bound -> noise (budget-checked) -> report (A/B, reliability) -> gate -> publish

Every function takes the data root and the config, writes files under the data root and
returns a :class:`StepResult` safe to log (paths and counts of cells, never raw rows,
user ids or un-noised aggregates). Every step is idempotent; the noise step spends budget
at most once per slot.
"""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING

from dp_ops.layout import DataRoot
from dp_ops.reports.symptoms.config import REPORT, SymptomsConfig, load_symptoms_config
from dp_ops.reports.symptoms.spec import SPEC
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.result import StepResult

if TYPE_CHECKING:
    from dp_ops.steps.noising import NoisePlan

DAILY_DAG_ID = SPEC.daily_dag_id

__all__ = ["DAILY_DAG_ID", "REPORT", "bound_contributions", "first_noised_date", "gate",
           "load_config", "needs_baseline", "noise", "noise_plan", "prepare",
           "publish", "report", "skipped_after_noise"]


def load_config() -> SymptomsConfig:
    """Defaults, overridden by the JSON file named in ``DP_SYMPTOMS_CONFIG``."""
    return load_symptoms_config()


def prepare(cfg: SymptomsConfig) -> int:
    """Build the exact noise sampler of every metric group and the reliability tests
    once, in this process (the Airflow processes that fork tasks call it at start)."""
    from dp_ops.privacy.noise import prepare_samplers
    from dp_ops.reports.symptoms.reliability import prepare_ratio_tests

    return (prepare_samplers((b.cell_epsilon, b.sensitivity) for b in cfg.metric_budgets)
            + prepare_ratio_tests(cfg))


def first_noised_date(cfg: SymptomsConfig) -> date:
    """The first date this report noises: from the first public date."""
    return cfg.first_public_date


def needs_baseline(cfg: SymptomsConfig, day: date) -> bool:
    """Whether reporting ``day`` needs the frozen baseline: the symptoms dataset has no baseline."""
    return False


def skipped_after_noise(root: DataRoot, cfg: SymptomsConfig, day: date) -> frozenset[str]:
    """None: every day of the symptoms dataset is reported, gated and published."""
    return frozenset()


def bound_contributions(root: DataRoot, cfg: SymptomsConfig, day: date, *,
          shard: int | None = None) -> StepResult:
    """Contribution bounding and true partial aggregates (private, ``work/bounded``)."""
    from dp_ops.reports.symptoms.bounding import bound_day

    return bound_day(root, cfg, day, shard=shard)


def noise_plan(root: DataRoot, cfg: SymptomsConfig) -> NoisePlan:
    """What the noise step spends per day (metric groups, epsilons, levels, cap)."""
    from dp_ops.reports.symptoms.noising import noise_plan as plan
    from dp_ops.sources.search_activity import read_symptoms, symptom_list

    return plan(cfg, read_symptoms(symptom_list(root)))


def noise(root: DataRoot, cfg: SymptomsConfig, request: NoiseRequest, *,
          ledger_url: str) -> StepResult:
    """Reserve budget (refused past the cap before any draw), then draw and store noisy A
    and B for every cell of the public domain, or reuse the stored ones; a new draw under
    other budgets than the rest of its week is refused."""
    from dp_ops.steps.noising import noise_day

    return noise_day(root, noise_plan(root, cfg), request, ledger_url=ledger_url)


def report(root: DataRoot, cfg: SymptomsConfig, day: date, *, ledger_url: str) -> StepResult:
    """Pair noisy A and B for ``day`` and apply the reliability rule."""
    from dp_ops.reports.symptoms.daily import report_day

    return report_day(root, cfg, day, ledger_url=ledger_url)


def gate(root: DataRoot, cfg: SymptomsConfig, *, run_id: str, ledger_url: str,
         region: str | None = None) -> StepResult:
    """Assemble the candidate (resolution, weekly sums, scaling, values), validate it
    with Great Expectations and stage it; raises ``GateFailed`` naming the Data Docs."""
    from dp_ops.reports.symptoms.release import stage_and_validate

    return stage_and_validate(root, cfg, run_id=run_id, ledger_url=ledger_url, region=region)


def publish(root: DataRoot, cfg: SymptomsConfig, *, run_id: str, ledger_url: str) -> StepResult:
    """Store new scaling factors and atomically promote the staged release to
    ``published/symptoms/latest``."""
    from dp_ops.reports.symptoms.release import publish_staged

    return publish_staged(root, cfg, run_id=run_id, ledger_url=ledger_url)
