"""Search what an Airflow UI user can read for private values (docs/design.md, Operations).

Used by ``test_airflow_operations.py`` after a real Airflow has run the mobility report, and
checked on planted values by the same module's fast tests. What counts as a leak:

- **user ids** (rule U): any input ``user_id`` anywhere, as an exact substring.
- **small-cell aggregates** (rule V): the un-noised values of the cells of region-days with
  fewer true contributors than the publication threshold (the "small cells"). A bare
  1-5 digit number is everywhere in Airflow's own output (pids, ports, line numbers, row
  and byte counts), so matching values alone would fail by coincidence. A value is only
  meaningful next to the cell it belongs to, so a *record* (one log line, one metadata-DB
  row, one XCom value, one row of a published table) leaks a small cell when it contains
  the cell's ``region_id`` as a whole token **and** one of the textual forms of the cell's
  value as a whole number token (``contributors=37`` and ``"DM-03-006", 37`` both count,
  the ``01`` of ``DM-01`` or a date does not).
- **distinctive aggregates** (rule D): a float whose textual form has at least
  :data:`DISTINCTIVE_DIGITS` significant digits (the ``repr`` of a true average such as
  12.572998046875) is searched as a whole number token in every record, with or without a
  region id. Chance cannot produce those digits; another computation of the same simple
  ratio can (1/3 of something is 0.3333333333333333 everywhere), so floats equal to a
  fraction with a denominator up to :data:`SIMPLE_DENOMINATOR` are left to rule V, like
  every integer.

Why not search shorter values on their own: in one run of the test module, whole-token
matches of the small cells' integer values with 4 or more significant digits hit ~750
times in Airflow's own output (e.g. the year in ``datetime.datetime(2026, 11, 30, ...)``
of a task-instance repr equals a residential sum in minutes).

Limits, by construction: a value printed without its region id (rule V) and not
distinctive (rule D) is not found, nor one printed with thousands separators. Findings
name where and how many, never the value.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

DISTINCTIVE_DIGITS = 8
SIMPLE_DENOMINATOR = 100

# A number token: an optional minus sign, digits, an optional decimal part, and not glued
# to a word, a date, a time, a version or a path (the 02 of 2020-02-17, the 01 of DM-01,
# the 31 of 10:31:05 and the 5 of 1.5.0 are not tokens).
NUMBER = re.compile(r"(?<![\w.:/+-])(-?\d+(?:\.\d+)?)(?![\w.:/]|[-+]\d)")


def significant_digits(text: str) -> int:
    """Significant digits of a decimal number written as ``text`` (``-0.0120`` has 3)."""
    digits = text.lstrip("-").replace(".", "").lstrip("0")
    if "." not in text:
        digits = digits.rstrip("0")
    return len(digits)


def simple_ratio(value: float | int) -> bool:
    """Whether ``value`` is an integer or the float nearest to a fraction p/q with
    q <= :data:`SIMPLE_DENOMINATOR` (such values come out of unrelated computations too)."""
    if isinstance(value, int) or not math.isfinite(value):
        return True
    return float(Fraction(value).limit_denominator(SIMPLE_DENOMINATOR)) == value


def value_forms(value: float | int) -> set[str]:
    """The ways a program would print ``value``: ``str`` of an integer; ``repr`` and 1 to 4
    decimals of a float (and its integer form when it is whole)."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not an aggregate value")
    if isinstance(value, int):
        return {str(value)}
    if not math.isfinite(value):
        return set()
    forms = {repr(value)} | {f"{value:.{d}f}" for d in range(1, 5)}
    if value.is_integer():
        forms.add(str(int(value)))
    return forms


@dataclass
class Findings:
    """Counts of hits per (location, rule); never the matched values."""

    hits: Counter[tuple[str, str]] = field(default_factory=Counter)
    records: Counter[str] = field(default_factory=Counter)

    def add(self, location: str, rule: str, count: int = 1) -> None:
        self.hits[(location, rule)] += count

    def describe(self) -> str:
        return "; ".join(f"{rule} found in {location} ({n} time(s))"
                         for (location, rule), n in sorted(self.hits.items()))

    def __bool__(self) -> bool:
        return bool(self.hits)


class LeakScanner:
    """Finds user ids and small-cell aggregate values in text records.

    :param user_ids: every user id of the private input.
    :param small_cells: region_id -> the un-noised values of that region's small cells.
    :param distinctive: further un-noised values searched everywhere by rule D.
    """

    def __init__(self, user_ids: Iterable[str],
                 small_cells: Mapping[str, Iterable[float | int]],
                 distinctive: Iterable[float | int] = ()) -> None:
        self.user_ids = frozenset(user_ids)
        if not self.user_ids:
            raise ValueError("no user ids to search for")
        alphabet = "".join(sorted({c for uid in self.user_ids for c in uid}))
        self._id_lengths = sorted({len(uid) for uid in self.user_ids})
        # Runs of characters that user ids are made of; every id occurrence lies in one.
        self._id_runs = re.compile(f"[{re.escape(alphabet)}]{{{self._id_lengths[0]},}}")
        self.small_forms: dict[str, frozenset[str]] = {
            region: frozenset(f for v in values for f in value_forms(v))
            for region, values in small_cells.items()}
        regions = sorted(self.small_forms, key=len, reverse=True)
        self._regions = re.compile(
            r"(?<![\w-])(" + "|".join(map(re.escape, regions)) + r")(?![\w-])"
            if regions else r"(?!x)x")
        self.distinctive = frozenset(
            f for v in [*distinctive, *(v for vs in small_cells.values() for v in vs)]
            if not simple_ratio(v)
            for f in value_forms(v) if significant_digits(f) >= DISTINCTIVE_DIGITS)

    @property
    def n_small_forms(self) -> int:
        return sum(len(f) for f in self.small_forms.values())

    def user_id_hits(self, text: str) -> int:
        hits = 0
        for run in self._id_runs.finditer(text):
            s = run.group()
            for n in self._id_lengths:
                hits += sum(s[i:i + n] in self.user_ids for i in range(len(s) - n + 1))
        return hits

    def small_cell_hits(self, text: str) -> int:
        regions = set(self._regions.findall(text))
        if not regions:
            return 0
        numbers = set(NUMBER.findall(text))
        return sum(len(numbers & self.small_forms[r]) for r in regions)

    def distinctive_hits(self, text: str) -> int:
        if not self.distinctive:
            return 0
        return sum(1 for n in NUMBER.findall(text) if n in self.distinctive)

    def scan(self, location: str, records: Iterable[str], findings: Findings) -> None:
        """Scan ``records`` (each one line, row or value) found at ``location``."""
        for text in records:
            findings.records[location] += 1
            for rule, hits in (("user id", self.user_id_hits(text)),
                               ("small-cell value next to its region id",
                                self.small_cell_hits(text)),
                               ("distinctive un-noised value", self.distinctive_hits(text))):
                if hits:
                    findings.add(location, rule, hits)


# -- where the records come from ---------------------------------------------------------
def as_text(value: object) -> str:
    """A metadata-DB value as text; blobs are decompressed when they are zlib data."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            raw = zlib.decompress(raw)
        except zlib.error:
            pass
        return raw.decode("utf-8", errors="replace")
    return str(value)


def file_records(path: Path) -> Iterator[str]:
    """The records of one file: the rows of a Parquet file (cells joined by commas), else
    its lines (binary files as Latin-1, which maps every byte to one character)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        yield ",".join(table.column_names)
        for row in table.to_pylist():
            yield ",".join("" if v is None else str(v) for v in row.values())
        return
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    yield from text.splitlines()


def sqlite_records(db: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """Every row of every table of a SQLite DB, read-only: (table, column names, values as
    text)."""
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for table in tables:
            cur = con.execute(f'SELECT * FROM "{table}"')
            columns = [d[0] for d in cur.description]
            for row in cur:
                yield table, columns, [as_text(v) for v in row]
    finally:
        con.close()
