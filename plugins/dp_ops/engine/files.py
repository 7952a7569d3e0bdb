"""Atomic file writes: nothing half-written is ever visible under its final name.

Permissions follow what a file holds, whatever the process's umask. Under a data root the
private areas (docs/design.md, Data root) are ``work/clean``, ``work/bounded`` (raw rows
and true aggregates), ``work/tmp`` (DuckDB's spill files), every ``quarantine/<source>``
(rejected raw rows) and every ``noise/<report>`` (noisy values before publication),
whatever the source or report: their directories are created 0700 and their files 0600.
Everything else (reports, releases, the baseline) is 0644 in 0755 directories, for
readers. The area is recognised from the path itself (:func:`private_anchor`), so every
writer gets it right without being told.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:  # the Spark engine's processes never import DuckDB
    import duckdb

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
PUBLIC_FILE_MODE = 0o644
# The private areas: a directory and which of its children are private (None: every
# child, so that a new report's noise or a new source's quarantine is private without
# being listed anywhere).
_PRIVATE_CHILDREN: dict[str, tuple[str, ...] | None] = {
    "work": ("clean", "bounded", "tmp"),
    "quarantine": None,
    "noise": None,
}


def private_anchor(path: Path) -> int | None:
    """Index in ``path.parts`` of the private area (``work``, ``quarantine``, ``noise``)
    that holds ``path``, or None for a public path. The last such area wins, so a data
    root that itself sits under a directory called ``work`` is read right."""
    parts = path.parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] not in _PRIVATE_CHILDREN:
            continue
        children = _PRIVATE_CHILDREN[parts[i]]
        if children is None or parts[i + 1] in children:
            return i
    return None


def is_private(path: Path) -> bool:
    return private_anchor(Path(os.path.abspath(path))) is not None


@contextmanager
def exclusive_lock(lock: Path) -> Iterator[None]:
    """An exclusive flock on ``lock`` (created, with its directory, if missing), held by
    this process until the block ends (or the process dies: the kernel drops it)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def make_dirs(directory: Path) -> None:
    """``mkdir -p`` that creates a private area's directories 0700 (whatever the umask)
    and fixes the mode of the area's existing directories on the way."""
    directory = Path(os.path.abspath(directory))
    anchor = private_anchor(directory / "x")
    directory.mkdir(parents=True, exist_ok=True)
    if anchor is None:
        return
    parts = directory.parts
    for end in range(anchor + 1, len(parts) + 1):
        d = Path(*parts[:end])
        if d.stat().st_mode & 0o777 != PRIVATE_DIR_MODE:
            os.chmod(d, PRIVATE_DIR_MODE)


def file_mode(target: Path) -> int:
    return PRIVATE_FILE_MODE if is_private(target) else PUBLIC_FILE_MODE


def _tmp_beside(target: Path, suffix: str) -> str:
    make_dirs(target.parent)
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
        os.chmod(tmp, file_mode(target))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_parquet_atomic(table: pa.Table, target: Path) -> None:
    tmp = _tmp_beside(target, ".parquet")
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, file_mode(target))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


PENDING_SUFFIX = ".pending"


def write_parquet_beside(table: pa.Table, target: Path) -> Path:
    """``table`` in a new temporary file beside ``target`` (``.tmp-*``, never read as a
    version of it), with the mode of ``target``'s area, flushed to disk; the caller names
    it (:func:`pending_path`) or removes it."""
    tmp = Path(_tmp_beside(target, ".parquet"))
    try:
        pq.write_table(table, tmp)
        os.chmod(tmp, file_mode(target))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def pending_path(target: Path, tag: str) -> Path:
    """A private name beside ``target`` for a version being recorded before it is moved
    into place: ``tag`` (a MAC of the version under the ledger key,
    :func:`dp_ops.steps.pending.pending_tag`), then this writer's own suffix. Only a
    writer holding the key can name a file that :func:`read_as_recorded` will adopt."""
    return target.with_name(f".{target.name}.{tag}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
                            f"{PENDING_SUFFIX}")


def pending_paths(target: Path, tag: str) -> list[Path]:
    """The pending files of ``target`` named with ``tag`` (of any writer)."""
    return sorted(target.parent.glob(f".{target.name}.{tag}.*{PENDING_SUFFIX}"))


def adopt(pending: Path, target: Path, *, replace: bool = True) -> None:
    """Move a pending file that holds the recorded version into place, with the mode of
    ``target``'s area whatever it was given meanwhile (``replace=False``: a hard link,
    only if ``target`` does not exist; FileExistsError otherwise)."""
    os.chmod(pending, file_mode(target))
    if replace:
        os.replace(pending, target)
    else:
        os.link(pending, target)


def read_as_recorded(path: Path, recorded: Callable[[bytes], bool],
                     tag: Callable[[], str]) -> bytes | None:
    """The bytes of ``path`` if ``recorded(bytes)`` holds (they are the version a ledger
    recorded), else those of a pending file of it named with ``tag()`` (the MAC of the
    recorded version: a writer between its record and its move, or crashed there) that
    holds them, moved into place first (:func:`adopt`); else the bytes found at ``path``
    (the caller refuses them), or None if there are none. A pending file of another name
    (planted: nobody without the ledger key can name one) is never read, moved or
    removed: it may be another writer's, not recorded yet. Each file is read once: the
    caller parses the bytes it checked."""
    data = _read_or_none(path)
    if data is not None and recorded(data):
        return data
    if not any(path.parent.glob(f".{path.name}.*{PENDING_SUFFIX}")):
        return data  # nothing pending (and no key needed to say so)
    for pending in pending_paths(path, tag()):
        candidate = _read_or_none(pending)
        if candidate is not None and recorded(candidate):
            try:
                adopt(pending, path)
            except FileNotFoundError:
                pass  # its writer moved it meanwhile: the same bytes
            return candidate
    return data


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def write_bytes_atomic(target: Path, data: bytes) -> None:
    tmp = _tmp_beside(target, ".part")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, file_mode(target))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def json_bytes(payload: object) -> bytes:
    """What :func:`write_json_atomic` writes (indented, sorted keys, a final newline)."""
    return (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode()


def write_json_atomic(target: Path, payload: object) -> None:
    tmp = _tmp_beside(target, ".json")
    try:
        with open(tmp, "w") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.chmod(tmp, file_mode(target))  # mkstemp makes 0600; public files are for readers
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
        os.chmod(tmp, file_mode(target))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        try:
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
    finally:
        os.unlink(tmp)


def read_parquet_files(paths: list[Path]) -> pa.Table:
    """The rows of ``paths`` (Parquet files of one schema, e.g. a release's per-day
    files) in one Arrow table, file after file, in the schema of the last file.

    One DuckDB scan of the list is much cheaper than reading many small files one by one
    with pyarrow.
    Files whose columns do not cast to the last file's types are read one by one and
    unified by pyarrow's permissive promotion."""
    import duckdb  # here: a process on the Spark engine loads DuckDB only for this

    if not paths:
        raise ValueError("no Parquet files to read")
    schema = pq.read_schema(paths[-1])
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        con.execute("SET preserve_insertion_order = true")  # file order, row order
        # hive_partitioning off: a path's "date=..." must not become a column
        table = con.sql("SELECT * FROM read_parquet($paths, hive_partitioning=false, "
                        "union_by_name=true)",
                        params={"paths": [str(p) for p in paths]}).to_arrow_table()
        return table.select(schema.names).cast(schema)
    except (duckdb.Error, pa.ArrowInvalid, pa.ArrowNotImplementedError, KeyError):
        return pa.concat_tables([pq.read_table(p) for p in paths],
                                promote_options="permissive")
    finally:
        con.close()


@contextmanager
def pinned(path: Path) -> Iterator[Path]:
    """A private hard link to ``path`` for the block: the file as it is now, even if
    another run replaces ``path`` (by rename) meanwhile. A query that opens a file more
    than once (DuckDB opens a Parquet file to bind the query and again to scan it) must
    not see two versions: two runs of one day started together failed with DuckDB's
    "don't know what type" when one's ingest renamed a new clean file over the one the
    other's bounding was reading. On a file system without hard links, ``path`` itself.
    The link is ``<stem>.pinned-<hex><suffix>`` beside the file: not hidden (Spark skips
    files whose name starts with "." or "_", even when named explicitly)."""
    link = path.with_name(f"{path.stem}.pinned-{uuid.uuid4().hex}{path.suffix}")
    try:
        os.link(path, link)
    except OSError:
        if not path.is_file():
            raise
        linked = False  # no hard links here: read the path as it is
    else:
        linked = True
    if not linked:
        yield path
        return
    try:
        yield link
    finally:
        link.unlink(missing_ok=True)
