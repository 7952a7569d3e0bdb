"""The order ``make mutation`` runs a mutant's tests in (tests/support/mutation_order.py)."""

from __future__ import annotations

from support.mutation_order import order


def test_files_cheapest_first_then_tests_cheapest_first_within_a_file() -> None:
    duration = {"a.py::slow": 5.0, "a.py::fast": 0.1, "b.py::one": 1.0, "b.py::two": 1.5,
                "c.py::x": 0.2}
    given = ["a.py::slow", "b.py::two", "a.py::fast", "c.py::x", "b.py::one"]
    assert order(given, duration) == ["c.py::x", "b.py::one", "b.py::two", "a.py::fast",
                                      "a.py::slow"]


def test_unrecorded_tests_count_as_free_and_ties_keep_their_order() -> None:
    duration = {"a.py::t1": 1.0}
    given = ["a.py::t1", "a.py::t2[x]", "a.py::t2[y]", "b.py::new"]
    assert order(given, duration) == ["b.py::new", "a.py::t2[x]", "a.py::t2[y]", "a.py::t1"]
    assert order([], duration) == []
