"""Issue 48, routes 1 and 2: a data-root writer without the ledger key plants Great
Expectations configuration under ``gx/``, where the gate's GX project used to live.

Route 1: a module in the project's ``plugins/`` folder, named as a store backend and as
the Data Docs site's class in ``great_expectations.yml``; GX imported it into the gate,
where it could read the ledger key. Route 2: ``${DP_LEDGER_KEY}`` in the paths of
``great_expectations.yml`` and ``config_variables.yml``; GX substituted the key into
directory names and into the gate's "Data Docs:" line. The gate's context is now built in
code (``dp_ops.gx.project.project_config``): both plants change nothing. Also here: a
planted or edited record of what earlier gates validated (``dp_ops.gx.validated``) spares
no file the row-level checks, and a planted validation result is data the site renders,
never code and never the gate's verdict.
"""

from __future__ import annotations

import os

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

import json  # noqa: E402
import logging  # noqa: E402
import secrets  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import great_expectations as gx  # noqa: E402
import great_expectations.expectations as gxe  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from dp_ops.errors import ConfigError, GateFailed  # noqa: E402
from dp_ops.gx import project, validated  # noqa: E402
from dp_ops.gx.result import GateResult, require_pass  # noqa: E402
from dp_ops.gx.runner import run_suites  # noqa: E402
from dp_ops.gx.suites import suite  # noqa: E402

# A key no file, path or log line may ever show (64 hex digits, as the key is written).
KEY_TEXT = "5ec7e7" * 10 + "abcd"
EVIL = "dp_evil_gx_plugin"
FRAME = pd.DataFrame({"key": ["AA", "BB", "cc"], "value": [1, 2, 30]})

EVIL_MODULE = f'''
import os
from pathlib import Path

from great_expectations.data_context.store import TupleFilesystemStoreBackend
from great_expectations.render.renderer.site_builder import SiteBuilder

# runs at import, inside the gate: leave a mark and the key where the attacker reads
(Path(__file__).resolve().parents[2] / "{EVIL}.ran").write_text(
    os.environ.get("DP_LEDGER_KEY", "no key in the environment"))


class EvilBackend(TupleFilesystemStoreBackend):
    pass


class EvilSiteBuilder(SiteBuilder):
    pass
'''

# An older deployment's file project (as GX scaffolds it), with the attacker's names.
ROUTE_1_PROJECT = f"""config_version: 4.0
config_variables_file_path: uncommitted/config_variables.yml
plugins_directory: plugins/
stores:
  expectations_store:
    class_name: ExpectationsStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: expectations/
  validation_results_store:
    class_name: ValidationResultsStore
    store_backend:
      module_name: {EVIL}
      class_name: EvilBackend
      base_directory: uncommitted/validations/
  checkpoint_store:
    class_name: CheckpointStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      suppress_store_backend_id: true
      base_directory: checkpoints/
  validation_definition_store:
    class_name: ValidationDefinitionStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: validation_definitions/
expectations_store_name: expectations_store
validation_results_store_name: validation_results_store
checkpoint_store_name: checkpoint_store
data_docs_sites:
  local_site:
    module_name: {EVIL}
    class_name: EvilSiteBuilder
    show_how_to_buttons: true
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: uncommitted/data_docs/local_site/
    site_index_builder:
      class_name: DefaultSiteIndexBuilder
    site_section_builders:
      profiling: None
progress_bars:
  globally: false
"""

# Every path of the project names the key, directly or through a config variable.
ROUTE_2_PROJECT = """config_version: 4.0
config_variables_file_path: uncommitted/config_variables.yml
plugins_directory: plugins/${DP_LEDGER_KEY}/
stores:
  expectations_store:
    class_name: ExpectationsStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: expectations/${DP_LEDGER_KEY}/
  validation_results_store:
    class_name: ValidationResultsStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: ${results_dir}
  checkpoint_store:
    class_name: CheckpointStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      suppress_store_backend_id: true
      base_directory: checkpoints/$DP_LEDGER_KEY/
  validation_definition_store:
    class_name: ValidationDefinitionStore
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: validation_definitions/${DP_LEDGER_KEY}/
expectations_store_name: expectations_store
validation_results_store_name: validation_results_store
checkpoint_store_name: checkpoint_store
data_docs_sites:
  local_site:
    class_name: SiteBuilder
    show_how_to_buttons: true
    store_backend:
      class_name: TupleFilesystemStoreBackend
      base_directory: uncommitted/data_docs/${DP_LEDGER_KEY}/
    site_index_builder:
      class_name: DefaultSiteIndexBuilder
    site_section_builders:
      profiling: None
progress_bars:
  globally: false
"""
ROUTE_2_VARIABLES = "results_dir: uncommitted/validations/${DP_LEDGER_KEY}/\n"


def _suite() -> gx.ExpectationSuite:
    return suite("attack_test", [
        gxe.ExpectColumnValuesToMatchRegex(column="key", regex=r"^[A-Z]{2}$"),
        gxe.ExpectColumnValuesToBeBetween(column="value", max_value={"$PARAMETER": "top"}),
        gxe.ExpectTableRowCountToEqual(value=3),
    ])


def _gate(gx_dir: Path, run_name: str = "attack") -> GateResult:
    return run_suites([(_suite(), "asset", FRAME)], gx_dir=gx_dir, parameters={"top": 10},
                      run_name=run_name)


def _shape(result: GateResult, gx_dir: Path) -> tuple[object, ...]:
    """What a gate's outcome says, its paths relative to its ``gx_dir``."""
    index = Path(str(result.data_docs_index)).relative_to(gx_dir)
    return (result.success, result.failed, result.evaluated, index.as_posix(),
            len(result.validation_pages))


@pytest.fixture(scope="module")
def unplanted(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, ...]:
    """The outcome of the same gate in a ``gx_dir`` nobody planted anything in."""
    gx_dir = tmp_path_factory.mktemp("clean") / "gx"
    return _shape(_gate(gx_dir), gx_dir)


@pytest.fixture
def no_evil_import(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """sys.path and sys.modules as they were, whatever the gate did to them."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    sys.modules.pop(EVIL, None)


def _plant_module(gx_dir: Path) -> None:
    plugins = gx_dir / "gx" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / f"{EVIL}.py").write_text(EVIL_MODULE)


def _files_and_names(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in root.rglob("*"):
        yield path, path.read_bytes() if path.is_file() else b""


def test_route1_a_module_planted_in_the_gx_project_never_runs_in_the_gate(
        tmp_path: Path, unplanted: tuple[object, ...], no_evil_import: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DP_LEDGER_KEY", KEY_TEXT)
    gx_dir = tmp_path / "gx"
    _plant_module(gx_dir)
    (gx_dir / "gx" / "great_expectations.yml").write_text(ROUTE_1_PROJECT)
    result = _gate(gx_dir)
    assert not (gx_dir / f"{EVIL}.ran").exists()
    assert EVIL not in sys.modules
    assert not any(p.startswith(str(gx_dir)) for p in sys.path)
    assert _shape(result, gx_dir) == unplanted  # the gate judged the frame, as without


def test_route2_the_ledger_key_named_in_gx_config_reaches_no_file_and_no_log(
        tmp_path: Path, unplanted: tuple[object, ...], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("DP_LEDGER_KEY", KEY_TEXT)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="great_expectations")
    gx_dir = tmp_path / "gx"
    (gx_dir / "gx" / "uncommitted").mkdir(parents=True)
    (gx_dir / "gx" / "great_expectations.yml").write_text(ROUTE_2_PROJECT)
    (gx_dir / "gx" / "uncommitted" / "config_variables.yml").write_text(ROUTE_2_VARIABLES)
    result = _gate(gx_dir)
    with pytest.raises(GateFailed) as refused:  # the frame fails two rules, as unplanted
        require_pass(result)
    assert "Data Docs: " in str(refused.value) and KEY_TEXT not in str(refused.value)
    assert _shape(result, gx_dir) == unplanted
    planted = {gx_dir / "gx" / "great_expectations.yml",
               gx_dir / "gx" / "uncommitted" / "config_variables.yml"}
    for path, content in _files_and_names(tmp_path):
        assert KEY_TEXT not in str(path)
        assert path in planted or KEY_TEXT.encode() not in content, path
    assert not [r for r in caplog.records if KEY_TEXT in r.getMessage()]


def test_a_planted_validation_result_is_rendered_data_never_code_or_a_verdict(
        tmp_path: Path, no_evil_import: None) -> None:
    """The site index lists the stored results on disk, a planted one too: it names a
    module everywhere a config would, and says the failing suite passed. The gate still
    fails on its frame, and the module is never imported."""
    gx_dir = tmp_path / "gx"
    _plant_module(gx_dir)
    passing = FRAME.assign(key=["AA", "BB", "CC"], value=[1, 2, 3])
    assert run_suites([(_suite(), "asset", passing)], gx_dir=gx_dir, parameters={"top": 10},
                      run_name="earlier").success
    [stored] = (gx_dir / project.RESULTS_DIR).rglob("*.json")
    forged = json.loads(stored.read_text())
    names = {"module_name": EVIL, "class_name": "EvilSiteBuilder", "plugins_directory": "."}
    forged["meta"].update(names)
    for r in forged["results"]:
        r["expectation_config"]["meta"] = names
    # the run "planted": its result, and a page so that the site index lists it
    run = stored.relative_to(gx_dir / project.RESULTS_DIR).parts
    as_planted = Path(run[0], "planted", *run[2:])
    planted = gx_dir / project.RESULTS_DIR / as_planted
    planted.parent.mkdir(parents=True)
    planted.write_text(json.dumps(forged))
    page = gx_dir / project.SITE_DIR / "validations" / as_planted.with_suffix(".html")
    page.parent.mkdir(parents=True)
    page.write_text("<p>a page</p>")
    result = _gate(gx_dir)  # fails: the site index is rebuilt and lists every result
    assert not result.success and len(result.failed) == 2
    assert "planted" in Path(str(result.data_docs_index)).read_text(encoding="utf-8")
    assert not (gx_dir / f"{EVIL}.ran").exists() and EVIL not in sys.modules


# -- the gate's configuration -------------------------------------------------------------
def _leaves(config: object, at: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(config, dict):
        for k, v in config.items():
            yield from _leaves(v, f"{at}.{k}")
    elif isinstance(config, list):
        for i, v in enumerate(config):
            yield from _leaves(v, f"{at}[{i}]")
    else:
        yield at, config


def test_the_gate_context_is_configured_in_code_alone(tmp_path: Path) -> None:
    """No plugins folder, no variables file, no module named but dp_ops's own page views,
    nothing GX would substitute; suites, validation definitions and checkpoints in memory;
    what is on disk (results, Data Docs) under ``gx_dir``; no profiling or suite section
    (the gates never profile; GX's default site would list every stored result again at
    each build)."""
    gx_dir = tmp_path / "gx"
    config = project.project_config(gx_dir)
    assert config.plugins_directory is None and config.config_variables_file_path is None
    leaves = dict(_leaves(config.to_json_dict()))
    modules = {k: v for k, v in leaves.items() if k.endswith(".module_name")}
    assert modules == {
        f".data_docs_sites.{project.SITE_NAME}.site_index_builder.view.module_name":
            "dp_ops.gx.views",
        f".data_docs_sites.{project.SITE_NAME}.site_section_builders.validations.view"
        ".module_name": "dp_ops.gx.views"}
    assert not [v for v in leaves.values() if isinstance(v, str) and "$" in v]
    backends = {k: v for k, v in leaves.items() if k.endswith("store_backend.class_name")}
    on_disk = {k for k, v in backends.items() if v != "InMemoryStoreBackend"}
    assert on_disk == {".stores.validation_results_store.store_backend.class_name",
                       f".data_docs_sites.{project.SITE_NAME}.store_backend.class_name"}
    assert all(Path(str(v)).is_relative_to(gx_dir)
               for k, v in leaves.items() if k.endswith(".base_directory"))
    sections = config.data_docs_sites[project.SITE_NAME]["site_section_builders"]
    assert sections == {"expectations": "None", "profiling": "None", "validations": {
        "view": {"module_name": "dp_ops.gx.views", "class_name": "PageView"}}}
    context = project.open_context(gx_dir)
    assert context.plugins_directory is None


def test_a_gx_dir_gx_would_substitute_into_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"DP_DATA_ROOT.*'\$'"):
        project.project_config(tmp_path / "${DP_LEDGER_KEY}" / "gx")


# -- the record of what earlier gates validated -------------------------------------------
RULES = "rules-sha256"


def test_a_planted_or_edited_validated_record_spares_no_file(tmp_path: Path) -> None:
    key = secrets.token_bytes(32)
    gx_dir = tmp_path / "gx"
    path = gx_dir / validated.VALIDATED_DIR / "mobility.json"
    validated.record_validated(gx_dir, "mobility", RULES, {"2020-02-16": "a"}, key=key)
    assert validated.validated_files(gx_dir, "mobility", RULES, key=key) == {"2020-02-16": "a"}
    genuine = json.loads(path.read_text())

    # the record without a MAC, as an older version wrote it or in today's layout,
    # claiming a day's file passed
    unsealed = {k: v for k, v in genuine.items() if k != "mac"}
    for version in (1, genuine["version"]):
        path.write_text(json.dumps({**unsealed, "version": version,
                                    "files": {"2020-02-17": "b"}}))
        assert validated.validated_files(gx_dir, "mobility", RULES, key=key) == {}
    # the genuine record with one more file added, or one file's digest changed
    for files in ({**genuine["files"], "2020-02-17": "b"}, {"2020-02-16": "b"}):
        path.write_text(json.dumps({**genuine, "files": files}))
        assert validated.validated_files(gx_dir, "mobility", RULES, key=key) == {}
    # sealed under another key
    other = secrets.token_bytes(32)
    validated.record_validated(gx_dir, "mobility", RULES, {"2020-02-17": "b"}, key=other)
    assert validated.validated_files(gx_dir, "mobility", RULES, key=key) == {}
    # another report's genuine record, copied
    validated.record_validated(gx_dir, "symptoms", RULES, {"2020-02-17": "b"}, key=key)
    path.write_bytes((gx_dir / validated.VALIDATED_DIR / "symptoms.json").read_bytes())
    assert validated.validated_files(gx_dir, "mobility", RULES, key=key) == {}
    # a record that does not verify is replaced, not merged into
    validated.record_validated(gx_dir, "mobility", RULES, {"2020-02-18": "c"}, key=key)
    assert validated.validated_files(gx_dir, "mobility", RULES, key=key) == {"2020-02-18": "c"}
