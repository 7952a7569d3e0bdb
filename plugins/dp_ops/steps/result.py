"""The value every pipeline step returns."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepResult:
    """What a step did, in words and paths that are safe for logs, XCom and the UI: never
    raw rows, user ids or un-noised aggregates."""

    summary: str
    paths: tuple[str, ...] = field(default_factory=tuple)
