"""Load what other packages register under an entry-point group: the reports
(``dp_ops.reports``) and the sources (``dp_ops.sources``), each a named spec."""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Protocol, TypeVar

# A report's or a source's name appears in paths, ledger rows, asset and DAG ids: a plain
# identifier.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")


class Named(Protocol):
    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Named)
S = TypeVar("S")


def registered(group: str, kind: type[T]) -> dict[str, T]:
    """Every spec registered under ``group``, by name, in name order, each entry point
    loaded once. An entry point that is no ``kind``, or whose name differs from its spec's,
    and a second package registering a taken name, are errors naming them."""
    specs: dict[str, T] = {}
    origin: dict[str, str] = {}
    for ep in entry_points(group=group):
        spec = ep.load()
        if not isinstance(spec, kind):
            raise TypeError(f"entry point {ep.name} = {ep.value} ({group}) is a "
                            f"{type(spec).__name__}, not a {kind.__name__}")
        if spec.name != ep.name:
            raise ValueError(f"entry point {ep.name} = {ep.value} ({group}) holds the spec "
                             f"of {spec.name!r}: the names must agree")
        if spec.name in specs and origin[spec.name] != ep.value:
            raise ValueError(f"{kind.__name__} {spec.name!r} is registered twice: "
                             f"{origin[spec.name]} and {ep.value}")
        specs[spec.name], origin[spec.name] = spec, ep.value
    return dict(sorted(specs.items()))


def find(specs: Mapping[str, S], name: str, unknown: type[ValueError], noun: str,
         hint: str = "") -> S:
    """``specs[name]``; ``unknown`` (a ``ValueError``) naming the known names otherwise."""
    try:
        return specs[str(name)]
    except KeyError:
        raise unknown(f"{noun}={str(name)[:40]!r}: unknown {noun}, expected one of "
                      f"{sorted(specs)}{hint}") from None
