"""Load the SQL that the engines run: package data of ``dp_ops`` (``dp_ops/sql``, the
repository's ``include/sql`` through a symlink, copied into the wheel), so an installed
package needs no checkout. ``DP_SQL_DIR`` overrides it (to try edited SQL).

Values always go in as bind parameters (``$name`` in DuckDB). Jinja renders identifiers
only (table names), never values.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache, partial
from importlib.resources import files
from pathlib import Path
from typing import Any

import jinja2


def sql_dir() -> Path:
    """``DP_SQL_DIR`` if set, else the package's ``sql`` directory."""
    override = os.environ.get("DP_SQL_DIR")
    return Path(override) if override else Path(str(files("dp_ops") / "sql"))


@lru_cache(maxsize=64)
def _template(path: str) -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True)
    return env.from_string(Path(path).read_text())


def render_sql(name: str, **identifiers: Any) -> str:
    """The SQL of ``<name>.sql`` (:func:`sql_dir`; ``mobility/cell_sums`` names a file of a
    report's or a source's own directory) with Jinja identifiers filled in."""
    return render_sql_file(sql_dir() / f"{name}.sql", **identifiers)


def render_sql_file(path: Path, **identifiers: Any) -> str:
    """The SQL of the file ``path`` with Jinja identifiers filled in: how a report package
    of its own ships its queries (``files(package) / "sql" / ...``)."""
    if not path.is_file():
        raise FileNotFoundError(f"SQL file {path} not found")
    return _template(str(path)).render(**identifiers)


def package_sql(package: str, name: str) -> Callable[..., str]:
    """The query a package ships as ``<package>/sql/<name>.sql``, as a function of its Jinja
    identifiers (how a plug-in's source or report declares its SQL)."""
    return partial(render_sql_file, Path(str(files(package) / "sql" / f"{name}.sql")))


def prepare_templates() -> None:
    """Compile every SQL template of :func:`sql_dir` once. A process that forks task
    processes calls this first (``airflow_local_settings.py``), so that no task compiles
    them again."""
    for path in sorted(sql_dir().rglob("*.sql")):
        _template(str(path))
