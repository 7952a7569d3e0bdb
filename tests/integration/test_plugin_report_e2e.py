"""Two reports that edit nothing in ``dp_ops``, defined only under ``tests/plugin_report/``
and importing only ``dp_ops.api``: ``presence`` (users present per region and day, from
the built-in location history) and ``sessions`` (app session minutes per region and day,
from ``app_sessions``, a source the package declares itself). Each is registered through
the entry points of the distribution beside it (``dp_ops.reports``, ``dp_ops.sources``).
Put on ``sys.path`` here (and only here), they are found like installed packages and run
through the same DAG factory, ingest, ledger, noise step, gate and release flow as the
built-in reports, under ``dag.test()``."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from support.app_sessions import write_app_sessions
from support.cached_roots import GeneratedRoots
from support.dagrun_helpers import asset_events, delete_runs, run_dag_day
from support.dates import date_range

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_report"
START, END = date(2020, 1, 1), date(2020, 1, 3)


def _forget_reports() -> None:
    from dp_ops.reports.spec import report_specs

    report_specs.cache_clear()
    from dp_ops.sources.spec import source_specs

    source_specs.cache_clear()
    for name in [m for m in sys.modules
                 if m.split(".")[0] in ("presence_report", "sessions_report")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def presence(airflow_db: Path, tmp_path_factory: pytest.TempPathFactory,
             generated_roots: GeneratedRoots) -> Iterator[Path]:
    """The plug-ins registered, and a data root with three days of synthetic input of the
    built-in sources and of the sessions report's own."""
    from dp_ops.layout import DataRoot

    root = generated_roots.copy(tmp_path_factory.mktemp("presence") / "data", users=1500,
                                seed=3, start=START, end=END)
    write_app_sessions(DataRoot(root), date_range(START, END), users=3000, seed=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(PLUGIN))  # its .dist-info and its package
        # dag.test() runs a DAG its bundle holds: the plug-in's DAG folder is the bundle
        # (Airflow reads the folder into airflow.settings once, at its first import)
        import airflow.settings

        mp.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(PLUGIN / "dags"))
        mp.setattr(airflow.settings, "DAGS_FOLDER", str(PLUGIN / "dags"))
        mp.setenv("DP_DATA_ROOT", str(root))
        mp.delenv("DP_LEDGER_URL", raising=False)
        _forget_reports()
        try:
            yield root
        finally:
            _forget_reports()


def test_the_plugin_reports_and_source_are_found_through_their_entry_points(
        presence: Path) -> None:
    from dp_ops.airflow.tags import allowed_tags
    from dp_ops.reports.spec import report_names, report_spec
    from dp_ops.sources.spec import source_spec

    assert report_names() == ["mobility", "presence", "sessions", "symptoms"]
    spec = report_spec("presence")
    assert type(spec).__module__ == "dp_ops.reports.spec"
    assert spec.declaration == "presence_report.declaration"
    assert {"presence", "sessions"} <= set(allowed_tags())
    assert report_spec("sessions").sources == ("app_sessions",)
    assert source_spec("app_sessions").reference_files == ("apps.txt",)


# report -> (the epsilon a day books, the cap, the files' stem, the value column, threshold)
EXPECTED = {"presence": (1.5, 3.0, "Presence_Counts", "present_users", 100),
            "sessions": (3.0, 6.0, "Session_Minutes", "session_minutes", 2000)}


@pytest.mark.parametrize("report", sorted(EXPECTED))
def test_a_plugin_report_runs_end_to_end_under_dag_test(presence: Path, report: str) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from dp_ops.airflow.budget_plugin import _budgets
    from dp_ops.budget_view import render_page
    from dp_ops.layout import DataRoot, ledger_url
    from dp_ops.privacy.ledger import Ledger
    from dp_ops.steps.release_contract import check_manifest

    epsilon, cap, stem, value, threshold = EXPECTED[report]
    root = DataRoot(presence)
    bag = DagBag(dag_folder=str(PLUGIN / "dags"))
    assert bag.import_errors == {}
    dag = bag.dags[f"{report}_daily"]
    delete_runs(dag.dag_id)
    for day in date_range(START, END):
        run_dag_day(dag, day)

    # budget reserved and recorded: every level once per day, at the configured epsilon
    ledger = Ledger(ledger_url(root))
    try:
        totals = ledger.totals(report)
        assert sorted(d for _, d in totals) == date_range(START, END)
        assert all(abs(e - epsilon) < 1e-9 for e in totals.values())
        assert ledger.verify().ok
    finally:
        ledger.dispose()

    # stored noise private: 0600 files in 0700 directories
    noise_files = sorted((presence / "noise" / report).rglob("*.parquet"))
    assert len(noise_files) == 3 * 3  # 3 days x 3 levels
    for f in noise_files:
        assert stat.S_IMODE(os.stat(f).st_mode) == 0o600, f
        for d in f.relative_to(presence).parents:
            if d != Path("."):
                assert stat.S_IMODE(os.stat(presence / d).st_mode) == 0o700, d

    # gated and published, with a manifest the contract accepts
    import json

    latest = root.latest_release(report)
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["report"] == report and check_manifest(manifest) == []
    assert (manifest["first_date"], manifest["last_date"]) == ("2020-01-01", "2020-01-03")
    assert manifest["gate"]["success"] and manifest["gate"]["evaluated"] >= 4
    assert {f"{stem}.csv", f"{stem}.parquet", "index.html"} <= set(manifest["files"])
    header, *rows = (latest / f"{stem}.csv").read_text().splitlines()
    assert header == f"date,region_id,level,country_region_code,{value}" and rows
    assert all(int(r.rsplit(",", 1)[1]) >= threshold for r in rows)  # the threshold

    # one release asset event per move of latest, naming the release
    events = asset_events(f"{report}_release")
    assert events and events[-1]["release_id"] == manifest["release_id"]
    assert events[-1]["report"] == report

    # the Privacy budget view lists it, with what it spent
    budgets, state = _budgets()
    (view,) = [b for b in budgets if b.report == report]
    assert "verifies" in state
    assert view.totals == {d.isoformat(): pytest.approx(epsilon)
                           for d in date_range(START, END)}
    assert view.cap == pytest.approx(cap)
    assert [r.release_id for r in view.releases if r.latest] == [manifest["release_id"]]
    assert f"<section id='{report}'>" in render_page(budgets, {}, state)
