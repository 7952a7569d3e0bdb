"""The bounding step, shared by both reports: one day's clean rows -> true cell sums.

Each report has its own per-user bounding query (``include/sql/<report>_bound_
contributions.sql``); both are summed per cell by ``include/sql/aggregate_cells.sql``.
The engine that runs them (DuckDB or Spark, :mod:`dp_ops.engine`) is chosen by the
execution settings; this step only decides what is bounded where (the whole day, or one
user shard of it) and checks that the shards add up. The output is true and private:
only the noise step reads it.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from dp_ops.engine.base import BoundingSql
from dp_ops.engine.files import pinned
from dp_ops.engine.registry import engine_for
from dp_ops.errors import BoundingError
from dp_ops.layout import DataRoot
from dp_ops.settings import ExecutionSettings, execution_settings
from dp_ops.steps.result import StepResult


def shard_file(root: DataRoot, report: str, day: date, shard: int, shards: int) -> Path:
    """Private partial cell sums of one user shard (summed by :func:`combine_shards`)."""
    return root.bounded_file(report, day).parent / f"shard-{shard:05d}-of-{shards:05d}.parquet"


def combine_shards(root: DataRoot, report: str, day: date, shards: int) -> Path:
    """Sum the partial cell sums of all ``shards`` into the day's bounded aggregates file.

    Refuses if a shard is missing: a missing shard would silently undercount its users."""
    parts = [shard_file(root, report, day, k, shards) for k in range(shards)]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise BoundingError(f"bounding of {report} for {day} is incomplete: {len(missing)} of "
                          f"{shards} shard file(s) missing ({', '.join(missing[:3])}"
                          f"{', ...' if len(missing) > 3 else ''}) under {parts[0].parent}; "
                          "rerun the bound_contributions task(s) of that day")
    target = root.bounded_file(report, day)
    # the shards' cell sums (true aggregates, no rows) are added up here, on DuckDB
    from dp_ops.engine.duckdb import sum_partials

    sum_partials(parts, target)
    return target


def bound_clean_day(root: DataRoot, report: str, source: str, day: date,
                    bounding: BoundingSql,
                    params: dict[str, object], *, shard: int | None = None,
                    settings: ExecutionSettings | None = None) -> StepResult:
    """Bound one day's clean rows of ``source`` and write the true cell sums (private).

    Unsharded (``bounding_shards`` = 1) it writes the day's aggregates file. Sharded, a
    given ``shard`` writes that shard's partial sums (one mapped Airflow task each; the
    noise step combines them); ``shard=None`` runs every shard here, then combines."""
    settings = settings or execution_settings()
    shards = settings.bounding_shards
    clean = root.clean_partition(source, day) / "part.parquet"
    if not clean.is_file():
        raise BoundingError(f"no clean {source} rows for {day} at {clean}: run the ingest "
                          "step first")
    if shard is not None and not 0 <= shard < shards:
        raise ValueError(f"shard={shard!r}: expected 0..{shards - 1} "
                         f"(bounding_shards={shards})")
    from dp_ops.regions import ancestors, read_regions

    anc = ancestors(read_regions(root.regions_csv))  # public: the region tree
    engine = engine_for(settings)
    if shards == 1:
        target: Path = root.bounded_file(report, day)
        with pinned(clean) as snapshot:  # one version of the file for the whole query
            engine.bound_to_parquet(root, snapshot, target, anc, bounding, params, None)
        return StepResult(f"bounded contributions for {day} ({engine.name}); private cell sums "
                          f"in {target}", (str(target),))
    todo = range(shards) if shard is None else [shard]
    written = []
    for k in todo:
        part = shard_file(root, report, day, k, shards)
        with pinned(clean) as snapshot:
            engine.bound_to_parquet(root, snapshot, part, anc, bounding, params, k)
        written.append(str(part))
    if shard is None:
        target = combine_shards(root, report, day, shards)
        return StepResult(f"bounded contributions for {day} in {shards} shards ({engine.name}); "
                          f"private cell sums in {target}", (*written, str(target)))
    return StepResult(f"bounded shard {shard} of {shards} for {day} ({engine.name}); private "
                      f"partial sums in {written[0]}", tuple(written))


def finish_bounding(root: DataRoot, report: str, day: date,
                    settings: ExecutionSettings | None = None) -> None:
    """Make the day's bounded aggregates file whole before anything reads it: when the
    bounding ran in user shards (mapped ``bound_contributions`` task instances), add up
    their partial sums per cell; this refuses, before any spend, if a shard is missing.
    Unsharded, the bounding step wrote the file itself and there is nothing to do."""
    shards = (settings or execution_settings()).bounding_shards
    if shards > 1:
        combine_shards(root, report, day, shards)
