"""Which characters quarantine an id (docs/design.md, Input contract): every Unicode
control (C0, DEL, C1), format character (zero-width, bidi overrides, BOM, tags), line or
paragraph separator and space other than the ASCII one, and nothing else. The judging
queries test ids with the class of :func:`dp_ops.engine.base.ingest_dialect`; here it is
checked code point by code point against Python's Unicode tables and then as DuckDB (RE2)
and Spark (Java) read it, which must agree to the character."""

from __future__ import annotations

import os
import shutil
import unicodedata

import duckdb
import pandas as pd
import pytest

from dp_ops.engine.base import ID_FORBIDDEN_RANGES, ingest_dialect

FORBIDDEN_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Zs"}
SURROGATES = range(0xD800, 0xE000)


def _listed(cp: int) -> bool:
    return any(first <= cp <= last for first, last in ID_FORBIDDEN_RANGES)


def _forbidden_by_python(cp: int) -> bool:
    return chr(cp) != " " and unicodedata.category(chr(cp)) in FORBIDDEN_CATEGORIES


def _listed_code_points() -> set[int]:
    return {cp for first, last in ID_FORBIDDEN_RANGES for cp in range(first, last + 1)}


def test_the_ranges_are_the_forbidden_categories() -> None:
    """Every character Python's tables put in a forbidden category is listed; a listed
    one Python does not is unassigned in its (older) Unicode version."""
    missing = [hex(cp) for cp in range(0x110000) if _forbidden_by_python(cp)
               and not _listed(cp)]
    assert missing == []
    extra = [hex(cp) for cp in _listed_code_points() if not _forbidden_by_python(cp)
             and unicodedata.category(chr(cp)) != "Cn"]
    assert extra == []
    for ordinary in "José Ünal 東京 café-1 user_42 - . @ ~":
        assert not _listed(ord(ordinary)), ordinary


def test_duckdb_reads_the_class_as_listed() -> None:
    test = ingest_dialect("duckdb")["has_control"]("'id' || chr(CAST(cp AS INTEGER)) || 'x'")
    matched = {int(cp) for (cp,) in duckdb.sql(
        "SELECT cp FROM (SELECT range AS cp FROM range(0, 1114112) "
        f"WHERE range NOT BETWEEN {SURROGATES.start} AND {SURROGATES.stop - 1}) "
        f"WHERE {test}").fetchall()}
    assert matched == _listed_code_points()


@pytest.mark.slow
@pytest.mark.integration
def test_spark_reads_the_class_as_duckdb_does() -> None:
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        pytest.skip("Java not found: the Spark engine needs Java 17+")
    from dp_ops.engine.spark import spark_session
    from dp_ops.settings import ExecutionSettings

    spark = spark_session(ExecutionSettings(engine="spark", spark_master="local[2]"))
    ids = pd.DataFrame({"cp": [cp for cp in range(0x110000) if cp not in SURROGATES]})
    ids["id"] = ["id" + chr(cp) + "x" for cp in ids["cp"]]
    spark.createDataFrame(ids).createOrReplaceTempView("ids")
    has_control = ingest_dialect("spark")["has_control"]
    rows = spark.sql(f"SELECT cp FROM ids WHERE {has_control('id')}").collect()
    assert {int(r.cp) for r in rows} == _listed_code_points()
