"""Everything published is bound to the ledger, checked at the system-call level (issue 31,
point 2).

For each report, a data root holding a release gets one more day (ingest, bounding, noise,
report), and then its gate and its publish run, each in a child process of its own as
under Airflow, under strace (:mod:`file_audit`): pyarrow and DuckDB open files in C++,
where no Python hook sees them. Every open for reading of a file of the data root must be

(a) the one open of a verified-read call for that file: its bytes read once, checked
    against the ledger's record (or a MAC under the ledger key) and parsed from those
    same bytes (``file_audit.READERS``); a second open by another reader is not;
(b) of a file the same step wrote; or
(c) on the short allow-list ``file_audit.ALLOWED`` (public inputs, the ledger and its
    MAC'd records, the GX project, lock files), each entry saying why it is safe.

A verified reader that is renamed or removed is no longer recognised, so the test then
fails on its reads rather than passing them.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from support.file_audit import (
    Finding,
    opened_for_reading,
    run_child,
    strace_or_skip,
    traced_step,
    unverified_reads,
)
from support.pipeline_helpers import LAST_BEFORE, child_env, copy_root, latest, verify_release

# shares ``previous`` with the other modules of its xdist group (one worker builds it)
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.xdist_group("previous")]


@pytest.fixture(scope="module")
def strace() -> str:
    """Before ``previous`` (a minute of building): a missing strace skips or fails first."""
    return strace_or_skip()


@pytest.mark.parametrize("report", ["mobility", "symptoms"])
def test_gate_and_publish_read_private_files_only_as_the_ledger_recorded_them(
        strace: str, previous: dict[str, Path], tmp_path: Path, report: str) -> None:
    root = copy_root(previous[report], tmp_path / "data")
    env = child_env(root)
    day = LAST_BEFORE[report] + timedelta(days=1)
    run_child(root, env, report, "prepare", run_id="audited", day=day)

    findings: list[Finding] = []
    for step in ("gate", "publish"):
        trace = traced_step(root, env, report, step, run_id="audited",
                            workdir=tmp_path / "trace", strace=strace)
        if step == "gate":
            # the trace sees the reads it judges: the gate read the new day's report file
            assert opened_for_reading(trace, f"report/{report}/date=*/rows.parquet") >= 1, (
                f"the trace of the {report} gate shows no read of a per-day report file: "
                f"the audit is blind ({trace.strace_log})")
        findings += unverified_reads(trace)[0]

    assert verify_release(latest(root, report))["last_date"] == day.isoformat()
    if findings:
        pytest.fail(f"the {report} gate and publish read private or intermediate files "
                    "that were neither verified against the ledger (one open per verified "
                    "read), their own output, nor allowed (file_audit.ALLOWED):\n"
                    + "\n".join(f"- {finding.describe()}" for finding in findings),
                    pytrace=False)
