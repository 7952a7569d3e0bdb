"""The simplest kind of report, written once: noisy values per region, published where the
region is large enough and the value reaches a threshold.

:func:`region_values` gives such a report's ``report_day``: every cell of the day's
public domain with its noisy value, the region's public attributes and whether the row is
published (area at least ``min_area_km2``, noisy value at least the report's threshold).
:class:`TableRelease` gives its release parts: one table of the published rows of the
recorded days, ``<stem>.csv`` and ``<stem>.parquet``, checked by Great Expectations
against those same rules (one row per region, cell and day; the configured levels), with
a column schema it derives from the table, the manifest's parameters and the data
statement's paragraphs. A report of this kind declares only its source, bounding query,
budgets and words (``tests/plugin_report/``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import date
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import pyarrow as pa

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.steps.data_statement import StatementParts
from dp_ops.steps.page import PublishedSection
from dp_ops.steps.release_flow import Built, ReleasePlan
from dp_ops.steps.release_values import GateOutcome, Staged
from dp_ops.steps.result import StepResult


class RegionValuesConfig(Protocol):
    """What a region-values report's config gives the factory."""

    @property
    def min_area_km2(self) -> float: ...

    @property
    def levels(self) -> tuple[int, ...]: ...

    @property
    def first_public_date(self) -> date: ...

    @property
    def run_epsilon(self) -> float: ...

    @property
    def cap(self) -> float: ...


C = TypeVar("C", bound=RegionValuesConfig)
C_contra = TypeVar("C_contra", bound=RegionValuesConfig, contravariant=True)
# The day file's columns, in order.
DAY_COLUMNS = ("date", "level", "region_id", "cell", "noisy_value", "country_region_code",
               "area_km2", "publish_row")


class RegionValuesDay(Protocol[C_contra]):
    def __call__(self, root: DataRoot, cfg: C_contra, day: date, *,
                 ledger_url: str) -> StepResult: ...


def region_values(report: str, threshold: Callable[[C], float]) -> RegionValuesDay[C]:
    """The ``report_day`` of a region-values report: every noisy cell of the day with its
    region's public attributes, published where the area is at least ``min_area_km2`` and
    the noisy value at least ``threshold(cfg)``; written with ``write_day_file``."""

    def report_day(root: DataRoot, cfg: C, day: date, *, ledger_url: str) -> StepResult:
        from dp_ops.regions import read_regions
        from dp_ops.steps.day_files import write_day_file
        from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
        from dp_ops.steps.noising import load_noisy_cells

        regions = read_regions(root.regions_csv)
        with closing_ledger(open_ledger(root, ledger_url)) as ledger:
            cells = load_noisy_cells(root, report, day, ledger.spends(report, day))
            rows = cells[["level", "region_id", "metric", "noisy_value"]].rename(
                columns={"metric": "cell"}).merge(
                regions[["region_id", "country_region_code", "area_km2"]], on="region_id",
                how="left", validate="many_to_one")
            rows.insert(0, "date", day.isoformat())
            rows["level"] = rows["level"].astype("int64")
            rows["publish_row"] = ((rows["area_km2"] >= cfg.min_area_km2)
                                   & (rows["noisy_value"] >= threshold(cfg)))
            rows = rows[list(DAY_COLUMNS)].sort_values(["level", "region_id", "cell"])
            target = write_day_file(root, ledger, report, day, pa.Table.from_pandas(
                rows.reset_index(drop=True), preserve_index=False))
        return StepResult(f"{report} for {day}: {int(rows['publish_row'].sum())} of "
                          f"{len(rows)} region values published; rows in {target}",
                          (str(target),))

    return report_day


def _published_values(manifest: Mapping[str, Any]) -> dict[str, Any]:
    rows = manifest.get("rows") or {}
    return {"published": int(rows.get("published") or 0),
            "domain": int(rows.get("domain") or 0),
            "parameters": dict(manifest.get("parameters") or {})}


# The release page's "What is published" section of every region-values report.
TABLE_SECTION = PublishedSection("table_published.html", _published_values)


@dataclass(frozen=True)
class TableRelease(Generic[C]):
    """The release parts (:class:`~dp_ops.steps.release_flow.ReleaseParts`) of a
    region-values report.

    ``stem``: the files' name (``<stem>.csv``, ``<stem>.parquet``). ``value_column``: the
    noisy value's column in them. ``cell_column``: the column naming each value's cell,
    for a report with several cells per region (none: one cell per region, not shown).
    ``threshold``: the value a published row reaches (the
    gate checks it). ``parameters``: what the manifest states of the config besides the
    area threshold. ``what``, ``bounds``, ``biases``: the data statement's words for what a
    value is, how a user's contribution is bounded and whom the thresholds leave out.
    """

    report: str
    title: str
    stem: str
    value_column: str
    threshold: Callable[[C], float]
    parameters: Callable[[C], dict[str, Any]]
    what: str
    bounds: str
    biases: str = "Values of small regions are withheld more often."
    cell_column: str | None = None
    page_section: PublishedSection = field(default=TABLE_SECTION)

    @property
    def columns(self) -> tuple[str, ...]:
        cell = () if self.cell_column is None else (self.cell_column,)
        return ("date", "region_id", "level", "country_region_code", *cell,
                self.value_column)

    @property
    def column_contract(self) -> Mapping[str, Any]:
        types = {"date": "date", "level": "integer", self.value_column: "integer"}
        columns = [{"name": c, "type": types.get(c, "string"), "nullable": False}
                   for c in self.columns]
        return {"report": self.report, "schema_version": "1.1", "files": [
            {"pattern": f"{self.stem}.{kind}", "format": kind, "columns": columns}
            for kind in ("csv", "parquet")]}

    def plan(self, root: DataRoot, cfg: C, ledger: Ledger, days: list[date],
             digests: dict[date, str], *, run_id: str, region: str | None) -> ReleasePlan:
        from dp_ops.steps.release import build_key, inputs_sha256, sha256_file

        config: dict[str, Any] = (asdict(cfg) if is_dataclass(cfg) and not isinstance(cfg, type)
                                  else {})
        key = build_key(self.report, days=[days[0].isoformat(), days[-1].isoformat()],
                        inputs=inputs_sha256(days, digests), config=config,
                        regions=sha256_file(root.regions_csv))
        return ReleasePlan(key, f"{self.report} release candidate {days[0]}..{days[-1]}",
                           lambda target: self._build(root, cfg, ledger, target,
                                                      run_id=run_id, key=key))

    def _build(self, root: DataRoot, cfg: C, ledger: Ledger, target: Path, *, run_id: str,
               key: str) -> Built:
        import great_expectations.expectations as gxe
        import pyarrow.parquet as pq

        from dp_ops.gx.result import require_pass
        from dp_ops.gx.runner import run_suites
        from dp_ops.gx.suites import suite
        from dp_ops.steps.day_files import read_release_days
        from dp_ops.steps.release import inputs_sha256, write_csv
        from dp_ops.steps.release_contract import arrow_table

        days, digests, tables = read_release_days(root, ledger, self.report,
                                                  cfg.first_public_date)
        rows = pa.concat_tables(tables).to_pandas()
        published = rows[rows["publish_row"]].rename(
            columns={"noisy_value": self.value_column, "cell": self.cell_column or "cell"})
        gate = suite(f"{self.report}_release", [
            gxe.ExpectColumnValuesToBeBetween(column="area_km2", min_value=cfg.min_area_km2),
            gxe.ExpectColumnValuesToBeBetween(column=self.value_column,
                                              min_value=self.threshold(cfg)),
            gxe.ExpectCompoundColumnsToBeUnique(
                column_list=["region_id", self.cell_column or "cell", "date"]),
            gxe.ExpectColumnValuesToBeInSet(column="level", value_set=list(cfg.levels)),
        ])
        result = run_suites([(gate, f"{self.report}_published", published)],
                            gx_dir=root.gx_dir, parameters={},
                            run_name=f"{self.report}-{run_id}")
        require_pass(result)
        out = published.sort_values(["date", "level", "region_id", self.cell_column or "cell"])
        out = out[list(self.columns)].reset_index(drop=True)
        target.mkdir(parents=True, exist_ok=True)
        write_csv(out, target / f"{self.stem}.csv")
        pq.write_table(arrow_table(out, self.report, f"{self.stem}.parquet",
                                   self.column_contract), target / f"{self.stem}.parquet")
        share = round(len(out) / len(rows), 4) if len(rows) else 0.0
        return Built(rows={"published": len(out), "domain": len(rows)},
                     suppression={"published_share": share},
                     gate=GateOutcome(result.success, result.evaluated,
                                      result.data_docs_index),
                     charts=[], uncharted_levels=[], inputs_sha256=inputs_sha256(days, digests),
                     build_key=key)

    def inputs_sha256(self, ledger: Ledger, days: list[date],
                      digests: Mapping[date, str]) -> str:
        from dp_ops.steps.release import inputs_sha256

        return inputs_sha256(days, digests)

    def state_moved(self, ledger: Ledger, staged: Staged) -> bool:
        return False

    def epsilon(self, ledger: Ledger, cfg: C, first: date, last: date) -> dict[str, Any]:
        from dp_ops.steps.release import epsilon_summary

        totals = {d: e for (_, d), e in ledger.totals(self.report).items()
                  if first <= d <= last}
        return epsilon_summary(totals, normal_run=cfg.run_epsilon, cap=cfg.cap,
                               composition="basic (sum over levels of each date)")

    def check_inputs(self, root: DataRoot, ledger: Ledger, cfg: C) -> None:
        return None

    def manifest_inputs(self, root: DataRoot, ledger: Ledger, cfg: C) -> dict[str, Any]:
        return {}

    def manifest_extras(self, root: DataRoot, ledger: Ledger, cfg: C,
                        last: date) -> dict[str, Any]:
        return {"parameters": {"min_area_km2": cfg.min_area_km2,
                               "threshold": self.threshold(cfg), **self.parameters(cfg)}}

    def release_id_parts(self, extras: Mapping[str, Any]) -> tuple[Any, ...]:
        return ()

    def commit(self, root: DataRoot, ledger: Ledger, staged: Staged) -> None:
        return None

    def statement(self, cfg: C, manifest: Mapping[str, Any]) -> StatementParts:
        rows = manifest.get("rows") or {}
        return StatementParts(
            what=self.what, bounds=self.bounds,
            thresholds=(f"A value under {self.threshold(cfg):g} is not published, nor one "
                        f"of a region under {cfg.min_area_km2:g} km2.",),
            rule="A value is published when its noisy value reaches the threshold.",
            published=f"Published values: {int(rows.get('published', 0)):,}.",
            intervals="This report publishes no intervals.", biases=self.biases)

    def rows_text(self, rows: Mapping[str, int]) -> str:
        return f"{rows['published']} region values"
