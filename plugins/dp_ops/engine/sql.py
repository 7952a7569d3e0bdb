"""Load the SQL that the engines run from ``include/sql`` (STYLE principle 8).

Values always go in as bind parameters (``$name`` in DuckDB). Jinja renders identifiers
only (table names), never values.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

_REPO_SQL = Path(__file__).resolve().parents[3] / "include" / "sql"


def sql_dir() -> Path:
    """``DP_SQL_DIR`` if set, else the repository's ``include/sql``."""
    return Path(os.environ.get("DP_SQL_DIR", _REPO_SQL))


@lru_cache(maxsize=64)
def _template(path: str) -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=True)
    return env.from_string(Path(path).read_text())


def render_sql(name: str, **identifiers: Any) -> str:
    """The SQL of ``include/sql/<name>.sql`` with Jinja identifiers filled in."""
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"SQL file {path} not found")
    return _template(str(path)).render(**identifiers)
