"""The gate's verdict, and each failed expectation described in one log-safe line (never
row values)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from great_expectations.expectations.row_conditions import deserialize_row_condition

from dp_ops.errors import GateFailed
from dp_ops.gx.suites import day_start

if TYPE_CHECKING:
    from great_expectations.core import ExpectationValidationResult


@dataclass(frozen=True)
class GateResult:
    """Outcome of one gate run.

    ``failed`` describes each failed expectation (type, column, counts or aggregate
    observations; never row values). ``data_docs_index`` is the local path of the Data
    Docs site's ``index.html``; ``validation_pages`` the local paths of this run's
    validation pages in that site.
    """

    success: bool
    failed: tuple[str, ...]
    data_docs_index: str | None
    evaluated: int
    validation_pages: tuple[str, ...] = ()


def require_pass(result: GateResult) -> None:
    """Raise :class:`GateFailed` unless the gate passed."""
    if result.success:
        return
    lines = [
        f"release gate failed: {len(result.failed)} of {result.evaluated} expectations failed"
    ]
    lines += [f"  - {f}" for f in result.failed]
    lines.append(f"Data Docs: {result.data_docs_index}")
    lines += [f"validation report: {p}" for p in result.validation_pages]
    raise GateFailed("\n".join(lines))


# Keyword arguments that locate or tune an expectation rather than state its rule.
_NOT_RULE_KWARGS = frozenset(
    {"column", "column_list", "row_condition", "condition_parser", "result_format",
     "catch_exceptions", "meta", "notes", "mostly", "windows", "severity", "batch_id"}
)


def _exception_message(info: dict[str, Any] | None) -> str | None:
    """The first error message of a result's ``exception_info``.

    GX puts it at the top level when the expectation raised, or under the id of each
    metric that failed to resolve (e.g. a missing column).
    """
    if not info:
        return None
    candidates = [info, *(v for v in info.values() if isinstance(v, dict))]
    for candidate in candidates:
        if candidate.get("raised_exception"):
            message = str(candidate.get("exception_message") or "unknown error")
            return (message.splitlines() or [""])[0][:200]
    return None


def describe(result: ExpectationValidationResult) -> str:
    """One failed expectation: type, column, rule, and counts or aggregate observations.

    Never row values: map expectations report how many rows failed, table expectations
    their observed aggregate (a row count, a distinct count, column names, a dtype).
    """
    config = result.expectation_config
    kwargs = dict(config.kwargs) if config is not None else {}
    kind = config.type if config is not None else "unknown expectation"
    target = kwargs.get("column") or kwargs.get("column_list") or "table"
    if isinstance(target, list):
        target = "(" + ", ".join(map(str, target)) + ")"
    condition = kwargs.get("row_condition")
    if isinstance(condition, dict):
        condition = deserialize_row_condition(condition)
    where = f" where {condition!r}" if condition else ""
    res = result.result or {}

    if "column_set" in kwargs or kind == "expect_table_columns_to_match_ordered_list":
        expected = list(kwargs.get("column_set") or kwargs.get("column_list") or [])
        observed = list(res.get("observed_value") or [])
        missing = [c for c in expected if c not in observed]
        extra = [c for c in observed if c not in expected]
        if missing or extra:
            summary = f"missing columns {missing}, unexpected columns {extra}"
        else:
            summary = f"columns out of order, observed {observed}"
        return f"{kind} [table]: {summary}"

    rule = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items() if k not in _NOT_RULE_KWARGS)
    label = f"{kind} [{target}{where}]" + (f" ({rule})" if rule else "")
    error = _exception_message(result.exception_info)
    if error is not None:
        return f"{label}: could not be evaluated: {error}"
    if "unexpected_count" in res:
        return (
            f"{label}: {res.get('unexpected_count')} of {res.get('element_count')} rows"
            f" unexpected ({float(res.get('unexpected_percent') or 0.0):.2f}%)"
        )
    return f"{label}: observed {_short(res.get('observed_value'))}"


def _short(value: Any) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat() if value == day_start(value) else value.isoformat()
    if isinstance(value, dict) and "$PARAMETER" in value:
        return f"${value['$PARAMETER']}"
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(map(_short, value[:2]))}, ..., {_short(value[-1])}] ({len(value)})"
    return repr(value) if isinstance(value, str) else str(value)
