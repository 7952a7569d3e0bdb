"""The import boundaries of the package (rules in tests/support/architecture_rules.py and
docs/architecture.md): the real tree keeps them, and each rule fails on a tree that
crosses it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.architecture_rules import all_imports, check, cycles, module_name

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


def test_the_package_keeps_every_boundary() -> None:
    violations = check(PLUGINS)
    assert violations == [], "\n".join(map(str, violations))


def test_the_checker_sees_the_whole_package() -> None:
    """Guards against a checker that passes because it reads nothing."""
    modules = {module_name(PLUGINS, p) for p in PLUGINS.rglob("*.py")}
    assert {"dp_ops.privacy.ledger", "dp_ops.airflow.operators.noise",
            "dp_ops.reports.mobility.declaration", "dp_demo.generator"} <= modules
    imports = all_imports(PLUGINS)
    assert any(i.module == "dp_ops.airflow.operators.noise" and i.target.startswith("airflow")
               for i in imports)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A minimal dp_ops/dp_demo tree with the given module sources."""
    base = {
        "dp_ops/__init__.py": "",
        "dp_ops/errors.py": "from __future__ import annotations\n",
        "dp_ops/privacy/__init__.py": "",
        "dp_ops/privacy/noise.py": "import numpy\nfrom dp_ops.errors import X\n",
        "dp_ops/engine/__init__.py": "",
        "dp_ops/engine/duckdb.py": "import duckdb\n",
        "dp_ops/steps/__init__.py": "",
        "dp_ops/steps/ingest.py": "import duckdb\n",
        "dp_ops/steps/bound.py": "from dp_ops.engine import duckdb\n",
        "dp_ops/reports/__init__.py": "",
        "dp_ops/reports/mobility.py": "from dp_ops.steps import bound\n",
        "dp_ops/airflow/__init__.py": "",
        "dp_ops/airflow/ops.py": "from airflow.sdk import BaseOperator\n"
                                 "from dp_ops.reports import mobility\n",
        "dp_demo/__init__.py": "",
        "dp_demo/gen.py": "from dp_ops.privacy import noise\n",
    }
    for name, source in {**base, **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


def test_a_clean_synthetic_tree_passes(tmp_path: Path) -> None:
    assert check(_tree(tmp_path, {})) == []


@pytest.mark.parametrize("files,rule", [
    ({"dp_ops/privacy/noise.py": "import airflow\n"},
     "the privacy kernel imports no file, engine, dataframe or Airflow code"),
    ({"dp_ops/privacy/noise.py": "import pandas\n"},
     "the privacy kernel imports no file, engine, dataframe or Airflow code"),
    ({"dp_ops/privacy/noise.py": "def f():\n    from dp_ops.engine import duckdb\n"},
     "the privacy kernel imports only itself, errors and requests"),
    ({"dp_ops/steps/bound.py": "from airflow.sdk import task\n"},
     "only dp_ops.airflow imports Airflow"),
    ({"dp_ops/reports/mobility.py": "import dp_demo.gen\n"}, "dp_ops never imports dp_demo"),
    ({"dp_ops/errors.py": "import os\n"}, "dp_ops.errors imports nothing"),
    ({"dp_ops/steps/bound.py": "import duckdb\n"},
     "only the engines and ingest run SQL over private rows"),
    ({"dp_ops/steps/bound.py": "from dp_ops.reports import mobility\n"},
     "steps are report-agnostic"),
    ({"dp_ops/engine/duckdb.py": "from dp_ops.steps import bound\n"},
     "engines know no steps, reports or Airflow"),
    ({"dp_ops/reports/visits/__init__.py": "",
      "dp_ops/reports/visits/spec.py": "SPEC = None\n",
      "dp_ops/steps/page.py": '"""A docstring may say visits."""\nTITLES = {"visits": "V"}\n'},
     "nothing outside a report's package names a report"),
    ({"dp_ops/reports/visits/__init__.py": "",
      "dp_ops/reports/visits/spec.py": "SPEC = None\n",
      "dp_ops/airflow/ops.py": "def f():\n    from dp_ops.reports.visits import spec\n"},
     "nothing outside a report's package names a report"),
    ({"dp_ops/sources/__init__.py": "", "dp_ops/sources/visits_log.py": "",
      "dp_ops/engine/duckdb.py": 'SQL = "ingest_visits_log.sql"\n'},
     "nothing outside a source's module names a source"),
    ({"dp_ops/reports/other.py": "from dp_ops.reports.mobility import x\n",
      "dp_ops/reports/mobility.py": "def f():\n    from dp_ops.reports.other import y\n"},
     "no import cycles"),
])
def test_each_rule_fails_when_its_boundary_is_crossed(tmp_path: Path, files: dict[str, str],
                                                      rule: str) -> None:
    violations = check(_tree(tmp_path, files))
    assert rule in {v.rule for v in violations}, violations


def test_type_checking_imports_are_not_dependencies(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"dp_ops/privacy/noise.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pandas\n")})
    assert check(root) == []


def test_a_cycle_closed_by_a_type_checking_import_is_a_cycle(tmp_path: Path) -> None:
    """How reports once had their spec type their steps module: the spec imported the
    steps under TYPE_CHECKING, and the steps imported the spec's package (16 files in one
    circle)."""
    root = _tree(tmp_path, {
        "dp_ops/reports/spec.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from dp_ops.reports import steps\n",
        "dp_ops/reports/steps.py": "from dp_ops.reports.spec import SPEC\n"})
    assert [v.rule for v in check(root)] == ["no import cycles"]


def test_a_cycle_is_reported_as_its_path(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"dp_ops/reports/a.py": "import dp_ops.reports.b\n",
                            "dp_ops/reports/b.py": "from dp_ops.reports import a\n"})
    modules = {module_name(root, p) for p in root.rglob("*.py")}
    found = cycles(all_imports(root), modules)
    assert found == [["dp_ops.reports.a", "dp_ops.reports.b", "dp_ops.reports.a"]]


def test_a_report_may_name_itself_and_nothing_outside_it_may(tmp_path: Path) -> None:
    """Inside ``reports/<name>/`` the name is the report's own; outside, a docstring or a
    longer word (``visitsx``) is no report's name, but an identifier or a file name built
    on it is (``visits_release``, ``visits.txt``: the module would change with the
    report)."""
    files = {"dp_ops/reports/visits/__init__.py": "",
             "dp_ops/reports/visits/spec.py": 'NAME = "visits"\nASSET = "visits_release"\n',
             "dp_ops/layout.py": '"""visits"""\nOTHER = "visitsx"\n'}
    assert check(_tree(tmp_path, files)) == []
    for text in ('ASSET = "visits_release"\n', 'FILE = "reference/visits.txt"\n'):
        bad = check(_tree(tmp_path, {**files, "dp_ops/layout.py": text}))
        assert [v.rule for v in bad] == ["nothing outside a report's package names a report"]
        assert "dp_ops.layout:1" in bad[0].where and "visits" in bad[0].detail


def test_a_source_is_named_only_by_its_module_and_the_reports(tmp_path: Path) -> None:
    """A source's module and any report (which names the sources it reads) may name it;
    the core may not: not its judging query, its reference file, nor an import."""
    files = {"dp_ops/sources/__init__.py": "",
             "dp_ops/sources/spec.py": "SPEC = None\n",
             "dp_ops/sources/app_sessions.py": 'NAME = "app_sessions"\n'
                                               'SQL = "ingest_app_sessions"\n',
             "dp_ops/reports/visits/__init__.py": "",
             "dp_ops/reports/visits/spec.py": 'SOURCES = ("app_sessions",)\n'}
    assert check(_tree(tmp_path, files)) == []
    for text in ('SQL = "ingest_app_sessions"\n', "from dp_ops.sources import app_sessions\n",
                 'LIST = "reference/app_sessions.csv"\n'):
        bad = check(_tree(tmp_path, {**files, "dp_ops/steps/ingest.py": text}))
        assert [v.rule for v in bad] == ["nothing outside a source's module names a source"], text
