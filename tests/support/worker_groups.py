"""Which tests share a pytest-xdist worker under ``pytest -n N --dist loadgroup``.

A test's group is the name of its ``xdist_group`` mark; tests/conftest.py gives every test
of a module that has a slow test the module as its group (unless it names one), so that
a module's fixtures (data roots, Airflow deployments, Spark servers) are built once, on one
worker. Tests of no group are handed out one by one.

pytest-xdist tells its controller a test's group by appending ``@group`` to the test's id
on the worker, which pytest 9 no longer lets it do (the id is read-only there): the groups
would be silently ignored. Here each worker writes the groups it collected to a file in a
directory the controller gives it, and the controller's scheduler reads them from there.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadGroupScheduling

# the worker input naming the directory of the group files
WORKER_INPUT = "dp_group_dir"
GROUP_DIR = pytest.StashKey[Path]()


def group_of(item: pytest.Item) -> str | None:
    """The item's group: the names of its ``xdist_group`` marks, joined as xdist does."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


def group_dir(config: pytest.Config) -> Path:
    """The controller's directory of group files (made at the first call)."""
    if GROUP_DIR not in config.stash:
        config.stash[GROUP_DIR] = Path(tempfile.mkdtemp(prefix="dp_xdist_groups_"))
    return config.stash[GROUP_DIR]


def write_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker given a group directory: its items' groups, as ``<worker>.json``."""
    worker_input: dict[str, Any] | None = getattr(config, "workerinput", None)
    if not worker_input or WORKER_INPUT not in worker_input:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item))}
    target = Path(worker_input[WORKER_INPUT]) / f"{worker_input['workerid']}.json"
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(groups))
    os.replace(partial, target)


def read_groups(directory: Path) -> dict[str, str]:
    """Every worker's groups, merged (the workers collect the same tests)."""
    groups: dict[str, str] = {}
    for path in sorted(directory.glob("*.json")):
        groups.update(json.loads(path.read_text()))
    return groups


# The groups whose module fixtures run the longest scenarios, handed out first and in
# this order (longest first), so that none of them starts late and ends the run alone:
# the Celery stack's backfills, the Spark Connect backfill, the modules sharing
# ``previous``, then the Airflow end-to-end and operations deployments. Every other
# group follows in xdist's order (most tests first), then the tests of no group.
LONGEST_FIRST = (
    "tests/integration/test_topology.py",
    "tests/integration/test_spark_connect_backfill.py",
    "previous",
    "tests/integration/test_mobility_dag_e2e.py",
    "tests/integration/test_airflow_operations.py",
)


def longest_first(scopes: list[str]) -> list[str]:
    """``scopes`` (xdist's work units, ``group:<name>`` for a group) with the groups of
    ``LONGEST_FIRST`` moved to the front in that order; the rest keep their order."""
    rank = {f"group:{name}": i for i, name in enumerate(LONGEST_FIRST)}
    return sorted(scopes, key=lambda scope: rank.get(scope, len(rank)))


class FileGroupScheduling(LoadGroupScheduling):
    """xdist's ``loadgroup`` scheduling with the groups read from the workers' files, and
    the longest groups handed out first (``LONGEST_FIRST``)."""

    def __init__(self, config: pytest.Config, log: Producer | None, directory: Path) -> None:
        super().__init__(config, log)
        self.directory = directory
        self.groups: dict[str, str] | None = None
        self.ordered = False

    def _assign_work_unit(self, node: Any) -> None:
        # the first call comes once schedule() has filled the whole queue
        if not self.ordered:
            units = dict(self.workqueue)
            self.workqueue.clear()
            for scope in longest_first(list(units)):
                self.workqueue[scope] = units[scope]
            self.ordered = True
        super()._assign_work_unit(node)

    def _split_scope(self, nodeid: str) -> str:
        # first called once every worker has collected (and so written its file)
        if self.groups is None:
            self.groups = read_groups(self.directory)
        group = self.groups.get(nodeid)
        return f"group:{group}" if group else super()._split_scope(nodeid)
