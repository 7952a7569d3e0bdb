"""The one place that decides retry (``dp_ops.airflow.runtime``), and the parsing of
rendered template values."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from dp_ops.airflow.runtime import (
    parse_bool,
    parse_day,
    parse_region,
    refusals_fail_without_retry,
)
from dp_ops.errors import (
    BadRequest,
    BoundingError,
    BudgetExceeded,
    GateFailed,
    IngestError,
    MethodUpdateError,
    RerunRequestError,
)


class RecordingLog:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, msg: str, *args: Any) -> None:
        self.errors.append(msg % args)


@pytest.mark.parametrize("exc,message", [
    (BudgetExceeded("date 2020-03-02: over the cap"), "date 2020-03-02: over the cap"),
    (GateFailed("release gate failed: 1 of 40"), "release gate failed: 1 of 40"),
    (RerunRequestError("region='X': unknown"), "rerun request refused: region='X': unknown"),
    (MethodUpdateError("factor=0: must be > 0"), "rerun request refused: factor=0: must be > 0"),
    (BadRequest("day='2020-13-01': expected a date"),
     "rerun request refused: day='2020-13-01': expected a date"),
])
def test_a_refusal_fails_without_retry(exc: Exception, message: str) -> None:
    log = RecordingLog()
    with pytest.raises(AirflowFailException) as info:
        with refusals_fail_without_retry(log, "rerun request"):
            raise exc
    assert str(info.value) == message
    assert info.value.__cause__ is exc


def test_budget_and_gate_refusals_are_logged_as_errors() -> None:
    log = RecordingLog()
    for exc in (BudgetExceeded("over the cap"), GateFailed("2 expectations failed")):
        with pytest.raises(AirflowFailException):
            with refusals_fail_without_retry(log):
                raise exc
    assert log.errors == ["privacy budget refused, no noise drawn: over the cap",
                          "release gate failed; the last good release stays published. "
                          "2 expectations failed"]


@pytest.mark.parametrize("exc", [IngestError("raw/x: unreadable"),
                                 BoundingError("shard missing"), OSError("disk full"),
                                 ValueError("anything else")])
def test_other_errors_propagate_so_retries_apply(exc: Exception) -> None:
    log = RecordingLog()
    with pytest.raises(type(exc)) as info:
        with refusals_fail_without_retry(log):
            raise exc
    assert info.value is exc and log.errors == []


def test_rendered_values_are_parsed_strictly() -> None:
    assert parse_day("2020-03-02") == date(2020, 3, 2)
    assert parse_day(" 2020-03-02 ") == date(2020, 3, 2)
    assert parse_bool("False", field="renoise") is False
    assert parse_region("  ") is None and parse_region(None) is None
    assert parse_region(" DM-01 ") == "DM-01"
    with pytest.raises(BadRequest, match="date='2020-02-30'"):
        parse_day("2020-02-30", field="date")
    with pytest.raises(BadRequest, match="renoise='maybe'"):
        parse_bool("maybe", field="renoise")


@pytest.mark.parametrize("value", ["20200216", "2020-2-16", "2020-02-16T00:00", "16/02/2020"])
def test_dates_from_forms_are_iso_only(value: str) -> None:
    """Issue 14, finding 10: `20200216` was read as a date."""
    with pytest.raises(BadRequest, match="expected a date as YYYY-MM-DD"):
        parse_day(value, field="date")


def test_a_huge_or_odd_region_id_is_refused_and_echoed_short() -> None:
    with pytest.raises(BadRequest, match="a region_id is 1-64") as info:
        parse_region("R" * 1_000_000)
    assert len(str(info.value)) < 300
    with pytest.raises(BadRequest, match=r"^region='DM-01\\nforged': a region_id is"):
        parse_region("DM-01\nforged")
