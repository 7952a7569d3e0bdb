"""What a report package exports so the factory can find it: a :class:`ReportSpec`.

A report is one package (``dp_ops.reports.mobility``, ``dp_ops.reports.symptoms``, or a
package of an agency's own) with a ``spec`` module holding a ``ReportSpec``, registered
under the entry-point group ``dp_ops.reports``::

    [project.entry-points."dp_ops.reports"]
    mobility = "dp_ops.reports.mobility.spec:SPEC"

Everything outside a report's package that needs to know about reports (the registry, the
DAG tags and assets, the Privacy budget view, the release page, ingest) reads the specs:
none of it names a report. A spec is a light, declarative value: loading it imports no
pandas, DuckDB or Great Expectations (the DAG files read it at parse time); its
declaration (a :class:`~dp_ops.reports.declared.Report`, which imports its step
functions) is imported on first use (:func:`dp_ops.reports.registry.declared_report`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from dp_ops.registered import NAME_PATTERN, find, registered

ENTRY_POINT_GROUP = "dp_ops.reports"


@dataclass(frozen=True)
class ReportSpec:
    """One report, as the factory sees it.

    ``name``: in paths (``noise/<name>/``), the ledger, asset names and tags.
    ``title``: the release page's title.
    ``daily_dag_id``: the DAG that runs the report day by day; its read permission guards
    the report's figures in the Privacy budget view.
    ``sources``: the names of the raw sources it reads (``raw/<source>/date=D/``), each a
    :class:`~dp_ops.sources.spec.SourceSpec` registered under ``dp_ops.sources``; the
    ingest step judges each by its contract.
    ``declaration``: the module whose ``REPORT`` is the report's
    :class:`~dp_ops.reports.declared.Report`.
    ``assets``: the assets it emits events to besides ``<name>_release`` (e.g.
    ``baseline`` for ``<name>_baseline``).
    ``terms_change_weekday``: for a report whose values are summed by week, the weekday
    (0 = Monday) a change of its noise terms must take effect on, so that every week is
    noised under one law (``ledger set-epsilon`` refuses another date); None: any date.
    """

    name: str
    title: str
    daily_dag_id: str
    sources: tuple[str, ...]
    declaration: str
    assets: tuple[str, ...] = field(default=())
    terms_change_weekday: int | None = None

    def __post_init__(self) -> None:
        for label, value in (("name", self.name), ("daily_dag_id", self.daily_dag_id)):
            if not NAME_PATTERN.fullmatch(value):
                raise ValueError(f"report spec {label}={value!r}: expected lower-case "
                                 f"letters, digits and '_' (at most 40), starting with a "
                                 f"letter")
        if not self.sources:
            raise ValueError(f"report spec {self.name!r}: sources is empty")
        if self.terms_change_weekday not in (None, *range(7)):
            raise ValueError(f"report spec {self.name!r}: terms_change_weekday="
                             f"{self.terms_change_weekday!r} is no weekday (0..6) or None")
        for asset in self.assets:
            if not NAME_PATTERN.fullmatch(asset):
                raise ValueError(f"report spec {self.name!r}: asset {asset!r} is no "
                                 "plain identifier")

    @property
    def release_asset(self) -> str:
        """The asset whose events announce each new release."""
        return f"{self.name}_release"

    def asset(self, suffix: str) -> str:
        """The name of one of :attr:`assets` (``<name>_<suffix>``)."""
        if suffix not in self.assets:
            raise ValueError(f"report {self.name!r} declares no asset {suffix!r}; it has "
                             f"{list(self.assets)}")
        return f"{self.name}_{suffix}"


class UnknownReport(ValueError):
    """A report name no installed package registers."""


@cache
def report_specs() -> dict[str, ReportSpec]:
    """Every installed report, by name, in name order: each ``dp_ops.reports`` entry point
    loaded once per process (:func:`dp_ops.registered.registered`)."""
    return registered(ENTRY_POINT_GROUP, ReportSpec)


def report_names() -> list[str]:
    return list(report_specs())


def report_spec(name: str) -> ReportSpec:
    """The installed report ``name``; :class:`UnknownReport` (a ``ValueError``) naming
    the known ones otherwise."""
    return find(report_specs(), name, UnknownReport, "report")
