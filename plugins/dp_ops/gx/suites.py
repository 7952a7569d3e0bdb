"""Expectation suites as the reports build them, and what a suite checks (its rules)."""

from __future__ import annotations

import hashlib
import json
from datetime import date, datetime
from typing import Any

import great_expectations as gx
import great_expectations.expectations as gxe


def suite(name: str, expectations: list[gxe.Expectation]) -> gx.ExpectationSuite:
    """An expectation suite named ``name`` holding ``expectations``."""
    # Passed to the constructor, not added one by one: GX 1.24 writes each
    # ``add_expectation`` through to the store when a suite of that name is already saved.
    return gx.ExpectationSuite(name=name, expectations=expectations)


def day_start(day: date) -> datetime:
    """Midnight of ``day``, as GX compares datetime columns."""
    return datetime(day.year, day.month, day.day)


def rules(suite: gx.ExpectationSuite) -> list[tuple[str, dict[str, Any]]]:
    # What a suite checks, without the ids and rendering the store adds (GX's own suite
    # equality compares expectation ids, so a rebuilt suite never equals its stored self).
    skip = {"id", "rendered_content", "notes", "meta"}
    return [(e.expectation_type, e.dict(exclude=skip)) for e in suite.expectations]


def rules_digest(suites: list[gx.ExpectationSuite]) -> str:
    """sha256 of what ``suites`` check (names and rules, not ids): the key under which
    :func:`record_validated` remembers what passed them."""
    payload = [[s.name, rules(s)] for s in suites]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()
                          ).hexdigest()
