"""The typed records of a release: what a gate staged (:class:`Staged`, sealed in
``staged.json``) and what a release states (:class:`Manifest`, its ``manifest.json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from dp_ops.steps.release_contract import SCHEMA_VERSION

# A file of a release: {"sha256": ..., "bytes": ...}, keyed by its path in the release.
Files = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class GateOutcome:
    """The gate's verdict on a staged release (the manifest's ``gate``)."""

    success: bool
    evaluated: int
    data_docs: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"success": self.success, "evaluated": self.evaluated,
                "data_docs": self.data_docs}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GateOutcome:
        docs = data.get("data_docs")
        return cls(success=data["success"] is True, evaluated=int(data["evaluated"]),
                   data_docs=None if docs is None else str(docs))


@dataclass(frozen=True)
class Staged:
    """What a gate staged for a run: its files (by checksum), the days they cover, the
    figures the manifest will state, the gate's verdict and the charts on the page.

    ``region`` is the on-call rerun's region (None for a whole-report run); ``extras``
    the report's own record (the symptoms scaling factors it proposes); ``reused_from``
    the run whose staged files this one copied."""

    run_id: str
    first_date: date
    last_date: date
    files: Files
    rows: dict[str, int]
    suppression: dict[str, Any]
    inputs_sha256: str
    build_key: str
    gate: GateOutcome
    charts: list[dict[str, Any]]
    uncharted_levels: list[int]
    region: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    reused_from: str | None = None

    def as_record(self) -> dict[str, Any]:
        record = {"empty": False, "run_id": self.run_id, "region": self.region,
                  "first_date": self.first_date.isoformat(),
                  "last_date": self.last_date.isoformat(), "files": self.files,
                  "rows": self.rows, "suppression": self.suppression,
                  "inputs_sha256": self.inputs_sha256, "build_key": self.build_key,
                  "gate": self.gate.as_dict(), "charts": self.charts,
                  "uncharted_levels": self.uncharted_levels, "extras": self.extras}
        if self.reused_from is not None:
            record["reused_from"] = self.reused_from
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Staged:
        """Raises KeyError, TypeError or ValueError for a record this version does not
        write."""
        reused = record.get("reused_from")
        region = record.get("region")
        return cls(run_id=str(record["run_id"]),
                   first_date=date.fromisoformat(record["first_date"]),
                   last_date=date.fromisoformat(record["last_date"]),
                   files=dict(record["files"]), rows=dict(record["rows"]),
                   suppression=dict(record["suppression"]),
                   inputs_sha256=str(record["inputs_sha256"]),
                   build_key=str(record["build_key"]),
                   gate=GateOutcome.from_dict(record["gate"]),
                   charts=list(record["charts"]),
                   uncharted_levels=[int(x) for x in record["uncharted_levels"]],
                   region=None if region is None else str(region),
                   extras=dict(record["extras"]),
                   reused_from=None if reused is None else str(reused))


# The fields every manifest has; a report's own sections sit beside them.
_COMMON = ("schema_version", "report", "release_id", "run_id", "software_version",
           "method_version", "first_date", "last_date", "inputs", "rows", "suppression",
           "epsilon", "ledger", "files", "gate", "signature")


@dataclass(frozen=True)
class Manifest:
    """``manifest.json`` of a release: the common fields, typed, and the report's own
    top-level sections (``extras``: mobility's method updates, the symptoms parameters).
    ``signature`` says where the manifest's signature is and whose key made it
    (:meth:`dp_ops.release_signing.ReleaseSigner.manifest_fields`), or that the release
    is unsigned; None in a release written before contract 1.3."""

    report: str
    release_id: str
    run_id: str
    software_version: str
    method_version: str
    first_date: date
    last_date: date
    inputs: dict[str, Any]
    rows: dict[str, int]
    suppression: dict[str, Any]
    epsilon: dict[str, Any]
    ledger: dict[str, Any]
    files: Files
    gate: GateOutcome
    extras: dict[str, Any] = field(default_factory=dict)
    schema_version: str = SCHEMA_VERSION  # the flow passes the one it checks against
    signature: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        clash = set(self.extras) & set(_COMMON)
        if clash:
            raise ValueError(f"a report's manifest sections may not replace {sorted(clash)}")

    def as_dict(self) -> dict[str, Any]:
        """The JSON object written as ``manifest.json``."""
        return {"schema_version": self.schema_version, "report": self.report,
                "release_id": self.release_id, "run_id": self.run_id,
                "software_version": self.software_version,
                "method_version": self.method_version,
                "first_date": self.first_date.isoformat(),
                "last_date": self.last_date.isoformat(), "inputs": self.inputs,
                "rows": self.rows, "suppression": self.suppression, "epsilon": self.epsilon,
                "ledger": self.ledger, "files": self.files, "gate": self.gate.as_dict(),
                **({} if self.signature is None else {"signature": self.signature}),
                **self.extras}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Manifest:
        """The manifest of a published release (verified against the ledger by
        :func:`dp_ops.steps.release.current_release` before it is read here)."""
        return cls(report=str(data["report"]), release_id=str(data["release_id"]),
                   run_id=str(data["run_id"]), software_version=str(data["software_version"]),
                   method_version=str(data["method_version"]),
                   first_date=date.fromisoformat(str(data["first_date"])),
                   last_date=date.fromisoformat(str(data["last_date"])),
                   inputs=dict(data["inputs"]), rows=dict(data["rows"]),
                   suppression=dict(data["suppression"]), epsilon=dict(data["epsilon"]),
                   ledger=dict(data["ledger"]), files=dict(data["files"]),
                   gate=GateOutcome.from_dict(data["gate"]),
                   extras={k: v for k, v in data.items() if k not in _COMMON},
                   schema_version=str(data["schema_version"]),
                   signature=(dict(data["signature"]) if isinstance(data.get("signature"), dict)
                              else None))
