"""Write the bad-input corpus of ``tests/data/bad/`` (docs/design.md, Input contract; issue 6).

Usage (from the repository root)::

    .venv/bin/python tests/data/bad/make_corpus.py [OUT_DIR]

OUT_DIR defaults to this file's directory. The output is deterministic: a tiny valid data
root under ``base/`` (its own four-municipality region table "Testland", ZZ, a six-name
symptom list, one day of stays and of searches on ``DAY``), and one directory per case,
``<source>/<case id>/``, holding the files the case lays over the base root, plus
``cases.json`` (each case's defect and documented outcome) and ``README.md`` (the same as
a table). ``CASES`` below is the single source of truth; ``tests/unit/
test_bad_input_corpus.py`` runs every case through the real ingestion and bounding.

Where a case's files go in the data root: ``location_history`` and ``search_activity``
cases under ``raw/<source>/`` (beside the base partition, or instead of the whole tree
when ``replace`` is set), ``regions`` and ``symptoms`` cases under ``reference/``.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import TypeAlias

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from dp_demo.geography import fake_place_id

from dp_ops.regions import REGION_COLUMNS, write_regions

HERE = Path(__file__).resolve().parent
DAY = date(2020, 3, 2)
PARTITION = f"date={DAY.isoformat()}"
LOCATION = "location_history"
SEARCH = "search_activity"
SOURCES = (LOCATION, SEARCH, "regions", "symptoms")
# where a case's files go, relative to the data root
TARGETS = {LOCATION: "raw/location_history", SEARCH: "raw/search_activity",
           "regions": "reference", "symptoms": "reference"}
# the step each source's cases run (regions cases: the first step that reads the table)
STEPS = {LOCATION: "ingest_location_history", SEARCH: "ingest_search_activity",
         "regions": "ingest_location_history", "symptoms": "ingest_search_activity"}

LOCATION_SCHEMA = pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
                             ("place_id", pa.string()), ("place_category", pa.string()),
                             ("dwell_hours", pa.float64())])
SEARCH_SCHEMA = pa.schema([("user_id", pa.string()), ("region_id", pa.string()),
                           ("symptom", pa.string())])

SYMPTOMS = ("Fever", "Cough", "Headache", "Sore throat", "Fatigue", "Anosmia")
FINEST = ("ZZ-01-001", "ZZ-01-002", "ZZ-02-001", "ZZ-02-002")

# rows as written: deliberately loose, since bad rows carry values of the wrong type
Stay = tuple[object, ...]
Search = tuple[object, ...]


# -- the valid base ------------------------------------------------------------------

def base_regions() -> pd.DataFrame:
    """Testland (ZZ): two counties of two municipalities each; areas add up."""
    def row(region_id: str, parent_id: str, level: int, area: float,
            county: str = "", municipality: str = "") -> dict[str, object]:
        out: dict[str, object] = {c: "" for c in REGION_COLUMNS}
        out.update(region_id=region_id, parent_id=parent_id, level=level,
                   country_region_code="ZZ", country_region="Testland",
                   sub_region_1=county, sub_region_2=municipality,
                   place_id=fake_place_id(region_id), open_covid_region_code=region_id,
                   sub_region_1_code=region_id[:5] if level else "",
                   sub_region_2_code=region_id if level == 2 else "", area_km2=area)
        return out

    rows = [
        row("ZZ", "", 0, 1000.0),
        row("ZZ-01", "ZZ", 1, 600.0, "North County"),
        row("ZZ-01-001", "ZZ-01", 2, 250.0, "North County", "Northtown"),
        row("ZZ-01-002", "ZZ-01", 2, 350.0, "North County", "North Fields"),
        row("ZZ-02", "ZZ", 1, 400.0, "South County"),
        row("ZZ-02-001", "ZZ-02", 2, 150.0, "South County", "Southport"),
        row("ZZ-02-002", "ZZ-02", 2, 250.0, "South County", "South Moor"),
    ]
    return pd.DataFrame(rows, columns=list(REGION_COLUMNS))


BASE_STAYS: list[Stay] = [
    ("user-0001", "ZZ-01-001", "home-0001", "residential", 13.5),
    ("user-0001", "ZZ-01-002", "work-0001", "workplace", 8.0),
    ("user-0001", "ZZ-01-001", "shop-0001", "groceries", 0.5),
    ("user-0002", "ZZ-01-002", "home-0002", "residential", 15.0),
    ("user-0002", "ZZ-01-002", "park-0001", "parks", 1.25),
    ("user-0003", "ZZ-02-001", "home-0003", "residential", 12.0),
    ("user-0003", "ZZ-02-002", "work-0002", "workplace", 9.0),
    ("user-0003", "ZZ-02-001", "cafe-0001", "eateries", 0.75),
    ("user-0004", "ZZ-02-002", "home-0004", "residential", 14.0),
    ("user-0004", "ZZ-02-002", "station-0001", "transit", 0.25),
]
BASE_SEARCHES: list[Search] = [
    ("user-0001", "ZZ-01-001", None),
    ("user-0001", "ZZ-01-001", "Fever"),
    ("user-0001", "ZZ-01-001", "Cough"),
    ("user-0002", "ZZ-01-002", None),
    ("user-0003", "ZZ-02-001", "Headache"),
    ("user-0004", "ZZ-02-002", None),
    ("user-0004", "ZZ-02-002", "Fatigue"),
]


def stays_table(rows: list[Stay], schema: pa.Schema = LOCATION_SCHEMA,
                dates: list[object] | None = None,
                date_type: pa.DataType = pa.date32()) -> pa.Table:
    table = pa.table({f.name: [r[i] for r in rows] for i, f in enumerate(schema)},
                     schema=schema)
    if dates is not None:
        table = table.append_column("date", pa.array(dates, date_type))
    return table


def searches_table(rows: list[Search], schema: pa.Schema = SEARCH_SCHEMA,
                   dates: list[object] | None = None) -> pa.Table:
    return stays_table(rows, schema, dates)


def good_stays(case: str) -> list[Stay]:
    """Two valid stays of users new to the base, so each case file has clean rows too."""
    return [(f"user-{case}-a", "ZZ-01-001", "market-0001", "retail", 1.0),
            (f"user-{case}-b", "ZZ-02-001", "museum-0001", "recreation", 2.0)]


def good_searches(case: str) -> list[Search]:
    return [(f"user-{case}-a", "ZZ-01-001", "Cough"),
            (f"user-{case}-b", "ZZ-02-002", None)]


# -- cases ---------------------------------------------------------------------------

FileContent: TypeAlias = pa.Table | bytes | str | Callable[[], bytes]


@dataclass(frozen=True)
class Case:
    """One defect and its documented outcome.

    ``outcome``: ``quarantine`` (the rows ``quarantined`` = [(row, reason)], 0-based row
    numbers in ``file``, go to quarantine; every other row is clean), ``fail`` (the step
    raises ``error`` with every string of ``message`` in its message: always the file and
    the problem), ``accept`` (every row is clean; not a defect, documented for clarity) or
    ``bounded`` (every row is clean and contribution bounding caps ``user``).
    """

    id: str
    source: str
    kind: str
    defect: str
    outcome: str
    files: dict[str, FileContent]
    quarantined: tuple[tuple[int, str], ...] = ()
    error: str = ""
    message: tuple[str, ...] = ()
    user: str = ""
    replace: bool = False
    names: str = ""

    @property
    def named_path(self) -> str:
        """What a failure must name, relative to the data root: the case's one file, or
        ``names`` (a partition) where set."""
        if self.names:
            return self.names
        return f"{TARGETS[self.source]}/{self._only_file()}"

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "id": self.id, "source": self.source, "kind": self.kind, "defect": self.defect,
            "step": STEPS[self.source], "target": TARGETS[self.source],
            "replace": self.replace, "files": sorted(self.files), "outcome": self.outcome,
        }
        if self.outcome == "quarantine":
            out["file"] = self._only_file()
            out["quarantined"] = [{"row": r, "reason": why} for r, why in self.quarantined]
        if self.outcome == "fail":
            out["error"] = self.error
            out["names"] = self.named_path
            out["message_contains"] = list(self.message)
        if self.outcome == "bounded":
            out["user"] = self.user
        return out

    def _only_file(self) -> str:
        (name,) = self.files
        return name


def _f(case: str, ext: str = "parquet") -> str:
    """The path of a case's file inside its partition."""
    return f"{PARTITION}/{case}.{ext}"


def _with_rows(case: str, good: list[Stay], bad: list[tuple[Stay, str]],
               at: int = 1) -> tuple[dict[str, FileContent], tuple[tuple[int, str], ...]]:
    """A file of ``good`` rows with the ``bad`` rows inserted at position ``at``."""
    rows = [*good[:at], *(r for r, _ in bad), *good[at:]]
    quarantined = tuple((at + i, why) for i, (_, why) in enumerate(bad))
    return {_f(case): stays_table(rows)}, quarantined


def _searches_with_rows(case: str, bad: list[tuple[Search, str]]
                        ) -> tuple[dict[str, FileContent], tuple[tuple[int, str], ...]]:
    good = good_searches(case)
    rows = [good[0], *(r for r, _ in bad), good[1]]
    return ({_f(case): searches_table(rows)},
            tuple((1 + i, why) for i, (_, why) in enumerate(bad)))


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _truncated() -> bytes:
    data = _parquet_bytes(stays_table(good_stays("truncated") * 20))
    return data[: len(data) // 2]


def _corrupt_data_page() -> bytes:
    """A file whose footer is intact but whose first data pages are overwritten."""
    rows: list[Stay] = [(f"user-page-{i:03d}", FINEST[i % 4], f"place-{i:03d}", "parks",
                         0.5 + i / 100) for i in range(200)]
    data = bytearray(_parquet_bytes(stays_table(rows)))
    for i in range(8, len(data) // 2):
        data[i] = 0xAB
    return bytes(data)


def _heavy_stays() -> pa.Table:
    categories = ("retail", "recreation", "eateries", "groceries", "pharmacies", "transit",
                  "parks", "residential", "workplace")
    rows: list[Stay] = [("user-heavy", FINEST[k % 4], f"hp{k:05d}", categories[k % 9], 0.25)
                        for k in range(10_000)]
    return stays_table(rows)


def _heavy_searches() -> pa.Table:
    names: tuple[str | None, ...] = (*SYMPTOMS, None)
    rows: list[Search] = [("user-heavy-searcher", FINEST[k % 4], names[k % 7])
                          for k in range(10_000)]
    return searches_table(rows)


def location_cases() -> list[Case]:
    S = LOCATION
    cases: list[Case] = []

    def rows_case(case: str, kind: str, defect: str, bad: list[tuple[Stay, str]],
                  good: list[Stay] | None = None) -> None:
        files, quarantined = _with_rows(case, good or good_stays(case), bad)
        cases.append(Case(case, S, kind, defect, "quarantine", files, quarantined))

    def fail_case(case: str, kind: str, defect: str, files: dict[str, FileContent],
                  *message: str, replace: bool = False, partition: bool = False) -> None:
        cases.append(Case(case, S, kind, defect, "fail", files, error="IngestError",
                          message=message, replace=replace,
                          names=f"{TARGETS[S]}/{PARTITION}" if partition else ""))

    u = "user-bad"
    unknown = "unknown or non-finest region_id"
    rows_case("unknown_region", "unknown region",
              "region_id not in the region table (another country, a missing county, "
              "wrong case, padded with a space)",
              [((f"{u}-1", "XX-99-999", "p", "parks", 1.0), unknown),
               ((f"{u}-2", "ZZ-03-001", "p", "parks", 1.0), unknown),
               ((f"{u}-3", "zz-01-001", "p", "parks", 1.0), unknown),
               ((f"{u}-4", " ZZ-01-001", "p", "parks", 1.0), unknown)])
    rows_case("non_finest_region", "non-finest region",
              "a stay in a county or the country instead of a municipality",
              [((f"{u}-1", "ZZ-01", "p", "parks", 1.0), unknown),
               ((f"{u}-2", "ZZ", "p", "parks", 1.0), unknown)])
    rows_case("null_region", "null or empty region",
              "region_id null, empty or blank",
              [((f"{u}-1", None, "p", "parks", 1.0), "null or empty region_id"),
               ((f"{u}-2", "", "p", "parks", 1.0), "null or empty region_id"),
               ((f"{u}-3", "  ", "p", "parks", 1.0), "null or empty region_id")])
    rows_case("unknown_category", "unknown category",
              "place_category not one of the nine (an unknown word, wrong case, blank)",
              [((f"{u}-1", "ZZ-01-001", "p", "casino", 1.0), "unknown place_category"),
               ((f"{u}-2", "ZZ-01-001", "p", "Parks", 1.0), "unknown place_category"),
               ((f"{u}-3", "ZZ-01-001", "p", "", 1.0), "unknown place_category")])
    rows_case("null_category", "null category", "place_category null",
              [((f"{u}-1", "ZZ-01-001", "p", None, 1.0), "null place_category")])
    rows_case("negative_dwell", "negative dwell", "dwell_hours below zero",
              [((f"{u}-1", "ZZ-01-001", "p", "parks", -1.5), "negative dwell_hours"),
               ((f"{u}-2", "ZZ-01-001", "p", "parks", -0.001), "negative dwell_hours")])
    rows_case("dwell_over_24", "over-24h dwell",
              "dwell_hours above 24 (24.0 exactly, a good row here, is valid)",
              [((f"{u}-1", "ZZ-01-001", "p", "parks", 24.5), "dwell_hours over 24"),
               ((f"{u}-2", "ZZ-01-001", "p", "parks", 1000.0), "dwell_hours over 24")],
              good=[*good_stays("dwell_over_24"),
                    ("user-dwell_over_24-c", "ZZ-02-002", "home-9", "residential", 24.0)])
    rows_case("nonfinite_dwell", "NaN or infinite dwell", "dwell_hours NaN, +inf or -inf",
              [((f"{u}-1", "ZZ-01-001", "p", "parks", float("nan")),
                "dwell_hours is not finite"),
               ((f"{u}-2", "ZZ-01-001", "p", "parks", float("inf")),
                "dwell_hours is not finite"),
               ((f"{u}-3", "ZZ-01-001", "p", "parks", float("-inf")),
                "dwell_hours is not finite")])
    rows_case("null_dwell", "null dwell", "dwell_hours null",
              [((f"{u}-1", "ZZ-01-001", "p", "parks", None), "null dwell_hours")])
    rows_case("null_user_id", "null user id", "user_id null",
              [((None, "ZZ-01-001", "p", "parks", 1.0), "null or empty user_id")])
    rows_case("empty_user_id", "empty user id", "user_id empty or blank",
              [(("", "ZZ-01-001", "p", "parks", 1.0), "null or empty user_id"),
               (("   ", "ZZ-01-001", "p", "parks", 1.0), "null or empty user_id")])
    rows_case("null_place_id", "null or empty place id", "place_id null or empty",
              [((f"{u}-1", "ZZ-01-001", None, "parks", 1.0), "null or empty place_id"),
               ((f"{u}-2", "ZZ-01-001", "", "parks", 1.0), "null or empty place_id")])
    dup: Stay = ("user-duplicate_rows-c", "ZZ-01-002", "gym-0001", "recreation", 1.5)
    rows_case("duplicate_rows", "duplicate rows",
              "one stay written three times in a file: the first copy is kept",
              [(dup, "duplicate row"), (dup, "duplicate row")],
              good=[dup, *good_stays("duplicate_rows")])
    cases.append(Case(
        "duplicate_across_files", S, "duplicate rows across files",
        "a stay of the base file written again in a second file: the copy in the file "
        "later in path order is quarantined",
        "quarantine", {_f("duplicate_across_files"): stays_table(
            [good_stays("duplicate_across_files")[0], BASE_STAYS[4]])},
        ((1, "duplicate row"),)))
    ctl = "control characters in user_id"
    rows_case("control_characters", "control characters in ids",
              "NUL, newline, ESC and DEL in user_id; BEL and TAB in place_id",
              [(("user\x00-1", "ZZ-01-001", "p", "parks", 1.0), ctl),
               (("user-bad-2\n", "ZZ-01-001", "p", "parks", 1.0), ctl),
               (("user\x1b[31m-3", "ZZ-01-001", "p", "parks", 1.0), ctl),
               (("user-bad-4\x7f", "ZZ-01-001", "p", "parks", 1.0), ctl),
               ((f"{u}-5", "ZZ-01-001", "place\x07", "parks", 1.0),
                "control characters in place_id"),
               ((f"{u}-6", "ZZ-01-001", "place\tone", "parks", 1.0),
                "control characters in place_id")])
    rows_case("unicode_controls", "Unicode control, format and separator characters in ids",
              "C1 controls (NEL, CSI), line and paragraph separators in user_id; a zero-width "
              "space, a right-to-left override, a no-break space, a BOM and a tag character "
              "in place_id (ids with letters beyond ASCII, good rows here, are valid)",
              [(("user-bad-1\u0085", "ZZ-01-001", "p", "parks", 1.0), ctl),
               (("user\u009b31m-2", "ZZ-01-001", "p", "parks", 1.0), ctl),
               (("user-bad\u2028-3", "ZZ-01-001", "p", "parks", 1.0), ctl),
               (("user-bad-4\u2029", "ZZ-01-001", "p", "parks", 1.0), ctl),
               ((f"{u}-5", "ZZ-01-001", "place\u200bone", "parks", 1.0),
                "control characters in place_id"),
               ((f"{u}-6", "ZZ-01-001", "place\u202eeno", "parks", 1.0),
                "control characters in place_id"),
               ((f"{u}-7", "ZZ-01-001", "place\u00a0one", "parks", 1.0),
                "control characters in place_id"),
               ((f"{u}-8", "ZZ-01-001", "\ufeffplace", "parks", 1.0),
                "control characters in place_id"),
               ((f"{u}-9", "ZZ-01-001", "place\U000e0041", "parks", 1.0),
                "control characters in place_id")],
              good=[*good_stays("unicode_controls"),
                    ("user-José-Ünal", "ZZ-01-001", "café-東京", "parks", 1.0)])
    rows_case("very_long_ids", "very long ids",
              "user_id of 257 characters, place_id of 100,000, region_id of 10,000 (a "
              "user_id of exactly 256, a good row here, is valid)",
              [(("user-" + "x" * 252, "ZZ-01-001", "p", "parks", 1.0),
                "user_id longer than the limit"),
               ((f"{u}-2", "ZZ-01-001", "p" * 100_000, "parks", 1.0),
                "place_id longer than the limit"),
               ((f"{u}-3", "Z" * 10_000, "p", "parks", 1.0), unknown)],
              good=[*good_stays("very_long_ids"),
                    ("user-" + "y" * 251, "ZZ-01-001", "p", "parks", 1.0)])
    outside = "date outside the partition"
    good = good_stays("date_outside_partition")
    cases.append(Case(
        "date_outside_partition", S, "rows dated outside their partition",
        "a date column: rows of the day before, the day after, a year earlier and a null "
        "date, in a file beside the base file (which has no date column: its rows take "
        "the partition's day)",
        "quarantine", {_f("date_outside_partition"): stays_table(
            [good[0], *[(f"{u}-{i}", "ZZ-01-001", "p", "parks", 1.0) for i in range(4)],
             good[1]],
            dates=[DAY, DAY - timedelta(days=1), DAY + timedelta(days=1),
                   date(2019, 3, 2), None, DAY])},
        tuple((i, outside) for i in range(1, 5))))
    cases.append(Case(
        "unparsable_date", S, "unparsable date",
        "the date column as text: ISO dates are read, other spellings are not",
        "quarantine", {_f("unparsable_date"): stays_table(
            [good[0], *[(f"{u}-{i}", "ZZ-01-001", "p", "parks", 1.0) for i in range(3)],
             good[1]],
            dates=[DAY.isoformat(), "2 March 2020", "03/02/2020", "", "2020-3-2"],
            date_type=pa.string())},
        tuple((i, outside) for i in range(1, 4))))
    same: Stay = ("user-same_stay_other_day-c", "ZZ-02-001", "pool-0001", "recreation", 2.0)
    cases.append(Case(
        "same_stay_other_day", S, "valid row identical to a quarantined row",
        "the same stay dated the next day and the partition's day: only the first is "
        "quarantined (the second is not a duplicate of a rejected row)",
        "quarantine", {_f("same_stay_other_day"): stays_table(
            [same, same], dates=[DAY + timedelta(days=1), DAY])},
        ((0, outside),)))
    cases.append(Case(
        "empty_parquet", S, "empty Parquet file (0 rows)",
        "a valid Parquet file with the right columns and no rows: valid, adds nothing",
        "accept", {_f("empty_parquet"): stays_table([])}))
    cases.append(Case(
        "heavy_user", S, "user with 10,000 stays",
        "one user with 10,000 distinct stays (all categories, all four municipalities, "
        "2,500 hours in all): valid rows, so accepted; bounding caps the user's "
        "influence on every aggregate",
        "bounded", {_f("heavy_user"): _heavy_stays()}, user="user-heavy"))

    # -- file-level failures
    fail_case("string_dwell", "wrong type: string dwell",
              "dwell_hours stored as text ('2.5')",
              {_f("string_dwell"): stays_table(
                  [("user-bad-1", "ZZ-01-001", "p", "parks", "2.5")],
                  pa.schema([*list(LOCATION_SCHEMA)[:4], ("dwell_hours", pa.string())]))},
              "string_dwell.parquet", "column 'dwell_hours' has type string, expected a number")
    fail_case("int_user_id", "wrong type: integer user id",
              "user_id stored as int64",
              {_f("int_user_id"): stays_table(
                  [(918273645001, "ZZ-01-001", "p", "parks", 1.0)],
                  pa.schema([("user_id", pa.int64()), *list(LOCATION_SCHEMA)[1:]]))},
              "int_user_id.parquet", "column 'user_id' has type int64, expected string")
    fail_case("binary_user_id", "wrong type: binary (non-UTF-8) user id",
              "user_id stored as bytes that are not UTF-8",
              {_f("binary_user_id"): stays_table(
                  [(b"user-\xff\xfe", "ZZ-01-001", "p", "parks", 1.0)],
                  pa.schema([("user_id", pa.binary()), *list(LOCATION_SCHEMA)[1:]]))},
              "binary_user_id.parquet", "column 'user_id' has type binary, expected string")
    fail_case("missing_column", "missing column",
              "no place_id column",
              {_f("missing_column"): stays_table(
                  [("user-bad-1", "ZZ-01-001", "parks", 1.0)],
                  pa.schema([f for f in LOCATION_SCHEMA if f.name != "place_id"]))},
              "missing_column.parquet", "missing required column(s) ['place_id']")
    fail_case("extra_column", "extra column",
              "an extra email column (data that must not enter)",
              {_f("extra_column"): stays_table(
                  [("user-bad-1", "ZZ-01-001", "p", "parks", 1.0,
                    "someone@example.com")],
                  pa.schema([*LOCATION_SCHEMA, ("email", pa.string())]))},
              "extra_column.parquet", "unexpected column(s) ['email']")
    repeated = stays_table(good_stays("repeated_column")).append_column(
        "dwell_hours", pa.array([3.0, 4.0]))
    fail_case("repeated_column", "repeated column",
              "dwell_hours twice in one file", {_f("repeated_column"): repeated},
              "repeated_column.parquet", "repeated column(s) ['dwell_hours']")
    fail_case("date_wrong_type", "wrong type: integer date",
              "the date column as int64 (20200302)",
              {_f("date_wrong_type"): stays_table(good_stays("date_wrong_type"),
                                                  dates=[20200302, 20200302],
                                                  date_type=pa.int64())},
              "date_wrong_type.parquet", "column 'date' has type int64, expected a date")
    fail_case("zero_byte_file", "zero-byte file",
              "a .parquet file of zero bytes", {_f("zero_byte_file"): b""},
              "zero_byte_file.parquet", "cannot read Parquet file", "0 bytes")
    fail_case("truncated_parquet", "truncated Parquet",
              "the first half of a valid file (an interrupted copy)",
              {_f("truncated_parquet"): _truncated},
              "truncated_parquet.parquet", "cannot read Parquet file")
    fail_case("not_parquet", "corrupt file (not Parquet)",
              "a CSV file named .parquet",
              {_f("not_parquet"): "user_id,region_id,place_id,place_category,dwell_hours\n"
                                  "user-bad-1,ZZ-01-001,p,parks,1.0\n"},
              "not_parquet.parquet", "cannot read Parquet file")
    fail_case("corrupt_data_page", "corrupt data page",
              "a valid footer over overwritten data pages",
              {_f("corrupt_data_page"): _corrupt_data_page},
              "corrupt_data_page.parquet", "cannot read Parquet file")
    fail_case("missing_partition", "missing partition",
              "the days before and after exist, the run's day does not",
              {f"date={(DAY - timedelta(days=1)).isoformat()}/base.parquet":
                   stays_table(BASE_STAYS),
               f"date={(DAY + timedelta(days=1)).isoformat()}/base.parquet":
                   stays_table(BASE_STAYS)},
              "missing raw partition", f"location_history/{PARTITION}",
              "a missing partition is an error, not an empty day", replace=True,
              partition=True)
    fail_case("partition_without_parquet", "partition directory with no Parquet file",
              "the day's directory exists but holds no Parquet file",
              {f"{PARTITION}/.keep": ""},
              f"location_history/{PARTITION}", "holds no Parquet file", replace=True,
              partition=True)
    fail_case("stray_file", "non-Parquet file in a partition",
              "a CSV file beside the base Parquet file",
              {_f("stray_file", "csv"): "user_id,region_id\n"},
              f"location_history/{PARTITION}", "non-Parquet file(s) ['stray_file.csv']",
              partition=True)
    return cases


def search_cases() -> list[Case]:
    S = SEARCH
    cases: list[Case] = []

    def rows_case(case: str, kind: str, defect: str, bad: list[tuple[Search, str]]) -> None:
        files, quarantined = _searches_with_rows(case, bad)
        cases.append(Case(case, S, kind, defect, "quarantine", files, quarantined))

    def fail_case(case: str, kind: str, defect: str, files: dict[str, FileContent],
                  *message: str, replace: bool = False, partition: bool = False) -> None:
        cases.append(Case(case, S, kind, defect, "fail", files, error="IngestError",
                          message=message, replace=replace,
                          names=f"{TARGETS[S]}/{PARTITION}" if partition else ""))

    u = "user-bad"
    rows_case("unknown_symptom", "unknown symptom",
              "symptom not in the list (an unknown name, wrong case, empty text)",
              [((f"{u}-1", "ZZ-01-001", "Flu-like feelings"), "unknown symptom"),
               ((f"{u}-2", "ZZ-01-001", "fever"), "unknown symptom"),
               ((f"{u}-3", "ZZ-01-001", ""), "unknown symptom")])
    rows_case("unknown_region", "unknown region",
              "region_id unknown, or a county rather than a municipality",
              [((f"{u}-1", "XX-01-001", "Cough"), "unknown or non-finest region_id"),
               ((f"{u}-2", "ZZ-02", "Cough"), "unknown or non-finest region_id")])
    rows_case("null_user_id", "null user id", "user_id null or empty",
              [((None, "ZZ-01-001", "Cough"), "null or empty user_id"),
               (("", "ZZ-01-001", None), "null or empty user_id")])
    rows_case("null_region", "null or empty region", "region_id null",
              [((f"{u}-1", None, "Cough"), "null or empty region_id")])
    rows_case("control_characters", "control characters in ids",
              "carriage return and NUL in user_id",
              [(("user-bad-1\r", "ZZ-01-001", "Cough"), "control characters in user_id"),
               (("user\x00", "ZZ-01-001", "Cough"), "control characters in user_id")])
    rows_case("unicode_controls", "Unicode control, format and separator characters in ids",
              "a C1 control (CSI), a paragraph separator, a zero-width space and a "
              "right-to-left override in user_id",
              [(("user\u009b-1", "ZZ-01-001", "Cough"), "control characters in user_id"),
               (("user-bad\u2029-2", "ZZ-01-001", "Cough"), "control characters in user_id"),
               (("user-\u200bbad-3", "ZZ-01-001", "Cough"), "control characters in user_id"),
               (("user-\u202ebad-4", "ZZ-01-001", "Cough"), "control characters in user_id")])
    rows_case("very_long_user_id", "very long ids", "user_id of 10,000 characters",
              [(("user-" + "x" * 9_995, "ZZ-01-001", "Cough"),
                "user_id longer than the limit")])
    good = good_searches("date_outside_partition")
    cases.append(Case(
        "date_outside_partition", S, "rows dated outside their partition",
        "a date column with the day after and a null date", "quarantine",
        {_f("date_outside_partition"): searches_table(
            [good[0], (f"{u}-1", "ZZ-01-001", "Cough"), (f"{u}-2", "ZZ-01-001", None),
             good[1]], dates=[DAY, DAY + timedelta(days=1), None, DAY])},
        ((1, "date outside the partition"), (2, "date outside the partition"))))
    cases.append(Case(
        "null_symptom_and_repeats", S, "null symptom and repeated searches (valid)",
        "searches matching no symptom (null) and the same search made twice: both valid "
        "by docs/design.md, Input contract (a repeat is a second search; bounding counts a "
        "user once per symptom)", "accept",
        {_f("null_symptom_and_repeats"): searches_table(
            [("user-repeat-1", "ZZ-01-002", None), ("user-repeat-1", "ZZ-01-002", None),
             ("user-repeat-2", "ZZ-02-001", "Anosmia"),
             ("user-repeat-2", "ZZ-02-001", "Anosmia")])}))
    cases.append(Case(
        "heavy_searcher", S, "user with 10,000 searches",
        "one user with 10,000 searches of every symptom in all four municipalities: "
        "accepted; bounding counts the user once in B and in at most "
        "max_symptoms_per_day symptoms per level", "bounded",
        {_f("heavy_searcher"): _heavy_searches()}, user="user-heavy-searcher"))
    fail_case("int_symptom", "wrong type: integer symptom",
              "symptom stored as int64",
              {_f("int_symptom"): searches_table(
                  [("user-bad-1", "ZZ-01-001", 7)],
                  pa.schema([*list(SEARCH_SCHEMA)[:2], ("symptom", pa.int64())]))},
              "int_symptom.parquet", "column 'symptom' has type int64, expected string")
    fail_case("missing_column", "missing column",
              "no symptom column",
              {_f("missing_column"): searches_table(
                  [("user-bad-1", "ZZ-01-001")],
                  pa.schema(list(SEARCH_SCHEMA)[:2]))},
              "missing_column.parquet", "missing required column(s) ['symptom']")
    fail_case("extra_column", "extra column",
              "an extra query_text column (data that must not enter)",
              {_f("extra_column"): searches_table(
                  [("user-bad-1", "ZZ-01-001", "Cough",
                    "why do I cough at night")],
                  pa.schema([*SEARCH_SCHEMA, ("query_text", pa.string())]))},
              "extra_column.parquet", "unexpected column(s) ['query_text']")
    fail_case("not_parquet", "corrupt file (not Parquet)",
              "a JSON lines file named .parquet",
              {_f("not_parquet"): '{"user_id": "user-bad-1", "symptom": "Cough"}\n'},
              "not_parquet.parquet", "cannot read Parquet file")
    fail_case("missing_partition", "missing partition",
              "only the day before exists",
              {f"date={(DAY - timedelta(days=1)).isoformat()}/base.parquet":
                   searches_table(BASE_SEARCHES)},
              "missing raw partition", f"search_activity/{PARTITION}", replace=True,
              partition=True)
    return cases


def _regions_csv(edit: Callable[[pd.DataFrame], pd.DataFrame]) -> str:
    df = edit(base_regions().astype({"level": str, "area_km2": str}))
    return str(df.to_csv(index=False, lineterminator="\n"))


def _set(region: str, **values: object) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(df: pd.DataFrame) -> pd.DataFrame:
        for column, value in values.items():
            df.loc[df["region_id"] == region, column] = value
        return df
    return edit


def region_cases() -> list[Case]:
    cases: list[Case] = []

    def fail_case(case: str, kind: str, defect: str, content: str | bytes,
                  *message: str) -> None:
        cases.append(Case(case, "regions", kind, defect, "fail", {"regions.csv": content},
                          error="RegionTableError", message=("regions.csv", *message)))

    fail_case("cycle", "region table: parent cycle",
              "county ZZ-01's parent is its own municipality ZZ-01-001",
              _regions_csv(_set("ZZ-01", parent_id="ZZ-01-001")),
              "region 'ZZ-01'", "parent cycle ZZ-01 -> ZZ-01-001 -> ZZ-01")
    fail_case("self_parent", "region table: parent cycle",
              "municipality ZZ-02-001 is its own parent, at level 2",
              _regions_csv(_set("ZZ-02-001", parent_id="ZZ-02-001")),
              "region 'ZZ-02-001'", "parent cycle ZZ-02-001 -> ZZ-02-001")
    fail_case("missing_parent", "region table: missing parent",
              "municipality ZZ-02-002's parent ZZ-09 is not in the table",
              _regions_csv(_set("ZZ-02-002", parent_id="ZZ-09")),
              "row 7 (line 8), region 'ZZ-02-002'", "parent_id 'ZZ-09' is not a region")
    fail_case("negative_area", "region table: negative area",
              "municipality ZZ-01-002 has area_km2 -350",
              _regions_csv(_set("ZZ-01-002", area_km2="-350.0")),
              "region 'ZZ-01-002'", "area_km2=-350.0 must be a finite number > 0")
    fail_case("zero_area", "region table: zero area", "a municipality of area 0",
              _regions_csv(_set("ZZ-02-001", area_km2="0")),
              "region 'ZZ-02-001'", "area_km2=0.0 must be a finite number > 0")
    fail_case("nan_area", "region table: NaN area", "a municipality of area nan",
              _regions_csv(_set("ZZ-02-001", area_km2="nan")),
              "region 'ZZ-02-001'", "area_km2=nan must be a finite number > 0")
    fail_case("non_numeric_area", "region table: non-numeric area",
              "area_km2 written with its unit",
              _regions_csv(_set("ZZ-01-001", area_km2="250 km2")),
              "region 'ZZ-01-001'", "area_km2='250 km2' is not a valid float")
    fail_case("duplicate_region_id", "region table: duplicate region id",
              "ZZ-01-002 listed twice",
              _regions_csv(lambda df: pd.concat([df, df.iloc[[3]]], ignore_index=True)),
              "duplicate region_id", "region 'ZZ-01-002'")
    fail_case("level_mismatch", "region table: level mismatch",
              "a level-2 municipality whose parent is the country (level 0)",
              _regions_csv(_set("ZZ-02-001", parent_id="ZZ")),
              "region 'ZZ-02-001'", "level 2 but parent 'ZZ' has level 0 (must be 1)")
    fail_case("level_out_of_range", "region table: level out of range",
              "a region at level 3", _regions_csv(_set("ZZ-02-002", level="3")),
              "region 'ZZ-02-002'", "level=3 must be 0, 1 or 2")
    fail_case("country_with_parent", "region table: country with a parent",
              "the level-0 row has a parent_id",
              _regions_csv(_set("ZZ", parent_id="ZZ-01")),
              "region 'ZZ'", "a level-0 region must have an empty parent_id")
    fail_case("two_country_rows", "region table: two country rows",
              "county ZZ-02 is marked level 0 without a parent, so ZZ has two roots",
              _regions_csv(lambda df: _set("ZZ-02", parent_id="", level="0")(
                  _set("ZZ-02-001", level="1")(_set("ZZ-02-002", level="1")(df)))),
              "country 'ZZ' has 2 level-0 rows")
    fail_case("country_code_mismatch", "region table: country code differs from parent",
              "a municipality carries another country's code",
              _regions_csv(_set("ZZ-01-002", country_region_code="YY")),
              "region 'ZZ-01-002'", "country_region_code 'YY' differs from its parent's 'ZZ'")
    fail_case("empty_region_id", "region table: empty region id",
              "a row with an empty region_id",
              _regions_csv(_set("ZZ-02-002", region_id="")),
              "row 7 (line 8)", "region_id is empty")
    fail_case("missing_column", "region table: missing column", "no area_km2 column",
              _regions_csv(lambda df: df.drop(columns=["area_km2"])),
              "missing required columns: area_km2")
    fail_case("no_regions", "region table: header only",
              "the header and no rows (every stay would be an unknown region)",
              _regions_csv(lambda df: df.iloc[0:0]),
              "the region table has no regions")
    fail_case("not_utf8", "region table: not UTF-8",
              "written in Latin-1 (a name with an accent)",
              _regions_csv(_set("ZZ-02-002", sub_region_2="Söuth Moor")).encode("latin-1"),
              "cannot read region table", "utf-8")
    fail_case("zero_byte_file", "region table: empty file", "regions.csv of zero bytes", b"",
              "cannot read region table")
    return cases


def symptom_cases() -> list[Case]:
    def fail_case(case: str, kind: str, defect: str, content: str, *message: str) -> None:
        cases.append(Case(case, "symptoms", kind, defect, "fail", {"symptoms.txt": content},
                          error="IngestError", message=("symptoms.txt", *message)))

    cases: list[Case] = []
    fail_case("duplicate_name", "symptom list: duplicate name", "Cough listed twice",
              "Fever\nCough\nHeadache\nCough\n", "line 4", "symptom 'Cough' repeats line 2")
    fail_case("empty_line", "symptom list: empty line", "a blank line inside the list",
              "Fever\nCough\n\nHeadache\n", "line 3", "empty symptom name")
    return cases


def all_cases() -> list[Case]:
    return [*location_cases(), *search_cases(), *region_cases(), *symptom_cases()]


# -- writing -------------------------------------------------------------------------

def _write(path: Path, content: FileContent) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if callable(content):
        content = content()
    if isinstance(content, pa.Table):
        pq.write_table(content, path, compression="zstd")
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_bytes(content.encode("utf-8"))


def write_base(root: Path) -> None:
    write_regions(base_regions(), root / "reference" / "regions.csv")
    (root / "reference" / "symptoms.txt").write_text("\n".join(SYMPTOMS) + "\n")
    _write(root / "raw" / LOCATION / PARTITION / "base.parquet", stays_table(BASE_STAYS))
    _write(root / "raw" / SEARCH / PARTITION / "base.parquet", searches_table(BASE_SEARCHES))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def readme(cases: list[Case]) -> str:
    lines = [
        "# Bad-input corpus (docs/design.md, Input contract; issue 6)",
        "",
        "Generated by `make_corpus.py` (do not edit by hand: change the script and run",
        "`.venv/bin/python tests/data/bad/make_corpus.py`). `tests/unit/"
        "test_bad_input_corpus.py`",
        "runs every case through the real ingestion (and, for row-level cases, the",
        "contribution bounding) and asserts its outcome.",
        "",
        "Layout: `base/` is a tiny valid data root (the region table of Testland, ZZ: two",
        "counties of two municipalities each, its own table rather than the generator's",
        f"Demoland; six symptoms; one day, {DAY}, of stays and of searches). Each case is",
        "`<source>/<case>/`, holding the files laid over the base root: `location_history`",
        "and `search_activity` files go under `raw/<source>/` (beside the base partition,",
        "or instead of the whole tree where *replace* is set), `regions` and `symptoms`",
        "files replace `reference/regions.csv` and `reference/symptoms.txt`.",
        "`cases.json` lists each case: its defect, the step it runs and its outcome.",
        "",
        "Outcomes:",
        "",
        "- **quarantine**: the listed rows (0-based row numbers in the case's file) go to",
        "  `quarantine/<source>/date=D/rows.parquet` with exactly that reason; every other",
        "  row of the partition is clean (nothing is lost), and the bounded aggregates equal",
        "  those of the valid rows alone (nothing bad reaches an aggregate).",
        "- **fail**: the step raises with a message naming the file and the problem (all",
        "  the listed strings), never a user id or a row, and writes no clean rows.",
        "- **accept**: not a defect (documented because it looks like one): every row is",
        "  clean.",
        "- **bounded**: valid, so accepted; contribution bounding caps the user: their",
        "  change to the bounded aggregates is at most the per-user bound at every level.",
        "",
        "Decisions: a Parquet file with the right columns and no rows is valid and adds",
        "nothing (a zero-byte file is not Parquet and fails); a partition directory with",
        "no Parquet file fails like a missing one (git keeps no empty directory, so the",
        "case holds a `.keep` file, which ingestion ignores like any hidden file); rows of a",
        "file without a `date` column take the partition's day, beside files that have one.",
        "",
        "| source | case | kind | defect | outcome |",
        "|---|---|---|---|---|",
    ]
    for c in cases:
        if c.outcome == "quarantine":
            reasons = sorted({why for _, why in c.quarantined})
            outcome = (f"quarantine {len(c.quarantined)} row(s): "
                       + "; ".join(f"'{r}'" for r in reasons))
        elif c.outcome == "fail":
            outcome = f"fail ({c.error}): " + ", ".join(f"`{m}`" for m in c.message)
        elif c.outcome == "bounded":
            outcome = f"accepted, bounded (`{c.user}`)"
        else:
            outcome = "accepted (valid)"
        lines.append(f"| {c.source} | `{c.id}` | {_cell(c.kind)} | {_cell(c.defect)} | "
                     f"{_cell(outcome)} |")
    return "\n".join(lines) + "\n"


def write_corpus(out: Path) -> list[Case]:
    """Write the whole corpus under ``out`` (replacing what the script owns there)."""
    cases = all_cases()
    ids = [(c.source, c.id) for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique within a source"
    for name in ("base", *SOURCES):
        shutil.rmtree(out / name, ignore_errors=True)
    write_base(out / "base")
    for case in cases:
        for relative, content in case.files.items():
            _write(out / case.source / case.id / relative, content)
    (out / "cases.json").write_text(
        json.dumps({"day": DAY.isoformat(), "cases": [c.to_json() for c in cases]},
                   indent=1, ensure_ascii=True) + "\n")
    (out / "README.md").write_text(readme(cases))
    return cases


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    written = write_corpus(target)
    print(f"wrote {len(written)} cases under {target}")
