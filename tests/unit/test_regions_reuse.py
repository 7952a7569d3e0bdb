"""The validated region table a process keeps (``read_regions``) is given again only while
its file is the same file: the processes that fork Airflow tasks read it once at start and
keep it for their lifetime (issue 49), so a rewrite that keeps the size and sets the
modification time back must still be read and validated again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dp_demo.geography import demo_regions

from dp_ops.errors import RegionTableError
from dp_ops.regions import read_regions, write_regions


def test_a_same_size_rewrite_with_the_old_mtime_is_read_again(tmp_path: Path) -> None:
    regions = demo_regions()
    path = tmp_path / "regions.csv"
    write_regions(regions, path)
    old = path.stat().st_mtime_ns - 10_000_000_000
    os.utime(path, ns=(old, old))  # older than the 2 s racy window: reusable
    read_regions(path)
    text = path.read_text()
    parent = str(regions.loc[1, "parent_id"])
    unknown = "Q" * len(parent)  # a parent no region has, of the same length
    assert f",{parent}," in text and unknown not in text
    path.write_text(text.replace(f",{parent},", f",{unknown},", 1))  # the same size
    os.utime(path, ns=(old, old))
    with pytest.raises(RegionTableError, match=unknown):
        read_regions(path)
