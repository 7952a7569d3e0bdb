"""Fixtures shared by the crash, race, file-access and ledger-attack tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cached_roots import GeneratedRoots, build_previous


@pytest.fixture(scope="session")
def previous(tmp_path_factory: pytest.TempPathFactory,
             generated_roots: GeneratedRoots) -> dict[str, Path]:
    """Per report, a data root holding a release and the input of the next days, with the
    default SQLite ledger (built once per session and worker, copied by every test: no
    test writes here). The modules using it share the ``xdist_group`` "previous"."""
    return build_previous(tmp_path_factory, generated_roots)
