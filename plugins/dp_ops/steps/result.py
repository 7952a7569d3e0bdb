"""The value every pipeline step returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepResult:
    """What a step did, in words and paths that are safe for logs, XCom and the UI: never
    raw rows, user ids or un-noised aggregates.

    ``event``: set when the step changed something downstream consumers schedule on (a
    new ``latest`` release, the frozen baseline): the extra of the asset event the Airflow
    task adds (public values only: ids, dates, checksums, epsilon)."""

    summary: str
    paths: tuple[str, ...] = field(default_factory=tuple)
    event: Mapping[str, str | float | int] | None = None
