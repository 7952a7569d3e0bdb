"""``dp_ops.gx.runner.run_checkpoint``: what ``Checkpoint.run`` does for the gate's
checkpoints (no actions, held in memory), minus its freshness check. Run against GX itself: the same
result keys, statistics and stored results as ``Checkpoint.run``."""

from __future__ import annotations

import os

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import great_expectations as gx  # noqa: E402
import great_expectations.expectations as gxe  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from great_expectations.checkpoint import UpdateDataDocsAction  # noqa: E402
from great_expectations.core.run_identifier import RunIdentifier  # noqa: E402

from dp_ops.gx import project, runner  # noqa: E402
from dp_ops.gx.suites import suite  # noqa: E402

FRAME = pd.DataFrame({"key": ["AA", "BB", "cc"], "value": [1, 2, 30]})


def _suite() -> gx.ExpectationSuite:
    return suite("checkpoint_test", [
        gxe.ExpectColumnValuesToMatchRegex(column="key", regex=r"^[A-Z]{2}$"),
        gxe.ExpectColumnValuesToBeBetween(column="value", max_value={"$PARAMETER": "top"}),
        gxe.ExpectTableRowCountToEqual(value=3),
    ])


def _stored_checkpoint(tmp_path: Path) -> tuple[object, gx.Checkpoint]:
    context, [checkpoint] = project.prepared(tmp_path / "gx", [(_suite(), "asset", FRAME)])
    return context, checkpoint


def test_same_results_and_stored_results_as_checkpoint_run(tmp_path: Path) -> None:
    context, checkpoint = _stored_checkpoint(tmp_path)
    ours_id = RunIdentifier(run_name="ours", run_time=datetime(2020, 1, 1, tzinfo=UTC))
    theirs_id = RunIdentifier(run_name="theirs", run_time=datetime(2020, 1, 2, tzinfo=UTC))
    ours = runner.run_checkpoint(checkpoint, FRAME, {"top": 10}, ours_id)
    theirs = list(checkpoint.run(batch_parameters={"dataframe": FRAME},
                                 expectation_parameters={"top": 10},
                                 run_id=theirs_id).run_results.items())
    assert len(ours) == len(theirs) == 1
    (our_key, our_result), (their_key, their_result) = ours[0], theirs[0]
    assert our_key.expectation_suite_identifier == their_key.expectation_suite_identifier
    assert our_key.batch_identifier == their_key.batch_identifier
    assert our_key.run_id == ours_id
    assert not our_result.success and not their_result.success  # "cc" and 30 fail
    assert our_result.statistics == their_result.statistics
    assert ([r.success for r in our_result.results]
            == [r.success for r in their_result.results] == [False, False, True])
    # the gate's checkpoints are held, not stored: ours has no id; Checkpoint.run stores
    # its checkpoint first
    assert our_result.meta["checkpoint_id"] is None
    assert their_result.meta["checkpoint_id"] == checkpoint.id is not None
    assert our_result.meta["validation_id"] == their_result.meta["validation_id"] \
        == checkpoint.validation_definitions[0].id is not None
    store = context.validation_results_store
    stored = store.get(our_key)
    assert stored.statistics == our_result.statistics  # stored as Checkpoint.run stores


def test_a_checkpoint_with_actions_is_refused(tmp_path: Path) -> None:
    _, checkpoint = _stored_checkpoint(tmp_path)
    checkpoint.actions = [UpdateDataDocsAction(name="docs")]
    with pytest.raises(ValueError, match="has actions"):
        runner.run_checkpoint(checkpoint, FRAME, {"top": 10}, RunIdentifier(run_name="x"))


def test_frames_are_validated_without_a_data_fingerprint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_suites switches off GX's per-cell fingerprint of the frame (a batch marker no
    one reads) while it validates, and puts GX's setting back afterwards (nothing else in
    the process is changed); the outcome is the same as with it."""
    from great_expectations.execution_engine import pandas_execution_engine

    before = pandas_execution_engine.HASH_THRESHOLD
    assert before > 0
    seen: list[int] = []
    real = runner.run_checkpoint

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(pandas_execution_engine.HASH_THRESHOLD)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "run_checkpoint", spy)
    result = runner.run_suites([(_suite(), "asset", FRAME)], gx_dir=tmp_path / "gx",
                             parameters={"top": 10}, run_name="no-fingerprint")
    assert seen == [0] and pandas_execution_engine.HASH_THRESHOLD == before
    assert not result.success and len(result.failed) == 2  # "cc" and 30, as above
    stored = list((tmp_path / "gx").rglob("validations/**/*.json"))
    assert stored and all("pandas_data_fingerprint" not in p.read_text() for p in stored)


def _normalised_page(path: str) -> str:
    """A Data Docs page without what differs between two builds of the same result: the
    run's and the build's times (in every form GX writes them) and the element ids GX
    draws at random."""
    import re

    text = Path(path).read_text()
    text = re.sub(r"\d{8}T\d{6}\.\d{6}Z", "<time>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d(:|%3A)\d\d(:|%3A)\d\d(\.\d+)?( UTC|Z|\+00:00)?",
                  "<time>", text)
    text = re.sub(r"'_run_time_sort': [\d.]+", "<time>", text)
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>",
                  text)


def test_data_docs_compile_gx_templates_once_per_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's page views (dp_ops.gx.views) keep Jinja's compiled templates for the
    process: a second gate compiles none, and its pages are the ones GX's own views
    write for the same result."""
    import jinja2

    from dp_ops.gx import views

    compiled: list[str] = []
    real_compile = jinja2.Environment.compile

    def counting(self: jinja2.Environment, source: str, name: str | None = None,
                 *args: object, **kwargs: object) -> object:
        compiled.append(name or "")
        return real_compile(self, source, name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    views.COMPILED.clear()
    run = {"parameters": {"top": 10}, "run_name": "same"}
    first = runner.run_suites([(_suite(), "asset", FRAME)], gx_dir=tmp_path / "one", **run)
    assert compiled and len(views.COMPILED) > 0
    compiled.clear()
    second = runner.run_suites([(_suite(), "asset", FRAME)], gx_dir=tmp_path / "two", **run)
    assert compiled == []
    assert first.validation_pages and second.validation_pages
    assert first.data_docs_index and second.data_docs_index

    # GX's own views in their place write the same pages
    monkeypatch.setattr(views, "PageView", views.DefaultJinjaPageView)
    monkeypatch.setattr(views, "IndexPageView", views.DefaultJinjaIndexPageView)
    theirs = runner.run_suites([(_suite(), "asset", FRAME)], gx_dir=tmp_path / "gx", **run)
    assert compiled  # GX's views compile their templates
    for ours, gxs in ((first.validation_pages[0], theirs.validation_pages[0]),
                      (first.data_docs_index, theirs.data_docs_index)):
        assert ours is not None and gxs is not None
        assert _normalised_page(ours) == _normalised_page(gxs)
