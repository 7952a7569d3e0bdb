"""Helpers the tests share, imported as the package ``support`` (pytest.ini puts ``tests/``
on ``sys.path``; spawned workers inherit it): ``from support.pipeline_helpers import ...``.
Every name another file imports is public; ``dates.date_range`` and ``ci.in_ci`` are the
one date range and the one CI switch of the test suite."""
