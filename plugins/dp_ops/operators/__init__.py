"""Thin Airflow adapters over the pure report steps (``dp_ops.<report>.steps``).

Each operator only stores its (templated) arguments in ``__init__``; in ``execute()`` it
resolves the data root, the config and the ledger from the environment and calls one step
function. Imports of the pipeline (DuckDB, pandas, Great Expectations) happen inside the
step functions, so importing this package at DAG-parse time is cheap.
"""

from dp_ops.operators.gate import GreatExpectationsGateOperator
from dp_ops.operators.method_update import MethodUpdateOperator
from dp_ops.operators.noise import BudgetCheckedNoiseOperator
from dp_ops.operators.rerun import ValidateRerunRequestOperator
from dp_ops.operators.sensors import BaselineReadySensor
from dp_ops.operators.steps import ReportStepOperator

__all__ = [
    "BaselineReadySensor",
    "BudgetCheckedNoiseOperator",
    "GreatExpectationsGateOperator",
    "MethodUpdateOperator",
    "ReportStepOperator",
    "ValidateRerunRequestOperator",
]
