"""Atomic file writes: nothing half-written is ever visible under its final name."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq


def _tmp_beside(target: Path, suffix: str) -> str:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=suffix)
    os.close(fd)
    return tmp


def sql_literal_path(path: Path | str) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def atomic_copy_to_parquet(con: duckdb.DuckDBPyConnection, query: str, target: Path,
                           params: dict[str, object] | None = None) -> None:
    """Run ``COPY (query) TO target`` through a temporary file and an atomic rename."""
    tmp = _tmp_beside(target, ".parquet")
    try:
        con.execute(f"COPY ({query}) TO {sql_literal_path(tmp)} (FORMAT parquet)", params or {})
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_parquet_atomic(table: pa.Table, target: Path) -> None:
    tmp = _tmp_beside(target, ".parquet")
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json_atomic(target: Path, payload: object) -> None:
    tmp = _tmp_beside(target, ".json")
    try:
        with open(tmp, "w") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; published files are for readers
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def store_first_wins(table: pa.Table, target: Path) -> bool:
    """Write ``table`` to ``target`` unless it exists; True if this call's file won.

    ``os.link`` is atomic and fails when the target exists, so of several racing writers
    exactly one file becomes visible and every reader sees that one. Used for values that
    must never be silently replaced: stored noise and the frozen baseline.
    """
    tmp = _tmp_beside(target, ".parquet")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        try:
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)
