"""The GX project of the gate: a file Data Context under ``gx_dir``, its locks, its
checkpoints and its Data Docs site."""

from __future__ import annotations

import fcntl
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

import great_expectations as gx
import pandas as pd
from great_expectations.data_context.types.base import ProgressBarsConfig
from great_expectations.data_context.types.resource_identifiers import (
    ValidationResultIdentifier,
)
from great_expectations.datasource.fluent import PandasDatasource
from great_expectations.exceptions import DataContextError

from dp_ops.gx.suites import rules

if TYPE_CHECKING:
    from great_expectations.data_context import FileDataContext

# The GX data source every suite's pandas asset hangs off (named for the first report to
# use it; renaming it would orphan the assets of existing GX projects).
DATA_SOURCE = "candidate_release"
SITE_NAME = "local_site"

_thread_lock = threading.Lock()


# -- the GX project -----------------------------------------------------------------------
@contextmanager
def project_lock(gx_dir: Path, *, exclusive: bool = True) -> Iterator[None]:
    """Lock the GX project across threads and processes: exclusive to change what runs
    share (project config, suites, checkpoints, pruning, the site index), shared to
    validate and render one run's own pages (new files named by the run).

    The file stores rewrite JSON/YAML files in place and the site index is rebuilt from
    the stores, so a change must not interleave with another run's reads or writes;
    validations only read the shared files and add their own (and GX rewrites its static
    Data Docs assets with the same bytes at each build), so they run side by side
    (four runs of each report at once in a backfill: one lock for everything made the
    gates of both DAGs a queue, most of the demo's wall time).
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


def project_exists(gx_dir: Path) -> bool:
    return (gx_dir / "gx" / "great_expectations.yml").is_file()


def bars_off(context: FileDataContext) -> bool:
    bars = context.variables.progress_bars
    # A fresh project holds a config object, a reloaded one a plain dict.
    globally = bars.get("globally") if isinstance(bars, dict) else getattr(bars, "globally", None)
    return globally is False


def unused_variables_file(gx_dir: Path) -> Path | None:
    """GX's config-variables file when it is still the template it scaffolds (comments
    and an ``instance_id``, which only its usage statistics read, and they are off), else
    None. GX re-reads and parses that file at every access to a project setting, which
    a gate makes many times; a project without it reads no file there.
    This project substitutes no variables."""
    path = gx_dir / "gx" / "uncommitted" / "config_variables.yml"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    template = all(not ln.strip() or ln.lstrip().startswith("#")
                   or ln.startswith("instance_id:") for ln in lines)
    return path if template else None


def site_config(context: FileDataContext) -> dict[str, Any]:
    sites = context.variables.data_docs_sites or {}
    return dict(sites.get(SITE_NAME) or {})


def profiling_off(context: FileDataContext) -> bool:
    """Whether the Data Docs site has no profiling section. The gates never profile, yet
    GX's default site lists every stored validation result again at each build to look
    for profiling runs, which every gate would pay, and a site index more."""
    sections = site_config(context).get("site_section_builders") or {}
    return sections.get("profiling") == "None"


def open_context(gx_dir: Path) -> FileDataContext:
    """The project at ``gx_dir``, created if missing (call under the exclusive lock)."""
    context = gx.get_context(mode="file", project_root_dir=gx_dir)
    unused = unused_variables_file(gx_dir)
    if unused is not None:
        unused.unlink()
    changed = False
    if not bars_off(context):
        # Task logs are for humans; tqdm bars per metric batch only add noise there.
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        changed = True
    if not profiling_off(context):
        site = site_config(context)
        site["site_section_builders"] = {**(site.get("site_section_builders") or {}),
                                         "profiling": "None"}  # GX's word for "no section"
        context.variables.data_docs_sites = {**(context.variables.data_docs_sites or {}),
                                             SITE_NAME: site}
        changed = True
    if changed:
        context.variables.save()
        context = gx.get_context(mode="file", project_root_dir=gx_dir)  # the sites anew
    return context


def storedcheckpoint(context: FileDataContext, suite: gx.ExpectationSuite
                       ) -> gx.Checkpoint | None:
    """The checkpoint saved for ``suite`` when its rules are unchanged, else None
    (reads only)."""
    try:
        stored = context.checkpoints.get(suite.name)
        if ([rules(d.suite) for d in stored.validation_definitions] == [rules(suite)]
                and not stored.actions):
            return stored
    except (DataContextError, LookupError, ValueError):
        pass  # not saved yet, or saved by an older gate
    return None


def checkpoint(
    context: FileDataContext, suite: gx.ExpectationSuite, asset_name: str
) -> gx.Checkpoint:
    """The checkpoint validating ``suite`` on a whole dataframe, saved in the project
    (call under the exclusive lock).

    Reused as stored when its suite is unchanged: rewriting the suite, validation
    definition and checkpoint costs as much as validating a sizeable table.
    """
    stored = storedcheckpoint(context, suite)
    if stored is not None:
        return stored
    source: PandasDatasource
    try:
        source = cast(PandasDatasource, context.data_sources.get(DATA_SOURCE))
    except KeyError:
        source = context.data_sources.add_pandas(DATA_SOURCE)
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(asset_name)
    try:
        batch = asset.get_batch_definition("whole_table")
    except KeyError:
        batch = asset.add_batch_definition_whole_dataframe("whole_table")
    suite = context.suites.add_or_update(suite)
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=suite.name, data=batch, suite=suite)
    )
    # No actions: run_suites renders the Data Docs once for all of a gate's suites (one
    # site-index rebuild instead of one per suite).
    return context.checkpoints.add_or_update(
        gx.Checkpoint(name=suite.name, validation_definitions=[definition], actions=[])
    )


def site_path(context: FileDataContext, resource_identifier: Any = None) -> str | None:
    for site in context.get_docs_sites_urls(
        resource_identifier=resource_identifier, site_name=SITE_NAME, only_if_exists=True
    ):
        url = site.get("site_url")
        if url:
            return unquote(urlparse(url).path)
    return None


def prune_validations(context: FileDataContext, keep: int) -> None:
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


def prepared(gx_dir: Path, runs: list[tuple[gx.ExpectationSuite, str, pd.DataFrame]]
              ) -> tuple[FileDataContext, list[gx.Checkpoint]]:
    """The project and a checkpoint per suite: looked up under the shared lock, and only
    written (a new project, changed rules) under the exclusive one."""
    if project_exists(gx_dir):
        with project_lock(gx_dir, exclusive=False):
            context = gx.get_context(mode="file", project_root_dir=gx_dir)
            stored = [storedcheckpoint(context, suite) for suite, _, _ in runs]
            if (bars_off(context) and profiling_off(context)
                    and all(c is not None for c in stored)
                    and unused_variables_file(gx_dir) is None):
                return context, cast(list[gx.Checkpoint], stored)
    with project_lock(gx_dir, exclusive=True):
        context = open_context(gx_dir)
        return context, [checkpoint(context, suite, asset) for suite, asset, _ in runs]
