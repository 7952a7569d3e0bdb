"""The engine contract: what the ingest and bounding steps ask of whatever runs their SQL.

An engine does all the work on private rows. It reads a raw file's column types
(:meth:`Engine.file_columns`: the ingest step checks them against the source's contract),
runs a source's judging query over a day's raw files and writes the clean rows and the
quarantine (:meth:`Engine.judge_to_parquet`), and runs one report's bounding query
(``include/sql/<report>/bound_contributions.sql`` summed per cell by
``include/sql/aggregate_cells.sql``) over one day's clean Parquet rows and writes the
true cell sums, atomically, as one Parquet file. The steps never name an engine:
:func:`dp_ops.engine.registry.engine_for` picks it from the execution settings
(``DP_ENGINE``).

Both engines run the same SQL text (a Jinja ``dialect`` switch where their functions
differ) and give identical quarantines, clean rows and cell sums for the same input and
bounding salt (``tests/integration/test_spark_engine.py``, the bad-input corpus on both).
The rows read and the sums written are private: an engine logs, prints and returns
neither; it returns only the number of rows of each outcome, which the ingest step keeps
in the private work area.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa

from dp_ops.engine.sql import render_sql
from dp_ops.errors import IngestError, RegionTableError
from dp_ops.layout import DataRoot
from dp_ops.settings import ExecutionSettings

# A report's bounding query over a relation of clean rows (a view name or a subquery).
ContributionsSql = Callable[[str], str]

# The cell-sums queries (mobility/cell_sums*.sql) pack three levels' region numbers into
# one BIGINT, 21 bits each (all ones marks "no region at that level").
MAX_REGIONS = 2**21 - 1


@dataclass(frozen=True)
class BoundingSql:
    """A report's bounding queries over a relation of clean rows.

    ``contributions`` is the per-user query (``<report>/bound_contributions.sql``): it
    states the bounds, runs on every engine, and its rows summed per cell are the truth.
    ``cell_sums_by_dialect``, by engine dialect (``duckdb``, ``spark``), are queries, where a
    report has them, that give rows with exactly the same sums per cell, faster, each in
    its engine's dialect only; tests hold them equal to ``contributions``."""

    contributions: ContributionsSql
    cell_sums_by_dialect: Mapping[str, ContributionsSql] = field(default_factory=dict)

    @classmethod
    def of(cls, query: Callable[..., str], relation: str) -> BoundingSql:
        """The bounding of the per-user ``query`` (its Jinja identifiers by keyword) whose
        SQL reads the relation of clean rows as ``{{ <relation> }}``."""
        return cls(lambda rows: query(**{relation: rows}))

    def cell_sums_rows(self, relation: str, engine: str) -> str:
        """Rows over ``relation`` whose per-cell sums are the true cell sums, in the query
        the ``engine`` runs best (the per-user query where it has no faster one)."""
        return self.cell_sums_by_dialect.get(engine, self.contributions)(relation)

    def cell_sums(self, relation: str, engine: str) -> str:
        """The true per-cell sums over ``relation`` in the SQL the ``engine`` runs best."""
        return aggregate_sql(self.cell_sums_rows(relation, engine))


@dataclass(frozen=True)
class ColumnType:
    """A raw column's type as the ingest step judges it: ``name`` as errors show it
    (Arrow's name, on either engine) and the ``kinds`` of input column it may stand for:
    ``string``, ``number`` and ``date`` (a date, a timestamp without time zone or text).
    An all-null column stands for every kind."""

    name: str
    kinds: frozenset[str]


@dataclass(frozen=True)
class Judging:
    """One day of one source to judge: each raw file (mapped to whether it has a ``date``
    column), the source's judging query (its Jinja identifiers still to fill in), the
    public lookup tables it joins (name -> (column, values)), the clean columns and where
    the clean rows and the quarantine go."""

    sql: Callable[..., str]
    day: date
    files: Mapping[Path, bool]
    lookups: Mapping[str, tuple[str, tuple[str, ...]]]
    clean_columns: tuple[str, ...]
    clean: Path
    quarantine: Path
    partition: Path
    max_id_length: int

    def params(self, files: Mapping[Path, bool] | None = None,
               name: Callable[[Path], str] = str) -> dict[str, object]:
        """The judging query's bind parameters (over ``files``, default all of them), each
        dated file as the query's ``filename`` column names it (``name``: its path)."""
        files = self.files if files is None else files
        params: dict[str, object] = {"day": self.day.isoformat(),
                                     "max_id_length": self.max_id_length}
        if any(files.values()):
            # rows of a file without the column take the partition's day
            params["dated_files"] = [name(f) for f, dated in files.items() if dated]
        return params

    def lookup_tables(self) -> dict[str, pa.Table]:
        """The public one-column lookup tables the judging query joins, as Arrow tables
        (what either engine registers under each name)."""
        return {name: pa.table({column: pa.array(sorted(set(values)), pa.string())})
                for name, (column, values) in self.lookups.items()}


class Engine(Protocol):
    """Runs the ingest and bounding SQL of one day (or one user shard of it)."""

    name: str

    def file_columns(self, path: Path) -> list[tuple[str, ColumnType]]:
        """The columns of the raw Parquet file ``path``, in file order (a repeated name
        repeated), from its footer. Raises :class:`dp_ops.errors.IngestError` naming the
        file when it cannot be read."""
        ...

    def judge_to_parquet(self, root: DataRoot, job: Judging) -> dict[str, int]:
        """Judge every row of ``job``'s files: write the clean rows to ``job.clean`` and
        the rejected ones (with reason, file and row) to ``job.quarantine``, each
        atomically (no quarantine file when nothing is rejected: a stale one is removed).
        Returns the number of rows per reason (``clean`` for the clean rows). Raises
        :class:`dp_ops.errors.IngestError` naming the file whose data cannot be read."""
        ...

    def bound_to_parquet(self, root: DataRoot, clean: Path, target: Path,
                         ancestors: pd.DataFrame, bounding: BoundingSql,
                         params: dict[str, object], shard: int | None) -> None:
        """Write the true cell sums of the bounded contributions of ``clean`` (restricted
        to user ``shard`` when given) to ``target``, atomically."""
        ...


def ingest_dialect(dialect: str) -> dict[str, Any]:
    """The Jinja values of the sources' judging queries for
    an engine's ``dialect``: the spellings in which DuckDB and Spark differ (the text type,
    quoting the ``date`` column, which Spark would read as a string in double quotes, and
    the test for the characters no id may hold, :data:`ID_FORBIDDEN_RANGES`), and
    ``copy_hash``: a leading key for the duplicate check's partitions, a 64-bit hash of
    the compared columns on Spark (equal rows have equal hashes, so the partitions are the
    same; Spark sorts them by that one number first instead of comparing strings),
    nothing on DuckDB, which does not sort them."""
    if dialect == "spark":
        return {"text": "STRING", "date_column": "`date`",
                "has_control": lambda column: f"{column} RLIKE r'{_CONTROL}'",
                "copy_hash": lambda columns: f"xxhash64({columns}),"}
    return {"text": "VARCHAR", "date_column": '"date"',
            "has_control": lambda column: f"regexp_matches({column}, '{_CONTROL}')",
            "copy_hash": lambda columns: ""}


# The characters an id may not hold (docs/design.md, Input contract), as inclusive code
# point ranges: Unicode's controls (Cc: C0, DEL, C1), format characters (Cf: zero-width
# characters, bidi overrides and isolates, the BOM, tags), line and paragraph separators
# (Zl, Zp) and every space but the ASCII one (Zs), as of Unicode 15.1. Listed by code point
# rather than as \p{...} classes so that DuckDB (RE2) and Spark (Java, with older Unicode
# tables) match exactly the same characters.
ID_FORBIDDEN_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F), (0x007F, 0x00A0), (0x00AD, 0x00AD), (0x0600, 0x0605),
    (0x061C, 0x061C), (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891),
    (0x08E2, 0x08E2), (0x1680, 0x1680), (0x180E, 0x180E), (0x2000, 0x200F),
    (0x2028, 0x202F), (0x205F, 0x2064), (0x2066, 0x206F), (0x3000, 0x3000),
    (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
    (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F))
# ... as one character class that RE2 and Java read alike (\x{h..h}: a code point)
_CONTROL = "[" + "".join(f"\\x{{{first:x}}}-\\x{{{last:x}}}"
                         for first, last in ID_FORBIDDEN_RANGES) + "]"
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def redacted(exc: BaseException, limit: int = 300) -> str:
    """An engine's error text fit for a task log: its type and message with every quoted
    string replaced (a conversion error may quote a raw value) and cut to ``limit``."""
    text = _QUOTED.sub("'<redacted>'", str(exc)).replace("\n", " ")
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"{type(exc).__name__}: {text}"


def unreadable(path: Path, exc: BaseException) -> IngestError:
    """The error for a raw file an engine cannot read."""
    return IngestError(f"cannot read Parquet file {path}: {redacted(exc)}")


def repeated(path: Path, names: list[str]) -> IngestError:
    return IngestError(f"{path}: repeated column(s) {names}")


def ancestors_table(ancestors: pd.DataFrame) -> pa.Table:
    """The public region tree as both engines register it (the view ``ancestors``): each
    finest region and its region at every level, each region also numbered
    (``region_idx``, its rank among the sorted region ids), so that both engines' cell-sums
    queries key regions by the same small integers. An Arrow table: DuckDB registers it
    without a copy, and Spark takes it without Python worker processes (also over Spark
    Connect).

    Refuses a region table with too many regions for the packed keys."""
    region_ids = ancestors["region_id"].astype(str)
    count = region_ids.nunique()
    if count >= MAX_REGIONS:
        raise RegionTableError(
            f"the region table has {count:,} regions: the bounding queries pack "
            f"region numbers in 21 bits, so at most {MAX_REGIONS - 1:,} (split the country "
            "into several region tables)")
    names = pd.Index(sorted(set(region_ids)))
    return pa.table({
        "finest_region_id": pa.array(ancestors["finest_region_id"].astype(str), pa.string()),
        "level": pa.array(ancestors["level"].astype("int64"), pa.int64()),
        "region_id": pa.array(region_ids, pa.string()),
        "region_idx": pa.array(names.get_indexer(region_ids), pa.int32()),
    })


def aggregate_sql(contributions_sql: str) -> str:
    """True per-cell sums of the bounded contributions of ``contributions_sql``."""
    return render_sql("aggregate_cells", contributions=f"({contributions_sql})")


def shard_relation(relation: str, params: dict[str, object], settings: ExecutionSettings,
                   shard: int | None, dialect: str) -> tuple[str, dict[str, object]]:
    """``relation`` restricted to one user shard (unchanged when unsharded), in the SQL
    ``dialect`` of the engine (``shard_stays.sql`` parses hex differently in each)."""
    if shard is None:
        return relation, params
    rows = "(" + render_sql("shard_stays", rows=relation, dialect=dialect) + ")"
    return rows, params | {"shards": settings.bounding_shards, "shard": shard}
