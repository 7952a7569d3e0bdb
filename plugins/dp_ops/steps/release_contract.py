"""The versioned release contract (docs/release-contract.md): what consumers may rely on.

- ``manifest.schema.json`` (shipped with the package, under ``dp_ops/schemas/``): the
  JSON Schema (draft 2020-12) of every ``manifest.json``;
- ``<report>.columns.json`` (shipped beside each report, in its package's ``schemas/``,
  :func:`load_columns`; the release parts' ``column_contract``): the columns of each
  published data file, by file pattern:
  name, type (``string``, ``date`` as YYYY-MM-DD, ``integer``, ``number``) and whether it
  may be empty; a ``name_prefix`` entry stands for the run of columns that start with it
  (the symptoms' ``symptom:<name>`` columns).

The gate checks every staged data file against its report's column schema
(:func:`check_release_files`), and publish checks the manifest against the manifest schema
(:func:`check_manifest`) before anything is promoted; a release that breaks its own
contract is never published. ``SCHEMA_VERSION`` is the version both carry: a new minor
version only adds, a new major version may change meanings.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.errors import GateFailed, PublishRefused

SCHEMA_VERSION = "1.3"
# The versions this code reads (a release written under an earlier minor version).
READABLE_VERSIONS = ("1.1", "1.2", "1.3")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_INTEGER = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
# problems reported per file at most: a contract broken in every row says so once
_MAX_PER_FILE = 5


@cache
def load_schema(name: str) -> dict[str, Any]:
    """A schema file shipped with the factory (``manifest.schema.json``)."""
    return load_columns_file("dp_ops", name)


@cache
def load_columns(package: str, report: str) -> dict[str, Any]:
    """The column schema a report's package ships: ``<package>/schemas/<report>.columns.json``."""
    return load_columns_file(package, f"{report}.columns.json")


def load_columns_file(package: str, name: str) -> dict[str, Any]:
    text = resources.files(package).joinpath("schemas", name).read_text(encoding="utf-8")
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def check_manifest(manifest: dict[str, Any]) -> list[str]:
    """Every way ``manifest`` breaks the manifest schema (empty: it conforms)."""
    import jsonschema  # type: ignore[import-untyped]  # no stubs; only Draft202012Validator

    validator = jsonschema.Draft202012Validator(load_schema("manifest.schema.json"))
    return [f"manifest{''.join(f'[{p!r}]' for p in e.absolute_path)}: {e.message[:200]}"
            for e in sorted(validator.iter_errors(manifest), key=lambda e: list(e.path))]


def _expected(columns: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]] | str:
    """The column specs for the actual ``names``, expanding ``name_prefix`` runs, or why
    the names do not fit."""
    out: list[dict[str, Any]] = []
    i = 0
    for spec in columns:
        if "name_prefix" in spec:
            start = i
            while i < len(names) and names[i].startswith(spec["name_prefix"]):
                out.append({**spec, "name": names[i]})
                i += 1
            if i == start:
                return f"no column starting with {spec['name_prefix']!r} at position {start + 1}"
            continue
        if i >= len(names):
            return f"column {spec['name']!r} is missing (the file has {len(names)} columns)"
        if names[i] != spec["name"]:
            return f"column {i + 1} is {names[i][:60]!r}, expected {spec['name']!r}"
        out.append(spec)
        i += 1
    if i < len(names):
        return f"unexpected column {names[i][:60]!r} at position {i + 1}"
    return out


_PATTERNS = {"date": _DATE, "integer": _INTEGER, "number": _NUMBER}


def _check_csv(path: Path, columns: list[dict[str, Any]]) -> list[str]:
    """Every column of the CSV read as text (pyarrow's reader; RE2 matching, so that a
    year of hundreds of symptom columns is checked quickly)."""
    import pyarrow.compute as pc
    from pyarrow import csv as pacsv

    with open(path, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh), None)
    if header is None:
        return ["the file is empty (no header)"]
    specs = _expected(columns, header)
    if isinstance(specs, str):
        return [specs]
    try:
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(header, pa.string()), strings_can_be_null=False,
            quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, ValueError) as exc:
        return [f"unreadable as CSV: {str(exc)[:200]}"]
    if _columns_pass(specs, table.columns):
        return []
    # something is wrong: column by column, to name the column and the first bad line
    problems: list[str] = []
    for spec, values in zip(specs, table.columns, strict=True):
        empty = pc.equal(values, "")
        if not spec["nullable"] and pc.any(empty).as_py():
            line = pc.index(empty, True).as_py() + 2
            problems.append(f"{spec['name']!r} is empty on line {line}")
        pattern = _PATTERNS.get(spec["type"])
        if pattern is not None:
            bad = pc.and_(pc.invert(empty), pc.invert(pc.match_substring_regex(
                values, pattern.pattern)))
            if pc.any(bad).as_py():
                line = pc.index(bad, True).as_py() + 2
                problems.append(f"{spec['name']!r} is not a {spec['type']} on line {line}")
        if len(problems) >= _MAX_PER_FILE:
            break
    return problems


def _columns_pass(specs: list[dict[str, Any]], columns: list[pa.ChunkedArray]) -> bool:
    """Whether every column meets its spec, checked a kind at a time: the columns of one
    (type, nullable) as one array, the pattern matched on its non-empty values only (a
    year of symptoms is ~2% full), so the cost follows the values, not the columns."""
    import pyarrow.compute as pc

    groups: dict[tuple[str, bool], list[pa.Array]] = {}
    for spec, values in zip(specs, columns, strict=True):
        groups.setdefault((spec["type"], bool(spec["nullable"])), []).extend(values.chunks)
    for (kind, nullable), chunks in groups.items():
        combined = pa.chunked_array(chunks, type=pa.string())
        empty = pc.equal(combined, "")
        if not nullable and pc.any(empty).as_py():
            return False
        pattern = _PATTERNS.get(kind)
        if pattern is not None:
            present = pc.filter(combined, pc.invert(empty))
            if len(present) and not pc.all(pc.match_substring_regex(
                    present, pattern.pattern)).as_py():
                return False
    return True


_ARROW_KINDS = {
    "string": (pa.types.is_string, pa.types.is_large_string),
    "date": (pa.types.is_string, pa.types.is_large_string),
    "integer": (pa.types.is_integer,),
    "number": (pa.types.is_floating, pa.types.is_integer),
}


def _check_parquet(path: Path, columns: list[dict[str, Any]]) -> list[str]:
    """Types from the file's schema, null counts from its row groups' statistics (a
    column is read only when a row group has none), the date columns' values read: so
    that a year of 430 columns is not read back whole to learn what its footer says."""
    import pyarrow.compute as pc

    parquet = pq.ParquetFile(path)
    schema = parquet.schema_arrow
    specs = _expected(columns, schema.names)
    if isinstance(specs, str):
        return [specs]
    problems: list[str] = []
    counted = _null_counts(parquet)
    for spec, field in zip(specs, schema, strict=True):
        if not any(test(field.type) for test in _ARROW_KINDS[spec["type"]]):
            problems.append(f"{spec['name']!r} has type {field.type}, expected {spec['type']}")
            continue
        # a date column is read for its values anyway (its nulls counted on it); another
        # column only when its nulls matter and no statistics count them
        dates = _read_column(parquet, field.name) if spec["type"] == "date" else None
        nulls = 0
        if not spec["nullable"]:
            known = counted.get(field.name) if dates is None else dates.null_count
            nulls = known if known is not None else _read_column(parquet, field.name).null_count
        if nulls:
            problems.append(f"{spec['name']!r} has {nulls} null value(s)")
        if dates is not None:
            values = dates.drop_null()
            bad = len(values) - pc.sum(pc.match_substring_regex(
                values, _DATE.pattern)).as_py() if len(values) else 0
            if bad:
                problems.append(f"{spec['name']!r}: {bad} value(s) not YYYY-MM-DD")
        if len(problems) >= _MAX_PER_FILE:
            break
    return problems


def _read_column(parquet: pq.ParquetFile, name: str) -> pa.ChunkedArray:
    return parquet.read(columns=[name]).column(0)


def _null_counts(parquet: pq.ParquetFile) -> dict[str, int | None]:
    """Per column, the nulls its row groups' statistics count (None when one of its row
    groups has no such statistic; 0 in a file without row groups)."""
    meta = parquet.metadata
    counts: dict[str, int | None] = dict.fromkeys(parquet.schema_arrow.names, 0)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for j in range(group.num_columns):
            chunk = group.column(j)
            stats = chunk.statistics
            known = stats is not None and stats.has_null_count
            name = chunk.path_in_schema
            before = counts.get(name, 0)
            counts[name] = (before + int(stats.null_count)
                            if known and before is not None else None)
    return counts


_ARROW_TYPES = {"string": pa.large_string(), "date": pa.large_string(),
                "integer": pa.int64(), "number": pa.float64()}


def column_contract(report: str, contract: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``contract``, the report's column schema (its release parts' ``column_contract``);
    a report without one is a :class:`GateFailed` naming it."""
    if contract is None:
        raise GateFailed(f"report {report!r} ships no column schema: its release parts "
                         "give none (column_contract)")
    return contract


def arrow_table(frame: Any, report: str, pattern: str,
                contract: Mapping[str, Any] | None) -> pa.Table:
    """``frame`` as an Arrow table typed by the contract's columns for ``pattern``, so that
    a column with no value in this release still has its contracted type (not Arrow's
    ``null`` type, which a consumer's reader would trip over)."""
    entry = next(e for e in column_contract(report, contract)["files"]
                 if e["pattern"] == pattern)
    specs = _expected(entry["columns"], [str(c) for c in frame.columns])
    if isinstance(specs, str):
        raise GateFailed(f"release contract {report}.columns.json, {pattern}: {specs}")
    schema = pa.schema([pa.field(s["name"], _ARROW_TYPES[s["type"]], nullable=True)
                        for s in specs])
    floats = [i for i, t in enumerate(frame.dtypes) if t == "float64"
              and schema.field(i).type == pa.float64()]
    if len(floats) < _BLOCK_COLUMNS:
        return pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    # a wide table (the symptoms files): its float columns converted from one 2-D block,
    # what from_pandas does column by column (NaN -> null), with from_pandas' metadata
    block = np.asfortranarray(frame.iloc[:, floats].to_numpy(np.float64))
    is_float = set(floats)
    others = [i for i in range(len(frame.columns)) if i not in is_float]
    rest = pa.Table.from_pandas(frame.iloc[:, others],
                                schema=pa.schema([schema.field(i) for i in others]),
                                preserve_index=False)
    arrays: list[Any] = [None] * len(frame.columns)
    for j, i in enumerate(others):
        arrays[i] = rest.column(j)
    for j, i in enumerate(floats):
        arrays[i] = pa.array(block[:, j], type=pa.float64(), from_pandas=True)
    return pa.Table.from_arrays(arrays, schema=schema.with_metadata(
        _pandas_metadata(rest.schema.metadata, frame, is_float)))


def _pandas_metadata(rest: dict[bytes, bytes] | None, frame: Any,
                     floats: set[int]) -> dict[bytes, bytes]:
    """The ``pandas`` schema metadata ``from_pandas`` writes for ``frame``, from that of its
    other columns (``rest``) with an entry for each float64 column put back in place."""
    meta = json.loads((rest or {})[b"pandas"])
    entries = iter(meta["columns"])
    meta["columns"] = [
        {"name": str(c), "field_name": str(c), "pandas_type": "float64",
         "numpy_type": "float64", "metadata": None} if i in floats else next(entries)
        for i, c in enumerate(frame.columns)]
    return {**(rest or {}), b"pandas": json.dumps(meta).encode("utf8")}


# From this many float columns on, :func:`arrow_table` converts them as one block.
_BLOCK_COLUMNS = 32


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def check_release_files(report: str, release_dir: Path,
                        contract: Mapping[str, Any] | None, *,
                        version: str = SCHEMA_VERSION) -> list[str]:
    """Every way the data files under ``release_dir`` break ``report``'s column schema
    (:func:`column_contract`), each naming the file; a pattern no file matches is a
    problem too, unless the pattern is newer (its ``since``) than the release's contract
    ``version``."""
    contract = column_contract(report, contract)
    files = sorted(p.relative_to(release_dir).as_posix()
                   for p in release_dir.rglob("*") if p.is_file())
    problems: list[str] = []
    for entry in contract["files"]:
        if _version_key(str(entry.get("since", "1.0"))) > _version_key(version):
            continue
        matched = [f for f in files if fnmatch.fnmatchcase(f, entry["pattern"])]
        if not matched:
            problems.append(f"{entry['pattern']}: no such file in the release")
        for name in matched:
            check = _check_csv if entry["format"] == "csv" else _check_parquet
            problems += [f"{name}: {p}" for p in check(release_dir / name, entry["columns"])]
    return problems


def require_contract(report: str, release_dir: Path,
                     contract: Mapping[str, Any] | None) -> None:
    """The gate's contract check: raise :class:`GateFailed` naming every problem."""
    problems = check_release_files(report, release_dir, contract)
    if problems:
        raise GateFailed(f"release contract {report}.columns.json {SCHEMA_VERSION}: "
                         f"{len(problems)} problem(s), nothing staged:\n  "
                         + "\n  ".join(problems[:20]))


def require_manifest(manifest: dict[str, Any]) -> None:
    """Publish's contract check: raise :class:`PublishRefused` naming every problem."""
    problems = check_manifest(manifest)
    if problems:
        raise PublishRefused(f"the manifest breaks manifest.schema.json {SCHEMA_VERSION}: "
                             + "; ".join(problems[:10]) + "; not published")
