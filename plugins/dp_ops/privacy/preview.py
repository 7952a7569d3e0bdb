"""What an extra spend (a re-noise, a method update) will cost, before anyone approves it.

Pure: takes the spend requests the step would reserve, the composed epsilon already spent
per date and the recorded cap, and says, per date, what is spent, what the request adds
and the headroom left after it. The ledger's own check (``Ledger.reserve``) is the one
that refuses; this is what the approver reads, computed by the same function
(:func:`dp_ops.privacy.ledger.cap_refusal`: the cap bounds the sum of every spend of a
date, whatever its region), so a request the ledger would refuse is never sent for
approval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date

from dp_ops.privacy.ledger import EPS_TOLERANCE as _TOLERANCE  # the cap check's own
from dp_ops.privacy.ledger import SpendRequest, cap_refusal


@dataclass(frozen=True)
class DayCost:
    day: date
    spent: float
    requested: float
    cap: float

    @property
    def after(self) -> float:
        return self.spent + self.requested

    @property
    def headroom_after(self) -> float:
        return self.cap - self.after

    @property
    def fits(self) -> bool:
        return self.after <= self.cap + _TOLERANCE


@dataclass(frozen=True)
class SpendPreview:
    """The cost of one extra spend, per date, against the cap."""

    what: str
    slots: int
    days: tuple[DayCost, ...]
    # the ledger's own refusal message (privacy.ledger.cap_refusal), None if it fits
    refusal: str | None = None

    @property
    def fits(self) -> bool:
        return self.refusal is None

    @property
    def requested_max(self) -> float:
        return max((d.requested for d in self.days), default=0.0)

    @property
    def tightest(self) -> DayCost | None:
        """The date with the least headroom after the spend."""
        return min(self.days, key=lambda d: d.headroom_after, default=None)

    def summary(self) -> str:
        """One line for logs and the approval's subject."""
        tight = self.tightest
        if tight is None:
            return f"{self.what}: spends nothing"
        verdict = "fits the cap" if self.fits else "EXCEEDS the cap: the ledger will refuse it"
        return (f"{self.what}: {self.slots} ledger slot(s) on {len(self.days)} date(s), up to "
                f"+{self.requested_max:.4f} epsilon per user-day; least headroom after it "
                f"{tight.headroom_after:.4f} of cap {tight.cap:.4f} ({tight.day}); {verdict}")

    def markdown(self) -> str:
        """The approval form's body: the table of dates."""
        lines = [self.summary(), "",
                 "| date | spent | + this request | after | cap | headroom after |",
                 "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {d.day} | {d.spent:.4f} | {d.requested:.4f} | {d.after:.4f} | "
                  f"{d.cap:.4f} | {d.headroom_after:.4f} |" for d in self.days]
        lines += ["", "Approving spends this budget irreversibly (it is recorded in the "
                  "ledger); rejecting spends nothing. The requester cannot approve their "
                  "own run."]
        return "\n".join(lines)


def preview(what: str, requests: Sequence[SpendRequest], spent: Mapping[date, float],
            cap: float) -> SpendPreview:
    """The cost of ``requests`` given ``spent`` (composed epsilon per date so far)."""
    per_day: dict[date, list[float]] = {}
    for r in requests:
        per_day.setdefault(r.slot.day, []).append(r.epsilon)
    days = tuple(DayCost(day, spent.get(day, 0.0), math.fsum(eps), cap)
                 for day, eps in sorted(per_day.items()))
    refusal = cap_refusal(requests, lambda report, day: spent.get(day, 0.0), cap)
    return SpendPreview(what=what, slots=len(requests), days=days, refusal=refusal)
