"""``dp_ops.api``: the one surface a plug-in imports. Every name it lists resolves and is
typed; importing it loads nothing heavy; the test reports import nothing else of dp_ops."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dp_ops.api as api

PLUGINS = Path(__file__).resolve().parents[1] / "plugin_report"
API_FILE = Path(api.__file__)


def test_every_listed_name_resolves_to_its_module_s_own_object() -> None:
    import importlib

    for name, module in api._WHERE.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), name), name


def test_the_type_checker_sees_exactly_the_listed_names() -> None:
    """The ``if TYPE_CHECKING:`` block (what mypy reads) and the lazy table agree."""
    tree = ast.parse(API_FILE.read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", "") == "TYPE_CHECKING")
    typed = {(node.module, alias.asname or alias.name) for node in block.body
             if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert typed == {(module, name) for name, module in api._WHERE.items()}


def test_importing_the_api_loads_no_engine_dataframe_or_great_expectations() -> None:
    code = ("import sys, dp_ops.api; print(sorted(m for m in ('pandas', 'pyarrow', 'duckdb', "
            "'great_expectations', 'sqlalchemy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_the_test_reports_import_only_the_api_from_dp_ops() -> None:
    packages = sorted(p.parent for p in PLUGINS.glob("*/__init__.py"))
    assert {p.name for p in packages} >= {"presence_report", "sessions_report"}
    seen = []
    for path in sorted(f for p in packages for f in p.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.split(".")[0] == "dp_ops":
                    seen.append(name)
                    assert name == "dp_ops.api", f"{path.relative_to(PLUGINS)} imports {name}"
    assert "dp_ops.api" in seen
