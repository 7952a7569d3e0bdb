"""The digest of what a release is built from (``inputs_sha256``), which lets a publish
overtaken by a later release keep it only when that release holds the same inputs. The
per-day files enter by the sha256 the ledger recorded for them (dp_ops.steps.day_files)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

from dp_ops.steps.release import inputs_sha256
from dp_ops.steps.release_flow import holds_current_inputs
from dp_ops.steps.release_values import GateOutcome, Manifest

DAYS = [date(2020, 2, 15), date(2020, 2, 16)]


def test_the_digest_follows_every_input() -> None:
    digests = {day: f"{i:064x}" for i, day in enumerate(DAYS)}
    baseline = {"baseline": "a" * 64}  # by the sha256 the ledger recorded: no file read
    first = inputs_sha256(DAYS, digests, baseline)
    assert inputs_sha256(DAYS, digests, baseline) == first
    assert inputs_sha256(DAYS[:1], digests, baseline) != first
    second = inputs_sha256(DAYS, {**digests, DAYS[1]: "f" * 64}, baseline)
    assert second != first  # a day re-noised: its file's new version
    assert inputs_sha256(DAYS, digests, {"baseline": "b" * 64}) != first
    assert inputs_sha256(DAYS, digests, {**baseline, "method_update/v2": "c" * 64}) != first


def test_holds_current_inputs() -> None:
    digests = {day: f"{i:064x}" for i, day in enumerate(DAYS)}
    manifest = Manifest(
        report="mobility", release_id="2020-02-16-000000000000", run_id="r",
        software_version="0", method_version="v1", first_date=DAYS[0], last_date=DAYS[1],
        inputs={"report_days_sha256": inputs_sha256(DAYS, digests)}, rows={},
        suppression={}, epsilon={}, ledger={}, files={}, gate=GateOutcome(True, 1, None))
    now_digests = dict(digests)

    def now(days: list[date]) -> str:
        return inputs_sha256(days, now_digests)

    assert holds_current_inputs(manifest, now)
    assert not holds_current_inputs(replace(manifest, inputs={}), now)  # an older release
    del now_digests[DAYS[1]]
    assert not holds_current_inputs(manifest, now)  # a day without a record: rebuild
