"""Ingestion: validate one day's raw partition, split it into clean rows and quarantine.

One source at a time (a :class:`~dp_ops.sources.spec.SourceSpec`: its columns, judging
query, lookups and reference files), the same way for every source. Input contract
(docs/design.md). File-level problems fail the task with a message naming the
file: a missing partition, a partition with no Parquet file or with a non-Parquet file, a
file that cannot be read (zero bytes, truncated, corrupt footer or data page, not
Parquet), a missing, unexpected or repeated column, a column of the wrong type. A file
with no rows is valid and adds nothing. Row-level problems send the row to
``quarantine/<source>/date=D/rows.parquet`` with its reason, file and row number; such
rows never reach an aggregate. Every input row lands in exactly one of the two outputs, so
nothing is lost. ``tests/data/bad/`` holds a corpus of bad inputs with the outcome of each.

A file may carry an optional ``date`` column (a date, a naive timestamp or ISO text): its
rows must fall on the partition's day (a null or unparsable date is outside it). Rows of a
file without the column take the partition's day.

Logs and summaries name paths and reasons, never rows, ids or counts of people.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from dp_ops.engine.base import ColumnType, Engine, Judging, redacted, repeated
from dp_ops.engine.files import write_json_atomic
from dp_ops.engine.registry import engine_for
from dp_ops.errors import IngestError
from dp_ops.layout import DataRoot
from dp_ops.settings import execution_settings
from dp_ops.sources.spec import DATE_COLUMN, SourceSchema, SourceSpec, source_spec
from dp_ops.steps.result import StepResult

__all__ = ["MAX_ID_LENGTH", "check_columns", "check_file_schema", "ingest_source",
           "ingest_sources", "partition_files", "redacted"]

MAX_ID_LENGTH = 256


def check_columns(path: Path, columns: list[tuple[str, ColumnType]],
                  schema: SourceSchema) -> bool:
    """Raise :class:`IngestError` naming ``path`` unless its ``columns`` (name and type, in
    file order, as the engine read them from the footer) match ``schema``.

    Returns whether the optional ``date`` column is present.
    """
    names = [name for name, _ in columns]
    types = dict(columns)
    duplicated = sorted({c for c in names if names.count(c) > 1})
    if duplicated:
        raise repeated(path, duplicated)
    missing = [c for c in schema.required if c not in names]
    if missing:
        raise IngestError(f"{path}: missing required column(s) {missing}; "
                          f"expected {list(schema.required)}")
    extra = [c for c in names if c not in schema.required + schema.optional_columns]
    if extra:
        raise IngestError(f"{path}: unexpected column(s) {extra}; "
                          f"expected {list(schema.required)} (optional: "
                          f"{list(schema.optional_columns)})")
    for col in schema.string_columns:
        if "string" not in types[col].kinds:
            raise IngestError(f"{path}: column {col!r} has type {types[col].name}, "
                              "expected string")
    for col in schema.numeric_columns:
        if "number" not in types[col].kinds:
            raise IngestError(f"{path}: column {col!r} has type {types[col].name}, "
                              "expected a number")
    if DATE_COLUMN in types and "date" not in types[DATE_COLUMN].kinds:
        raise IngestError(f"{path}: column {DATE_COLUMN!r} has type "
                          f"{types[DATE_COLUMN].name}, expected a date, a timestamp without "
                          "time zone or ISO text")
    return DATE_COLUMN in types


def check_file_schema(path: Path, schema: SourceSchema, engine: Engine | None = None) -> bool:
    """:func:`check_columns` of the file at ``path`` as ``engine`` (default: the
    configured one) reads its footer."""
    engine = engine or engine_for(execution_settings())
    return check_columns(path, engine.file_columns(path), schema)


def partition_files(root: DataRoot, source: str, day: date) -> list[Path]:
    part = root.raw_partition(source, day)
    if not part.is_dir():
        raise IngestError(f"missing raw partition {part}: a missing partition is an error, "
                          "not an empty day (write the partition, or exclude the date)")
    files = sorted(p for p in part.iterdir() if p.is_file() and not p.name.startswith("."))
    parquet = [p for p in files if p.suffix == ".parquet"]
    strays = [p.name for p in files if p.suffix != ".parquet"]
    if strays:
        raise IngestError(f"raw partition {part} holds non-Parquet file(s) {strays}")
    if not parquet:
        raise IngestError(f"raw partition {part} holds no Parquet file")
    return parquet


def ingest_source(root: DataRoot, source: SourceSpec, day: date) -> StepResult:
    """Validate ``raw/<source>/date=day`` into clean rows (``work/clean``) and quarantine.

    The public inputs are checked first (the lookups, each reader naming its file, then
    every reference file the source declares), then the partition's files."""
    lookups = {lookup.table: (lookup.column, tuple(lookup.values(root)))
               for lookup in source.lookups}
    for name in source.reference_files:
        if not root.reference_file(name).is_file():
            raise IngestError(f"source {source.name}: reference file "
                              f"{root.reference_file(name)} not found (run `python -m dp_ops "
                              "generate` or copy the file there)")
    files = partition_files(root, source.name, day)
    engine = engine_for(execution_settings())
    dated = {f: check_file_schema(f, source.schema, engine) for f in files}
    clean = root.clean_partition(source.name, day) / "part.parquet"
    quarantine = root.quarantine_partition(source.name, day) / "rows.parquet"
    counts = engine.judge_to_parquet(root, Judging(
        sql=source.judging_sql, day=day, files=dated, lookups=lookups,
        clean_columns=source.clean_columns, clean=clean, quarantine=quarantine,
        partition=root.raw_partition(source.name, day), max_id_length=MAX_ID_LENGTH))
    reasons = sorted(set(counts) - {"clean"})
    # Row counts stay in the private work area; the summary names reasons and paths only.
    write_json_atomic(clean.parent / "ingest_report.json",
                      {"date": day.isoformat(), "files": [str(f) for f in dated],
                       "rows_by_outcome": counts})
    if reasons:
        return StepResult(f"ingested {source.label} for {day} ({engine.name}): clean rows "
                          f"in {clean.parent}; rows quarantined for: {', '.join(reasons)} "
                          f"(see {quarantine})", (str(clean),))
    return StepResult(f"ingested {source.label} for {day} ({engine.name}): clean rows in "
                      f"{clean.parent}", (str(clean),))


def ingest_sources(root: DataRoot, sources: tuple[str, ...], day: date) -> StepResult:
    """Ingest the day of each source a report reads (``ReportSpec.sources``), found by name
    among the installed sources (:func:`dp_ops.sources.spec.source_spec`)."""
    results = [ingest_source(root, source_spec(name), day) for name in sources]
    if len(results) == 1:
        return results[0]
    return StepResult("; ".join(r.summary for r in results),
                      tuple(path for r in results for path in r.paths))
