"""``run_days``: a report's whole chain in-process, the same for every report; the baseline
step only for a report whose steps have one."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dp_ops.layout import DataRoot
from dp_ops.reports import chain
from dp_ops.reports.chain import run_days
from dp_ops.steps.noise_request import RunRequest
from dp_ops.steps.result import StepResult

DAYS = [date(2020, 3, 2), date(2020, 3, 1)]  # out of order on purpose


def _steps(calls: list[str], *, baseline: bool) -> Any:
    def step(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> StepResult:
            day = next((a for a in args if isinstance(a, date)), None)
            request = next((a for a in args if hasattr(a, "day")), None)
            when = day or (request.day if request is not None else None)
            calls.append(f"{name} {when or kwargs.get('region')}")
            return StepResult(name)
        return call

    names = ["bound_contributions", "noise", "report", "gate", "publish"]
    if baseline:
        names.append("build_baseline")
    return SimpleNamespace(**{n: step(n) for n in names})


@pytest.mark.parametrize("baseline", [True, False])
def test_days_in_order_then_one_gate_and_publish(tmp_path: Path, baseline: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    seen: list[date] = []

    def ingest(root: DataRoot, sources: tuple[str, ...], day: date) -> StepResult:
        calls.append(f"ingest {day}")
        assert sources == ("stays",)
        return StepResult("ingest")

    monkeypatch.setattr(chain, "ingest_sources", ingest)
    results = run_days(_steps(calls, baseline=baseline), ("stays",), DataRoot(tmp_path),
                       object(), DAYS, RunRequest(run_id="r", region="DL-1"),
                       ledger_url="sqlite://", on_day=lambda day, _: seen.append(day))
    expected = []
    for d in sorted(DAYS):
        expected += [f"ingest {d}", f"bound_contributions {d}", f"noise {d}"]
        # build_baseline takes no day: it freezes the baseline once its window is noised
        expected += ["build_baseline None"] if baseline else []
        expected += [f"report {d}"]
    assert calls == expected + ["gate DL-1", "publish None"]
    assert seen == sorted(DAYS) and len(results) == len(calls)
