"""Both reports backfilled through a real Airflow with the work on private rows on a real
Spark Connect server, and the Airflow processes reading none of those rows.

The module starts the Connect server that ships with pyspark
(``scripts/spark_connect_server.py``: ``sbin/start-connect-server.sh``, local mode, on
loopback) and runs ``scripts/airflow_demo.py`` (api-server, dag-processor, scheduler with
the LocalExecutor, ``airflow backfill create`` of ``mobility_report`` and
``symptoms_dataset`` over ten days) with ``DP_ENGINE=spark``. The Connect URL comes from
an Airflow connection of the Apache Spark provider's ``spark_connect`` type
(``AIRFLOW_CONN_SPARK_CONNECT_DEFAULT``), not from ``DP_SPARK_REMOTE``, which is unset.

Every ``airflow`` process runs under ``strace -f`` (a wrapper first on ``PATH``), which
records every file any of them, or any process they fork (task processes included),
opens. Then:

1. **No raw or clean row in Airflow.** No Airflow process opened a file under
   ``raw/``, ``work/clean/``, ``work/tmp/`` (where Spark keeps the judged rows while it
   ingests) or ``quarantine/``: the server read and wrote them all; the
   workers only listed directories and renamed the server's output into place. The one
   file they write there is each day's ``ingest_report.json`` (outcome counts, no rows).
   Nor did any load DuckDB (no file of the ``duckdb`` package opened).
   The traces are checked to hold the task processes' other opens (the data root's
   ledger, noise and releases), so an empty trace cannot pass.
2. **The same truth on both engines.** The same input, ingested and bounded in-process
   on DuckDB (a copy of the data root made before the backfill), gives the same
   quarantined rows (as a multiset, with their reasons), the same clean rows and the same
   true cell sums for every day and both reports.
3. **The same release from the stored noise.** Running both reports again on DuckDB over
   the backfilled data root (the CLI) reuses the stored noise and leaves every published
   file byte for byte as the Spark run wrote it.

The mobility baseline needs 35 days, so over these ten days mobility spends and stores
its noise but publishes nothing (its releases start on 2020-02-15): its comparison is of
the true cell sums; symptoms publishes from the first day.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from support.ci import in_ci
from support.dates import date_range
from support.pipeline_helpers import child_env, load_script, ok

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
START, END = date(2020, 1, 1), date(2020, 1, 10)
USERS = 1500
SEED = 5
SOURCES = {"mobility": "location_history", "symptoms": "search_activity"}
PRIVATE_AREAS = ("raw", "work/clean", "work/tmp", "quarantine")

# strace -y: "PID openat(dirfd, "name", FLAGS...) = FD</resolved/path>"
OPEN = re.compile(r'^(\d+)\s+(?:open|openat|openat2)\((.*)\)\s+=\s+(\d+)<(.*)>$')
# write_json_atomic's temporary file beside ingest_report.json
REPORT_TEMP = re.compile(r"^\.tmp-[A-Za-z0-9_]+\.json$")


@dataclass(frozen=True)
class Opened:
    pid: int
    path: str
    directory: bool  # opened with O_DIRECTORY


def parse_trace(text: str) -> list[Opened]:
    """The successful opens of an ``strace -f -y`` log."""
    out = []
    for line in text.splitlines():
        match = OPEN.match(line)
        if match:
            out.append(Opened(int(match.group(1)), match.group(4),
                              "O_DIRECTORY" in match.group(2)))
    return out


def private_row_opens(opened: list[Opened], root: Path) -> list[Opened]:
    """The opens of files under the data root's private-row areas that are not allowed:
    every one but directories and the ingest step's outcome counts."""
    bad = []
    for o in opened:
        path = Path(o.path)
        area = next((a for a in PRIVATE_AREAS if path.is_relative_to(root / a)), None)
        if area is None or o.directory or path.is_dir():
            continue
        if area == "work/clean" and (path.name == "ingest_report.json"
                                     or REPORT_TEMP.match(path.name)):
            continue  # the outcome counts the worker writes (atomically), no rows
        if any(part.startswith(".tmp-spark-") for part in path.parts) and not path.exists():
            continue  # the server's output directory, opened by rmtree after the rename
        bad.append(o)
    return bad


def test_the_trace_parser_finds_a_planted_open(tmp_path: Path) -> None:
    """The scan can fail: a read of a clean file, in strace's own format, is caught."""
    root = tmp_path / "data"
    (root / "work/clean/location_history/date=2020-01-01").mkdir(parents=True)
    clean = root / "work/clean/location_history/date=2020-01-01/part.parquet"
    clean.write_bytes(b"x")
    trace = "\n".join([
        f'101 openat(AT_FDCWD, "{clean.parent}", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY)'
        f' = 5<{clean.parent}>',
        f'101 openat(AT_FDCWD, "{clean.parent}/ingest_report.json", O_WRONLY|O_CREAT) '
        f'= 6<{clean.parent}/ingest_report.json>',
        f'101 openat(AT_FDCWD, "{clean.parent}/.tmp-k2j_x.json", O_WRONLY|O_CREAT) '
        f'= 6<{clean.parent}/.tmp-k2j_x.json>',
        f'101 openat(AT_FDCWD, "{root}/raw/x.json", O_RDONLY) = 6<{root}/raw/x.json>',
        f'102 openat(AT_FDCWD, "{clean}", O_RDONLY|O_CLOEXEC) = 7<{clean}>',
        '103 openat(AT_FDCWD, "/etc/hosts", O_RDONLY) = 3</etc/hosts>',
    ])
    opened = parse_trace(trace)
    assert len(opened) == 6
    assert private_row_opens(opened, root) == [Opened(101, f"{root}/raw/x.json", False),
                                               Opened(102, str(clean), False)]


# -------------------------------------------------------------------------- the run --
@dataclass(frozen=True)
class Backfilled:
    spark_root: Path
    duckdb_root: Path
    traces: list[Path]
    published_before: dict[str, bytes]


def _strace_wrapper(bin_dir: Path, trace_dir: Path) -> None:
    """``airflow`` first on PATH: the real one under ``strace -f -y``, one log a call."""
    real = shutil.which("airflow") or str(Path(sys.executable).parent / "airflow")
    assert Path(real).is_file(), "airflow is not installed beside this Python"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "airflow"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'exec strace -f -y -qq --seccomp-bpf -e trace=open,openat,openat2 '
        f'-o "{trace_dir}/airflow.$$.trace" "{real}" "$@"\n')
    wrapper.chmod(0o755)


def _published(root: Path) -> dict[str, bytes]:
    base = root / "published"
    return {str(p.relative_to(base)): p.read_bytes()
            for p in sorted(base.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    if not shutil.which("strace"):
        # CI must run it (its image has strace); elsewhere it may be missing
        if in_ci():
            pytest.fail("strace not found under CI: install Debian's strace package")
        pytest.skip("strace not found (Debian's strace package)")
    connect = load_script("spark_connect_server")
    base = tmp_path_factory.mktemp("spark_connect")
    spark_root, duckdb_root = base / "spark" / "data", base / "duckdb" / "data"
    spark_root.mkdir(parents=True)
    env = child_env(spark_root)
    ok(subprocess.run([sys.executable, "-m", "dp_ops", "generate", "--start", str(START),
                       "--end", str(END), "--users", str(USERS), "--seed", str(SEED)],
                      env=env, cwd=REPO, capture_output=True, text=True, timeout=600))
    shutil.copytree(spark_root, duckdb_root, symlinks=True)
    trace_dir = base / "traces"
    trace_dir.mkdir()
    _strace_wrapper(base / "bin", trace_dir)
    server = connect.start(base / "server")
    try:
        env.update({
            "DP_ENGINE": "spark",
            # the Airflow way: the provider's connection type; its hook builds the URL
            "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT":
                f'{{"conn_type": "spark_connect", "host": "127.0.0.1", "port": {server.port}}}',
            "PATH": f"{base / 'bin'}{os.pathsep}{os.environ['PATH']}",
        })
        env.pop("DP_SPARK_REMOTE", None)
        demo = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "airflow_demo.py"), "--fresh",
             "--start", str(START), "--end", str(END),
             "--airflow-home", str(base / "airflow"), "--port", "8093",
             "--timeout-minutes", "30"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=2400)
        assert demo.returncode == 0, (
            f"the Spark Connect backfill failed ({demo.returncode}):\n"
            f"{demo.stdout[-4000:]}\n{demo.stderr[-4000:]}")
    finally:
        connect.stop(server.directory)
    yield Backfilled(spark_root, duckdb_root, sorted(trace_dir.glob("*.trace")),
                     _published(spark_root))


def test_no_airflow_process_opens_a_raw_or_clean_file(backfilled: Backfilled) -> None:
    root = backfilled.spark_root.resolve()
    opened = [o for t in backfilled.traces for o in parse_trace(t.read_text())]
    # the traces hold the task processes' work: they can fail
    assert any(Path(o.path).is_relative_to(root / "noise") for o in opened), (
        "no open of the stored noise in the traces: the tasks were not traced")
    assert any(Path(o.path).is_relative_to(root / "published") for o in opened)
    bad = private_row_opens(opened, root)
    assert not bad, f"Airflow processes opened private rows: {bad[:5]}"
    # nor is DuckDB, the embedded engine, ever loaded into an Airflow process
    duckdb = sorted({o.path for o in opened if "duckdb" in Path(o.path).name.lower()
                     or "/duckdb/" in o.path})
    assert not duckdb, f"an Airflow process loaded DuckDB: {duckdb[:3]}"
    # and the data exists: the server did write clean rows and bounded sums
    for report, source in SOURCES.items():
        for day in date_range(START, END):
            assert (root / "work/clean" / source / f"date={day}" / "part.parquet").is_file()
            assert (root / "work/bounded" / report / f"date={day}" / "aggregates.parquet"
                    ).is_file()


def _multiset(path: Path, columns: list[str]) -> list[tuple[object, ...]]:
    if not path.exists():
        return []
    frame = pq.read_table(path).to_pandas()[columns]
    return sorted(tuple("<null>" if pd.isna(v) else str(v) for v in row)
                  for row in frame.itertuples(index=False))


def _cells(path: Path) -> pd.DataFrame:
    cells = pq.read_table(path).to_pandas()
    cells = cells.astype({"level": "int64", "region_id": str, "metric": str, "value": "int64"})
    return cells.sort_values(["level", "region_id", "metric"], ignore_index=True)


def test_duckdb_gives_the_same_quarantine_clean_rows_and_cell_sums(
        backfilled: Backfilled) -> None:
    from dp_ops.layout import DataRoot
    from dp_ops.reports.registry import bind, load_report
    from dp_ops.settings import ExecutionSettings, execution_settings_bound
    from dp_ops.steps.ingest import ingest_sources

    spark, duck = DataRoot(backfilled.spark_root), DataRoot(backfilled.duckdb_root)
    compared = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DP_DATA_ROOT", str(duck.root))
        for report, source in SOURCES.items():
            bound = load_report(report)
            with execution_settings_bound(ExecutionSettings(engine="duckdb")):
                for day in date_range(START, END):
                    ingest_sources(duck, bound.spec.sources, day)
                    bind(bound.report, bound.cfg, duck, bound.ledger).bound(day)
                    clean = [c.name for c in pq.read_schema(
                        spark.clean_partition(source, day) / "part.parquet")]
                    for area, name, columns in (
                            (DataRoot.clean_partition, "part.parquet", clean),
                            (DataRoot.quarantine_partition, "rows.parquet",
                             [*clean, "source_row", "reason"])):
                        assert _multiset(area(spark, source, day) / name, columns) == (
                            _multiset(area(duck, source, day) / name, columns)), (
                            report, day, name)
                    pd.testing.assert_frame_equal(
                        _cells(spark.bounded_file(report, day)),
                        _cells(duck.bounded_file(report, day)), obj=f"{report} {day}")
                    compared += 1
    assert compared == 2 * len(date_range(START, END))


def test_duckdb_rerun_from_the_stored_noise_gives_the_same_release_bytes(
        backfilled: Backfilled) -> None:
    assert any(k.startswith("symptoms/") for k in backfilled.published_before)
    env = child_env(backfilled.spark_root)
    for report in SOURCES:
        ok(subprocess.run([sys.executable, "-m", "dp_ops", "run", report, "--start",
                           str(START), "--end", str(END)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=900))
    after = _published(backfilled.spark_root)
    assert after.keys() == backfilled.published_before.keys()
    changed = [k for k in after if after[k] != backfilled.published_before[k]]
    assert not changed, f"published files changed: {changed[:5]}"
