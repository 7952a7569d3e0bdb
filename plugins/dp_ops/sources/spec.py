"""What a source package exports so the factory can ingest it: a :class:`SourceSpec`.

A source is one kind of raw input under the data root, ``raw/<name>/date=D/*.parquet``,
with its input contract: its columns and their types, the query that judges each row clean
or quarantined (with a Jinja ``dialect`` switch where DuckDB and Spark differ), the public
lookup tables that query joins, and the public reference files it reads under
``reference/``. It is registered under the entry-point group ``dp_ops.sources``::

    [project.entry-points."dp_ops.sources"]
    app_sessions = "my_agency.sources:APP_SESSIONS"

A report names the sources it reads (``ReportSpec.sources``) and the ingest step finds each
here, so a source has one contract whichever report ingests it: its clean rows
(``work/clean/<name>/``) serve every report that reads it. Nothing outside a source's own
module names it. A spec is a light value: loading it imports no pandas or engine (its
lookups read the data root when the ingest step calls them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Protocol

from dp_ops.registered import NAME_PATTERN, find, registered

if TYPE_CHECKING:
    from dp_ops.layout import DataRoot

ENTRY_POINT_GROUP = "dp_ops.sources"
# Every source keys its rows by user (bounding) and finest region (the public domain).
KEY_COLUMNS = ("user_id", "region_id")
# A reference file's name: one plain file under reference/.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# The column a raw file may add to date its rows (a date, a naive timestamp or ISO text).
DATE_COLUMN = "date"


class SqlTemplate(Protocol):
    """A query with Jinja identifiers still to fill in (``dp_ops.engine.sql``)."""

    def __call__(self, **identifiers: Any) -> str: ...


@dataclass(frozen=True)
class SourceSchema:
    """A raw file's columns: the required ones by kind, in the order its clean rows keep
    them (string columns, then numeric ones); an optional ``date`` column besides."""

    string_columns: tuple[str, ...]
    numeric_columns: tuple[str, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        return self.string_columns + self.numeric_columns

    @property
    def optional_columns(self) -> tuple[str, ...]:
        return (DATE_COLUMN,)


@dataclass(frozen=True)
class Lookup:
    """A public one-column table the judging query joins as ``table`` (one ``column``),
    its values read from the data root's public files when a day is ingested."""

    table: str
    column: str
    values: Callable[[DataRoot], Iterable[str]]


def finest_regions(root: DataRoot) -> set[str]:
    """The finest regions of the region table: the only regions a raw row may name."""
    from dp_ops.regions import read_regions

    regions = read_regions(root.regions_csv)
    return set(regions["region_id"]) - set(regions["parent_id"])


# The lookup every source's judging query joins to refuse an unknown or coarse region.
FINEST_REGIONS = Lookup("finest_regions", "region_id", finest_regions)


@dataclass(frozen=True)
class SourceSpec:
    """One raw source, as the ingest step judges it.

    ``name``: the directory under ``raw/`` (and ``work/clean/``, ``quarantine/``).
    ``label``: how task summaries name it ("location history").
    ``schema``: the raw files' columns; their clean rows keep the required ones.
    ``judging_sql``: the query giving every raw row with its ``reason`` (NULL: clean),
    over the relation ``source`` (raw rows with ``filename`` and ``file_row_number``),
    with bind parameters ``$day``, ``$max_id_length`` and ``$dated_files``, and the Jinja
    spellings of :func:`dp_ops.engine.base.ingest_dialect`.
    ``lookups``: the public tables it joins (:data:`FINEST_REGIONS` among them).
    ``reference_files``: the public files under ``reference/`` it reads (a lookup's values,
    the order of a report's columns); ingest refuses a day while one is missing.
    """

    name: str
    label: str
    schema: SourceSchema
    judging_sql: SqlTemplate
    lookups: tuple[Lookup, ...] = (FINEST_REGIONS,)
    reference_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name):
            raise ValueError(f"source spec name={self.name!r}: expected lower-case letters, "
                             "digits and '_' (at most 40), starting with a letter")
        missing = [c for c in KEY_COLUMNS if c not in self.schema.string_columns]
        if missing:
            raise ValueError(f"source spec {self.name!r}: string columns "
                             f"{list(self.schema.string_columns)} lack {missing}: every "
                             "source keys its rows by user and region")
        if DATE_COLUMN in self.schema.required:
            raise ValueError(f"source spec {self.name!r}: {DATE_COLUMN!r} is the optional "
                             "column dating a file's rows, not a required one")
        for name in self.reference_files:
            if not _FILE_NAME.fullmatch(name):
                raise ValueError(f"source spec {self.name!r}: reference file {name!r} is no "
                                 "plain file name")

    @property
    def clean_columns(self) -> tuple[str, ...]:
        return self.schema.required


class UnknownSource(ValueError):
    """A source name no installed package registers."""


@cache
def source_specs() -> dict[str, SourceSpec]:
    """Every installed source, by name, in name order: each ``dp_ops.sources`` entry point
    loaded once per process (:func:`dp_ops.registered.registered`)."""
    return registered(ENTRY_POINT_GROUP, SourceSpec)


def source_spec(name: str) -> SourceSpec:
    """The installed source ``name``; :class:`UnknownSource` (a ``ValueError``) naming
    the known ones otherwise."""
    return find(source_specs(), name, UnknownSource, "source",
                f" (a source is registered under the entry-point group {ENTRY_POINT_GROUP})")
