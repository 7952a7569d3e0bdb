"""The fault-injection switch: it kills hard where asked, only there, and refuses typos."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dp_ops.errors import FaultConfigError
from dp_ops.faults import POINTS, fault_point, parse_faults


def run_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    for var in ("DP_FAULT", "DP_FAULT_ONCE"):
        if var not in env:
            full.pop(var, None)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=60)


PASS_THREE_TIMES = """
from dp_ops.faults import fault_point
for i in range(3):
    print("before", i, flush=True)
    fault_point("noise.after_draw")
    print("after", i, flush=True)
"""


def test_parse_faults_reads_points_and_counts() -> None:
    assert parse_faults("noise.after_draw") == {"noise.after_draw": 1}
    assert parse_faults(" noise.after_store@3 , publish.after_rename ") == {
        "noise.after_store": 3, "publish.after_rename": 1}
    assert parse_faults("") == {}


@pytest.mark.parametrize("spec, problem", [
    ("noise.after_drawn", "unknown fault point 'noise.after_drawn'"),
    ("noise.after_draw@0", "needs a count >= 1"),
    ("noise.after_draw@x", "needs a count >= 1"),
])
def test_a_bad_fault_spec_is_refused_naming_it(spec: str, problem: str) -> None:
    with pytest.raises(FaultConfigError, match="DP_FAULT=") as err:
        parse_faults(spec)
    assert problem in str(err.value)


def test_an_unregistered_point_in_the_code_is_refused() -> None:
    with pytest.raises(FaultConfigError, match="not a registered point"):
        fault_point("nowhere")


def test_no_fault_without_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DP_FAULT", raising=False)
    for name in POINTS:
        fault_point(name)  # returns: this test process is still alive


def test_the_point_kills_the_process_with_sigkill_at_the_first_pass() -> None:
    child = run_child(PASS_THREE_TIMES, {"DP_FAULT": "noise.after_draw"})
    assert child.returncode == -signal.SIGKILL
    assert child.stdout.split("\n")[:2] == ["before 0", ""]


def test_a_count_kills_at_the_nth_pass() -> None:
    child = run_child(PASS_THREE_TIMES, {"DP_FAULT": "noise.after_draw@2"})
    assert child.returncode == -signal.SIGKILL
    assert child.stdout.split() == ["before", "0", "after", "0", "before", "1"]


def test_other_points_do_not_fire() -> None:
    child = run_child(PASS_THREE_TIMES, {"DP_FAULT": "noise.after_store,publish.after_rename"})
    assert child.returncode == 0
    assert child.stdout.count("after") == 3


def test_once_fires_in_the_first_process_only(tmp_path: Path) -> None:
    marker = tmp_path / "fired"
    env = {"DP_FAULT": "noise.after_draw", "DP_FAULT_ONCE": str(marker)}
    first = run_child(PASS_THREE_TIMES, env)
    assert first.returncode == -signal.SIGKILL
    assert marker.read_text() == "noise.after_draw"
    retry = run_child(PASS_THREE_TIMES, env)  # a retry inherits the same environment
    assert retry.returncode == 0 and retry.stdout.count("after") == 3


def test_a_typo_in_the_switch_fails_the_run_instead_of_passing_silently() -> None:
    child = run_child(PASS_THREE_TIMES, {"DP_FAULT": "noise.afterdraw"})
    assert child.returncode == 1
    assert "unknown fault point 'noise.afterdraw'" in child.stderr
