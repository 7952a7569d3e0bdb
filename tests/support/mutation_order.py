"""pytest plugin for ``make mutation`` (scripts/mutation.py loads it with ``-p``): run the
tests that reach a mutant cheapest first, so a killed mutant costs its cheapest failing
test and not whatever the selection happened to list first.

mutmut hands a mutant's tests to pytest in no particular order and stops at the first
failure (``-x``); it records each test's duration in ``mutmut-stats.json`` (in the working
directory of the run). Tests stay grouped by file, so a module-scoped fixture is still set
up once: files cheapest first by their tests' total time, then tests within a file cheapest
first. Without the stats file (an ordinary pytest run) the order is left alone. The order
changes what a run costs, never a verdict: a survivor runs every test either way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")


def order(nodeids: list[str], duration: dict[str, float]) -> list[str]:
    """``nodeids`` grouped by file, files by total duration, tests by duration; ties (and
    tests with no recorded duration, counted as 0) keep their given order."""
    by_file: dict[str, list[str]] = {}
    for nodeid in nodeids:
        by_file.setdefault(nodeid.split("::", 1)[0], []).append(nodeid)
    files = sorted(by_file.values(), key=lambda ids: sum(duration.get(i, 0.0) for i in ids))
    return [i for ids in files for i in sorted(ids, key=lambda i: duration.get(i, 0.0))]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not STATS.is_file():
        return
    duration = json.loads(STATS.read_text()).get("duration_by_test", {})
    position = {nodeid: n for n, nodeid in enumerate(order([i.nodeid for i in items],
                                                           duration))}
    items.sort(key=lambda item: position[item.nodeid])
