"""What a run asks of the noise step, as one typed value from the operator and the command
line to the ledger.

:class:`RunRequest` is what a run asks of every day it processes: its id and, for an
on-call rerun, the region and whether to re-noise it (a repeat re-noise, and the reason
recorded in the ledger). :class:`NoiseRequest` is the same for one day.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """A run's request: ``run_id``; ``region`` (an on-call rerun's region, else None);
    ``renoise`` (draw that region's noise afresh, an approved extra spend);
    ``repeat_renoise`` (a second re-noise of the same region and day); ``reason``."""

    run_id: str
    region: str | None = None
    renoise: bool = False
    repeat_renoise: bool = False
    reason: str = ""

    def for_day(self, day: date) -> NoiseRequest:
        """This request for ``day``."""
        return NoiseRequest(day=day, **asdict(self))


@dataclass(frozen=True, kw_only=True)
class NoiseRequest(RunRequest):
    """A :class:`RunRequest` for one ``day``."""

    day: date
