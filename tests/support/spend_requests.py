"""Ledger-level spend requests for tests that exercise the ledger alone.

A :class:`~dp_ops.privacy.ledger.SpendRequest` carries the budget its noise is drawn with
and books the epsilon derived from it; a test that only needs a slot and an epsilon asks
for one cell of sensitivity 1 at that epsilon here.
"""

from __future__ import annotations

from dp_ops.privacy.ledger import Slot, SpendRequest
from dp_ops.privacy.plan import MetricBudget


def spend_request(slot: Slot, epsilon: float, *, sensitivity: int = 1, cells: int = 1,
                  fraction: float = 1.0) -> SpendRequest:
    """A request for ``slot`` whose group costs ``epsilon`` per user-day: ``cells`` cells
    of ``epsilon / cells`` each, at ``sensitivity``, spent at ``fraction``."""
    return SpendRequest(slot, MetricBudget(slot.metric, epsilon / cells, sensitivity, cells),
                        fraction)
