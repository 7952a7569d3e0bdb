"""``dp_ops.gx.memo``: what GX recomputes per metric, computed once per validation.

Run against GX itself: a validation inside the memo gives exactly the results of the same
validation outside it, failures, observed values and failing samples included, on a suite
with row conditions of every kind the reports use; outside the block and in other threads
GX's own methods answer."""

from __future__ import annotations

import os

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

import threading  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import great_expectations as gx  # noqa: E402
import great_expectations.expectations as gxe  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from great_expectations.core.run_identifier import RunIdentifier  # noqa: E402
from great_expectations.execution_engine.pandas_execution_engine import (  # noqa: E402
    PandasExecutionEngine,
)
from great_expectations.expectations.row_conditions import Column  # noqa: E402

from dp_ops.gx import memo, project, runner  # noqa: E402
from dp_ops.gx.suites import suite  # noqa: E402

# A release-like frame with planted failures: a bad key, a published row under the
# contributor minimum, a low bound above its high bound, a duplicate key, a weekly row
# off its Monday.
FRAME = pd.DataFrame({
    "key": ["AA", "BB", "cc", "DD", "DD", "EE"],
    "day": ["2020-02-15", "2020-02-16", "2020-02-17", "2020-02-18", "2020-02-18",
            "2020-02-19"],
    "publish": [True, True, False, True, True, False],
    "contributors": pd.array([150, 90, 20, 400, 400, None], dtype="Int64"),
    "change": pd.array([3, -7, None, 12, 12, 5], dtype="Int64"),
    "low": pd.array([1, -9, None, 15, 10, 2], dtype="Int64"),
    "high": pd.array([5, -4, None, 14, 14, 8], dtype="Int64"),
    "resolution": ["daily", "weekly", "daily", "weekly", "daily", "weekly"],
    "weekday": [0, 0, 3, 2, 1, 0],
})


def _suite() -> gx.ExpectationSuite:
    published = Column("publish") == True  # noqa: E712  (a GX condition)
    weekly = Column("resolution") == "weekly"
    has_change = Column("change").is_not_null()
    return suite("memo_test", [
        gxe.ExpectTableColumnsToMatchSet(column_set=list(FRAME.columns), exact_match=False),
        gxe.ExpectTableRowCountToEqual(value={"$PARAMETER": "rows"}),
        gxe.ExpectColumnValuesToMatchRegex(column="key", regex=r"^[A-Z]{2}$"),
        gxe.ExpectColumnValuesToNotBeNull(column="contributors", row_condition=published),
        gxe.ExpectColumnValuesToBeBetween(column="contributors", min_value=100,
                                          row_condition=published),
        gxe.ExpectColumnValuesToNotBeNull(column="low", row_condition=has_change),
        gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="high", column_B="low", or_equal=True,
            ignore_row_if="either_value_is_missing"),
        gxe.ExpectColumnValuesToBeInSet(column="weekday", value_set=[0], row_condition=weekly),
        gxe.ExpectColumnValuesToBeInSet(column="day", value_set={"$PARAMETER": "days"}),
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["key", "day"]),
        gxe.ExpectColumnValuesToBeInTypeList(column="change", type_list=["Int64Dtype"]),
    ])


PARAMETERS = {"rows": 6, "days": sorted(set(FRAME["day"]))}


def _results(checkpoint: gx.Checkpoint, *, memoised: bool) -> list[dict[str, Any]]:
    run_id = RunIdentifier(run_name="same", run_time=datetime(2020, 1, 1, tzinfo=UTC))
    if memoised:
        with memo.validation_memo():
            [(_, result)] = runner.run_checkpoint(checkpoint, FRAME, PARAMETERS, run_id)
    else:
        [(_, result)] = runner.run_checkpoint(checkpoint, FRAME, PARAMETERS, run_id)
    return [r.to_json_dict() for r in result.results]


def test_a_validation_gives_the_same_results_with_and_without_the_memo(
        tmp_path: Path) -> None:
    calls: list[bool] = []
    real = memo.configured_kwargs

    def counting(expectation: Any, held: dict[Any, Any]) -> dict[str, Any]:
        calls.append(True)
        return real(expectation, held)

    memo.install()
    # one checkpoint, validated twice: the expectations' ids are the context's
    _, [checkpoint] = project.prepared(tmp_path / "gx", [(_suite(), "asset", FRAME)])
    plain = _results(checkpoint, memoised=False)
    assert calls == []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(memo, "configured_kwargs", counting)
        memoised = _results(checkpoint, memoised=True)
    assert calls  # the memo answered
    assert memoised == plain
    failed = sorted(r["expectation_config"]["type"] for r in plain if not r["success"])
    assert failed == sorted([
        "expect_column_values_to_match_regex",  # "cc"
        "expect_column_values_to_be_between",  # 90 contributors on a published row
        "expect_column_pair_values_a_to_be_greater_than_b",  # 14 < 15
        "expect_column_values_to_be_in_set",  # a weekly row on weekday 2
        "expect_compound_columns_to_be_unique",  # DD on 2020-02-18 twice
    ])


def test_each_row_condition_is_filtered_once_and_handed_out_as_a_copy() -> None:
    engine = PandasExecutionEngine()
    condition = {"column": {"name": "publish"}, "operator": "==", "parameter": True,
                 "type": "comparison"}
    filters: list[object] = []
    real = memo._installed.get("row_filter") or PandasExecutionEngine._apply_row_condition_filter

    def counting(self: PandasExecutionEngine, data: pd.DataFrame, row_condition: object,
                 domain_kwargs: dict[str, Any]) -> pd.DataFrame:
        filters.append(row_condition)
        return real(self, data, row_condition, domain_kwargs)  # type: ignore[no-any-return]

    memo.install()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(memo._installed, "row_filter", counting)
        with memo.validation_memo():
            first = engine._apply_row_condition_filter(FRAME, condition, {})
            first.loc[first.index[0], "key"] = "ZZ"  # a change to one copy ...
            second = engine._apply_row_condition_filter(FRAME, dict(condition), {})
            other = engine._apply_row_condition_filter(
                FRAME, condition | {"parameter": False}, {})
        outside = engine._apply_row_condition_filter(FRAME, condition, {})
    assert len(filters) == 3  # the equal condition was served from the memo; not outside
    assert list(second["key"]) == ["AA", "BB", "DD", "DD"]  # ... never reaches another
    assert list(other["key"]) == ["cc", "EE"]
    assert list(outside["key"]) == ["AA", "BB", "DD", "DD"]
    assert list(FRAME["key"]) == ["AA", "BB", "cc", "DD", "DD", "EE"]


def test_a_field_set_anew_is_read_again_and_nothing_outlives_the_block() -> None:
    expectation = gxe.ExpectColumnValuesToBeBetween(column="value", min_value=1)
    memo.install()
    with memo.validation_memo():
        assert expectation._get_success_kwargs()["min_value"] == 1
        expectation.min_value = 5
        assert expectation._get_success_kwargs()["min_value"] == 5
        assert expectation._get_success_kwarg("min_value") == 5
        assert expectation._get_domain_kwargs()["column"] == "value"
        inner = memo._ACTIVE.get()
        with memo.validation_memo():
            assert memo._ACTIVE.get() is inner  # a nested block shares the memo
    assert memo._ACTIVE.get() is None
    expectation.min_value = 7
    assert expectation._get_success_kwargs()["min_value"] == 7


def test_another_thread_uses_gx_own_methods_during_a_block() -> None:
    seen: list[object] = []
    memo.install()
    with memo.validation_memo():
        assert memo._ACTIVE.get() is not None
        worker = threading.Thread(target=lambda: seen.append(memo._ACTIVE.get()))
        worker.start()
        worker.join()
    assert seen == [None]


def test_the_gate_validates_inside_the_memo(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    real = runner.run_checkpoint

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(memo._ACTIVE.get())
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_checkpoint", spy)
    result = runner.run_suites([(_suite(), "asset", FRAME)], gx_dir=tmp_path / "gx",
                               parameters=PARAMETERS, run_name="memo")
    assert len(seen) == 1 and seen[0] is not None and memo._ACTIVE.get() is None
    assert not result.success and len(result.failed) == 5
