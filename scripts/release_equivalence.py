#!/usr/bin/env python
"""Do two versions of dp_ops publish the same releases and book the same spends?

For a change that must not move a byte of what is published (a refactoring of the seam
between the factory and its reports), run the same scenario under the code before and
after it:

    git switch <before>; python scripts/release_equivalence.py record DIR
    git switch <after>;  python scripts/release_equivalence.py check DIR

The scenario: a small synthetic country (``--users``, default 3,000), the mobility report
from 2020-01-01 with its baseline and a method update (parks, from 2020-03-06), and the
symptoms dataset over five weeks, each run in-process day by day (``python -m dp_ops
run``) in a data root of its own under ``DIR``.

``record`` runs it in ``DIR/run`` and writes ``DIR/record.json``: the release id of each
report's latest release, the sha256 of every file of it, and the ledger's spends.

``check`` runs, with this checkout's code:

1. every day again, without re-noise, on a copy of ``DIR/run``: each noise step reuses
   the stored noise, each report step and the gate rebuild from it, and publish must find
   that the release it built is the recorded one (the release id names its files, its
   accounting and its report state): latest stays, no spend is added;
2. the scenario from scratch on a fresh copy of the generated input: the ledger's spends
   must be the recorded ones but for run ids, times and ids (the noise drawn is new, so
   the values differ; what is booked may not).

Exit status 0 when both hold; 1, with what differs, otherwise. Nothing here reads a
private value: it compares checksums, release ids and ledger rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import date, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
START = date(2020, 1, 1)
MOBILITY_END = date(2020, 3, 10)
SYMPTOMS_END = date(2020, 2, 5)
UPDATE = {"method_version": "v2", "effective_date": date(2020, 3, 6),
          "categories": ["parks"], "factor": 1.3, "reason": "parks classifier v2"}
REPORTS = ("mobility", "symptoms")


def log(msg: str) -> None:
    print(f"[equivalence] {msg}", flush=True)


def dp_ops(root: Path, *args: str) -> None:
    env = {**os.environ, "DP_DATA_ROOT": str(root), "GX_ANALYTICS_ENABLED": "false"}
    env.pop("DP_LEDGER_URL", None)  # the data root's own SQLite ledger
    done = subprocess.run([sys.executable, "-m", "dp_ops", *args], env=env, cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"python -m dp_ops {' '.join(args)} failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")


def run(root: Path, report: str, start: date, end: date, run_id: str) -> None:
    dp_ops(root, "run", report, "--start", start.isoformat(), "--end", end.isoformat(),
           "--run-id", run_id)


def method_update(root: Path, run_id: str) -> None:
    """The scenario's method update, approved and run as the operator's form asks
    (in a process of its own, so that it reads ``root``)."""
    code = f"""
import os
from datetime import date
os.environ["DP_DATA_ROOT"] = {str(root)!r}
from dp_ops.reports.protocol import MethodUpdateForm
from dp_ops.reports.registry import load_report
from dp_ops.privacy.ledger import VIA_CLI
from dp_ops.steps.ledger_binding import closing_ledger, open_ledger
rep = load_report("mobility")
form = MethodUpdateForm({UPDATE['method_version']!r}, date.fromisoformat(
    {UPDATE['effective_date'].isoformat()!r}), {UPDATE['categories']!r}, {UPDATE['factor']!r},
    {UPDATE['reason']!r})
declared = hasattr(rep, "method_update_request")  # a declared report, or steps modules
if declared:
    request = rep.method_update_request(form)
else:
    request = rep.steps.method_update_request(rep.cfg, form)
with closing_ledger(open_ledger(rep.root, rep.ledger_url)) as ledger:
    ledger.record_approval(request, run_id={run_id!r}, requester="operator",
                           approver="approver", via=VIA_CLI)
if declared:
    rep.method_update(form, run_id={run_id!r})
else:
    with rep.settings_in_force():
        rep.steps.method_update(rep.root, rep.cfg, form, run_id={run_id!r},
                                ledger_url=rep.ledger_url)
"""
    env = {**os.environ, "GX_ANALYTICS_ENABLED": "false"}
    env.pop("DP_LEDGER_URL", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the method update failed ({done.returncode}):\n"
                         f"{done.stderr[-3000:]}")


def scenario(root: Path, tag: str) -> None:
    """Both reports over the scenario's days in ``root`` (generated input in place)."""
    before = UPDATE["effective_date"] - timedelta(days=1)
    run(root, "mobility", START, before, f"{tag}-mobility-1")
    method_update(root, f"{tag}-update")
    run(root, "mobility", UPDATE["effective_date"], MOBILITY_END, f"{tag}-mobility-2")
    run(root, "symptoms", START, SYMPTOMS_END, f"{tag}-symptoms")


def generate(root: Path, users: int) -> None:
    dp_ops(root, "generate", "--start", START.isoformat(), "--end",
           MOBILITY_END.isoformat(), "--users", str(users), "--seed", "7")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def releases(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for report in REPORTS:
        latest = (root / "published" / report / "latest").resolve()
        out[report] = {"release_id": latest.name,
                       "files": {p.relative_to(latest).as_posix(): sha256(p)
                                 for p in sorted(latest.rglob("*")) if p.is_file()}}
    return out


def spends(root: Path) -> list[dict[str, Any]]:
    """The ledger's spends without what names a run, a time or a row: what was booked."""
    from dp_ops.privacy.ledger import Ledger

    ledger = Ledger(f"sqlite:///{root / 'ledger.sqlite'}")
    try:
        return [{"report": s.slot.report, "day": s.slot.day.isoformat(),
                 "level": s.slot.level, "metric": s.slot.metric,
                 "region_scope": s.slot.region_scope, "generation": s.generation,
                 "epsilon": s.epsilon, "kind": s.kind, "method_version": s.method_version,
                 "reason": s.reason, "stored_cells": s.stored_cells}
                for s in ledger.spends()]
    finally:
        ledger.dispose()


def record(directory: Path, users: int) -> int:
    work = directory / "run"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    generate(work, users)
    shutil.copytree(work, directory / "input")  # the generated input, before any run
    log(f"scenario in {work}")
    scenario(work, "record")
    rec = {"users": users, "releases": releases(work), "spends": spends(work)}
    (directory / "record.json").write_text(json.dumps(rec, indent=1) + "\n")
    ids = ", ".join(f"{r} {v['release_id']}" for r, v in rec["releases"].items())
    log(f"recorded {ids} and {len(rec['spends'])} spends in {directory / 'record.json'}")
    return 0


def check(directory: Path) -> int:
    rec = json.loads((directory / "record.json").read_text())
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="equivalence-") as tmp:
        again = Path(tmp) / "again"
        shutil.copytree(directory / "run", again, symlinks=True)
        log("1. every day again on the recorded state, stored noise reused")
        run(again, "mobility", START, MOBILITY_END, "check-mobility")
        run(again, "symptoms", START, SYMPTOMS_END, "check-symptoms")
        now = releases(again)
        for report in REPORTS:
            if now[report] != rec["releases"][report]:
                failures.append(f"{report}: latest is {now[report]['release_id']}, recorded "
                                f"{rec['releases'][report]['release_id']}")
        if spends(again) != rec["spends"]:
            failures.append("the rerun changed the ledger's spends")
        fresh = Path(tmp) / "fresh"
        shutil.copytree(directory / "input", fresh, symlinks=True)
        log("2. the scenario from scratch")
        scenario(fresh, "fresh")
        booked = spends(fresh)
        if booked != rec["spends"]:
            differ = sum(a != b for a, b in zip(booked, rec["spends"], strict=False))
            failures.append(f"from scratch: {len(booked)} spends, recorded "
                            f"{len(rec['spends'])}; {differ} of the common ones differ")
    for failure in failures:
        log(f"DIFFERS: {failure}")
    if not failures:
        log("the same releases and the same spends")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("record", "check"))
    p.add_argument("directory", type=Path)
    p.add_argument("--users", type=int, default=3000)
    args = p.parse_args(argv)
    if args.mode == "record":
        return record(args.directory, args.users)
    return check(args.directory)


if __name__ == "__main__":
    sys.exit(main())
