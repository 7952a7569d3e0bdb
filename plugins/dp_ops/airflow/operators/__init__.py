"""Thin Airflow adapters over a declared report's steps
(:class:`dp_ops.reports.registry.BoundReport`).

Each operator only stores its (templated) arguments in ``__init__``; in ``execute()`` it
binds its report to the data root, the config and the ledger from the environment
(:func:`dp_ops.airflow.runtime.load`) and calls one step. Imports of the pipeline (DuckDB,
pandas, Great Expectations) happen inside the step functions, so importing this package at
DAG-parse time is cheap.
"""

from dp_ops.airflow.operators.approval import SpendApprovalOperator
from dp_ops.airflow.operators.gate import GreatExpectationsGateOperator
from dp_ops.airflow.operators.method_update import MethodUpdateOperator
from dp_ops.airflow.operators.noise import BudgetCheckedNoiseOperator
from dp_ops.airflow.operators.rerun import ValidateRerunRequestOperator
from dp_ops.airflow.operators.steps import ReportStepOperator
from dp_ops.airflow.sensors import BaselineReadySensor

__all__ = [
    "BaselineReadySensor",
    "BudgetCheckedNoiseOperator",
    "GreatExpectationsGateOperator",
    "MethodUpdateOperator",
    "ReportStepOperator",
    "SpendApprovalOperator",
    "ValidateRerunRequestOperator",
]
