"""The ledger's label of a date range, as its refusals and texts print it."""

from __future__ import annotations

from datetime import date

from dp_ops.privacy.ledger import date_range_label


def test_one_date_is_the_date_and_a_range_names_both_ends() -> None:
    d1, d2 = date(2020, 3, 1), date(2020, 3, 9)
    assert date_range_label(d1, d1) == "2020-03-01"
    assert date_range_label(d1, d2) == "2020-03-01..2020-03-09"
