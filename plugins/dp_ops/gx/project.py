"""The gate's GX context: built in code at every gate, nothing of it read from the data
root; its locks; its checkpoints; its Data Docs site under ``gx_dir``.

The data root is writable by someone without the ledger key (PRIVACY.md, Threat model),
and a GX project file is code to GX: it imports the modules a ``module_name`` names, puts
a ``plugins/`` folder on ``sys.path`` and substitutes ``${VARIABLES}`` from the
environment. So the context is ephemeral (:func:`project_config`): suites, validation
definitions and checkpoints live in memory, no ``great_expectations.yml``,
``config_variables.yml`` or plugins folder is read (one left by an older deployment is
ignored), and the only files GX touches under ``gx_dir`` are what it renders and the
validation results that the site index lists (data, never acted on: a gate's verdict
comes from the results in its hands, not from the store).
"""

from __future__ import annotations

import fcntl
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import great_expectations as gx
import pandas as pd
from great_expectations.data_context.types.base import DataContextConfig, ProgressBarsConfig
from great_expectations.data_context.types.resource_identifiers import (
    ValidationResultIdentifier,
)
from great_expectations.datasource.fluent import PandasDatasource

from dp_ops.errors import ConfigError

if TYPE_CHECKING:
    from great_expectations.data_context import EphemeralDataContext

# The GX data source every suite's pandas asset hangs off.
DATA_SOURCE = "candidate_release"
WHOLE_TABLE = "whole_table"
SITE_NAME = "local_site"
# Under ``gx_dir``: where the file projects of earlier versions kept them, so that their
# pages and results stay listed in the site.
SITE_DIR = Path("gx", "uncommitted", "data_docs", SITE_NAME)
RESULTS_DIR = Path("gx", "uncommitted", "validations")

_IN_MEMORY = {"class_name": "InMemoryStoreBackend"}
VIEWS = "dp_ops.gx.views"

_thread_lock = threading.Lock()


# -- the GX context ---------------------------------------------------------------------
def _on_disk(base: Path) -> dict[str, Any]:
    # no store id file: GX would read one back from the directory (and write one)
    return {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(base),
            "suppress_store_backend_id": True}


def project_config(gx_dir: Path) -> DataContextConfig:
    """The whole GX configuration of a gate, fixed here: in-memory stores for suites,
    validation definitions and checkpoints; validation results and the Data Docs site
    (no profiling or suite pages: the gates never profile, and the validation pages show
    each expectation) under ``gx_dir``; no plugins folder, no variables file, no
    analytics, no progress bars (task logs are for humans).

    GX substitutes ``$NAME`` and ``${NAME}`` from the environment in every string of
    it, so a ``gx_dir`` holding a ``$`` is refused (:class:`ConfigError`).
    """
    gx_dir = Path(gx_dir).absolute()
    if "$" in str(gx_dir):
        raise ConfigError(
            f"DP_DATA_ROOT: the Great Expectations directory {str(gx_dir)!r} holds a '$', "
            "which GX would read as a variable to substitute: use a data root path "
            "without '$'")
    return DataContextConfig(
        config_version=4,
        plugins_directory=None,
        config_variables_file_path=None,
        stores={
            "expectations_store": {"class_name": "ExpectationsStore",
                                   "store_backend": _IN_MEMORY},
            "validation_results_store": {"class_name": "ValidationResultsStore",
                                         "store_backend": _on_disk(gx_dir / RESULTS_DIR)},
            "checkpoint_store": {"class_name": "CheckpointStore", "store_backend": _IN_MEMORY},
            "validation_definition_store": {"class_name": "ValidationDefinitionStore",
                                            "store_backend": _IN_MEMORY},
        },
        expectations_store_name="expectations_store",
        validation_results_store_name="validation_results_store",
        checkpoint_store_name="checkpoint_store",
        data_docs_sites={SITE_NAME: {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": _on_disk(gx_dir / SITE_DIR),
            # GX's page views with their compiled templates kept (dp_ops.gx.views)
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder",
                                   "view": {"module_name": VIEWS, "class_name": "IndexPageView"}},
            "site_section_builders": {
                "expectations": "None", "profiling": "None",
                "validations": {"view": {"module_name": VIEWS, "class_name": "PageView"}}},
        }},
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
    )


def open_context(gx_dir: Path) -> EphemeralDataContext:
    """A GX context for a gate at ``gx_dir``, from :func:`project_config` alone."""
    return gx.get_context(mode="ephemeral", project_config=project_config(gx_dir))


def prepared(gx_dir: Path, runs: list[tuple[gx.ExpectationSuite, str, pd.DataFrame]]
             ) -> tuple[EphemeralDataContext, list[gx.Checkpoint]]:
    """A fresh context for ``gx_dir`` (:func:`open_context`) and, per (suite, asset name,
    frame), the checkpoint validating the suite on a whole dataframe asset of that name
    (each table its own asset, so that Data Docs name the table).

    The data source is added with all its assets at once, and the suites and validation
    definitions are added to the context's in-memory stores (a definition validates only
    what its store holds). The checkpoints are not added: each is only the definition's
    holder for :func:`~dp_ops.gx.runner.run_checkpoint`, and adding one to a store costs
    a serialisation of its definition and suite. No actions: the runner renders the Data
    Docs once for all of a gate's suites."""
    context = open_context(gx_dir)
    source = context.data_sources.add_pandas(datasource=PandasDatasource.parse_obj({
        "name": DATA_SOURCE, "type": "pandas", "assets": [
            {"name": asset, "type": "dataframe", "batch_definitions": [{"name": WHOLE_TABLE}]}
            for _, asset, _ in runs]}))
    checkpoints = []
    for suite, asset, _ in runs:
        batch = source.get_asset(asset).get_batch_definition(WHOLE_TABLE)
        definition = context.validation_definitions.add(gx.ValidationDefinition(
            name=suite.name, data=batch, suite=context.suites.add(suite)))
        checkpoints.append(gx.Checkpoint(name=suite.name, validation_definitions=[definition],
                                         actions=[]))
    return context, checkpoints


# -- locks ------------------------------------------------------------------------------
@contextmanager
def project_lock(gx_dir: Path, *, exclusive: bool = True) -> Iterator[None]:
    """Lock the gate's files under ``gx_dir`` across threads and processes: exclusive to
    change what runs share (pruning old results and pages, the site index), shared to
    validate and store and render one run's own results (new files named by the run).

    The site index is rebuilt from the stored results, so pruning and rebuilding must
    not interleave with another run's writes; validations only add their own files (and
    GX rewrites its static Data Docs assets with the same bytes at each build), so they
    run side by side (four runs of each report at once in a backfill: one lock for
    everything made the gates of both DAGs a queue).
    """
    gx_dir.mkdir(parents=True, exist_ok=True)
    with _thread_lock, file_lock(gx_dir / ".gate.lock", exclusive=exclusive):
        yield


@contextmanager
def file_lock(path: Path, *, exclusive: bool = True) -> Iterator[None]:
    """An flock on ``path`` (created if missing), across processes."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- the Data Docs site -----------------------------------------------------------------
def site_path(context: EphemeralDataContext, resource_identifier: Any = None) -> str | None:
    """The local path of the page of ``resource_identifier`` (None: the site index) when
    it exists."""
    for site in context.get_docs_sites_urls(
        resource_identifier=resource_identifier, site_name=SITE_NAME, only_if_exists=True
    ):
        url = site.get("site_url")
        if url:
            return unquote(urlparse(url).path)
    return None


def prune_validations(context: EphemeralDataContext, keep: int) -> None:
    """Drop stored validation results beyond the newest ``keep`` per suite, and their
    Data Docs pages (call under the exclusive lock, before the index is rebuilt). Between
    index rebuilds the store holds the results of the runs since the last one too."""
    store = context.validation_results_store
    by_suite: dict[str, list[ValidationResultIdentifier]] = {}
    for key in store.list_keys():
        if isinstance(key, ValidationResultIdentifier):
            by_suite.setdefault(key.expectation_suite_identifier.name, []).append(key)
    for suite_keys in by_suite.values():
        suite_keys.sort(key=lambda k: k.run_id.run_time, reverse=True)
        for key in suite_keys[keep:]:
            page = site_path(context, key)
            # GE's Store.remove_key has no annotations (a library typing gap)
            store.remove_key(key)  # type: ignore[no-untyped-call]
            if page:
                Path(page).unlink(missing_ok=True)


def index_due(index: str | None, *, failed: bool, refresh_seconds: int,
              now: float) -> bool:
    """Whether this gate rebuilds the Data Docs site index: always when it failed (the
    on-call engineer opens the index from the message) or when there is no index yet,
    else when the index is at least ``refresh_seconds`` old. The index re-reads every
    stored result (one more each run), which a backfill's gates would otherwise pay one
    after the other under the exclusive lock; each run's own pages are always written,
    and their paths are in the result."""
    if failed or index is None:
        return True
    try:
        age = now - Path(index).stat().st_mtime
    except OSError:
        return True
    return age >= refresh_seconds


# -- GX's process-wide settings during a gate ------------------------------------------
def quiet_gx_info() -> None:
    """GX logs dozens of INFO lines per gate about its own config handling ("_get_default_value
    called with key ..."), which bury the gate's own lines in the task log: its loggers
    start at WARNING unless a logging config set their level."""
    gx_logger = logging.getLogger("great_expectations")
    if gx_logger.level == logging.NOTSET:
        gx_logger.setLevel(logging.WARNING)


@contextmanager
def no_data_fingerprint() -> Iterator[None]:
    """While the block runs, GX does not fingerprint in-memory frames. GX hashes every
    cell of a frame under 1 GB (the ``pandas_data_fingerprint`` batch marker of the
    validation result) before it validates anything, a large share of a wide symptoms
    gate's time. Nothing here reads the marker: what a release holds is bound by the
    sha256 of every staged file (manifest). GX has no setting for it, only a module
    constant, so it is set to 0 for the block and restored after it
    (docs/adr/0008-own-great-expectations-runner.md)."""
    from great_expectations.execution_engine import pandas_execution_engine

    before = pandas_execution_engine.HASH_THRESHOLD
    pandas_execution_engine.HASH_THRESHOLD = 0
    try:
        yield
    finally:
        pandas_execution_engine.HASH_THRESHOLD = before
