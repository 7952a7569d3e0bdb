"""The order in which ``make test`` hands the test groups to its pytest-xdist workers."""

from __future__ import annotations

import ast
from pathlib import Path

from support.worker_groups import LONGEST_FIRST, longest_first

REPO = Path(__file__).resolve().parents[2]


def test_the_longest_groups_go_first_in_their_order_and_the_rest_keep_theirs() -> None:
    scopes = ["group:tests/unit/a.py", "tests/unit/b.py::test_one",
              f"group:{LONGEST_FIRST[2]}", "group:tests/unit/c.py", f"group:{LONGEST_FIRST[0]}",
              "tests/unit/b.py::test_two"]
    assert longest_first(scopes) == [
        f"group:{LONGEST_FIRST[0]}", f"group:{LONGEST_FIRST[2]}", "group:tests/unit/a.py",
        "tests/unit/b.py::test_one", "group:tests/unit/c.py", "tests/unit/b.py::test_two"]
    # a test of no group named like a listed module is not moved
    assert longest_first(["tests/unit/x.py::t", LONGEST_FIRST[0]]) == [
        "tests/unit/x.py::t", LONGEST_FIRST[0]]


def _module_marks(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            return ast.unparse(node.value)
    return ""


def test_every_listed_group_is_one_the_collection_makes() -> None:
    # a module path is a group when the module is slow (tests/conftest.py); "previous" is
    # the group its modules name. A renamed module would otherwise silently lose its place.
    named = {name for name in LONGEST_FIRST if not name.startswith("tests/")}
    assert named == {"previous"}
    for name in set(LONGEST_FIRST) - named:
        path = REPO / name
        assert "pytest.mark.slow" in path.read_text(), name
        assert "xdist_group" not in _module_marks(path), name
    sharing = [p for p in (REPO / "tests").rglob("test_*.py")
               if "xdist_group('previous')" in _module_marks(p)]
    assert len(sharing) >= 2
