"""Validate candidate release tables against their suites in the gate's GX project
(:func:`run_suites`), and warm GX up in a process that forks tasks (:func:`warm_up`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import great_expectations as gx
import great_expectations.expectations as gxe
import pandas as pd
from great_expectations.core.run_identifier import RunIdentifier
from great_expectations.data_context.types.resource_identifiers import (
    ExpectationSuiteIdentifier,
    ValidationResultIdentifier,
)
from great_expectations.expectations.row_conditions import Column

from dp_ops.gx.memo import validation_memo
from dp_ops.gx.project import (
    SITE_NAME,
    index_due,
    no_data_fingerprint,
    prepared,
    project_lock,
    prune_validations,
    quiet_gx_info,
    site_path,
)
from dp_ops.gx.result import GateResult, describe
from dp_ops.gx.suites import suite

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuiteValidationResult

# Stored validation results (and their Data Docs pages) kept per suite.
KEEP_VALIDATIONS = 50


def run_checkpoint(checkpoint: gx.Checkpoint, frame: pd.DataFrame,
                    parameters: dict[str, Any], run_id: RunIdentifier
                    ) -> list[tuple[ValidationResultIdentifier,
                                    ExpectationSuiteValidationResult]]:
    """What ``checkpoint.run`` does for a checkpoint without actions, minus its own
    freshness check: each validation definition validates the frame and stores its result
    (the definition checks that its suite and batch are the ones in the context), keyed as
    the checkpoint keys it.

    ``checkpoint.run`` first re-reads the checkpoint, its definitions and their suites
    from the context's stores to check that they match the objects in hand;
    :func:`~dp_ops.gx.project.prepared` has just built both, in memory, so that check
    would only compare them with themselves.
    """
    if checkpoint.actions:  # project.checkpoint adds none; say so if one has them
        raise ValueError(f"checkpoint {checkpoint.name} has actions: run it with .run()")
    out = []
    for definition in checkpoint.validation_definitions:
        result = definition.run(checkpoint_id=checkpoint.id,
                                batch_parameters={"dataframe": frame},
                                expectation_parameters=parameters,
                                result_format=checkpoint.result_format, run_id=run_id)
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(
                name=definition.suite.name),
            run_id=run_id, batch_identifier=result.batch_id)
        out.append((key, result))
    return out


def warm_up() -> GateResult:
    """Validate a tiny frame with the kinds of expectation the reports' suites use, in a
    throwaway directory, Data Docs included (no data: a made-up two-row frame).

    For the processes that fork task processes (``airflow_local_settings``): Great
    Expectations' first validation in a process costs more than the next ones (class
    registries, metric providers, abstract-base-class caches, templates), and a forked
    task inherits what its parent has done."""
    import tempfile

    frame = pd.DataFrame({"key": ["AA", "BB"], "day": ["2020-02-15", "2020-02-16"],
                          "value": pd.array([1, None], dtype="Int64"), "share": [0.5, 1.0],
                          "flag": [True, False]})
    flagged = Column("flag") == True  # noqa: E712  (a GX condition, not a comparison)
    warm = suite("warm_up", [
        gxe.ExpectTableColumnsToMatchOrderedList(column_list=list(frame.columns)),
        gxe.ExpectTableColumnsToMatchSet(column_set=list(frame.columns), exact_match=False),
        gxe.ExpectTableRowCountToEqual(value={"$PARAMETER": "rows"}),
        gxe.ExpectColumnValuesToNotBeNull(column="key"),
        gxe.ExpectColumnValuesToMatchRegex(column="key", regex=r"^[A-Z]{2}$"),
        gxe.ExpectColumnValuesToMatchStrftimeFormat(column="day", strftime_format="%Y-%m-%d"),
        gxe.ExpectColumnValuesToBeInSet(column="day", value_set={"$PARAMETER": "days"}),
        gxe.ExpectColumnValuesToNotBeInSet(column="day", value_set=["2020-01-01"]),
        gxe.ExpectColumnValuesToBeInTypeList(column="value", type_list=["Int64Dtype"]),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=10),
        gxe.ExpectColumnValuesToBeBetween(column="share", min_value=0, strict_min=True,
                                          row_condition=flagged),
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["key", "day"]),
        gxe.ExpectColumnUniqueValueCountToBeBetween(column="day", min_value=2, max_value=2),
    ])
    with tempfile.TemporaryDirectory(prefix="dp_ops-gx-warm-") as tmp:
        return run_suites([(warm, "warm_up", frame)], gx_dir=Path(tmp),
                          parameters={"rows": 2, "days": list(frame["day"])},
                          run_name="warm-up")


def run_suites(
    runs: list[tuple[gx.ExpectationSuite, str, pd.DataFrame]],
    *,
    gx_dir: Path,
    parameters: dict[str, Any],
    run_name: str,
) -> GateResult:
    """Validate each (suite, asset name, dataframe) in a GX context built in code
    (:func:`~dp_ops.gx.project.prepared`), with Data Docs under ``gx_dir``; return what
    failed (raise nothing).

    Concurrent gates (a backfill runs several at once, of both reports) validate side by
    side under the shared lock of ``gx_dir``, each adding its own results and pages; the
    exclusive lock is taken only for the site index and the pruning of old results,
    rebuilt when :func:`~dp_ops.gx.project.index_due`."""
    from dp_ops.settings import execution_settings

    quiet_gx_info()
    refresh = execution_settings().docs_index_seconds
    gx_dir = Path(gx_dir)
    run_id = RunIdentifier(run_name=run_name, run_time=datetime.now(UTC))
    context, checkpoints = prepared(gx_dir, runs)
    results: list[tuple[Any, ExpectationSuiteValidationResult]] = []
    with project_lock(gx_dir, exclusive=False):
        with no_data_fingerprint(), validation_memo():
            for checkpoint, (_, _, frame) in zip(checkpoints, runs, strict=True):
                results += run_checkpoint(checkpoint, frame, parameters, run_id)
        failed: list[str] = []
        evaluated = 0
        for _, suite_result in results:
            evaluated += int(suite_result.statistics.get("evaluated_expectations") or 0)
            failed += [
                f"{suite_result.suite_name}: {describe(r)}"
                for r in suite_result.results
                if not r.success
            ]
        success = not failed and all(r.success for _, r in results)
        identifiers = [identifier for identifier, _ in results]
        rebuild_index = index_due(site_path(context), failed=not success,
                                  refresh_seconds=refresh, now=time.time())
        if not rebuild_index:
            context.build_data_docs(site_names=[SITE_NAME], resource_identifiers=identifiers,
                                    build_index=False)
    if rebuild_index:
        with project_lock(gx_dir, exclusive=True):
            prune_validations(context, KEEP_VALIDATIONS)
            context.build_data_docs(site_names=[SITE_NAME], resource_identifiers=identifiers)
    pages = [page for page in (site_path(context, i) for i in identifiers) if page]
    return GateResult(
        success=success,
        failed=tuple(failed),
        data_docs_index=site_path(context),
        evaluated=evaluated,
        validation_pages=tuple(pages),
    )
