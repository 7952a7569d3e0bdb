"""The input contract's public facts shared by every source and report: the levels of the
region table. Each source's own contract is its :class:`~dp_ops.sources.spec.SourceSpec`."""

from __future__ import annotations

# The geographic levels of the region table: 0 country, 1 sub_region_1, 2 sub_region_2.
LEVELS: tuple[int, ...] = (0, 1, 2)
LEVEL_NAMES = {0: "country", 1: "sub_region_1", 2: "sub_region_2"}
