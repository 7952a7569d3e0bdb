"""Data roots the tests build once and share.

``GeneratedRoots`` holds the demo generator's input per ``(users, seed, start, end)``: built
once under a file lock in a directory every pytest worker of the run sees (``pytest -n``),
kept under a key that names the arguments and a digest of the generator's source and of the
libraries that write its files, and handed to each caller as a fresh copy, so that no test
sees another's writes. Only generated input is cached: no ledger, key or release.

``build_previous`` is the release history the crash, race, file-access and ledger-attack
tests start from (``previous`` in tests/integration/conftest.py, built once per session and
worker: its ledger is sealed with the session's ledger key, which is each worker's own).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, timedelta
from importlib import metadata
from pathlib import Path

import pytest

from support.pipeline_helpers import LAST_BEFORE, START, USERS, cli, ok

# where the cached roots live, the same for every worker of a run (in .pytest_cache they
# are kept between runs: the key changes with the generator's source)
CACHE_SUBDIR = "dp_generated_roots"
# the libraries whose writers shape the generated files' bytes
WRITERS = ("numpy", "pandas", "pyarrow", "duckdb")
# the seed of the release history every ``previous`` starts from
PREVIOUS_SEED = 7


def generator_digest() -> str:
    """sha256 over the generator's package (code and data), the dp_ops modules it imports,
    and the versions of the libraries that write its files."""
    import dp_demo

    import dp_ops.layout
    import dp_ops.regions
    import dp_ops.reports.mobility.config
    import dp_ops.sources.location_history
    import dp_ops.sources.search_activity
    import dp_ops.sources.spec

    package = Path(dp_demo.__file__).parent
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files += [Path(str(module.__file__)) for module in (
        dp_ops.layout, dp_ops.regions, dp_ops.reports.mobility.config,
        dp_ops.sources.location_history, dp_ops.sources.search_activity, dp_ops.sources.spec)]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name in WRITERS:
        digest.update(f"{name}=={metadata.version(name)}\0".encode())
    return digest.hexdigest()


@contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """An exclusive lock on ``lock_file`` (other workers wait for it)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class GeneratedRoots:
    """The demo generator's data roots, cached under ``cache_dir``."""

    cache_dir: Path
    digest: str

    def key(self, users: int, seed: int, start: date, end: date) -> str:
        return f"u{users}-s{seed}-{start.isoformat()}-{end.isoformat()}-{self.digest[:16]}"

    def cached(self, users: int, seed: int, start: date, end: date) -> Path:
        """The cached root for these arguments, generated first if no worker has yet."""
        from dp_demo.generator import generate

        from dp_ops.layout import DataRoot

        key = self.key(users, seed, start, end)
        done = self.cache_dir / key
        with _locked(self.cache_dir / f"{key}.lock"):
            if not done.is_dir():
                building = self.cache_dir / f"{key}.building"
                shutil.rmtree(building, ignore_errors=True)  # a build that was interrupted
                generate(DataRoot(building / "data"), start, end, users=users, seed=seed)
                os.replace(building, done)
        return done / "data"

    def copy(self, dst: Path, *, users: int, seed: int, start: date, end: date) -> Path:
        """A fresh copy at ``dst`` (created; its parent must exist) of the generator's input
        for ``start``..``end``: what ``generate(DataRoot(dst), start, end, users=users,
        seed=seed)`` writes."""
        shutil.copytree(self.cached(users, seed, start, end), dst, symlinks=True)
        return dst


def generated_roots(config: pytest.Config,
                    tmp_path_factory: pytest.TempPathFactory) -> GeneratedRoots:
    """The cache of generated roots: in ``.pytest_cache`` (kept between runs), or with
    ``-p no:cacheprovider`` in the run's base temporary directory, which every xdist
    worker's own is under."""
    cache = getattr(config, "cache", None)  # no attribute at all without the plug-in
    if cache is not None:
        return GeneratedRoots(cache.mkdir(CACHE_SUBDIR), generator_digest())
    base = tmp_path_factory.getbasetemp()
    if hasattr(config, "workerinput"):  # <run's basetemp>/popen-gwN
        base = base.parent
    return GeneratedRoots(base / CACHE_SUBDIR, generator_digest())


def build_previous(tmp_path_factory: pytest.TempPathFactory, roots: GeneratedRoots,
                   reports: tuple[str, ...] = ("mobility", "symptoms"),
                   extra_env: dict[str, str] | None = None) -> dict[str, Path]:
    """Per report, a data root with a release through ``LAST_BEFORE`` and the input of the
    next three days (built once, copied by every test). ``extra_env`` is the CLI's
    (``DP_LEDGER_URL`` for a ledger outside the data root)."""
    bases = {}
    for report in reports:
        last = LAST_BEFORE[report]
        path = roots.copy(tmp_path_factory.mktemp(f"previous-{report}") / "data",
                          users=USERS[report], seed=PREVIOUS_SEED, start=START,
                          end=last + timedelta(days=3))
        ok(cli(path, "run", report, "--start", START.isoformat(), "--end", last.isoformat(),
               "--run-id", "previous", extra_env=extra_env))
        bases[report] = path
    return bases
