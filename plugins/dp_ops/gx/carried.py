"""What a gate carries over from the release now published, so that its Great
Expectations cost follows the new rows, not the release (docs/architecture.md, Gate).

A daily release is yesterday's release plus the new day's rows (and whatever the new day
changed: a week completed, a series decided again). The gate still builds every file from
the inputs the ledger recorded; what it carries over is validation:

- A suite is split (:func:`split_suite`) into its *row* expectations, whose verdict on a
  table is the conjunction of their verdicts on each row (not-null, regex, between,
  in a fixed set), and its *whole-table* expectations (columns, row count, compound
  uniqueness, distinct counts, membership in a set given at run time), which
  :func:`check_whole` evaluates in pandas over the whole table. Any other expectation,
  or one with ``mostly``, makes the suite unsplittable: the gate validates everything
  with GX, as before.
- Each row of a validated table has a 128-bit digest of its content (:func:`row_digests`).
  The gate of a release records, after it passed, the digests of the rows it validated
  (:func:`record_rows`), with a MAC under the ledger key over the rules, the release's
  files (name and sha256) and the digests file's sha256.
- The next gate looks that record up by the release ``latest`` points to
  (:func:`recorded_rows`): the release's manifest is the one the ledger recorded at
  publish, every file of it has the sha256 the manifest lists, its gate passed, and the
  record's files are the manifest's. Only then are the rows whose digest is in it left
  out of the GX run (:func:`new_rows`); a row identical to one that passed the same row
  rules passes them again. Anything that does not verify or match means nothing is
  carried: every row is validated with GX.

The record lies in the data root, writable by someone without the ledger key
(PRIVACY.md, Threat model): planted or edited, its MAC fails and nothing is carried. What
is carried is never read from the published files: the rows are always rebuilt from the
recorded inputs, so an edit to a published file can only make the next gate validate
more (:func:`recorded_rows` finds the release does not verify), never put the edit in a
release.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import great_expectations as gx
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray
from pandas.api.types import infer_dtype

from dp_ops.gx.project import file_lock
from dp_ops.gx.suites import suite
from dp_ops.privacy.ledger_key import seal, sealed

log = logging.getLogger(__name__)

# Column-map expectations: a table passes iff each of its rows does (without ``mostly``,
# and without a run-time parameter, whose value may differ from the previous gate's).
ROW_EXPECTATIONS = frozenset({
    "expect_column_values_to_not_be_null",
    "expect_column_values_to_match_regex",
    "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set",
    "expect_column_values_to_not_be_in_set",
})
# What check_whole evaluates in pandas over the whole table.
WHOLE_EXPECTATIONS = frozenset({
    "expect_table_columns_to_match_ordered_list",
    "expect_table_row_count_to_equal",
    "expect_compound_columns_to_be_unique",
    "expect_column_unique_value_count_to_be_between",
    "expect_column_values_to_be_in_set",
})
# Keyword arguments check_whole knows (any other one: the suite is not split).
_WHOLE_KWARGS = frozenset({"column", "column_list", "value", "value_set", "min_value",
                           "max_value", "batch_id"})


def _uses_parameter(kwargs: Mapping[str, Any]) -> bool:
    return any(isinstance(v, dict) and "$PARAMETER" in v for v in kwargs.values())


def _kwargs(expectation: Any) -> dict[str, Any]:
    config = expectation.configuration
    return {k: v for k, v in dict(config.kwargs).items() if v is not None}


@dataclass(frozen=True)
class SplitSuite:
    """A suite as a gate that carries rows over runs it: ``rows`` with GX on the rows not
    carried, ``whole`` in pandas over the whole table (:func:`check_whole`)."""

    name: str
    rows: gx.ExpectationSuite
    whole: tuple[tuple[str, dict[str, Any]], ...]


def split_suite(full: gx.ExpectationSuite) -> SplitSuite | None:
    """``full`` split into row and whole-table expectations, or None when one of them is
    neither (then the table is validated whole with GX)."""
    rows: list[Any] = []
    whole: list[tuple[str, dict[str, Any]]] = []
    for expectation in full.expectations:
        kind = expectation.expectation_type
        kwargs = _kwargs(expectation)
        if kwargs.get("mostly") not in (None, 1, 1.0):
            return None
        if (kind in ROW_EXPECTATIONS and not _uses_parameter(kwargs)
                and "mostly" not in kwargs):
            rows.append(copy.copy(expectation))  # GX: one suite per expectation
        elif (kind in WHOLE_EXPECTATIONS and set(kwargs) <= _WHOLE_KWARGS
              and "row_condition" not in kwargs):
            whole.append((kind, kwargs))
        else:
            return None
    return SplitSuite(full.name, suite(full.name, rows), tuple(whole))


def _resolve(value: Any, parameters: Mapping[str, Any]) -> Any:
    if isinstance(value, dict) and "$PARAMETER" in value:
        return parameters[value["$PARAMETER"]]
    return value


def _whole_failure(frame: pd.DataFrame, kind: str, kwargs: Mapping[str, Any],
                   parameters: Mapping[str, Any]) -> str | None:
    """What of ``kind`` fails on ``frame`` (counts and aggregates only, never values), or
    None; the semantics are GX's for these kwargs."""
    column = kwargs.get("column")
    if column is not None and column not in frame.columns:
        return f"column {column!r} missing"
    if kind == "expect_table_columns_to_match_ordered_list":
        expected = list(kwargs["column_list"])
        observed = [str(c) for c in frame.columns]
        if observed == expected:
            return None
        missing = [c for c in expected if c not in observed]
        extra = [c for c in observed if c not in expected]
        return (f"missing columns {missing}, unexpected columns {extra}" if missing or extra
                else f"columns out of order, observed {observed}")
    if kind == "expect_table_row_count_to_equal":
        want = int(_resolve(kwargs["value"], parameters))
        return None if len(frame) == want else f"observed {len(frame)} rows, expected {want}"
    if kind == "expect_compound_columns_to_be_unique":
        columns = list(kwargs["column_list"])
        absent = [c for c in columns if c not in frame.columns]
        if absent:
            return f"columns {absent} missing"
        keys = frame[columns]
        # GX's default: rows whose values are all missing are left out
        keys = keys[keys.notna().any(axis=1)]
        duplicated = int(keys.duplicated(keep=False).sum())
        return None if duplicated == 0 else (
            f"{duplicated} of {len(keys)} rows unexpected (duplicated keys)")
    if kind == "expect_column_unique_value_count_to_be_between":
        distinct = int(frame[column].nunique(dropna=True))
        low = _resolve(kwargs.get("min_value"), parameters)
        high = _resolve(kwargs.get("max_value"), parameters)
        if (low is not None and distinct < low) or (high is not None and distinct > high):
            return f"observed {distinct} distinct values, expected {low}..{high}"
        return None
    if kind == "expect_column_values_to_be_in_set":
        allowed = list(_resolve(kwargs["value_set"], parameters))
        present = frame[column].dropna()
        outside = int((~present.isin(allowed)).sum())
        return None if outside == 0 else f"{outside} of {len(present)} rows unexpected"
    raise ValueError(f"{kind} is not a whole-table expectation check_whole evaluates")


def check_whole(split: SplitSuite, frame: pd.DataFrame,
                parameters: Mapping[str, Any]) -> list[str]:
    """The failures of ``split``'s whole-table expectations on ``frame``, each described
    as :func:`dp_ops.gx.result.describe` does (``<suite>: <type> [<target>]: ...``)."""
    failed = []
    for kind, kwargs in split.whole:
        problem = _whole_failure(frame, kind, kwargs, parameters)
        if problem is not None:
            target = kwargs.get("column") or kwargs.get("column_list") or "table"
            if isinstance(target, list):
                target = "(" + ", ".join(map(str, target)) + ")"
            failed.append(f"{split.name}: {kind} [{target}]: {problem}")
    return failed


# -- row digests ----------------------------------------------------------------------------
# Two 64-bit lanes per row: a 128-bit digest, so that a changed row matching some carried
# one is out of reach by chance. Each cell is first a 64-bit word, exactly its value: a
# float's bits, an integer, a datetime's ticks; a text (or boolean) cell is hashed with
# BLAKE2b (type-tagged, so the text "True" is not the boolean), 64 bits of it for each lane,
# and every null of a text column is one word (None, NaN and pd.NA alike, as GX's null checks
# treat them, and apart from the text "None"). The word is mixed under a key of its column's
# position (splitmix64's finalizer, a bijection): lane 0 adds the mixed cells up, lane 1 adds
# them times an odd key of the column. A change to one cell changes both lanes for certain;
# two rows that differ in several cells agree on a lane only by chance. An object column
# holding anything but strings, booleans or nulls is not digested (1 and True compare equal).
_DIGEST_TAG = b"dp-ops row digest v3"
_DIGESTED_OBJECTS = frozenset({"string", "boolean", "empty"})
_NULL_TEXT = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def schema_of(frame: pd.DataFrame) -> list[list[str]]:
    """Each column's name, dtype and, for an object column, what it holds: two tables
    whose rows are compared by digest must have the same."""
    return [[str(c), str(t), infer_dtype(frame.iloc[:, j], skipna=True)
             if isinstance(t, np.dtype) and t.kind == "O" else ""]
            for j, (c, t) in enumerate(zip(frame.columns, frame.dtypes, strict=True))]


@lru_cache(maxsize=32)
def _column_keys(n: int) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """Per column position: the key its words are mixed under, and lane 1's odd factor."""
    raw = b"".join(hashlib.blake2b(_DIGEST_TAG + j.to_bytes(4, "little"),
                                   digest_size=16).digest() for j in range(n))
    keys = np.frombuffer(raw, dtype="<u8").reshape(n, 2).astype(np.uint64)
    return keys[:, 0].copy(), keys[:, 1] | np.uint64(1)


def _mix(x: NDArray[np.uint64], scratch: NDArray[np.uint64]) -> None:
    """splitmix64's finalizer on ``x`` in place (a bijection of 64-bit words)."""
    for shift, factor in ((_S30, _M1), (_S27, _M2)):
        np.right_shift(x, shift, out=scratch)
        x ^= scratch
        x *= factor
    np.right_shift(x, _S31, out=scratch)
    x ^= scratch


def _text_words(column: pd.Series) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """Lane 0's and lane 1's word of each cell of a text, boolean or null column."""
    codes, uniques = pd.factorize(column, use_na_sentinel=True)
    raw = b"".join(
        hashlib.blake2b((b"b1" if value else b"b0") if isinstance(value, bool | np.bool_)
                        else b"s" + str(value).encode(), digest_size=16).digest()
        for value in uniques)
    words = np.frombuffer(raw, dtype="<u8").reshape(len(uniques), 2).astype(np.uint64)
    words = np.vstack([words, np.array([_NULL_TEXT], dtype=np.uint64)])  # code -1: null
    return words[codes, 0], words[codes, 1]


def _words(column: pd.Series) -> NDArray[np.uint64] | tuple[NDArray[np.uint64],
                                                              NDArray[np.uint64]] | None:
    """The cells of ``column`` as 64-bit words (one array, both lanes' for a numeric
    column; a pair for a text one), or None for a dtype the digest does not know (a
    pandas extension dtype other than text: its table is validated whole)."""
    dtype = column.dtype
    if isinstance(dtype, pd.StringDtype):
        return _text_words(column)
    if not isinstance(dtype, np.dtype):
        return None
    values: NDArray[Any] = column.to_numpy()
    if dtype.kind == "f" and dtype.itemsize < 8:  # float16 and float32: exact in float64
        return values.astype(np.float64).view(np.uint64)
    if dtype.itemsize == 8 and dtype.kind in "fiuMm":
        return values.view(np.uint64)
    if dtype.kind in "iub":
        return values.astype(np.int64).view(np.uint64)
    if dtype.kind == "O":
        return _text_words(column)
    return None


def _fold(lanes: tuple[NDArray[np.uint64], NDArray[np.uint64]], first: NDArray[np.uint64],
          second: NDArray[np.uint64] | None, columns: NDArray[np.intp],
          k0: NDArray[np.uint64], k1: NDArray[np.uint64]) -> None:
    """Add the cells of ``columns`` (``first``: their words, a row per column; ``second``:
    lane 1's own words of a text column, else lane 1 uses ``first``) to both ``lanes``."""
    cells = first ^ k0[columns, None]
    _mix(cells, np.empty_like(cells))
    lanes[0][:] += cells.sum(axis=0, dtype=np.uint64)
    if second is not None:  # text: lane 1 has its own 64 bits of the hash
        cells = second ^ k0[columns, None]
        _mix(cells, np.empty_like(cells))
    cells *= k1[columns, None]
    lanes[1][:] += cells.sum(axis=0, dtype=np.uint64)


def row_digests(frame: pd.DataFrame, schema: list[list[str]] | None = None
                ) -> pd.DataFrame | None:
    """(d0, d1) per row of ``frame`` in its order, or None when a column holds values
    whose digests could confuse them (:data:`_DIGESTED_OBJECTS`) or has a dtype the
    digest does not know; ``schema`` is :func:`schema_of` the frame, when the caller has
    it. A row's digest depends on its cells and their column positions only."""
    schema = schema_of(frame) if schema is None else schema
    if any(kind and kind not in _DIGESTED_OBJECTS for _, _, kind in schema):
        return None
    rows = len(frame)
    k0, k1 = _column_keys(frame.shape[1])
    lanes = np.zeros(rows, np.uint64), np.zeros(rows, np.uint64)
    is_double = np.array([t == np.float64 for t in frame.dtypes], dtype=bool)
    # the float64 columns as one block, a row per column (a wide table has hundreds: one
    # Series each would cost more than the hashing), a few columns at a time, in cache
    doubles = np.flatnonzero(is_double)
    block = frame.iloc[:, doubles].to_numpy(np.float64).T.view(np.uint64)
    step = max(1, (1 << 16) // max(rows, 1))
    for at in range(0, len(doubles), step):
        _fold(lanes, block[at:at + step], None, doubles[at:at + step], k0, k1)
    for j in np.flatnonzero(~is_double):
        words = _words(frame.iloc[:, j])
        if words is None:
            return None
        first, second = words if isinstance(words, tuple) else (words, None)
        _fold(lanes, first[None, :], None if second is None else second[None, :],
              np.array([j]), k0, k1)
    return pd.DataFrame({"d0": lanes[0], "d1": lanes[1]})


def new_rows(digests: pd.DataFrame, carried: pd.DataFrame | None) -> NDArray[np.bool_]:
    """Per row, whether its digest is not among ``carried`` (None: every row is new)."""
    if carried is None:
        return np.ones(len(digests), dtype=bool)
    known = carried[["d0", "d1"]].drop_duplicates()
    if known.empty:
        return np.ones(len(digests), dtype=bool)
    d0, d1 = (digests[c].to_numpy(np.uint64) for c in ("d0", "d1"))
    first = pd.Index(known["d0"].to_numpy(np.uint64))
    if not first.is_unique:  # two carried rows share a lane: look both lanes up together
        pairs = pd.MultiIndex.from_arrays([d0, d1])
        return np.asarray(~pairs.isin(pd.MultiIndex.from_frame(known)), dtype=bool)
    at = first.get_indexer(d0)
    second = known["d1"].to_numpy(np.uint64)
    return np.asarray((at < 0) | (second[at] != d1), dtype=bool)


# -- the record of what a release's gate validated -----------------------------------------
ROWS_DIR = "validated"
# 3: the digest of this module (a record of an earlier version is not carried: the first
# gate after the change validates every row)
_VERSION = 3
_KIND = "gx_release_rows"
# records kept per report: the gates of a backfill's concurrent runs each leave one, and
# the release published is among the newest
KEEP_RECORDS = 8


def _rows_dir(gx_dir: Path, report: str) -> Path:
    return Path(gx_dir) / ROWS_DIR / f"{report}-rows"


def _body(report: str, rules: str, files: Mapping[str, str], schemas: Any,
          digests_sha256: str) -> dict[str, Any]:
    return {"version": _VERSION, "report": report, "rules": rules, "files": dict(files),
            "schemas": schemas, "digests_sha256": digests_sha256}


def record_rows(gx_dir: Path, report: str, rules: str, files: Mapping[str, str],
                tables: Mapping[str, tuple[pd.DataFrame, list[list[str]]]], *,
                key: bytes) -> None:
    """Record that the rows of ``tables`` (name: (digests, schema)) passed ``rules``, in
    the release whose files are ``files`` (name: sha256); call only after they passed.
    Keeps the :data:`KEEP_RECORDS` newest records of the report."""
    from dp_ops.engine.files import write_bytes_atomic, write_json_atomic

    where = _rows_dir(gx_dir, report)
    where.mkdir(parents=True, exist_ok=True)
    stacked = pa.Table.from_pandas(pd.concat(
        [d.assign(table=name) for name, (d, _) in sorted(tables.items())],
        ignore_index=True), preserve_index=False)
    sink = pa.BufferOutputStream()
    pq.write_table(stacked, sink)
    data = sink.getvalue().to_pybytes()
    digest = hashlib.sha256(data).hexdigest()
    label = hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()[:32]
    schemas = {name: schema for name, (_, schema) in sorted(tables.items())}
    body = _body(report, rules, files, schemas, digest)
    with file_lock(where / ".lock"):
        write_bytes_atomic(where / f"{label}.parquet", data)
        write_json_atomic(where / f"{label}.json", {**body, "mac": seal(key, _KIND, body)})
        records = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in records[KEEP_RECORDS:]:
            old.unlink(missing_ok=True)
            old.with_suffix(".parquet").unlink(missing_ok=True)


def recorded_rows(gx_dir: Path, report: str, rules: str,
                  release_files: Mapping[str, Mapping[str, Any]], *,
                  key: bytes) -> dict[str, tuple[pd.DataFrame, list[list[str]]]] | None:
    """The digests (and schema) per table that the gate of the release with
    ``release_files`` (its verified manifest's ``files``) recorded under ``rules``, or
    None: no record whose MAC verifies, whose rules are ``rules`` and whose files are all
    the release's with their sha256, or its digests file is not the recorded one."""
    where = _rows_dir(gx_dir, report)
    published = {name: str(meta.get("sha256")) for name, meta in release_files.items()}
    for path in sorted(where.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("rules") != rules:
            continue
        files = record.get("files")
        if not isinstance(files, dict) or not files or any(
                published.get(name) != sha for name, sha in files.items()):
            continue
        body = _body(report, rules, files, record.get("schemas"),
                     str(record.get("digests_sha256")))
        if record.get("version") != _VERSION or not sealed(key, _KIND, body,
                                                           record.get("mac")):
            log.warning("%s carries no valid MAC under the ledger key: ignored, every row "
                        "is validated again", path)
            continue
        try:
            data = path.with_suffix(".parquet").read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() != body["digests_sha256"]:
            log.warning("%s is not the digests file its record names: ignored, every row "
                        "is validated again", path.with_suffix(".parquet"))
            continue
        stacked = pq.read_table(pa.BufferReader(data)).to_pandas()
        schemas = body["schemas"] if isinstance(body["schemas"], dict) else {}
        return {name: (part[["d0", "d1"]].reset_index(drop=True), schemas.get(name, []))
                for name, part in stacked.groupby("table", sort=False)}
    return None


# -- a gate that carries rows over ----------------------------------------------------------
Tables = dict[str, tuple[pd.DataFrame, list[list[str]]]]


def table_digests(runs: list[tuple[gx.ExpectationSuite, str, pd.DataFrame]]
                  ) -> Tables | None:
    """Per asset of ``runs`` (suite, asset name, table), its row digests and schema; None
    when a table cannot be digested (:func:`row_digests`)."""
    tables: Tables = {}
    for _, asset, frame in runs:
        schema = schema_of(frame)
        digests = row_digests(frame, schema)
        if digests is None:
            return None
        tables[asset] = (digests, schema)
    return tables


def validate_carrying(runs: list[tuple[gx.ExpectationSuite, str, pd.DataFrame]], *,
                      gx_dir: Path, parameters: dict[str, Any], run_name: str,
                      digests: Tables | None, carried: Tables | None) -> Any:
    """Validate ``runs`` (suite, asset name, whole table) as
    :func:`dp_ops.gx.runner.run_suites` does, leaving out of the GX run the rows whose
    digest (``digests``: :func:`table_digests` of ``runs``) is in ``carried`` (per asset,
    what the previous release's gate recorded: :func:`recorded_rows`); the whole-table
    expectations are then checked in pandas (:func:`check_whole`). The same expectations
    are evaluated either way; without ``digests`` or ``carried``, or with a suite that
    does not split, every row goes through GX."""
    from dp_ops.gx.result import GateResult
    from dp_ops.gx.runner import run_suites

    splits = [split_suite(s) for s, _, _ in runs]
    if carried is None or digests is None or any(s is None for s in splits):
        return run_suites(runs, gx_dir=gx_dir, parameters=parameters, run_name=run_name)
    gx_runs = []
    whole_failed: list[str] = []
    whole_evaluated = 0
    for split, (_, asset, frame) in zip(splits, runs, strict=True):
        assert split is not None  # checked above
        rows, schema = digests[asset]
        before = carried.get(asset)
        known = before[0] if before is not None and before[1] == schema else None
        gx_runs.append((split.rows, asset, frame[new_rows(rows, known)]))
        whole_failed += check_whole(split, frame, parameters)
        whole_evaluated += len(split.whole)
    result = run_suites(gx_runs, gx_dir=gx_dir, parameters=parameters, run_name=run_name)
    return GateResult(success=result.success and not whole_failed,
                      failed=(*whole_failed, *result.failed),
                      data_docs_index=result.data_docs_index,
                      evaluated=result.evaluated + whole_evaluated,
                      validation_pages=result.validation_pages)
