"""Calendar days of the tests."""

from __future__ import annotations

from datetime import date, timedelta


def date_range(start: date, end: date) -> list[date]:
    """Every day from ``start`` to ``end``, both included, in order (empty when ``end`` is
    before ``start``)."""
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]
