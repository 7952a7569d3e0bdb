"""Ingestion: validate one day's raw partition, split it into clean rows and quarantine.

Input contract (docs/design.md). File-level problems fail the task with a message naming the
file: a missing partition, a partition with no Parquet file or with a non-Parquet file, a
file that cannot be read (zero bytes, truncated, corrupt footer or data page, not
Parquet), a missing, unexpected or repeated column, a column of the wrong type. A file
with no rows is valid and adds nothing. Row-level problems send the row to
``quarantine/<source>/date=D/rows.parquet`` with its reason, file and row number; such
rows never reach an aggregate. Every input row lands in exactly one of the two outputs, so
nothing is lost. ``tests/data/bad/`` holds a corpus of bad inputs with the outcome of each.

A file may carry an optional ``date`` column (a date, a naive timestamp or ISO text): its
rows must fall on the partition's day (a null or unparsable date is outside it). Rows of a
file without the column take the partition's day. Location history rows repeated exactly
are kept once (the copies are quarantined as duplicates of a clean row); repeated searches
are kept, as a second search of the same thing.

Logs and summaries name paths and reasons, never rows, ids or counts of people.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from dp_ops.contract import ALL_STAY_CATEGORIES, LOCATION_SOURCE, SEARCH_SOURCE
from dp_ops.engine.base import ColumnType, Engine, Judging, redacted, repeated
from dp_ops.engine.files import write_json_atomic
from dp_ops.engine.registry import engine_for
from dp_ops.errors import IngestError
from dp_ops.layout import DataRoot
from dp_ops.settings import execution_settings
from dp_ops.steps.result import StepResult

__all__ = ["LOCATION_SCHEMA", "MAX_ID_LENGTH", "SEARCH_SCHEMA", "SourceSchema",
           "check_columns", "check_file_schema", "ingest_location_history",
           "ingest_search_activity", "partition_files", "read_symptoms", "redacted"]

MAX_ID_LENGTH = 256


@dataclass(frozen=True)
class SourceSchema:
    name: str
    string_columns: tuple[str, ...]
    numeric_columns: tuple[str, ...]
    optional_columns: tuple[str, ...] = ("date",)
    nullable_string_columns: tuple[str, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        return self.string_columns + self.numeric_columns


LOCATION_SCHEMA = SourceSchema(
    name=LOCATION_SOURCE,
    string_columns=("user_id", "region_id", "place_id", "place_category"),
    numeric_columns=("dwell_hours",),
)
SEARCH_SCHEMA = SourceSchema(
    name=SEARCH_SOURCE,
    string_columns=("user_id", "region_id", "symptom"),
    numeric_columns=(),
)


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
    if "date" in types and "date" not in types["date"].kinds:
        raise IngestError(f"{path}: column 'date' has type {types['date'].name}, "
                          "expected a date, a timestamp without time zone or ISO text")
    return "date" in types


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


@dataclass(frozen=True)
class _Ingestion:
    """What differs between the sources: schema, SQL, lookups and the clean columns."""

    schema: SourceSchema
    sql: str
    clean_columns: tuple[str, ...]
    label: str


def _ingest(root: DataRoot, day: date, spec: _Ingestion,
            lookups: dict[str, tuple[str, Iterable[str]]]) -> StepResult:
    source_name = spec.schema.name
    files = partition_files(root, source_name, day)
    engine = engine_for(execution_settings())
    dated = {f: check_file_schema(f, spec.schema, engine) for f in files}
    clean = root.clean_partition(source_name, day) / "part.parquet"
    quarantine = root.quarantine_partition(source_name, day) / "rows.parquet"
    counts = engine.judge_to_parquet(root, Judging(
        sql=spec.sql, day=day, files=dated,
        lookups={name: (column, tuple(values)) for name, (column, values) in lookups.items()},
        clean_columns=spec.clean_columns, clean=clean, quarantine=quarantine,
        partition=root.raw_partition(source_name, day), max_id_length=MAX_ID_LENGTH))
    reasons = sorted(set(counts) - {"clean"})
    # Row counts stay in the private work area; the summary names reasons and paths only.
    write_json_atomic(clean.parent / "ingest_report.json",
                      {"date": day.isoformat(), "files": [str(f) for f in dated],
                       "rows_by_outcome": counts})
    if reasons:
        return StepResult(f"ingested {spec.label} for {day} ({engine.name}): clean rows in "
                          f"{clean.parent}; rows quarantined for: {', '.join(reasons)} "
                          f"(see {quarantine})", (str(clean),))
    return StepResult(f"ingested {spec.label} for {day} ({engine.name}): clean rows in "
                      f"{clean.parent}", (str(clean),))


def _finest_regions(root: DataRoot) -> set[str]:
    from dp_ops.regions import read_regions

    regions = read_regions(root.regions_csv)
    return set(regions["region_id"]) - set(regions["parent_id"])


def ingest_location_history(root: DataRoot, day: date) -> StepResult:
    """Validate ``raw/location_history/date=day`` into clean rows and quarantine."""
    spec = _Ingestion(LOCATION_SCHEMA, "ingest_location_history",
                      ("user_id", "region_id", "place_id", "place_category", "dwell_hours"),
                      "location history")
    return _ingest(root, day, spec, {
        "finest_regions": ("region_id", _finest_regions(root)),
        "stay_categories": ("category", ALL_STAY_CATEGORIES),
    })


def read_symptoms(path: Path) -> list[str]:
    """The public symptom list, one name a line, in output column order. Raises naming
    the file and line for an empty name, a duplicate, or a missing file."""
    if not path.is_file():
        raise IngestError(f"symptom list {path} not found (run `python -m dp_ops generate` "
                          "or copy the list there)")
    names: list[str] = []
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8").rstrip("\n")  # trailing newlines are fine
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.strip()
        if not name:
            raise IngestError(f"{path}, line {number}: empty symptom name")
        if name in seen:
            raise IngestError(f"{path}, line {number}: symptom {name!r} repeats line "
                              f"{seen[name]}")
        seen[name] = number
        names.append(name)
    if not names:
        raise IngestError(f"symptom list {path} is empty")
    return names


def ingest_search_activity(root: DataRoot, day: date) -> StepResult:
    """Validate ``raw/search_activity/date=day`` into clean rows and quarantine.

    Repeated identical rows are kept: without a timestamp a second identical row is a
    second search of the same thing, which is normal, and bounding counts a user once
    per symptom anyway.
    """
    spec = _Ingestion(SEARCH_SCHEMA, "ingest_search_activity",
                      ("user_id", "region_id", "symptom"), "search activity")
    return _ingest(root, day, spec, {
        "finest_regions": ("region_id", _finest_regions(root)),
        "symptom_names": ("symptom", read_symptoms(root.symptoms_txt)),
    })
