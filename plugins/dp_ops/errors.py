"""Every exception the pipeline raises on purpose, in one place.

Imports nothing: any module (the privacy kernel, the engines, the Airflow adapters) can
name these without pulling in pandas, DuckDB, Great Expectations or Airflow.

Two families, and the Airflow adapters decide retry by family (``dp_ops.airflow.runtime``):

- :class:`Refusal`: a decision that a retry cannot change (a budget refusal, a failed
  release gate, a bad request). The task fails at once, without retry, and a human
  decides what happens next.
- everything else: a failure that may go away (a missing file that a rerun of an earlier
  task writes, an engine error); Airflow's retries apply.

Every message names the file, row, field or parameter at fault, and never holds raw rows,
user ids or un-noised aggregates (messages reach the task log and the UI).
"""

from __future__ import annotations


class DpOpsError(Exception):
    """Base of every error the pipeline raises on purpose."""


class Refusal(DpOpsError):
    """A refusal a retry cannot change: fail the task without retry."""


# -- configuration and requests -----------------------------------------------------------

class ConfigError(DpOpsError, ValueError):
    """A configuration field holds a bad value; the message names field and value."""


class FaultConfigError(DpOpsError, ValueError):
    """``DP_FAULT`` names a point that does not exist or a bad count."""


class BadRequest(Refusal, ValueError):
    """A request cannot be served as asked (a trigger-form value, a rendered template
    value, a CLI argument); the message names the field and why."""


class RerunRequestError(BadRequest):
    """The rerun request cannot be served; the message says which field and why."""


class MethodUpdateError(BadRequest):
    """The update request cannot be served; the message names the field and why."""


# -- input ------------------------------------------------------------------------------

class RegionTableError(DpOpsError, ValueError):
    """The region table is malformed; the message names the file and the problem."""


class IngestError(DpOpsError, RuntimeError):
    """A raw partition or file cannot be ingested; the message names it."""


class BoundingError(DpOpsError, RuntimeError):
    """Contribution bounding cannot run or is incomplete (no clean rows for the day, a
    shard's partial sums missing); the message names the files and the task to rerun."""


class SparkEngineError(DpOpsError, RuntimeError):
    """The Spark engine cannot run (no Java) or wrote an unexpected result."""


# -- privacy budget ledger and stored noise -----------------------------------------------

class LedgerError(Refusal, RuntimeError):
    """Base class of ledger refusals."""


class BudgetExceeded(LedgerError):
    """A spend would take a user-day past the report's cap; nothing was drawn."""


class NoiseNotStored(DpOpsError, RuntimeError):
    """The ledger holds a spend whose noisy values are not stored (yet)."""


class NoiseRecordConflict(LedgerError):
    """A spend's stored noise was already recorded with another checksum."""


class LedgerSchemaError(LedgerError):
    """The ledger's schema is missing and this role may not create it, or it was written
    by a version without the hash chain."""


class LedgerMismatch(LedgerError):
    """The data root was first used with another ledger (or lost its identity record)."""


class PolicyMismatch(LedgerError):
    """This process's cap or epsilons differ from the policy recorded in the ledger."""


class LedgerTampered(LedgerError):
    """``ledger --verify`` fails: a row was edited or deleted, or a guard is missing."""


class LedgerKeyMissing(LedgerError):
    """This process has no ledger key, or a malformed one: it can neither write a chain
    link nor verify one."""


class ApprovalMissing(LedgerError):
    """A re-noise or method update has no recorded approval by someone other than its
    requester: nothing is reserved or drawn."""


class DerivedStateConflict(LedgerError):
    """A derived file's new version does not follow the version the ledger recorded."""


class DerivedStateTampered(Refusal, RuntimeError):
    """A derived file (frozen baseline, scaling factors, method-update factors) is missing
    or differs from the sha256 the ledger recorded when it was written."""


class NoiseTampered(Refusal, RuntimeError):
    """A spend's stored noisy values are missing or differ from what the ledger recorded
    when they were stored: never redrawn silently, never read."""


# -- reports and releases ---------------------------------------------------------------

class BaselineMissing(DpOpsError, RuntimeError):
    """A report needs the baseline before it exists."""


class BaselineIncompatible(Refusal, RuntimeError):
    """The frozen baseline was written by a version whose rule needs other columns; it is
    never recomputed in place, so a retry cannot help."""


class GateFailed(Refusal, RuntimeError):
    """The candidate release failed the gate; nothing may be published from it."""


class PublishRefused(DpOpsError, RuntimeError):
    """The staged release may not be published (gate not passed, accounting over cap)."""


class MixedWeekLaws(Refusal, ValueError):
    """A week of a report's weekly values holds days noised under different terms, so its
    weekly sums have no single law; the message names the week and the remedy."""
