"""Work Great Expectations repeats within one validation, done once per validation.

GX 1.x plans each expectation's metrics by asking the expectation for its keyword
arguments again and again: every domain or success key it looks up rebuilds the whole
``Expectation.configuration`` (a copy of the pydantic model), dozens of times per
expectation. And every metric of an expectation with a ``row_condition`` filters the
frame again with ``DataFrame.query``, which builds a resolver for every column each time.
On the gate's small suites these two repeats are a large share of a validation.

:func:`validation_memo` keeps, for the block it wraps and the thread that runs it:

- an expectation's configuration keyword arguments, per expectation object, while the
  object's fields are the same objects as when they were read (GX builds the expectation
  objects it validates from their configurations and does not change them);
- a row condition's filtered frame, per (engine, frame, condition, parser), handed out as
  a shallow copy (pandas' copy-on-write: a change to one copy never reaches another).

Outside the block, or in another thread, GX's own methods run unchanged. The wrapped
methods are GX 1.x internals (``Expectation._get_domain_kwargs``,
``_get_success_kwargs``, ``_get_success_kwarg`` and
``PandasExecutionEngine._apply_row_condition_filter``), written here as GX writes them
except for where the values come from; revisit them at every GX upgrade
(docs/adr/0008-own-great-expectations-runner.md). ``tests/unit/gx/test_gx_memo.py``
checks that a validation gives the same results with and without the memo.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from great_expectations.exceptions import InvalidExpectationKwargsError
from great_expectations.execution_engine.pandas_execution_engine import PandasExecutionEngine
from great_expectations.expectations.expectation import Expectation

# The memo of the validation running in this thread (None: GX's own methods).
_ACTIVE: ContextVar[dict[Any, Any] | None] = ContextVar("dp_ops_gx_memo", default=None)
_install_lock = threading.Lock()
_installed: dict[str, Any] = {}


@contextmanager
def validation_memo() -> Iterator[None]:
    """Memoise, for the block and this thread, what GX recomputes per metric (module
    docstring). Nested blocks share the outer block's memo."""
    install()
    if _ACTIVE.get() is not None:
        yield
        return
    token = _ACTIVE.set({})
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def install() -> None:
    """Put the memo-aware methods on GX's classes (once per process). They behave as
    GX's own unless :func:`validation_memo` is active in the calling thread."""
    with _install_lock:
        if _installed:
            return
        _installed.update(
            domain=Expectation._get_domain_kwargs,
            success=Expectation._get_success_kwargs,
            success_kwarg=Expectation._get_success_kwarg,
            row_filter=PandasExecutionEngine._apply_row_condition_filter,
        )
        Expectation._get_domain_kwargs = _get_domain_kwargs  # type: ignore[method-assign]
        Expectation._get_success_kwargs = _get_success_kwargs  # type: ignore[method-assign]
        Expectation._get_success_kwarg = _get_success_kwarg  # type: ignore[method-assign]
        PandasExecutionEngine._apply_row_condition_filter = (  # type: ignore[method-assign]
            _apply_row_condition_filter)


def configured_kwargs(expectation: Expectation, memo: dict[Any, Any]) -> dict[str, Any]:
    """``expectation.configuration.kwargs``, read once per expectation object while its
    fields stay the same objects (a field set anew is read again)."""
    fields = tuple(expectation.__dict__.values())
    hit = memo.get(("kwargs", id(expectation)))
    if hit is not None:
        held, held_fields, kwargs = hit
        if held is expectation and len(held_fields) == len(fields) and all(
                a is b for a, b in zip(held_fields, fields, strict=True)):
            return kwargs  # type: ignore[no-any-return]
    kwargs = expectation.configuration.kwargs
    # the expectation is held so that its id is not reused within the block
    memo[("kwargs", id(expectation))] = (expectation, fields, kwargs)
    return kwargs


def _get_domain_kwargs(self: Expectation) -> dict[str, str | None]:
    memo = _ACTIVE.get()
    if memo is None:
        return _installed["domain"](self)  # type: ignore[no-any-return]
    kwargs = configured_kwargs(self, memo)
    domain_kwargs = {key: kwargs.get(key, self._get_default_value(key))
                     for key in self.domain_keys}
    missing = set(self.domain_keys) - set(domain_kwargs.keys())
    if missing:
        raise InvalidExpectationKwargsError(f"Missing domain kwargs: {list(missing)}")
    return domain_kwargs


def _get_success_kwargs(self: Expectation) -> dict[str, Any]:
    memo = _ACTIVE.get()
    if memo is None:
        return _installed["success"](self)  # type: ignore[no-any-return]
    kwargs = configured_kwargs(self, memo)
    success_kwargs = {key: kwargs.get(key, self._get_default_value(key))
                      for key in self.success_keys}
    success_kwargs.update(self._get_domain_kwargs())
    return success_kwargs


def _get_success_kwarg(self: Expectation, key: str, default: Any = None) -> Any:
    memo = _ACTIVE.get()
    if memo is None:
        return _installed["success_kwarg"](self, key, default)
    kwargs = configured_kwargs(self, memo)
    if key in kwargs:
        return kwargs[key]
    field = self.__fields__.get(key)
    if field is not None:
        return field.default if not field.required else default
    return _installed["success_kwarg"](self, key, default)  # GX logs the unknown key


def _apply_row_condition_filter(self: PandasExecutionEngine, data: Any, row_condition: Any,
                                domain_kwargs: dict[str, Any]) -> Any:
    memo = _ACTIVE.get()
    condition = _condition_key(row_condition) if memo is not None else None
    if memo is None or condition is None:
        return _installed["row_filter"](self, data, row_condition, domain_kwargs)
    key = ("rows", id(self), id(data), condition, domain_kwargs.get("condition_parser"))
    hit = memo.get(key)
    if hit is None or hit[0] is not self or hit[1] is not data:
        hit = (self, data, _installed["row_filter"](self, data, row_condition, domain_kwargs))
        memo[key] = hit
    return hit[2].copy(deep=False)


def _condition_key(row_condition: Any) -> str | None:
    """A row condition as a canonical string, or None when it has none (then no memo)."""
    if isinstance(row_condition, str):
        return f"str:{row_condition}"
    if isinstance(row_condition, dict):
        try:
            return "dict:" + json.dumps(row_condition, sort_keys=True)
        except (TypeError, ValueError):
            return None
    return None
