"""Fixtures shared by the crash and race tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.pipeline_helpers import build_previous


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Per report, a data root holding a release and the input of the next days (built
    once per module, copied by every test)."""
    return build_previous(tmp_path_factory)
