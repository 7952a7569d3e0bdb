"""The privacy budget ledger (docs/design.md, Privacy budget ledger): append-only, atomic,
checked before noise.

Every noise draw is preceded by a *spend* row in the ledger. A spend names a slot
``(report, date, level, metric, region_scope)`` and a generation (0 for the first spend
of the slot, 1, 2, ... for later explicit ones: a day is noised in slots of scope ``*``,
so a region's first re-noise is generation 0 of the region-scoped slot, with kind
``renoise``, and the next re-noise of that region generation 1), the epsilon it costs
each user-day of that date, the kind (``noise``, ``renoise``, ``method_update``), the
method version, the run id, the reason and the time. Rows are only ever inserted: an
event, once written, never changes meaning. Only noise draws are spends: what is
computed from stored noisy values and public parameters (baselines, the reliability
rules, suppression, weekly sums, scaling factors) is post-processing and costs nothing.

Accounting: a user-day's data is read by every slot of its date, so the composed epsilon
per user-day of a date is the plain sum of the epsilons of that date's spends for the
report (basic composition, an upper bound: a region re-noise is charged to every
user-day of the date, not only to the region's users).

Atomicity: :meth:`Ledger.reserve` checks the report's recorded policy, the slots and the
cap and inserts in one transaction that holds the ledger's write lock: on SQLite the whole
database (``BEGIN IMMEDIATE``), on PostgreSQL a transaction-scoped advisory lock. Two
processes racing for one slot or for the last of the budget therefore serialise, and
exactly one wins; the loser sees the winner's spend (and reuses it) or is refused by the
cap.

Integrity (:mod:`dp_ops.privacy.ledger_schema`): every row of every table is an entry of a
hash chain computed from what this process inserted (a row read back otherwise is
refused), and the database itself refuses UPDATE and DELETE; every write transaction and
:meth:`Ledger.verify` refuse a schema other than the one dp_ops creates, and verify
recomputes the chain. Policy: the first spend of a report records its cap and terms
(each metric group's epsilon, sensitivity and cells per user-day, the method-update
fraction); a process configured otherwise is refused, every spend's budget
(:class:`SpendRequest`: the :class:`~dp_ops.privacy.plan.MetricBudget` its noise is drawn
from) must agree with the recorded terms, and :meth:`Ledger.set_policy` is the only way to
change them.

Approvals: a ``renoise`` or ``method_update`` reservation is refused
(:class:`ApprovalMissing`), before anything is written, unless the ledger holds an approval
of this run and this exact request (:class:`ApprovalRequest`, by its sha256), recorded by
:meth:`Ledger.record_approval` with an approver other than the requester. Approval is a
record, not the order of tasks in a DAG.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from dp_ops import requests as requests_check
from dp_ops.errors import (
    ApprovalMissing,
    BadRequest,
    BudgetExceeded,
    DerivedStateConflict,
    LedgerKeyMissing,
    LedgerSchemaError,
    NoiseRecordConflict,
    PolicyMismatch,
)
from dp_ops.privacy import ledger_key
from dp_ops.privacy.ledger_schema import (
    GENESIS,
    SCHEMA_TAMPERED,
    SCHEMA_VERSION,
    ChainCheck,
    append,
    budget_spend,
    derived_state,
    ledger_chain,
    ledger_meta,
    metadata,
    noise_store,
    report_policy,
    require_schema,
    schema_differences,
    spend_approval,
    verify_chain,
)
from dp_ops.privacy.plan import (
    CELLS_TERM,
    EPSILON_TERM,
    METHOD_UPDATE_FRACTION_TERM,
    SENSITIVITY_TERM,
    MetricBudget,
)

KINDS = ("noise", "renoise", "method_update")
# the kinds that spend beyond the daily run, each only with a recorded approval
APPROVED_KINDS = ("renoise", "method_update")
# who vouched for an approval's names: Airflow's human-in-the-loop response (the approver
# logged in to answer it), or an administrator at the command line
VIA_AIRFLOW, VIA_CLI = "airflow_hitl", "cli"
PERSON_MAX = 100
ALL_REGIONS = "*"
EPS_TOLERANCE = 1e-9

@dataclass(frozen=True, order=True)
class Slot:
    """One noised unit: every cell of ``metric`` at ``level`` on ``day`` within the scope
    (``*`` for all regions of the level, else one region id)."""

    report: str
    day: date
    level: int
    metric: str
    region_scope: str = ALL_REGIONS

    def describe(self) -> str:
        return (f"{self.report}/{self.day.isoformat()}/level {self.level}/{self.metric}"
                f"/region {self.region_scope}")


@dataclass(frozen=True)
class SpendRequest:
    """A slot to spend on and the budget that pays for it: the metric group's
    :class:`MetricBudget` (the noise step builds its sampler from it) and the ``fraction``
    of it spent (below 1 only for a method update). The epsilon booked is derived from
    them, never stated beside them; :meth:`Ledger.reserve` compares the budget and the
    fraction with the recorded policy."""

    slot: Slot
    budget: MetricBudget
    fraction: float = 1.0

    def __post_init__(self) -> None:
        if self.budget.name != self.slot.metric:
            raise ValueError(f"slot {self.slot.describe()}: paid from the budget of metric "
                             f"group {self.budget.name!r}, not its own")
        if not (math.isfinite(self.fraction) and 0 < self.fraction <= 1):
            raise ValueError(f"fraction={self.fraction!r} for {self.slot.describe()}: must "
                             "be in (0, 1]")

    @property
    def epsilon(self) -> float:
        """What the spend costs each user-day of its date: the group's epsilon (its cell
        epsilon times the cells a user-day touches) times the fraction."""
        return self.budget.epsilon * self.fraction

    @property
    def cell_epsilon(self) -> float:
        """The epsilon of each noisy cell the spend draws."""
        return self.budget.cell_epsilon * self.fraction

    @property
    def sensitivity(self) -> int:
        return self.budget.sensitivity


@dataclass(frozen=True)
class _Cost:
    """A spend's slot and epsilon, as the cap check reads them."""

    slot: Slot
    epsilon: float


@dataclass(frozen=True)
class Spend:
    """A row of the ledger."""

    id: int
    slot: Slot
    generation: int
    epsilon: float
    kind: str
    method_version: str
    run_id: str
    reason: str
    created_at: str
    # the recorded sha256 and cell count of the stored noisy values (None: not stored yet)
    stored_sha256: str | None = None
    stored_cells: int | None = None

    @classmethod
    def from_row(cls, row: Any) -> Spend:
        m = row._mapping  # once: each attribute access on a Row builds it again
        slot = Slot(m["report"], date.fromisoformat(m["day"]), m["level"], m["metric"],
                    m["region_scope"])
        return cls(m["id"], slot, m["generation"], m["epsilon"], m["kind"],
                   m["method_version"], m["run_id"], m["reason"], m["created_at"],
                   m.get("stored_sha256"), m.get("stored_cells"))


@dataclass(frozen=True)
class Reservation:
    """The outcome of :meth:`Ledger.reserve`: which spends cover the request and which of
    them this call created (``new``) rather than found (reused)."""

    spends: tuple[Spend, ...]
    new_ids: frozenset[int]

    @property
    def spent_now(self) -> float:
        return math.fsum(s.epsilon for s in self.spends if s.id in self.new_ids)


@dataclass(frozen=True)
class ApprovalRequest:
    """An extra spend as it is put to its approver: what the run will reserve (report,
    kind, dates, the region of a re-noise), why (``reason``) and how (the repeat flag, the
    method version, a method update's ``parameters`` as sorted name/value pairs). An
    approval is recorded under its :meth:`sha256`, and a reservation is checked against it:
    an approval of one request never covers another."""

    report: str
    kind: str
    days: tuple[date, ...]
    reason: str
    region: str | None = None
    repeat: bool = False
    method_version: str = ""
    parameters: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in APPROVED_KINDS:
            raise ValueError(f"kind={self.kind!r}: only {APPROVED_KINDS} need an approval")
        if not self.days:
            raise ValueError("days=(): an approval request names the dates it spends on")

    def canonical(self) -> str:
        """One text per request: sorted keys, ISO dates in order."""
        return json.dumps({
            "report": self.report, "kind": self.kind,
            "days": [d.isoformat() for d in sorted(self.days)], "reason": self.reason,
            "region": self.region, "repeat": self.repeat,
            "method_version": self.method_version,
            "parameters": dict(sorted(self.parameters))},
            sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def describe(self) -> str:
        days = sorted(self.days)
        when = date_range_label(days[0], days[-1]) if len(days) > 1 else days[0].isoformat()
        if self.kind == "renoise":
            return f"re-noise of {self.report} {when} region {self.region}"
        return f"method update {self.method_version} of {self.report} (dates {when})"


@dataclass(frozen=True)
class Approval:
    """A row of ``spend_approval``: ``approver`` approved request ``request_sha256``
    (``request``: its canonical text) of run ``run_id``, asked for by ``requester``."""

    id: int
    run_id: str
    report: str
    kind: str
    request_sha256: str
    request: str
    requester: str
    approver: str
    via: str
    decided_at: str
    created_at: str

    @classmethod
    def from_row(cls, row: Any) -> Approval:
        m = row._mapping
        return cls(m["id"], m["run_id"], m["report"], m["kind"], m["request_sha256"],
                   m["request"], m["requester"], m["approver"], m["via"], m["decided_at"],
                   m["created_at"])


def approval_mismatch(request: ApprovalRequest, requests: Sequence[SpendRequest], *,
                      kind: str, method_version: str, reason: str,
                      refuse_repeat_of: str | None) -> str | None:
    """How a reservation differs from the request it claims was approved, or None. The
    digest lookup finds an approval of ``request``; this makes sure ``request`` is the
    spend being reserved (the same kind, report, dates and method version, the approved
    region's chain, the approved repeat flag, a reason that carries the approved one)."""
    scopes = {r.slot.region_scope for r in requests}
    checks = [
        (request.kind == kind, f"kind {request.kind!r}, reserving {kind!r}"),
        ({r.slot.report for r in requests} == {request.report},
         f"report {request.report!r}"),
        ({r.slot.day for r in requests} == set(request.days),
         f"dates {sorted(d.isoformat() for d in request.days)}"),
        (request.method_version == method_version,
         f"method version {request.method_version!r}, reserving {method_version!r}"),
        (request.reason.strip() != "" and request.reason in reason,
         f"reason {requests_check.shown(request.reason)}"),
    ]
    if kind == "renoise":
        checks += [
            # one region's chain; every region only if that is what was approved
            (request.region in scopes
             and (ALL_REGIONS not in scopes or request.region == ALL_REGIONS),
             f"region {request.region!r}"),
            (request.repeat or refuse_repeat_of == request.region,
             "no repeat re-noise, reserving with the repeat check off"),
        ]
    wrong = [what for ok, what in checks if not ok]
    return None if not wrong else "approved " + "; ".join(wrong)


def _make_read_engine(url: str) -> Engine:
    """Reads need no write lock: on SQLite (WAL) they see the last committed state."""
    if url.startswith("sqlite"):
        return sa.create_engine(url, connect_args={"timeout": 120})
    return sa.create_engine(url, pool_pre_ping=True)


SQLITE_LOCK_WAIT_S = 120.0


def set_wal_mode(dbapi_conn: Any, wait_s: float = SQLITE_LOCK_WAIT_S) -> None:
    """Switch a SQLite ledger to WAL, waiting for other openers.

    Changing the journal mode needs an exclusive lock, and SQLite reports "database is
    locked" for it at once, without calling the busy handler, when several processes open a
    new ledger together (the first scheduled run's parallel tasks). So retry, with jitter,
    up to the same wait a write gets."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))  # jitter, not noise: no secrecy needed


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": 120})

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # let us issue BEGIN ourselves (pysqlite's implicit BEGIN is deferred)
            dbapi_conn.isolation_level = None
            dbapi_conn.execute("PRAGMA busy_timeout=120000")
            set_wal_mode(dbapi_conn)

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


# One PostgreSQL advisory lock serialises every write to a ledger (any role may take it;
# SELECT ... FOR UPDATE would need UPDATE rights the pipeline's role does not have).
_PG_LOCK_KEY = 0x6470_6C65_6467  # "dpledg"


@dataclass(frozen=True)
class Policy:
    """A report's recorded privacy policy (the row of ``report_policy`` in force)."""

    report: str
    cap: float
    terms: dict[str, float] = field(default_factory=dict)
    run_id: str = ""
    reason: str = ""
    created_at: str = ""

    def differences(self, cap: float, terms: Mapping[str, float]) -> list[str]:
        """What a process's configuration says that differs from this record."""
        out = []
        if not _same(self.cap, cap):
            out.append(f"cap: recorded {self.cap!r}, configured {cap!r}")
        for key in sorted(set(self.terms) | set(terms)):
            have, want = self.terms.get(key), terms.get(key)
            if have is None or want is None or not _same(have, want):
                out.append(f"{key}: recorded {have!r}, configured {want!r}")
        return out

    def budget_refusal(self, request: SpendRequest, kind: str) -> str | None:
        """How ``request`` (its budget, and for a method update the fraction) disagrees
        with the terms recorded here, or None. A term this record does not hold is not
        compared (a ledger whose policy predates it: :meth:`Ledger.reserve` records the
        configured value first); a group outside a policy that names groups is refused."""
        group = request.slot.metric
        budget = request.budget
        named = sorted(k[len(EPSILON_TERM):] for k in self.terms if k.startswith(EPSILON_TERM))
        if named and group not in named:
            return (f"metric group {group!r} is not in the recorded policy (its groups: "
                    f"{', '.join(named)})")
        asked = {EPSILON_TERM + group: budget.epsilon,
                 SENSITIVITY_TERM + group: float(budget.sensitivity),
                 CELLS_TERM + group: float(budget.contributions)}
        if kind == "method_update":
            asked[METHOD_UPDATE_FRACTION_TERM] = request.fraction
        elif request.fraction != 1.0:
            return f"a {kind} spends the whole budget; asked fraction {request.fraction!r}"
        wrong = [f"{key}: asked {value!r}, recorded {self.terms[key]!r}"
                 for key, value in asked.items()
                 if key in self.terms and not _same(self.terms[key], value)]
        return "; ".join(wrong) or None


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Ledger:
    """Append-only, hash-chained budget ledger behind a SQLAlchemy URL (SQLite file or
    PostgreSQL). Opening it creates the schema and its append-only guards if they are
    missing (which needs the owner role on PostgreSQL: ``python -m dp_ops ledger init``)."""

    def __init__(self, url: str, *, key: bytes | None = None) -> None:
        self.url = url
        # the ledger key (dp_ops.privacy.ledger_key), loaded when first needed: reading
        # spends needs none, writing a link or verifying one does
        self._key_bytes = key
        self.engine = _make_engine(url)
        self.read_engine = _make_read_engine(url)
        # called after every committed write (the data root's high-water mark of the chain;
        # dp_ops.steps.ledger_binding)
        self.after_write: Callable[[], None] | None = None
        try:
            self.ledger_id = self._existing_id() or self._open_schema()
        except Exception:
            self.dispose()
            raise

    def _existing_id(self) -> str | None:
        """The ledger's id when its schema is complete and at the newest migration (the
        common case: no write lock)."""
        from dp_ops.privacy import ledger_migrations

        with self.read_engine.connect() as conn:
            if not set(metadata.tables) <= set(sa.inspect(conn).get_table_names()):
                return None
            if ledger_migrations.current(conn) != ledger_migrations.head():
                return None
            meta = conn.execute(sa.select(ledger_meta).order_by(ledger_meta.c.id)).first()
        return None if meta is None else str(meta.ledger_id)

    def _open_schema(self) -> str:
        from dp_ops.privacy import ledger_migrations

        with self.engine.begin() as conn:
            self._lock(conn, schema=False)  # it may be older than this code, or empty
            have = set(sa.inspect(conn).get_table_names())
            if "budget_spend" in have and "ledger_chain" not in have:
                raise LedgerSchemaError(
                    f"the ledger at {safe_url(self.url)} was written by a version without "
                    "the hash chain and cannot be verified; keep it for the record and "
                    "start a new ledger with a new data root")
            at = ledger_migrations.current(conn)
            if at != ledger_migrations.head():
                try:
                    # the tables, their append-only guards, later changes: Alembic
                    # (privacy/migrations); a ledger from before them is stamped 0001
                    ledger_migrations.upgrade(conn)
                except sa.exc.ProgrammingError as exc:
                    if not any(m in str(exc) for m in ("permission denied",
                                                       "no schema has been selected")):
                        raise
                    state = ("has no schema" if not have & set(metadata.tables) else
                             f"is at schema migration {at or 'none (written before them)'}, "
                             "this version needs "
                             f"{ledger_migrations.head()},")
                    raise LedgerSchemaError(
                        f"the ledger at {safe_url(self.url)} {state} and this role may not "
                        "create or change its schema: run `python -m dp_ops ledger init` as "
                        "the ledger's owner role (the compose stack's airflow-init does at "
                        "every start; docs/deploy.md)") from exc
            meta = conn.execute(sa.select(ledger_meta).order_by(ledger_meta.c.id)).first()
            if meta is not None:
                return str(meta.ledger_id)
            require_schema(conn)  # (a database prepared by someone else)
            ledger_id = str(uuid.uuid4())
            if self._key_bytes is None:
                # a new ledger: its key is made now if none exists anywhere yet
                self._key_bytes = ledger_key.load_key(create=True)
            append(conn, "ledger_meta", {"ledger_id": ledger_id,
                                         "schema_version": SCHEMA_VERSION,
                                         "created_at": _now()}, self._key_bytes)
            return ledger_id

    def key(self) -> bytes:
        """The ledger key, loaded on first use and checked against the ledger's first
        link, so that a process holding another key is refused before it writes a link
        nobody could verify (:class:`LedgerKeyMissing`)."""
        if self._key_bytes is not None:
            return self._key_bytes
        key = ledger_key.load_key()
        with self.read_engine.connect() as conn:
            first = conn.execute(sa.select(ledger_chain).where(ledger_chain.c.seq == 1)).first()
            meta = conn.execute(sa.select(ledger_meta).order_by(ledger_meta.c.id)).first()
        if first is not None and meta is not None:
            from dp_ops.privacy.ledger_schema import link_sha256, row_sha256, row_values

            expected = link_sha256(key, GENESIS, 1, first.tbl, first.row_id, row_sha256(
                "ledger_meta", row_values("ledger_meta", meta._mapping)))
            if expected != first.chain_sha256:
                raise LedgerKeyMissing(
                    f"ledger {self.ledger_id}: its first chain link does not verify under "
                    f"this process's ledger key (id {ledger_key.key_id(key)}): the key is "
                    "not the one the ledger was created with, the ledger was written before "
                    "links were keyed, or its first entry was rewritten. Nothing was "
                    "written (OPERATIONS.md, 'The ledger key')")
        self._key_bytes = key
        return key

    def dispose(self) -> None:
        self.engine.dispose()
        self.read_engine.dispose()

    # -- reading ------------------------------------------------------------------
    def spends(self, report: str | None = None, day: date | None = None) -> list[Spend]:
        q = (sa.select(budget_spend, noise_store.c.sha256.label("stored_sha256"),
                       noise_store.c.cells.label("stored_cells"))
             .select_from(budget_spend.outerjoin(
                 noise_store, noise_store.c.spend_id == budget_spend.c.id))
             .order_by(budget_spend.c.id))
        if report is not None:
            q = q.where(budget_spend.c.report == report)
        if day is not None:
            q = q.where(budget_spend.c.day == day.isoformat())
        with self.read_engine.connect() as conn:
            return [Spend.from_row(r) for r in conn.execute(q)]

    def spent(self, report: str, day: date) -> float:
        """Composed epsilon per user-day of ``day`` for ``report``."""
        return math.fsum(s.epsilon for s in self.spends(report, day))

    def totals(self, report: str | None = None) -> dict[tuple[str, date], float]:
        """Composed epsilon per user-day of each (report, day) with a spend: the exact
        sum (``math.fsum``) of its spends, in (report, day) order. Reads only the three
        columns it sums (reading every spend as a ``Spend`` is costly at year end)."""
        q = (sa.select(budget_spend.c.report, budget_spend.c.day, budget_spend.c.epsilon)
             .order_by(budget_spend.c.id))
        if report is not None:
            q = q.where(budget_spend.c.report == report)
        out: dict[tuple[str, str], list[float]] = {}
        with self.read_engine.connect() as conn:
            for rep, day, epsilon in conn.execute(q):
                out.setdefault((rep, day), []).append(epsilon)
        return {(rep, date.fromisoformat(day)): math.fsum(v)
                for (rep, day), v in sorted(out.items())}

    def policy(self, report: str) -> Policy | None:
        with self.read_engine.connect() as conn:
            return _policy(conn, report)

    def policies(self) -> list[Policy]:
        """Every policy row ever recorded, oldest first (the history of set-cap etc.)."""
        with self.read_engine.connect() as conn:
            return [_to_policy(r) for r in conn.execute(
                sa.select(report_policy).order_by(report_policy.c.id))]

    def largest_daily_epsilons(self, report: str, first: date, last: date
                               ) -> dict[str, float]:
        """Metric group -> the largest epsilon of one slot (a group at one level) among
        the daily draws (kind ``noise``) of ``report`` on ``first``..``last``, as booked:
        after a recorded epsilon change the dates differ, and the largest never
        understates what a user-day of the period paid."""
        q = (sa.select(budget_spend.c.metric, sa.func.max(budget_spend.c.epsilon))
             .where(budget_spend.c.report == report, budget_spend.c.kind == "noise",
                    budget_spend.c.day >= first.isoformat(),
                    budget_spend.c.day <= last.isoformat())
             .group_by(budget_spend.c.metric))
        with self.read_engine.connect() as conn:
            return {str(m): float(e) for m, e in conn.execute(q)}

    def spends_with_terms(self, report: str) -> list[tuple[Spend, dict[str, float]]]:
        """Every spend of ``report``, oldest first, with the policy terms in force when it
        was booked: the report's last policy row before it in the hash chain (what the
        data statement prints date by date; ``{}`` before any policy was recorded)."""
        spends = {s.id: s for s in self.spends(report)}
        with self.read_engine.connect() as conn:
            terms = {int(r.id): json.loads(r.terms) for r in conn.execute(
                sa.select(report_policy.c.id, report_policy.c.terms)
                .where(report_policy.c.report == report))}
            order = conn.execute(
                sa.select(ledger_chain.c.tbl, ledger_chain.c.row_id)
                .where(ledger_chain.c.tbl.in_(("budget_spend", "report_policy")))
                .order_by(ledger_chain.c.seq)).all()
        in_force: dict[str, float] = {}
        out = []
        for tbl, row_id in order:
            if tbl == "report_policy" and row_id in terms:
                in_force = terms[row_id]
            elif tbl == "budget_spend" and row_id in spends:
                out.append((spends[row_id], in_force))
        return out

    def derived_sha256(self, report: str, name: str) -> str | None:
        """The sha256 of the current version of derived file ``name``, if recorded."""
        versions = self.derived_versions(report, name)
        return versions[-1] if versions else None

    def derived_names(self, report: str) -> list[str]:
        """Every derived file recorded for ``report``."""
        with self.read_engine.connect() as conn:
            return sorted(set(conn.execute(sa.select(derived_state.c.name).where(
                derived_state.c.report == report)).scalars()))

    def derived_current(self, report: str, prefix: str) -> dict[str, str]:
        """The current sha256 of every derived file of ``report`` whose name starts with
        ``prefix`` (one query: the release records behind a verify)."""
        out: dict[str, str] = {}
        with self.read_engine.connect() as conn:
            for name, sha in conn.execute(
                    sa.select(derived_state.c.name, derived_state.c.sha256).where(
                        derived_state.c.report == report,
                        derived_state.c.name.startswith(prefix, autoescape=True))
                    .order_by(derived_state.c.id)):
                out[str(name)] = str(sha)
        return out

    def derived_versions(self, report: str, name: str) -> list[str]:
        """The sha256 of every recorded version of derived file ``name``, oldest first."""
        with self.read_engine.connect() as conn:
            return [str(r.sha256) for r in conn.execute(
                sa.select(derived_state.c.sha256).where(
                    derived_state.c.report == report, derived_state.c.name == name)
                .order_by(derived_state.c.id))]

    def approval(self, request: ApprovalRequest, *, run_id: str) -> Approval | None:
        """The recorded approval of ``request`` for run ``run_id``, if any."""
        with self.read_engine.connect() as conn:
            return _approval(conn, run_id, request.sha256())

    def approvals(self, run_id: str | None = None) -> list[Approval]:
        """Every recorded approval (of run ``run_id``), oldest first."""
        q = sa.select(spend_approval).order_by(spend_approval.c.id)
        if run_id is not None:
            q = q.where(spend_approval.c.run_id == run_id)
        with self.read_engine.connect() as conn:
            return [Approval.from_row(r) for r in conn.execute(q)]

    def head(self) -> tuple[int, str]:
        """(seq, chain_sha256) of the last chain entry."""
        with self.read_engine.connect() as conn:
            row = conn.execute(sa.select(ledger_chain.c.seq, ledger_chain.c.chain_sha256)
                               .order_by(ledger_chain.c.seq.desc()).limit(1)).first()
        return (0, GENESIS) if row is None else (int(row.seq), str(row.chain_sha256))

    def chain_sha256(self, seq: int) -> str | None:
        """The chain hash of entry ``seq``, or None if the chain is shorter."""
        with self.read_engine.connect() as conn:
            return conn.execute(sa.select(ledger_chain.c.chain_sha256).where(
                ledger_chain.c.seq == seq)).scalar_one_or_none()

    def _written(self) -> None:
        if self.after_write is not None:
            self.after_write()

    def verify(self) -> ChainCheck:
        """Recompute the hash chain and compare the ledger's whole schema with the one
        dp_ops creates (:func:`schema_differences`: guards, and nothing else).

        One snapshot for the chain and every table, or a write landing between two reads
        would look like a deleted row: on SQLite the write lock (BEGIN IMMEDIATE; a verify
        is short), on PostgreSQL a REPEATABLE READ transaction."""
        key = self._key_bytes or ledger_key.load_key()
        if self.engine.dialect.name == "sqlite":
            with self.engine.begin() as conn:
                return _verify(conn, key)
        with self.read_engine.connect() as conn:
            snapshot = conn.execution_options(isolation_level="REPEATABLE READ")
            with snapshot.begin():
                return _verify(snapshot, key)

    # -- writing ------------------------------------------------------------------
    def record_stored(self, spend_id: int, sha256: str, cells: int) -> None:
        """Record the sha256 and cell count of a spend's stored noisy values, once. A
        second record of the same values is a no-op; of other values, a refusal."""
        _check_sha(sha256)
        with self.engine.begin() as conn:
            self._lock(conn)
            found = conn.execute(sa.select(noise_store).where(
                noise_store.c.spend_id == spend_id)).first()
            if found is None:
                append(conn, "noise_store", {"spend_id": spend_id, "sha256": sha256,
                                             "cells": int(cells), "created_at": _now()},
                       self.key())
        if found is None:
            self._written()
            return
        if found.sha256 != sha256 or found.cells != cells:
            raise NoiseRecordConflict(
                f"ledger spend {spend_id}: its stored noise was recorded with sha256 "
                f"{found.sha256} ({found.cells} cells), not {sha256} ({cells} cells); "
                "noise is drawn once and never replaced")

    def record_derived(self, report: str, name: str, sha256: str, *,
                       replaces: str | None = None) -> None:
        """Record a version of a derived file. ``replaces=None``: the first and only
        version (a frozen file); recording the same sha256 again is a no-op. Otherwise
        ``replaces`` must be the current version's sha256 (the file grows by appends)."""
        _check_sha(sha256)
        with self.engine.begin() as conn:
            self._lock(conn)
            current = _derived(conn, report, name)
            have = None if current is None else str(current.sha256)
            if have == sha256:
                return
            if have != replaces:
                raise DerivedStateConflict(
                    f"{report}/{name}: the ledger's current version is sha256 {have}, not "
                    f"{replaces}; a derived file is never replaced behind the ledger's back")
            append(conn, "derived_state", {"report": report, "name": name, "sha256": sha256,
                                           "replaces": replaces or "", "created_at": _now()},
                   self.key())
        self._written()

    def record_approval(self, request: ApprovalRequest, *, run_id: str,
                        requester: str | None, approver: str | None, via: str,
                        decided_at: str | None = None) -> Approval:
        """Record that ``approver`` approved ``request`` of run ``run_id``, which
        ``requester`` asked for. Refused (:class:`ApprovalMissing`, nothing recorded) when
        either name is missing or they are the same person (compared without case): nobody
        approves their own spend, and a run whose requester is unknown cannot be shown not
        to be. The first approval of a run's request stands; recording it again (a retry)
        returns it."""
        if via not in (VIA_AIRFLOW, VIA_CLI):
            raise ValueError(f"via={via!r}: expected {VIA_AIRFLOW!r} or {VIA_CLI!r}")
        requests_check.run_id(run_id)
        requests_check.reason(request.reason)
        what = f"{request.describe()} by run {requests_check.shown(run_id)}"
        who = (requester or "").strip()
        by = (approver or "").strip()
        if not who:
            raise ApprovalMissing(
                f"{what}: the run has no known requester, so nobody can be shown not to be "
                "approving their own spend; nothing was recorded or spent. Request it as "
                "yourself (the Airflow UI or REST API), or at the command line name "
                "yourself with --requested-by")
        if not by:
            raise ApprovalMissing(f"{what}: no approver named; nothing was recorded or spent")
        for name, value in (("requester", who), ("approver", by)):
            requests_check.plain_text(value, field=name, max_length=PERSON_MAX)
        if who.casefold() == by.casefold():
            raise ApprovalMissing(
                f"{what}: the approver {requests_check.shown(by)} is the requester; an "
                "extra spend needs the approval of someone else. Nothing was recorded or "
                "spent")
        digest = request.sha256()
        with self.engine.begin() as conn:
            self._lock(conn)
            found = _approval(conn, run_id, digest)
            if found is None:
                row_id = append(conn, "spend_approval", {
                    "run_id": run_id, "report": request.report, "kind": request.kind,
                    "request_sha256": digest, "request": request.canonical(),
                    "requester": who, "approver": by, "via": via,
                    "decided_at": decided_at or _now(), "created_at": _now()}, self.key())
                found = Approval.from_row(conn.execute(sa.select(spend_approval).where(
                    spend_approval.c.id == row_id)).one())
                written = True
            else:
                written = False
        if written:
            self._written()
        return found

    def require_approval(self, request: ApprovalRequest, *, run_id: str) -> Approval:
        """The approval of ``request`` for run ``run_id``, or :class:`ApprovalMissing`
        (for a step that reuses spends this run's request already reserved)."""
        with self.read_engine.connect() as conn:
            return _required_approval(conn, request, run_id)

    def set_policy(self, report: str, *, reason: str, run_id: str, cap: float | None = None,
                   terms: Mapping[str, float] | None = None,
                   change_weekday: int | None = None) -> Policy:
        """Record a new policy for ``report`` (an explicit command, with a reason): the
        current one with ``cap`` and/or the given ``terms`` replaced. A cap below what a
        date has already spent is refused: no state over the cap can arise. New terms
        apply to every spend booked after them, so from the day after the last date
        spent on; with ``change_weekday`` (a report whose values are summed by week) a
        change of a noise term is refused unless that day falls on this weekday
        (:func:`terms_change_refusal`), under the same lock as the record."""
        requests_check.run_id(run_id)
        requests_check.reason(reason)
        if not reason.strip():
            raise BadRequest("reason='': say why the policy changes; it is recorded")
        if cap is not None and not (math.isfinite(cap) and cap > 0):
            raise BadRequest(f"cap={cap!r}: must be a finite number > 0")
        for key, value in (terms or {}).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise BadRequest(f"{key}={value!r}: must be a finite number > 0")
            if key.startswith((SENSITIVITY_TERM, CELLS_TERM)) and not float(value).is_integer():
                raise BadRequest(f"{key}={value!r}: must be a whole number >= 1")
        with self.engine.begin() as conn:
            self._lock(conn)
            current = _policy(conn, report)
            if current is None:
                raise BadRequest(f"report {report!r} has no recorded policy yet: its first "
                                 "spend records the configured one")
            # a group's sensitivity and cells may be added to a policy that predates them
            unknown = sorted(set(terms or {}) - set(current.terms)
                             - set(predated_terms(current.terms, terms or {})))
            if unknown:
                raise BadRequest(f"{', '.join(unknown)}: not a term of {report}'s policy "
                                 f"(known: {', '.join(sorted(current.terms))})")
            changed = sorted(k for k, v in (terms or {}).items()
                             if k != METHOD_UPDATE_FRACTION_TERM
                             and not (k in current.terms and _same(current.terms[k], v)))
            if change_weekday is not None and changed:
                last = conn.execute(sa.select(sa.func.max(budget_spend.c.day)).where(
                    budget_spend.c.report == report)).scalar_one_or_none()
                refusal = terms_change_refusal(
                    report, changed, None if last is None else date.fromisoformat(last),
                    change_weekday)
                if refusal is not None:
                    raise BadRequest(refusal)
            new_cap = current.cap if cap is None else float(cap)
            worst = _most_spent(conn, report)
            if worst is not None and worst[1] > new_cap + EPS_TOLERANCE:
                raise BudgetExceeded(
                    f"cap={new_cap!r}: date {worst[0]} of {report} has already spent "
                    f"{worst[1]:.6f} per user-day; a cap below that would leave it over")
            new_terms = {**current.terms, **{k: float(v) for k, v in (terms or {}).items()}}
            self._insert_policy(conn, report, new_cap, new_terms, run_id, reason)
            found = _policy(conn, report)
        assert found is not None
        self._written()
        return found

    def reserve(
        self,
        requests: Sequence[SpendRequest],
        *,
        run_id: str,
        kind: str,
        cap: float,
        method_version: str,
        reason: str = "",
        refuse_repeat_of: str | None = None,
        terms: Mapping[str, float] | None = None,
        approval: ApprovalRequest | None = None,
    ) -> Reservation:
        """Atomically cover every requested slot with a spend, or refuse before any noise.

        ``kind="noise"``: a slot already noised is reused (no spend; a retry or a second
        run); otherwise generation 0 is spent. ``kind="renoise"`` or ``"method_update"``:
        a new generation is spent (an explicit, recorded re-noise), unless the slot's
        latest spend has that kind and this ``run_id``: that is a retry of the same run
        (Airflow keeps the run id across retries), which reuses it. Spends that
        would take any date past ``cap`` raise :class:`BudgetExceeded` naming the date, the
        slot, the spent and requested epsilon and the cap; nothing is written then. With
        ``refuse_repeat_of`` (a region id), a re-noise of that region's own slot that
        another run already re-noised is refused (:class:`BadRequest`), under the same
        lock as the spend, so two runs racing cannot both pass.

        ``cap`` and ``terms`` are this process's configured policy for each report
        requested: the first spend of a report records them; afterwards a process whose
        cap or terms differ from the recorded policy is refused
        (:class:`PolicyMismatch`), before anything is written. A policy recorded before
        groups' sensitivity and cells were terms gets the configured ones recorded (a
        policy row of its own) by the first reservation that passes them. Then every
        request's budget (epsilon, sensitivity, cells per user-day) and, for a method
        update, its fraction must agree with the terms in force
        (:meth:`Policy.budget_refusal`), reused slots included, or the reservation is
        refused (:class:`PolicyMismatch`) with nothing written: the epsilon booked is the
        one the noise is drawn with, and only a recorded policy command changes it.

        ``kind="renoise"`` or ``"method_update"`` needs ``approval``, the request as its
        approver saw it: it must describe this reservation (:func:`approval_mismatch`), and
        the ledger must hold an approval of it for ``run_id``
        (:meth:`record_approval`); else :class:`ApprovalMissing`, before anything is
        written (a retry of the run finds the same approval).
        """
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}: must be one of {KINDS}")
        if kind not in APPROVED_KINDS and approval is not None:
            raise ValueError(f"kind={kind!r} needs no approval; one was given")
        # what a person typed reaches the ledger's rows and `ledger --spends`: refuse
        # control characters and floods before anything is written
        requests_check.run_id(run_id)
        requests_check.reason(reason)
        if not requests:
            return Reservation((), frozenset())
        seen: set[Slot] = set()
        for r in requests:
            if r.slot in seen:
                raise ValueError(f"slot {r.slot.describe()} is requested twice in one "
                                 "reservation")
            seen.add(r.slot)
        for r in requests:
            if not (r.epsilon > 0 and math.isfinite(r.epsilon)):
                raise ValueError(f"epsilon={r.epsilon!r} for {r.slot.describe()}: must be > 0")
        if not (math.isfinite(cap) and cap > 0):
            raise ValueError(f"cap={cap!r}: must be a finite number > 0")
        if kind in APPROVED_KINDS:
            if approval is None:
                raise ApprovalMissing(
                    f"a {kind} reservation by run {requests_check.shown(run_id)} came "
                    "without the request its approver approved; nothing was spent")
            wrong = approval_mismatch(approval, requests, kind=kind,
                                      method_version=method_version, reason=reason,
                                      refuse_repeat_of=refuse_repeat_of)
            if wrong is not None:
                raise ApprovalMissing(
                    f"{approval.describe()} by run {requests_check.shown(run_id)}: the "
                    f"approval given is not for this reservation ({wrong}); nothing was "
                    "spent")
        now = _now()
        key = self.key()
        with self.engine.begin() as conn:
            self._lock(conn)
            if approval is not None:
                # under the lock, before anything (a first-use policy row) is written
                _required_approval(conn, approval, run_id)
            for report in sorted({r.slot.report for r in requests}):
                policy = self._ensure_policy(conn, report, cap, terms or {}, run_id)
                _check_budgets(policy, [r for r in requests if r.slot.report == report],
                               kind)
            chosen: list[Spend] = []
            to_insert: list[dict[str, Any]] = []
            for r in requests:
                existing = self._slot_spends(conn, r.slot)
                if kind == "renoise" and refuse_repeat_of == r.slot.region_scope:
                    earlier = sorted({s.run_id for s in existing
                                      if s.kind == "renoise" and s.run_id != run_id})
                    if earlier:
                        raise BadRequest(
                            f"region={refuse_repeat_of!r} date={r.slot.day}: already "
                            f"re-noised by run(s) "
                            f"{', '.join(requests_check.shown(x) for x in earlier[:3])}; "
                            "each re-noise publishes another noisy version of the same "
                            "cells. To re-noise again, set repeat_renoise (recorded in the "
                            "ledger with the reason)")
                if kind == "noise" and existing:
                    chosen.append(existing[0])
                    continue
                if existing and existing[-1].kind == kind and existing[-1].run_id == run_id:
                    # the same run asking again: an Airflow retry after a crash between
                    # this reservation and the store. Its draw was never seen; reuse it.
                    chosen.append(existing[-1])
                    continue
                generation = (existing[-1].generation + 1) if existing else 0
                to_insert.append({
                    "report": r.slot.report, "day": r.slot.day.isoformat(),
                    "level": r.slot.level, "metric": r.slot.metric,
                    "region_scope": r.slot.region_scope, "generation": generation,
                    "epsilon": float(r.epsilon), "kind": kind,
                    "method_version": method_version, "run_id": run_id,
                    "reason": reason, "created_at": now,
                })
            self._check_cap(conn, to_insert, cap)
            new_ids: set[int] = set()
            for row in to_insert:
                new_id = append(conn, "budget_spend", row, key)
                new_ids.add(new_id)
                chosen.append(Spend(id=new_id, slot=Slot(
                    row["report"], date.fromisoformat(row["day"]), row["level"],
                    row["metric"], row["region_scope"]), generation=row["generation"],
                    epsilon=row["epsilon"], kind=kind, method_version=method_version,
                    run_id=run_id, reason=reason, created_at=now))
        self._written()  # also a first-use policy row, when no spend was new
        return Reservation(tuple(sorted(chosen, key=lambda s: s.id)), frozenset(new_ids))

    # -- internals ----------------------------------------------------------------
    def _lock(self, conn: Connection, *, schema: bool = True) -> None:
        """Serialise writers: SQLite's BEGIN IMMEDIATE already holds the database's write
        lock; on PostgreSQL, one advisory lock per transaction. Then, with ``schema``,
        refuse a ledger whose schema is not the one dp_ops creates (its triggers would run
        inside this transaction): :func:`require_schema`."""
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        if schema:
            require_schema(conn)

    def _ensure_policy(self, conn: Connection, report: str, cap: float,
                       terms: Mapping[str, float], run_id: str) -> Policy:
        """The policy in force for ``report`` after recording the configured one at first
        use (or the group terms a recorded policy predates), or :class:`PolicyMismatch`."""
        current = _policy(conn, report)
        if current is None:
            self._insert_policy(conn, report, float(cap), {k: float(v) for k, v in
                                                           terms.items()},
                                run_id, "first use: the configured policy")
            found = _policy(conn, report)
            assert found is not None
            return found
        missing = predated_terms(current.terms, terms)
        differs = current.differences(cap, {k: v for k, v in terms.items()
                                            if k not in missing})
        if differs:
            raise PolicyMismatch(
                f"report {report!r}: this process's configuration differs from the privacy "
                f"policy recorded in the ledger ({'; '.join(differs)}); recorded "
                f"{current.created_at} by {requests_check.shown(current.run_id)} "
                f"({requests_check.shown(current.reason)}). Nothing was spent. To change "
                "the policy, record it first with `python -m dp_ops ledger set-cap` or "
                "`set-epsilon` (with a reason), then run with the matching configuration")
        if not missing:
            return current
        self._insert_policy(conn, report, current.cap, {**current.terms, **missing}, run_id,
                            "recorded the configured sensitivity and cells per user-day of "
                            "each metric group, which the policy in force predates")
        found = _policy(conn, report)
        assert found is not None
        return found

    def _insert_policy(self, conn: Connection, report: str, cap: float,
                       terms: Mapping[str, float], run_id: str, reason: str) -> None:
        append(conn, "report_policy", {
            "report": report, "cap": float(cap),
            "terms": json.dumps(dict(sorted(terms.items())), separators=(",", ":")),
            "run_id": run_id, "reason": reason, "created_at": _now()}, self.key())

    def _slot_spends(self, conn: Connection, slot: Slot) -> list[Spend]:
        q = (sa.select(budget_spend)
             .where(budget_spend.c.report == slot.report,
                    budget_spend.c.day == slot.day.isoformat(),
                    budget_spend.c.level == slot.level,
                    budget_spend.c.metric == slot.metric,
                    budget_spend.c.region_scope == slot.region_scope)
             .order_by(budget_spend.c.generation))
        return [Spend.from_row(r) for r in conn.execute(q)]

    def _check_cap(self, conn: Connection, rows: Iterable[dict[str, Any]], cap: float) -> None:
        def spent(report: str, day: date) -> float:
            return math.fsum(conn.execute(
                sa.select(budget_spend.c.epsilon).where(
                    budget_spend.c.report == report,
                    budget_spend.c.day == day.isoformat())).scalars())

        requests = [_Cost(Slot(row["report"], date.fromisoformat(row["day"]),
                                row["level"], row["metric"], row["region_scope"]),
                           row["epsilon"]) for row in rows]
        refusal = cap_refusal(requests, spent, cap)
        if refusal is not None:
            raise BudgetExceeded(refusal + "; no noise was drawn")


def cap_refusal(requests: Iterable[SpendRequest | _Cost],
                spent: Callable[[str, date], float], cap: float) -> str | None:
    """Why spending ``requests`` would take a date past ``cap`` (the first slot that would,
    with the spent and requested epsilon), or None if every date stays within it.
    ``spent(report, day)`` is the composed epsilon a date has spent so far. The ledger's
    own check, and what an approval shows before asking (:mod:`dp_ops.privacy.preview`)."""
    pending: dict[tuple[str, date], float] = {}
    for r in requests:
        key = (r.slot.report, r.slot.day)
        so_far = pending.get(key)
        if so_far is None:
            so_far = spent(*key)
        if so_far + r.epsilon > cap + EPS_TOLERANCE:
            return (f"privacy budget refused for date {r.slot.day}, slot "
                    f"{r.slot.describe()}: spent {so_far:.4f} + requested {r.epsilon:.4f} "
                    f"would exceed the per-user-day cap {cap:.4f} for report "
                    f"{r.slot.report!r}")
        pending[key] = so_far + r.epsilon
    return None


def predated_terms(recorded: Mapping[str, float], configured: Mapping[str, float]
                   ) -> dict[str, float]:
    """The configured sensitivity and cells of groups whose epsilon ``recorded`` holds
    but not them (a policy recorded before they were terms): recorded at the next
    reservation, then enforced like the rest."""
    out = {}
    for key, value in configured.items():
        prefix = next((p for p in (SENSITIVITY_TERM, CELLS_TERM) if key.startswith(p)), None)
        if (prefix is not None and key not in recorded
                and EPSILON_TERM + key[len(prefix):] in recorded):
            out[key] = float(value)
    return out


def _check_budgets(policy: Policy, requests: Sequence[SpendRequest], kind: str) -> None:
    """:class:`PolicyMismatch` for the first request whose budget disagrees with
    ``policy`` (:meth:`Policy.budget_refusal`), naming what was asked, what is recorded and
    the remedy."""
    for r in requests:
        wrong = policy.budget_refusal(r, kind)
        if wrong is not None:
            raise PolicyMismatch(
                f"report {policy.report!r}, metric group {r.slot.metric!r}: a {kind} spend "
                f"of {r.slot.describe()} disagrees with the privacy policy recorded in the "
                f"ledger ({wrong}); recorded {policy.created_at} by "
                f"{requests_check.shown(policy.run_id)} "
                f"({requests_check.shown(policy.reason)}). Nothing was spent: noise is "
                "drawn with the budget the ledger books, so that budget must be the "
                "policy's. To change the policy, record it first with `python -m dp_ops "
                "ledger set-epsilon REPORT TERM VALUE --reason ...` (TERM epsilon.GROUP, "
                "sensitivity.GROUP, cells.GROUP or method_update_fraction), then run with "
                "the matching configuration")


WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def terms_change_refusal(report: str, terms: Sequence[str], last_spent: date | None,
                         weekday: int) -> str | None:
    """Why a change of ``report``'s noise ``terms`` may not be recorded now, or None. The
    new terms apply from the next date noised, the day after ``last_spent`` (any date when
    nothing is spent yet); a report whose values are summed by week needs that day to be
    ``weekday``, or one week would hold days drawn under two laws. The refusal names the
    next such day and when to record the change instead."""
    if last_spent is None:
        return None
    effective = last_spent + timedelta(days=1)
    if effective.weekday() == weekday:
        return None
    allowed = effective + timedelta(days=(weekday - effective.weekday()) % 7)
    name = WEEKDAYS[weekday]
    return (f"report {report!r}, {', '.join(terms)}: new noise terms apply from the next "
            f"date noised, {effective} (a {WEEKDAYS[effective.weekday()]}: the day after "
            f"the last date spent on, {last_spent}); {report} sums its values by week, so "
            f"its noise terms change on a {name} only, or one week would be drawn under "
            "two laws and its weekly values could not be released. Nothing was recorded. "
            f"Record the change once {allowed - timedelta(days=1)} is noised and before "
            f"{allowed} is: it then takes effect on {name} {allowed} (OPERATIONS.md, "
            "Changing the cap or an epsilon)")


def _verify(conn: Connection, key: bytes) -> ChainCheck:
    check = verify_chain(conn, key)
    if check.ok:
        wrong = schema_differences(conn)
        if wrong:
            return ChainCheck(check.entries, check.head,
                              f"{SCHEMA_TAMPERED}: {'; '.join(wrong)}")
    return check


def _approval(conn: Connection, run_id: str, digest: str) -> Approval | None:
    row = conn.execute(sa.select(spend_approval).where(
        spend_approval.c.run_id == run_id, spend_approval.c.request_sha256 == digest)
        .order_by(spend_approval.c.id).limit(1)).first()
    return None if row is None else Approval.from_row(row)


def _required_approval(conn: Connection, request: ApprovalRequest, run_id: str) -> Approval:
    found = _approval(conn, run_id, request.sha256())
    if found is None or found.approver.casefold() == found.requester.casefold():
        raise ApprovalMissing(
            f"{request.describe()} by run {requests_check.shown(run_id)}: no approval is "
            "recorded in the ledger for this run and this exact request (sha256 "
            f"{request.sha256()[:16]}...). It is recorded only when someone other than the "
            "requester answers Approve in the run's approve_spend task (Browse > Required "
            "Actions; DP_SPEND_APPROVERS), or at the command line with --approved-by; a "
            "task marked successful by hand approves nothing. Nothing was spent")
    return found


def _to_policy(row: Any) -> Policy:
    return Policy(str(row.report), float(row.cap), json.loads(row.terms), str(row.run_id),
                  str(row.reason), str(row.created_at))


def _policy(conn: Connection, report: str) -> Policy | None:
    row = conn.execute(sa.select(report_policy).where(report_policy.c.report == report)
                       .order_by(report_policy.c.id.desc()).limit(1)).first()
    return None if row is None else _to_policy(row)


def _derived(conn: Connection, report: str, name: str) -> Any:
    return conn.execute(sa.select(derived_state).where(
        derived_state.c.report == report, derived_state.c.name == name)
        .order_by(derived_state.c.id.desc()).limit(1)).first()


def _most_spent(conn: Connection, report: str) -> tuple[str, float] | None:
    per_day: dict[str, list[float]] = {}
    for day, eps in conn.execute(sa.select(budget_spend.c.day, budget_spend.c.epsilon)
                                 .where(budget_spend.c.report == report)):
        per_day.setdefault(day, []).append(eps)
    if not per_day:
        return None
    return max(((d, math.fsum(v)) for d, v in per_day.items()), key=lambda t: t[1])


def _check_sha(sha256: str) -> None:
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"sha256={sha256[:70]!r}: expected 64 lowercase hex digits")


def safe_url(url: str) -> str:
    """The URL without its password, for messages and records."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "(the configured ledger URL)"


def date_range_label(first: date, last: date) -> str:
    """``D`` for one date, ``D1..D2`` for a range (the ledger's texts)."""
    return first.isoformat() if first == last else f"{first.isoformat()}..{last.isoformat()}"
