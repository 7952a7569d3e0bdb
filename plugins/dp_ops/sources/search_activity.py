"""The search activity: one row per search of a user, matched to at most one symptom of
the public symptom list, the symptoms dataset's input
(``raw/search_activity/date=D/*.parquet``; docs/design.md, Input contract).

Its columns: ``user_id``, ``region_id`` (a finest region) and ``symptom`` (a name of
``reference/symptoms.txt``, or null for a search that matches none). Repeated identical
rows are kept: without a timestamp a second identical row is a second search of the same
thing, which is normal, and bounding counts a user once per symptom anyway.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from dp_ops.engine.sql import render_sql
from dp_ops.errors import IngestError
from dp_ops.layout import DataRoot
from dp_ops.sources.spec import FINEST_REGIONS, Lookup, SourceSchema, SourceSpec

# The public symptom list under reference/: one name a line, in output column order.
SYMPTOM_LIST = "symptoms.txt"


def symptom_list(root: DataRoot) -> Path:
    return root.reference_file(SYMPTOM_LIST)


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


NAME = "search_activity"
SOURCE = SourceSpec(
    name=NAME,
    label="search activity",
    schema=SourceSchema(string_columns=("user_id", "region_id", "symptom")),
    judging_sql=partial(render_sql, "search_activity/ingest"),
    lookups=(FINEST_REGIONS,
             Lookup("symptom_names", "symptom", lambda root: read_symptoms(symptom_list(root)))),
    reference_files=(SYMPTOM_LIST,),
)
