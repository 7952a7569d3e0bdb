"""Everything a report or a source package needs from the factory, in one place.

A plug-in imports from here and nothing else of ``dp_ops`` (the test reports do, and a
test checks it): the values it declares (``ReportSpec``, ``Report``, ``SourceSpec``), its
config's base, the budget of a metric group, its SQL, and the parts the factory offers
for the common kinds of report (``region_values``, ``TableRelease``). Names are imported
on first use (PEP 562), so a spec module that imports this one stays light: the DAG files
read specs at parse time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dp_ops.engine.base import BoundingSql as BoundingSql
    from dp_ops.engine.sql import package_sql as package_sql
    from dp_ops.engine.sql import render_sql_file as render_sql_file
    from dp_ops.layout import DataRoot as DataRoot
    from dp_ops.privacy.plan import MetricBudget as MetricBudget
    from dp_ops.regions import read_regions as read_regions
    from dp_ops.reports.base_config import BudgetedConfig as BudgetedConfig
    from dp_ops.reports.base_config import check as check
    from dp_ops.reports.declared import Baseline as Baseline
    from dp_ops.reports.declared import MethodUpdates as MethodUpdates
    from dp_ops.reports.declared import Report as Report
    from dp_ops.reports.protocol import MethodUpdateForm as MethodUpdateForm
    from dp_ops.reports.spec import ReportSpec as ReportSpec
    from dp_ops.sources.spec import FINEST_REGIONS as FINEST_REGIONS
    from dp_ops.sources.spec import Lookup as Lookup
    from dp_ops.sources.spec import SourceSchema as SourceSchema
    from dp_ops.sources.spec import SourceSpec as SourceSpec
    from dp_ops.steps.data_statement import StatementParts as StatementParts
    from dp_ops.steps.day_files import read_release_days as read_release_days
    from dp_ops.steps.day_files import write_day_file as write_day_file
    from dp_ops.steps.ledger_binding import closing_ledger as closing_ledger
    from dp_ops.steps.ledger_binding import open_ledger as open_ledger
    from dp_ops.steps.noising import load_noisy_cells as load_noisy_cells
    from dp_ops.steps.page import PublishedSection as PublishedSection
    from dp_ops.steps.release_flow import Built as Built
    from dp_ops.steps.release_flow import ReleaseParts as ReleaseParts
    from dp_ops.steps.release_flow import ReleasePlan as ReleasePlan
    from dp_ops.steps.result import StepResult as StepResult
    from dp_ops.steps.table_release import TableRelease as TableRelease
    from dp_ops.steps.table_release import region_values as region_values

# name -> the module defining it
_WHERE: dict[str, str] = {
    "BoundingSql": "dp_ops.engine.base",
    "package_sql": "dp_ops.engine.sql",
    "render_sql_file": "dp_ops.engine.sql",
    "DataRoot": "dp_ops.layout",
    "MetricBudget": "dp_ops.privacy.plan",
    "read_regions": "dp_ops.regions",
    "BudgetedConfig": "dp_ops.reports.base_config",
    "check": "dp_ops.reports.base_config",
    "Baseline": "dp_ops.reports.declared",
    "MethodUpdates": "dp_ops.reports.declared",
    "Report": "dp_ops.reports.declared",
    "MethodUpdateForm": "dp_ops.reports.protocol",
    "ReportSpec": "dp_ops.reports.spec",
    "FINEST_REGIONS": "dp_ops.sources.spec",
    "Lookup": "dp_ops.sources.spec",
    "SourceSchema": "dp_ops.sources.spec",
    "SourceSpec": "dp_ops.sources.spec",
    "StatementParts": "dp_ops.steps.data_statement",
    "read_release_days": "dp_ops.steps.day_files",
    "write_day_file": "dp_ops.steps.day_files",
    "closing_ledger": "dp_ops.steps.ledger_binding",
    "open_ledger": "dp_ops.steps.ledger_binding",
    "load_noisy_cells": "dp_ops.steps.noising",
    "PublishedSection": "dp_ops.steps.page",
    "Built": "dp_ops.steps.release_flow",
    "ReleaseParts": "dp_ops.steps.release_flow",
    "ReleasePlan": "dp_ops.steps.release_flow",
    "StepResult": "dp_ops.steps.result",
    "TableRelease": "dp_ops.steps.table_release",
    "region_values": "dp_ops.steps.table_release",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup finds it without this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
