"""Where everything lives under the data root (docs/design.md, Input contract and Interfaces).

The data root is configurable with ``DP_DATA_ROOT`` (default ``./data``). Areas:

- ``reference/``   public inputs (region table, symptom list)
- ``raw/``         private input partitions (never committed, never logged)
- ``truth/``       the generator's non-private ground truth, for evaluation only;
                   nothing in the pipeline reads it
- ``work/``        private intermediate files (clean rows, bounded true aggregates);
                   only the noise step reads the bounded aggregates
- ``quarantine/``  rejected input rows with their reasons
- ``noise/``       stored noisy values, one file per ledger reservation batch
- ``baseline/``    the frozen baseline (mobility) and scaling factors (symptoms)
- ``report/``      per-day post-processed, suppressed report rows (noisy values only)
- ``published/``   releases; ``published/<report>/latest`` points at the newest
- ``gx/``          Great Expectations project (expectation suites, Data Docs)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path

DEFAULT_DATA_ROOT = "./data"


@dataclass(frozen=True)
class DataRoot:
    """Typed accessors for the data-root layout; creates nothing by itself."""

    root: Path

    @classmethod
    def from_env(cls) -> DataRoot:
        return cls(Path(os.environ.get("DP_DATA_ROOT", DEFAULT_DATA_ROOT)).resolve())

    # -- public reference ------------------------------------------------------------
    @property
    def regions_csv(self) -> Path:
        return self.root / "reference" / "regions.csv"

    def reference_file(self, name: str) -> Path:
        """A public file a source reads (``SourceSpec.reference_files``): a plain name."""
        if not name or name != Path(name).name or name.startswith("."):
            raise ValueError(f"reference file {name!r}: expected a plain file name")
        return self.root / "reference" / name

    # -- private input -----------------------------------------------------------------
    def raw_partition(self, source: str, day: date) -> Path:
        """``source``: a registered source's name (``dp_ops.sources``)."""
        return self.root / "raw" / source / f"date={day.isoformat()}"

    @property
    def truth_dir(self) -> Path:
        return self.root / "truth"

    # -- private intermediates -------------------------------------------------------
    def clean_partition(self, source: str, day: date) -> Path:
        return self.root / "work" / "clean" / source / f"date={day.isoformat()}"

    def quarantine_partition(self, source: str, day: date) -> Path:
        return self.root / "quarantine" / source / f"date={day.isoformat()}"

    def bounded_file(self, report: str, day: date) -> Path:
        part = f"date={day.isoformat()}"
        return self.root / "work" / "bounded" / report / part / "aggregates.parquet"

    # -- noisy values and everything derived from them ---------------------------
    def noise_dir(self, report: str, day: date) -> Path:
        return self.root / "noise" / report / f"date={day.isoformat()}"

    def baseline_file(self, report: str) -> Path:
        return self.root / "baseline" / report / "baseline.parquet"

    def method_updates_dir(self, report: str) -> Path:
        """Where a report's method-update factors live, one file per method version."""
        return self.baseline_file(report).parent / "method_updates"

    def method_update_file(self, report: str, version: str) -> Path:
        return self.method_updates_dir(report) / f"{version}.parquet"

    def scaling_file(self, report: str) -> Path:
        """Stored per-region scaling factors (symptoms), fixed at first release."""
        return self.root / "baseline" / report / "scaling_factors.parquet"

    def report_file(self, report: str, day: date) -> Path:
        return self.root / "report" / report / f"date={day.isoformat()}" / "rows.parquet"

    def report_glob(self, report: str) -> str:
        return str(self.root / "report" / report / "date=*" / "rows.parquet")

    def published_dir(self, report: str) -> Path:
        return self.root / "published" / report

    def latest_release(self, report: str) -> Path:
        return self.published_dir(report) / "latest"

    @property
    def gx_dir(self) -> Path:
        return self.root / "gx"

    @property
    def default_ledger_url(self) -> str:
        return f"sqlite:///{self.root / 'ledger.sqlite'}"


def ledger_url(root: DataRoot) -> str:
    """``DP_LEDGER_URL`` if set, else a SQLite file under the data root, which is made
    private (0600, and its ``-wal``/``-shm`` files, which SQLite creates with the same
    mode) whatever the umask."""
    url = os.environ.get("DP_LEDGER_URL")
    if url:
        return url
    path = root.root / "ledger.sqlite"
    if path.parent.is_dir():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)  # no O_TRUNC: contents kept
        os.close(fd)
        for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            if f.exists() and f.stat().st_mode & 0o777 != 0o600:
                os.chmod(f, 0o600)
    return root.default_ledger_url
