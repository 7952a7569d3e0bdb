"""The budget-checked noise step, shared by both reports.

A :class:`NoisePlan` says what a report noises: its ledger metric groups (each with its
cells per region and its :class:`MetricBudget`: per-cell epsilon, sensitivity, cells per
user-day), its levels, cap and method version. The epsilon booked for a slot is derived
from the budget the slot's noise is drawn with (:class:`SpendRequest`), and the ledger
compares that budget with the recorded policy before it books it.

Order of operations, which is what makes reruns and crashes safe:

1. Plan the slots to noise (every level and metric group for the day, or for an explicit
   re-noise one region and its ancestors) and **reserve** them in the ledger. The ledger
   refuses a spend past the cap here, before anything is drawn; a slot already spent is
   reused, not spent again.
2. For each spend whose noisy values are not recorded yet, draw noise for every cell of
   the public domain in its scope (zeros included: delta = 0), write it to a pending file,
   record its sha256 in the ledger (the first record of a spend wins), then move it into
   place. A draw whose record never landed was never seen by anyone, so drawing again for
   the same (already paid) spend costs nothing more; and a file found at a spend's path
   with no record is never adopted (anyone who can write the data root could have put it
   there: a file of zeros would publish the true sums): it is replaced by a fresh draw.
3. Every later step reads noisy values only from stored files that match the ledger's
   record (:func:`verify_stored`).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dp_ops.engine.files import (
    make_dirs,
    pending_path,
    read_as_recorded,
    write_parquet_beside,
)
from dp_ops.errors import (
    BadRequest,
    NoiseNotStored,
    NoiseRecordConflict,
    NoiseTampered,
    PolicyMismatch,
)
from dp_ops.faults import fault_point
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import (
    ALL_REGIONS,
    EPS_TOLERANCE,
    ApprovalRequest,
    Ledger,
    Slot,
    Spend,
    SpendRequest,
)
from dp_ops.privacy.noise import add_discrete_laplace, noise_generator
from dp_ops.privacy.plan import GROUP_TERM_PREFIXES, MetricBudget, group_terms
from dp_ops.steps.ledger_binding import open_ledger, require_sound
from dp_ops.steps.noise_request import NoiseRequest
from dp_ops.steps.pending import pending_tag
from dp_ops.steps.result import StepResult

# Spend kinds whose noisy values are the cells' current values (method-update spends
# produce recomputed sums for scaling factors, not replacement values).
VALUE_KINDS = ("noise", "renoise")

NOISE_SCHEMA = pa.schema([
    ("level", pa.int8()),
    ("region_id", pa.string()),
    ("metric", pa.string()),
    ("noisy_value", pa.int64()),
    ("cell_epsilon", pa.float64()),
    ("sensitivity", pa.int64()),
    ("spend_id", pa.int64()),
])


@dataclass(frozen=True)
class NoisePlan:
    """What one report noises per date and level.

    ``budgets`` give each metric group's per-cell epsilon, sensitivity and cells per
    user-day: the sampler is built from them and what a slot (a group at one level) costs
    each user-day is derived from them (:attr:`ledger_epsilons`), never stated apart;
    ``group_cells`` the cells of a group in one region (the public domain: it does not
    depend on the data).
    """

    report: str
    budgets: tuple[MetricBudget, ...]
    group_cells: Mapping[str, tuple[str, ...]]
    levels: tuple[int, ...]
    cap: float
    method_version: str
    # the first date that is ever published: a re-noise before it spends for nothing
    first_public_date: date
    # what the ledger's recorded policy holds besides the cap and the budgets' own terms
    # (the report config's policy_terms): a process whose terms differ is refused before
    # any spend
    policy_terms: Mapping[str, float] = field(default_factory=dict)
    # for a report whose values are summed by week: the weekday (0 = Monday) its weeks
    # start on, so that every week is drawn under one law (:func:`week_law_refusal`)
    terms_change_weekday: int | None = None

    def __post_init__(self) -> None:
        names = [b.name for b in self.budgets]
        if len(set(names)) != len(names) or set(names) != set(self.group_cells):
            raise ValueError(f"report {self.report!r}: budgets {names} and group_cells "
                             f"{sorted(self.group_cells)} must name the same groups, once each")
        derived = group_terms(self.budgets)
        stated = {k: v for k, v in self.policy_terms.items()
                  if k.startswith(GROUP_TERM_PREFIXES)}
        wrong = sorted(k for k, v in stated.items()
                       if k not in derived or not math.isclose(v, derived[k], rel_tol=1e-12))
        if wrong:
            raise ValueError(f"report {self.report!r}: policy_terms {wrong} state a metric "
                             "group's terms otherwise than its budget; they are derived "
                             "from the budgets")

    @property
    def ledger_epsilons(self) -> dict[str, float]:
        """What one slot of each group costs per user-day (derived from its budget)."""
        return {b.name: b.epsilon for b in self.budgets}

    @property
    def ledger_terms(self) -> dict[str, float]:
        """The policy terms the ledger records and checks: ``policy_terms`` and every
        group's terms, derived from its budget."""
        return {**self.policy_terms, **group_terms(self.budgets)}

    def budget(self, name: str) -> MetricBudget:
        for b in self.budgets:
            if b.name == name:
                return b
        raise KeyError(f"unknown metric group {name!r} for report {self.report!r}")


def noise_file(root: DataRoot, spend: Spend) -> Path:
    return root.noise_dir(spend.slot.report, spend.slot.day) / f"spend-{spend.id:09d}.parquet"


def file_digest(path: Path) -> tuple[str, int]:
    """(sha256, cell count) of a stored noise file."""
    return _digest(path.read_bytes())


def _digest(data: bytes) -> tuple[str, int]:
    return (_sha256(data),
            pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows)


def read_stored(path: Path, spend: Spend) -> pa.Table:
    """The stored noise of ``spend``, parsed from the very bytes that were checked against
    the ledger's record (no second open a swapped file could slip into), or
    :class:`NoiseTampered` naming the slot and the remedy."""
    what = (f"ledger spend {spend.id} ({spend.slot.describe()}, {spend.kind}, run "
            f"{spend.run_id[:40]!r})")
    remedy = ("noise is never redrawn silently (a redraw would be a free second release): "
              "restore the file from a backup of the data root, or re-noise that "
              "region-day explicitly with a reason (it is paid again); OPERATIONS.md, "
              "'stored noise does not verify'")
    if spend.stored_sha256 is None:
        raise NoiseNotStored(f"{what}: the ledger recorded no stored noise for it; a file "
                             f"at {path} is never read unrecorded. Rerun the noise step for "
                             f"{spend.slot.day} (it reuses the spend and costs nothing more)")
    # the recorded draw may still be pending (its writer is between the ledger record and
    # the move, or crashed there): then it is moved into place over whatever is there,
    # if its name carries the MAC of the recorded sha256 (a planted one cannot). Compared
    # by sha256 before anything is parsed: a pending file left half-written by a crash,
    # or garbage planted at the path, is refused, never handed to the Parquet reader
    data = read_as_recorded(path, lambda b: _sha256(b) == spend.stored_sha256,
                            lambda: _noise_tag(path, spend.id, str(spend.stored_sha256)))
    if data is None:
        raise NoiseTampered(f"{what}: its stored noise {path} is missing; {remedy}")
    digest = _sha256(data)
    if digest != spend.stored_sha256:
        raise NoiseTampered(f"{what}: {path} is not the file stored for it (sha256 "
                            f"{digest[:16]}..., {_cells_text(data)}; recorded "
                            f"{str(spend.stored_sha256)[:16]}..., {spend.stored_cells} "
                            f"cells); {remedy}")
    # the very bytes recorded (and parsed when they were): their cell count is the record's
    return pq.read_table(pa.BufferReader(data))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _noise_tag(path: Path, spend_id: int, sha256: str) -> str:
    """The tag of the pending file of spend ``spend_id``'s stored noise (steps/pending.py)."""
    return pending_tag(path, f"noise_store/{spend_id}", sha256)


def _cells_text(data: bytes) -> str:
    try:
        return f"{_digest(data)[1]} cells"
    except (pa.ArrowInvalid, OSError):
        return "not a Parquet file"


def verify_stored(path: Path, spend: Spend) -> None:
    """The stored noise of ``spend`` is the file the ledger recorded (see
    :func:`read_stored`)."""
    read_stored(path, spend)


def region_chain(regions: pd.DataFrame, region_id: str) -> list[tuple[int, str]]:
    """``region_id`` and its ancestors as (level, region_id), finest first."""
    by_id = regions.set_index("region_id")
    if region_id not in by_id.index:
        raise ValueError(f"region={region_id!r}: not in the region table")
    chain: list[tuple[int, str]] = []
    current: str = region_id
    while current:
        row = by_id.loc[current]
        chain.append((int(row["level"]), current))
        current = str(row["parent_id"] or "")
    return chain


def plan_requests(plan: NoisePlan, regions: pd.DataFrame, day: date,
                  renoise_region: str | None = None) -> list[SpendRequest]:
    """The ledger slots of one day: all regions per level, or one region's chain."""
    if renoise_region is None:
        scopes = [(level, ALL_REGIONS) for level in plan.levels]
    else:
        scopes = [(lvl, rid) for lvl, rid in region_chain(regions, renoise_region)
                  if lvl in plan.levels]
    return [SpendRequest(Slot(plan.report, day, level, b.name, scope), b)
            for level, scope in scopes for b in plan.budgets]


def renoise_request(plan: NoisePlan, day: date, region: str, reason: str,
                    repeat: bool) -> ApprovalRequest:
    """A re-noise as its approver approves it and as :func:`noise_day` reserves it (the
    approval task and the noise step build it here, so their digests agree)."""
    return ApprovalRequest(report=plan.report, kind="renoise", days=(day,), reason=reason,
                           region=region, repeat=repeat, method_version=plan.method_version)


# The day's true cell sums by (level, metric), then region id: the noise step looks its
# domain's cells up here (a dict per metric is cheaper than a three-key merge per spend).
TrueCells = dict[tuple[int, str], dict[str, int]]


def domain_keys(plan: NoisePlan, regions: pd.DataFrame, spend: Spend
                ) -> tuple[int, list[str], list[str]]:
    """The spend's level, region ids and metrics: its domain is every (region, metric)
    pair, region-major."""
    level = spend.slot.level
    if spend.slot.region_scope == ALL_REGIONS:
        ids = regions.loc[regions["level"] == level, "region_id"].astype(str).tolist()
    else:
        ids = [spend.slot.region_scope]
    return level, ids, list(plan.group_cells[spend.slot.metric])


def domain_table(level: int, ids: list[str], metrics: list[str]) -> pa.Table:
    return pa.table({
        "level": pa.array(np.full(len(ids) * len(metrics), level, dtype=np.int8), pa.int8()),
        "region_id": pa.array(np.repeat(np.array(ids, dtype=object), len(metrics)), pa.string()),
        "metric": pa.array(np.tile(np.array(metrics, dtype=object), len(ids)), pa.string()),
    })


def domain_true_values(level: int, ids: list[str], metrics: list[str],
                       true_cells: TrueCells) -> np.ndarray:
    """The true value of each domain cell, in the domain's order (0 where absent)."""
    by_metric = [true_cells.get((level, metric), {}) for metric in metrics]
    return np.fromiter((cells.get(region_id, 0) for region_id in ids for cells in by_metric),
                       dtype=np.int64, count=len(ids) * len(metrics))


def draw_and_store(root: DataRoot, ledger: Ledger, plan: NoisePlan, regions: pd.DataFrame,
                   spend: Spend, booked: SpendRequest, true_cells: TrueCells,
                   rng: np.random.Generator) -> None:
    """Noise every cell of ``spend``'s domain with the budget ``booked`` for it (the request
    the ledger checked and reserved), record the noisy values' sha256 in the ledger and
    move them into place. Of racing draws for one spend, the first record wins; the
    others' values are dropped unseen and the winner's are used."""
    budget = booked_budget(spend, booked)
    keys = domain_keys(plan, regions, spend)
    cells = domain_table(*keys)
    true_values = domain_true_values(*keys, true_cells)
    noisy = add_discrete_laplace(true_values, epsilon=budget.cell_epsilon,
                                 sensitivity=budget.sensitivity, rng=rng)
    table = pa.table({
        "level": cells["level"],
        "region_id": cells["region_id"],
        "metric": cells["metric"],
        "noisy_value": pa.array(noisy, pa.int64()),
        "cell_epsilon": pa.array(np.full(len(cells), budget.cell_epsilon), pa.float64()),
        "sensitivity": pa.array(np.full(len(cells), budget.sensitivity), pa.int64()),
        "spend_id": pa.array(np.full(len(cells), spend.id), pa.int64()),
    }, schema=NOISE_SCHEMA)
    fault_point("noise.after_draw")
    target = noise_file(root, spend)
    make_dirs(target.parent)
    tmp = write_parquet_beside(table, target)
    pending = tmp
    try:
        digest, cells = file_digest(tmp)
        # named with the MAC of its sha256 before the record: adoptable after a crash
        pending = pending_path(target, _noise_tag(target, spend.id, digest))
        os.replace(tmp, pending)
        try:
            ledger.record_stored(spend.id, digest, cells)
        except NoiseRecordConflict:
            return  # another process recorded its draw first: that one is used
        fault_point("noise.after_store")
        try:
            os.replace(pending, target)  # over any unrecorded file found there
        except FileNotFoundError:
            pass  # a reader moved it into place already (verify_stored)
    finally:
        tmp.unlink(missing_ok=True)
        pending.unlink(missing_ok=True)


def booked_budget(spend: Spend, booked: SpendRequest) -> MetricBudget:
    """The budget to draw ``spend``'s noise with: the one ``booked`` for its slot, unless
    the ledger booked the spend at less (a spend reserved under an earlier policy and never
    stored), which is refused rather than drawn above what was paid."""
    if booked.slot != spend.slot or booked.fraction != 1.0:
        raise ValueError(f"ledger spend {spend.id} ({spend.slot.describe()}) is not the "
                         f"slot reserved with its budget ({booked.slot.describe()})")
    if booked.epsilon > spend.epsilon + EPS_TOLERANCE:
        raise PolicyMismatch(
            f"ledger spend {spend.id} ({spend.slot.describe()}, run "
            f"{spend.run_id[:40]!r}) was booked at epsilon {spend.epsilon!r} and has no "
            f"stored noise; the budget in force asks {booked.epsilon!r}, more than was "
            "paid. Nothing was drawn: re-noise the region-day explicitly with a reason "
            "(it is paid at the policy in force), or record the earlier epsilon with "
            "`python -m dp_ops ledger set-epsilon` for the rerun")
    return booked.budget


def _read_true_cells(root: DataRoot, report: str, day: date) -> TrueCells:
    path = root.bounded_file(report, day)
    if not path.is_file():
        raise FileNotFoundError(f"no bounded aggregates for {day} at {path}: run the "
                                "bound_contributions step first")
    table = pq.read_table(path, columns=["level", "region_id", "metric", "value"])
    cells: TrueCells = {}
    columns = (table[c].to_pylist() for c in ("level", "region_id", "metric", "value"))
    for level, region_id, metric, value in zip(*columns, strict=True):
        cells.setdefault((int(level), metric), {})[region_id] = 0 if value is None else value
    return cells


def week_law_refusal(ledger: Ledger, plan: NoisePlan, request: NoiseRequest) -> None:
    """For a plan with weeks (``terms_change_weekday``), refuse (:class:`BadRequest`,
    before anything is spent) a draw for ``request.day`` under other budgets than the other
    days of its week were drawn with: its weekly values sum seven draws of one law
    (docs/design.md, Symptoms dataset, noise terms change on a Monday). Only a new draw is
    checked (a re-noise, or a day not noised yet: a backfill under terms changed since); a
    rerun reuses what is stored."""
    weekday = plan.terms_change_weekday
    day = request.day
    if weekday is None or (not request.renoise and ledger.spends(plan.report, day)):
        return
    booked = {b.name: b.epsilon for b in plan.budgets}
    start = day - timedelta(days=(day.weekday() - weekday) % 7)
    for other in (start + timedelta(days=i) for i in range(7)):
        for s in ledger.spends(plan.report, other):
            want = booked.get(s.slot.metric)
            if (s.kind in ("noise", "renoise") and want is not None
                    and not math.isclose(s.epsilon, want, rel_tol=1e-12)):
                raise BadRequest(
                    f"date={day}: its week ({start} to {start + timedelta(days=6)}) was "
                    f"noised with {s.slot.metric} epsilon {s.epsilon!r} on {other}; this "
                    f"draw would use {want!r} (the terms in force), and a week drawn under "
                    "two laws has no weekly values. Nothing was spent. The epsilon of "
                    "that week's days cannot be changed any more: leave them as they are "
                    "(OPERATIONS.md, Changing the cap or an epsilon)")


def noise_day(root: DataRoot, plan: NoisePlan, request: NoiseRequest, *,
              ledger_url: str) -> StepResult:
    """Reserve, then draw and store (or reuse) the noisy values of ``request.day``.

    A re-noise (one region, with a reason) is refused before anything is spent when the
    day is never published (before ``plan.first_public_date``), or when the region was
    already re-noised that day by another run, unless ``repeat_renoise`` (recorded in the
    ledger's reason), and when the ledger holds no approval of this run's request
    (:func:`renoise_request`; the approval task or the CLI's ``--approved-by`` records
    it), and, for a plan with weeks (``terms_change_weekday``), a new draw under other
    budgets than the rest of its week (:func:`week_law_refusal`). First it makes the
    day's bounded aggregates file whole (:func:`dp_ops.steps.bound.finish_bounding`: the
    bounding shards added up), refusing, before any spend, when a shard is missing."""
    from dp_ops.regions import read_regions
    from dp_ops.steps.bound import finish_bounding

    day, run_id, region, renoise = request.day, request.run_id, request.region, request.renoise
    repeat_renoise, reason = request.repeat_renoise, request.reason
    if renoise and region is None:
        raise BadRequest("renoise=True needs a region: re-noising a whole day is a new "
                         "release of it; rerun one region at a time")
    if renoise and not reason.strip():
        raise BadRequest("renoise=True needs a reason; it is recorded in the ledger")
    if renoise and day < plan.first_public_date:
        raise BadRequest(
            f"date={day}: before the first public date {plan.first_public_date}; its values "
            "are never published (at most a baseline frozen once is built from them), so a "
            "re-noise would spend budget for nothing")
    finish_bounding(root, plan.report, day)
    regions = read_regions(root.regions_csv)
    if region is not None:
        region_chain(regions, region)  # validates the region id
    # a re-noise spends only with a recorded approval of exactly this request
    approval = (renoise_request(plan, day, region, reason, repeat_renoise)
                if renoise and region is not None else None)
    ledger = open_ledger(root, ledger_url)
    try:
        # nothing is spent while the ledger fails verification or a release in the data
        # root is not the one it recorded (a rollback, a planted or edited release)
        require_sound(root, ledger)
        week_law_refusal(ledger, plan, request)
        if renoise and repeat_renoise:
            reason = f"[repeat re-noise] {reason}"
        requests = plan_requests(plan, regions, day, region if renoise else None)
        reservation = ledger.reserve(
            requests, run_id=run_id, kind="renoise" if renoise else "noise", cap=plan.cap,
            terms=plan.ledger_terms,
            method_version=plan.method_version, reason=reason,
            refuse_repeat_of=region if renoise and not repeat_renoise else None,
            approval=approval)
        fault_point("noise.after_reserve")
        recorded = {s.id: s for s in ledger.spends(plan.report, day)}
        to_draw = []
        for spend in reservation.spends:
            known = recorded.get(spend.id, spend)
            if known.stored_sha256 is not None:
                verify_stored(noise_file(root, spend), known)  # stored: never drawn again
            else:
                # nothing recorded: a file at its path (a crash before the record, or
                # planted) is never adopted; the draw replaces it
                to_draw.append(spend)
        if to_draw:
            true_cells = _read_true_cells(root, plan.report, day)
            rng = noise_generator()
            booked = {r.slot: r for r in requests}
            for spend in to_draw:
                draw_and_store(root, ledger, plan, regions, spend, booked[spend.slot],
                               true_cells, rng)
            del true_cells
            by_id = {s.id: s for s in ledger.spends(plan.report, day)}
            for spend in to_draw:
                verify_stored(noise_file(root, spend), by_id[spend.id])
        spent = ledger.spent(plan.report, day)
    finally:
        ledger.dispose()
    reused = len(reservation.spends) - len(reservation.new_ids)
    return StepResult(
        f"noise for {day}: {len(reservation.new_ids)} slot(s) spent "
        f"(epsilon {reservation.spent_now:.4f}), {reused} reused; composed epsilon per "
        f"user-day for {day} is now {spent:.4f} (cap {plan.cap:.4f})",
        tuple(str(noise_file(root, s)) for s in reservation.spends))


def load_noisy_cells(root: DataRoot, report: str, day: date,
                     spends: list[Spend]) -> pd.DataFrame:
    """The current noisy value of every cell of ``day``: for each cell, the value of the
    latest noise or re-noise spend covering it. Raises if a spend's values are missing,
    except for a spend superseded by a later generation of its slot (a re-noise whose run
    died before storing, then asked for again by a new run: paid for, never seen)."""
    frames = []
    latest: dict[object, int] = {}
    for spend in spends:
        if spend.kind in VALUE_KINDS:
            latest[spend.slot] = max(latest.get(spend.slot, -1), spend.generation)
    for spend in spends:
        if spend.slot.report != report or spend.slot.day != day or spend.kind not in VALUE_KINDS:
            continue
        if spend.stored_sha256 is None and spend.generation < latest[spend.slot]:
            continue  # paid for, never drawn or never recorded: nothing of it was seen
        frames.append(read_stored(noise_file(root, spend), spend).to_pandas())
    if not frames:
        raise NoiseNotStored(f"no noisy values for {day}: run the noise step first")
    cells = pd.concat(frames, ignore_index=True)
    cells = cells.sort_values("spend_id").drop_duplicates(["level", "region_id", "metric"],
                                                          keep="last")
    return cells.reset_index(drop=True)
