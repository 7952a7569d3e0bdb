"""The release gate's runner: Great Expectations validation of candidate release tables.

Each report brings its own expectation suites (``dp_ops.reports.<report>.suites``);
:func:`run_suites` validates each (suite, table) pair in one GX project and returns what
failed, and :func:`require_pass` stops the release unless everything passed. Failure
messages name the expectation, the column and counts or aggregate observations only,
never row values; the full report is in the GX Data Docs site under ``gx_dir``, which the
on-call engineer opens from the message. The Data Docs pages themselves list a sample of
the failing values (GX's SUMMARY result format): noisy estimates and public region
attributes, the same kind of values a release publishes, never raw rows or user ids.

The GX project is a file Data Context at ``gx_dir``, created on first use and reused
after. Its suites, validation definitions and checkpoints are rewritten only when the
rules change (e.g. a new config). A file lock on the project makes concurrent calls in
one process or across processes safe: validations share it, changes to shared files take
it exclusively (:func:`run_suites`). Each run writes its own validation pages; the site
index is rebuilt on failure and otherwise at most every ``DP_DOCS_INDEX_SECONDS`` (120),
when stored validation results and their Data Docs pages are also pruned to
``KEEP_VALIDATIONS`` a suite.

The gate reads only noisy values and public region attributes (post-processing), so it
costs no privacy budget. No Airflow imports; ``dp_ops.airflow.operators`` wraps it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlparse

# GX reads this when it is imported and when a context is built; opt out before either.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

import great_expectations as gx  # noqa: E402
import great_expectations.expectations as gxe  # noqa: E402
import pandas as pd  # noqa: E402
from great_expectations.core.run_identifier import RunIdentifier  # noqa: E402
from great_expectations.data_context.types.base import ProgressBarsConfig  # noqa: E402
from great_expectations.data_context.types.resource_identifiers import (  # noqa: E402
    ExpectationSuiteIdentifier,
    ValidationResultIdentifier,
)
from great_expectations.datasource.fluent import PandasDatasource  # noqa: E402
from great_expectations.exceptions import DataContextError  # noqa: E402
from great_expectations.expectations.row_conditions import (  # noqa: E402
    Column,
    deserialize_row_condition,
)

from dp_ops.errors import GateFailed

if TYPE_CHECKING:
    from great_expectations.core import (
        ExpectationSuiteValidationResult,
        ExpectationValidationResult,
    )
    from great_expectations.data_context import FileDataContext

# The GX data source every suite's pandas asset hangs off (named for the first report to
# use it; renaming it would orphan the assets of existing GX projects).
DATA_SOURCE = "candidate_release"
SITE_NAME = "local_site"
# Stored validation results (and their Data Docs pages) kept per suite.
KEEP_VALIDATIONS = 50

_thread_lock = threading.Lock()


@dataclass(frozen=True)
class GateResult:
    """Outcome of one gate run.

    ``failed`` describes each failed expectation (type, column, counts or aggregate
    observations; never row values). ``data_docs_index`` is the local path of the Data
    Docs site's ``index.html``; ``validation_pages`` the local paths of this run's
    validation pages in that site.
    """

    success: bool
    failed: tuple[str, ...]
    data_docs_index: str | None
    evaluated: int
    validation_pages: tuple[str, ...] = ()


def require_pass(result: GateResult) -> None:
    """Raise :class:`GateFailed` unless the gate passed."""
    if result.success:
        return
    lines = [
        f"release gate failed: {len(result.failed)} of {result.evaluated} expectations failed"
    ]
    lines += [f"  - {f}" for f in result.failed]
    lines.append(f"Data Docs: {result.data_docs_index}")
    lines += [f"validation report: {p}" for p in result.validation_pages]
    raise GateFailed("\n".join(lines))


# -- the expectation suites ---------------------------------------------------------------
def suite(name: str, expectations: list[gxe.Expectation]) -> gx.ExpectationSuite:
    """An expectation suite named ``name`` holding ``expectations``."""
    # Passed to the constructor, not added one by one: GX 1.24 writes each
    # ``add_expectation`` through to the store when a suite of that name is already saved.
    return gx.ExpectationSuite(name=name, expectations=expectations)


def day_start(day: date) -> datetime:
    """Midnight of ``day``, as GX compares datetime columns."""
    return datetime(day.year, day.month, day.day)


# -- the GX project -----------------------------------------------------------------------
@contextmanager
def _project_lock(gx_dir: Path, *, exclusive: bool = True) -> Iterator[None]:
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
    with _thread_lock, _file_lock(gx_dir / ".gate.lock", exclusive=exclusive):
        yield


@contextmanager
def _file_lock(path: Path, *, exclusive: bool = True) -> Iterator[None]:
    """An flock on ``path`` (created if missing), across processes."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _project_exists(gx_dir: Path) -> bool:
    return (gx_dir / "gx" / "great_expectations.yml").is_file()


def _bars_off(context: FileDataContext) -> bool:
    bars = context.variables.progress_bars
    # A fresh project holds a config object, a reloaded one a plain dict.
    globally = bars.get("globally") if isinstance(bars, dict) else getattr(bars, "globally", None)
    return globally is False


def _unused_variables_file(gx_dir: Path) -> Path | None:
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


def _site(context: FileDataContext) -> dict[str, Any]:
    sites = context.variables.data_docs_sites or {}
    return dict(sites.get(SITE_NAME) or {})


def _profiling_off(context: FileDataContext) -> bool:
    """Whether the Data Docs site has no profiling section. The gates never profile, yet
    GX's default site lists every stored validation result again at each build to look
    for profiling runs, which every gate would pay, and a site index more."""
    sections = _site(context).get("site_section_builders") or {}
    return sections.get("profiling") == "None"


def _open_context(gx_dir: Path) -> FileDataContext:
    """The project at ``gx_dir``, created if missing (call under the exclusive lock)."""
    context = gx.get_context(mode="file", project_root_dir=gx_dir)
    unused = _unused_variables_file(gx_dir)
    if unused is not None:
        unused.unlink()
    changed = False
    if not _bars_off(context):
        # Task logs are for humans; tqdm bars per metric batch only add noise there.
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        changed = True
    if not _profiling_off(context):
        site = _site(context)
        site["site_section_builders"] = {**(site.get("site_section_builders") or {}),
                                         "profiling": "None"}  # GX's word for "no section"
        context.variables.data_docs_sites = {**(context.variables.data_docs_sites or {}),
                                             SITE_NAME: site}
        changed = True
    if changed:
        context.variables.save()
        context = gx.get_context(mode="file", project_root_dir=gx_dir)  # the sites anew
    return context


def _stored_checkpoint(context: FileDataContext, suite: gx.ExpectationSuite
                       ) -> gx.Checkpoint | None:
    """The checkpoint saved for ``suite`` when its rules are unchanged, else None
    (reads only)."""
    try:
        stored = context.checkpoints.get(suite.name)
        if ([_rules(d.suite) for d in stored.validation_definitions] == [_rules(suite)]
                and not stored.actions):
            return stored
    except (DataContextError, LookupError, ValueError):
        pass  # not saved yet, or saved by an older gate
    return None


def _checkpoint(
    context: FileDataContext, suite: gx.ExpectationSuite, asset_name: str
) -> gx.Checkpoint:
    """The checkpoint validating ``suite`` on a whole dataframe, saved in the project
    (call under the exclusive lock).

    Reused as stored when its suite is unchanged: rewriting the suite, validation
    definition and checkpoint costs about as much as validating 25,000 rows.
    """
    stored = _stored_checkpoint(context, suite)
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


# Keyword arguments that locate or tune an expectation rather than state its rule.
_NOT_RULE_KWARGS = frozenset(
    {"column", "column_list", "row_condition", "condition_parser", "result_format",
     "catch_exceptions", "meta", "notes", "mostly", "windows", "severity", "batch_id"}
)


def _rules(suite: gx.ExpectationSuite) -> list[tuple[str, dict[str, Any]]]:
    # What a suite checks, without the ids and rendering the store adds (GX's own suite
    # equality compares expectation ids, so a rebuilt suite never equals its stored self).
    skip = {"id", "rendered_content", "notes", "meta"}
    return [(e.expectation_type, e.dict(exclude=skip)) for e in suite.expectations]


def rules_digest(suites: list[gx.ExpectationSuite]) -> str:
    """sha256 of what ``suites`` check (names and rules, not ids): the key under which
    :func:`record_validated` remembers what passed them."""
    payload = [[s.name, _rules(s)] for s in suites]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()


# -- what earlier gates validated -----------------------------------------------------------
# Files whose rows passed a report's row-level suites, by a label (a day) and the file's
# sha256, under ``<gx_dir>/validated/<report>.json``. A gate validates with GX only the
# rows of files not in it, and rules that hold for a set of rows when they hold for each
# row cannot fail on the union of sets that each passed. Deleting the record (or the GX
# project) costs one full validation and nothing else; a record of other rules is ignored.
VALIDATED_DIR = "validated"
_VALIDATED_VERSION = 1


def _validated_path(gx_dir: Path, report: str) -> Path:
    return Path(gx_dir) / VALIDATED_DIR / f"{report}.json"


def validated_files(gx_dir: Path, report: str, rules: str) -> dict[str, str]:
    """label -> sha256 of the files that passed ``rules`` (empty when there is no record,
    it cannot be read, or it is of other rules or another layout)."""
    try:
        record = json.loads(_validated_path(gx_dir, report).read_text())
    except (OSError, ValueError):
        return {}
    if (not isinstance(record, dict) or record.get("version") != _VALIDATED_VERSION
            or record.get("rules") != rules or not isinstance(record.get("files"), dict)):
        return {}
    return {str(k): str(v) for k, v in record["files"].items()}


def record_validated(gx_dir: Path, report: str, rules: str, files: dict[str, str]) -> None:
    """Add ``files`` (label -> sha256) to the record of what passed ``rules`` (call only
    after they passed). Concurrent gates merge under a lock; a record of other rules is
    replaced."""
    from dp_ops.engine.files import write_json_atomic

    path = _validated_path(gx_dir, report)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(path.parent / f".{report}.lock"):
        merged = {**validated_files(gx_dir, report, rules), **files}
        write_json_atomic(path, {"version": _VALIDATED_VERSION, "rules": rules,
                                 "files": dict(sorted(merged.items()))})


def _exception_message(info: dict[str, Any] | None) -> str | None:
    """The first error message of a result's ``exception_info``.

    GX puts it at the top level when the expectation raised, or under the id of each
    metric that failed to resolve (e.g. a missing column).
    """
    if not info:
        return None
    candidates = [info, *(v for v in info.values() if isinstance(v, dict))]
    for candidate in candidates:
        if candidate.get("raised_exception"):
            message = str(candidate.get("exception_message") or "unknown error")
            return (message.splitlines() or [""])[0][:200]
    return None


def _describe(result: ExpectationValidationResult) -> str:
    """One failed expectation: type, column, rule, and counts or aggregate observations.

    Never row values: map expectations report how many rows failed, table expectations
    their observed aggregate (a row count, a distinct count, column names, a dtype).
    """
    config = result.expectation_config
    kwargs = dict(config.kwargs) if config is not None else {}
    kind = config.type if config is not None else "unknown expectation"
    target = kwargs.get("column") or kwargs.get("column_list") or "table"
    if isinstance(target, list):
        target = "(" + ", ".join(map(str, target)) + ")"
    condition = kwargs.get("row_condition")
    if isinstance(condition, dict):
        condition = deserialize_row_condition(condition)
    where = f" where {condition!r}" if condition else ""
    res = result.result or {}

    if "column_set" in kwargs or kind == "expect_table_columns_to_match_ordered_list":
        expected = list(kwargs.get("column_set") or kwargs.get("column_list") or [])
        observed = list(res.get("observed_value") or [])
        missing = [c for c in expected if c not in observed]
        extra = [c for c in observed if c not in expected]
        if missing or extra:
            summary = f"missing columns {missing}, unexpected columns {extra}"
        else:
            summary = f"columns out of order, observed {observed}"
        return f"{kind} [table]: {summary}"

    rule = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items() if k not in _NOT_RULE_KWARGS)
    label = f"{kind} [{target}{where}]" + (f" ({rule})" if rule else "")
    error = _exception_message(result.exception_info)
    if error is not None:
        return f"{label}: could not be evaluated: {error}"
    if "unexpected_count" in res:
        return (
            f"{label}: {res.get('unexpected_count')} of {res.get('element_count')} rows"
            f" unexpected ({float(res.get('unexpected_percent') or 0.0):.2f}%)"
        )
    return f"{label}: observed {_short(res.get('observed_value'))}"


def _short(value: Any) -> str:
    if isinstance(value, datetime):
        return value.date().isoformat() if value == day_start(value) else value.isoformat()
    if isinstance(value, dict) and "$PARAMETER" in value:
        return f"${value['$PARAMETER']}"
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(map(_short, value[:2]))}, ..., {_short(value[-1])}] ({len(value)})"
    return repr(value) if isinstance(value, str) else str(value)


def _site_path(context: FileDataContext, resource_identifier: Any = None) -> str | None:
    for site in context.get_docs_sites_urls(
        resource_identifier=resource_identifier, site_name=SITE_NAME, only_if_exists=True
    ):
        url = site.get("site_url")
        if url:
            return unquote(urlparse(url).path)
    return None


def _prune_validations(context: FileDataContext, keep: int) -> None:
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
            page = _site_path(context, key)
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


def _quiet_gx_info() -> None:
    """GX logs dozens of INFO lines per gate about its own config handling ("_get_default_value
    called with key ..."), which bury the gate's own lines in the task log: its loggers
    start at WARNING unless a logging config set their level."""
    gx_logger = logging.getLogger("great_expectations")
    if gx_logger.level == logging.NOTSET:
        gx_logger.setLevel(logging.WARNING)


@contextmanager
def _no_data_fingerprint() -> Iterator[None]:
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


def _prepared(gx_dir: Path, runs: list[tuple[gx.ExpectationSuite, str, pd.DataFrame]]
              ) -> tuple[FileDataContext, list[gx.Checkpoint]]:
    """The project and a checkpoint per suite: looked up under the shared lock, and only
    written (a new project, changed rules) under the exclusive one."""
    if _project_exists(gx_dir):
        with _project_lock(gx_dir, exclusive=False):
            context = gx.get_context(mode="file", project_root_dir=gx_dir)
            stored = [_stored_checkpoint(context, suite) for suite, _, _ in runs]
            if (_bars_off(context) and _profiling_off(context)
                    and all(c is not None for c in stored)
                    and _unused_variables_file(gx_dir) is None):
                return context, cast(list[gx.Checkpoint], stored)
    with _project_lock(gx_dir, exclusive=True):
        context = _open_context(gx_dir)
        return context, [_checkpoint(context, suite, asset) for suite, asset, _ in runs]


def _run_checkpoint(checkpoint: gx.Checkpoint, frame: pd.DataFrame,
                    parameters: dict[str, Any], run_id: RunIdentifier
                    ) -> list[tuple[ValidationResultIdentifier,
                                    ExpectationSuiteValidationResult]]:
    """What ``checkpoint.run`` does for a checkpoint without actions, minus its own
    freshness check: each validation definition validates the frame and stores its result
    (the definition checks that its suite and batch are the stored ones), keyed as the
    checkpoint keys it.

    ``checkpoint.run`` first re-reads the checkpoint, its definitions and their suites
    from the project to check that they match the objects in hand; :func:`_prepared` has
    just read them from the project, under the lock that keeps them from changing, and
    checked their rules, so that check read the same files again (a few hundredths of a
    second a suite).
    """
    if checkpoint.actions:  # _stored_checkpoint returns none with actions; say so if not
        raise ValueError(f"checkpoint {checkpoint.name} has actions: run it with .run()")
    out = []
    for definition in checkpoint.validation_definitions:
        result = definition.run(checkpoint_id=checkpoint.id,
                                batch_parameters={"dataframe": frame},
                                expectation_parameters=parameters,
                                result_format=checkpoint.result_format, run_id=run_id)
        key = ValidationResultIdentifier(
            expectation_suite_identifier=ExpectationSuiteIdentifier(
                name=definition.suite.name),
            run_id=run_id, batch_identifier=result.batch_id)
        out.append((key, result))
    return out


def warm_up() -> GateResult:
    """Validate a tiny frame with the kinds of expectation the reports' suites use, in a
    throwaway project, Data Docs included (no data: a made-up two-row frame).

    For the processes that fork task processes (``airflow_local_settings``): Great
    Expectations' first validation in a process costs more than the next ones (class
    registries, metric providers, abstract-base-class caches, templates), and a forked
    task inherits what its parent has done."""
    import tempfile

    frame = pd.DataFrame({"key": ["AA", "BB"], "day": ["2020-02-15", "2020-02-16"],
                          "value": pd.array([1, None], dtype="Int64"), "share": [0.5, 1.0],
                          "flag": [True, False]})
    flagged = Column("flag") == True  # noqa: E712  (a GX condition, not a comparison)
    warm = suite("warm_up", [
        gxe.ExpectTableColumnsToMatchOrderedList(column_list=list(frame.columns)),
        gxe.ExpectTableColumnsToMatchSet(column_set=list(frame.columns), exact_match=False),
        gxe.ExpectTableRowCountToEqual(value={"$PARAMETER": "rows"}),
        gxe.ExpectColumnValuesToNotBeNull(column="key"),
        gxe.ExpectColumnValuesToMatchRegex(column="key", regex=r"^[A-Z]{2}$"),
        gxe.ExpectColumnValuesToMatchStrftimeFormat(column="day", strftime_format="%Y-%m-%d"),
        gxe.ExpectColumnValuesToBeInSet(column="day", value_set={"$PARAMETER": "days"}),
        gxe.ExpectColumnValuesToNotBeInSet(column="day", value_set=["2020-01-01"]),
        gxe.ExpectColumnValuesToBeInTypeList(column="value", type_list=["Int64Dtype"]),
        gxe.ExpectColumnValuesToBeBetween(column="value", min_value=0, max_value=10),
        gxe.ExpectColumnValuesToBeBetween(column="share", min_value=0, strict_min=True,
                                          row_condition=flagged),
        gxe.ExpectCompoundColumnsToBeUnique(column_list=["key", "day"]),
        gxe.ExpectColumnUniqueValueCountToBeBetween(column="day", min_value=2, max_value=2),
    ])
    with tempfile.TemporaryDirectory(prefix="dp_ops-gx-warm-") as tmp:
        return run_suites([(warm, "warm_up", frame)], gx_dir=Path(tmp),
                          parameters={"rows": 2, "days": list(frame["day"])},
                          run_name="warm-up")


def run_suites(
    runs: list[tuple[gx.ExpectationSuite, str, pd.DataFrame]],
    *,
    gx_dir: Path,
    parameters: dict[str, Any],
    run_name: str,
) -> GateResult:
    """Validate each (suite, asset name, dataframe) in the GX project at ``gx_dir``, with
    Data Docs; return what failed (raise nothing).

    Concurrent gates (a backfill runs several at once, of both reports) validate side by
    side under the shared project lock, each adding its own results and pages; the
    exclusive lock is taken only to write shared files: a new project or changed rules
    (:func:`_prepared`), and the site index with the pruning of old results, rebuilt
    when :func:`index_due`."""
    from dp_ops.settings import load_execution_settings

    _quiet_gx_info()
    refresh = load_execution_settings().docs_index_seconds
    gx_dir = Path(gx_dir)
    run_id = RunIdentifier(run_name=run_name, run_time=datetime.now(UTC))
    context, checkpoints = _prepared(gx_dir, runs)
    results: list[tuple[Any, ExpectationSuiteValidationResult]] = []
    with _project_lock(gx_dir, exclusive=False):
        with _no_data_fingerprint():
            for checkpoint, (_, _, frame) in zip(checkpoints, runs, strict=True):
                results += _run_checkpoint(checkpoint, frame, parameters, run_id)
        failed: list[str] = []
        evaluated = 0
        for _, suite_result in results:
            evaluated += int(suite_result.statistics.get("evaluated_expectations") or 0)
            failed += [
                f"{suite_result.suite_name}: {_describe(r)}"
                for r in suite_result.results
                if not r.success
            ]
        success = not failed and all(r.success for _, r in results)
        identifiers = [identifier for identifier, _ in results]
        rebuild_index = index_due(_site_path(context), failed=not success,
                                  refresh_seconds=refresh, now=time.time())
        if not rebuild_index:
            context.build_data_docs(site_names=[SITE_NAME], resource_identifiers=identifiers,
                                    build_index=False)
    if rebuild_index:
        with _project_lock(gx_dir, exclusive=True):
            _prune_validations(context, KEEP_VALIDATIONS)
            context.build_data_docs(site_names=[SITE_NAME], resource_identifiers=identifiers)
    pages = [page for page in (_site_path(context, i) for i in identifiers) if page]
    return GateResult(
        success=success,
        failed=tuple(failed),
        data_docs_index=_site_path(context),
        evaluated=evaluated,
        validation_pages=tuple(pages),
    )
