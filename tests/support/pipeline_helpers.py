"""Helpers for the crash and race tests: run the CLI in child processes on copies of a
data root that already holds a release, and check releases, ``published/`` and the ledger."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any

from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import Ledger
from dp_ops.steps.release import sha256_file
from support import cli_server

REPO = Path(__file__).resolve().parents[2]
START = date(2020, 1, 1)
# mobility publishes from 2020-02-15 (after the baseline window); symptoms from day one
LAST_BEFORE = {"mobility": date(2020, 2, 15), "symptoms": date(2020, 1, 13)}
USERS = {"mobility": 3000, "symptoms": 8000}


def child_env(root: Path) -> dict[str, str]:
    """The environment of a CLI child on ``root``: none of the caller's ``DP_*`` settings
    (ledger, configs, faults) except the data root itself and the session's ledger key."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DP_") or k.startswith(("DP_LEDGER_KEY", "DP_RELEASE_SIGN"))}
    env.update(DP_DATA_ROOT=str(root), GX_ANALYTICS_ENABLED="false")
    return env


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (the real-Airflow tests deploy with their pieces:
    settings, services, metadata reads)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look up their module while being built
    spec.loader.exec_module(module)
    return module


def load_airflow_demo() -> ModuleType:
    """``scripts/airflow_demo.py`` as a module."""
    return load_script("airflow_demo")


def cli(root: Path, *args: str, fault: str | None = None,
        extra_env: dict[str, str] | None = None,
        fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m dp_ops args...`` on ``root``, forked from the test process's CLI server
    (:mod:`support.cli_server`), or in a new interpreter when ``fresh``."""
    env = child_env(root)
    env.update(extra_env or {})
    if fault:
        env["DP_FAULT"] = fault
    return cli_server.run(list(args), env, REPO, timeout=600, fresh=fresh)


def run_day(root: Path, report: str, day: date, *more: str, fault: str | None = None,
            extra_env: dict[str, str] | None = None,
            fresh: bool = False) -> subprocess.CompletedProcess[str]:
    return cli(root, "run", report, "--start", day.isoformat(), "--end", day.isoformat(),
               *more, fault=fault, extra_env=extra_env, fresh=fresh)


def ok(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"


def copy_root(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def latest(root: Path, report: str) -> Path:
    return DataRoot(root).latest_release(report).resolve()


def verify_release(directory: Path) -> dict[str, Any]:
    """The manifest of a complete release whose files match their checksums."""
    manifest_file = directory / "manifest.json"
    assert manifest_file.is_file(), f"release directory without a manifest: {directory}"
    manifest = json.loads(manifest_file.read_text())
    on_disk = sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                     if p.is_file() and p.name not in ("manifest.json", "manifest.json.sig"))
    assert on_disk == sorted(manifest["files"]), f"files of {directory} differ from its manifest"
    for name, meta in manifest["files"].items():
        assert sha256_file(directory / name) == meta["sha256"], f"{directory / name} changed"
    return dict(manifest)


def assert_published_consistent(root: Path, report: str) -> None:
    """Nothing partial or temporary under ``published/``: only complete releases."""
    published = DataRoot(root).published_dir(report)
    stray = [p for p in published.rglob("*") if p.name.startswith(".tmp")
             or p.suffix in (".tmp", ".partial")]
    assert stray == [], f"temporary files visible under {published}: {stray}"
    entries = sorted(p.name for p in published.iterdir())
    assert entries == ["latest", "releases"], entries
    for release in (published / "releases").iterdir():
        verify_release(release)


def assert_one_spend_per_slot(root: Path, report: str) -> None:
    ledger = Ledger(DataRoot(root).default_ledger_url)
    try:
        spends = ledger.spends(report)
    finally:
        ledger.dispose()
    noise = Counter(s.slot for s in spends if s.kind == "noise")
    twice = [slot.describe() for slot, n in noise.items() if n > 1]
    assert twice == [], f"slots spent twice: {twice[:5]}"


def release_files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name not in ("manifest.json", "manifest.json.sig")}


def uninterrupted_reference(previous_root: Path, recovered: Path, report: str, day: date,
                            dst: Path) -> Path:
    """A fresh copy of the previous state given the recovered run's stored noise and
    ledger, then ``day`` run once without a fault, in a new interpreter: its own hash
    seed, not the CLI server's, so that a release equal to it does not hang on one."""
    ref = copy_root(previous_root, dst)
    noise = DataRoot(recovered).noise_dir(report, day)
    shutil.copytree(noise, DataRoot(ref).noise_dir(report, day))
    shutil.copy2(recovered / "ledger.sqlite", ref / "ledger.sqlite")
    ok(run_day(ref, report, day, "--run-id", "reference", fresh=True))
    return ref
