"""Pick the engine the execution settings name (``DP_ENGINE``)."""

from __future__ import annotations

from dp_ops.engine.base import Engine
from dp_ops.settings import ExecutionSettings


def engine_for(settings: ExecutionSettings) -> Engine:
    """The engine ``settings.engine`` names (``duckdb`` or ``spark``)."""
    if settings.engine == "spark":
        from dp_ops.engine.spark import SparkEngine

        return SparkEngine(settings)
    from dp_ops.engine.duckdb import DuckDBEngine

    return DuckDBEngine(settings)
