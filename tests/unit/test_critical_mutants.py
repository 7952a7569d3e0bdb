"""The critical-mutant set (tests/mutation/critical_mutants.toml and critical/*.toml, run by
scripts/critical_mutants.py in `make test`) stays applicable: every mutant's text occurs
exactly once in today's code and every test it names exists. Killing them is the script's
job; this catches a mutant that drifted from the code in the fast tier. The script's pytest
server runs each mutant on the files as they are then. Not statistical."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.pipeline_helpers import REPO, load_script


def test_every_mutant_matches_the_code_once_and_names_existing_tests() -> None:
    script = load_script("critical_mutants")
    mutants = script.load_mutants()
    assert len(mutants) >= 26
    for mutant in mutants:
        for edit in mutant.edits:
            text = (REPO / edit.file).read_text()
            assert text.count(edit.old) == 1, (mutant.id, edit.file)
        for test in mutant.tests:
            path, _, name = test.partition("::")
            assert (REPO / path).exists(), (mutant.id, path)
            if name:
                assert f"def {name.split('[')[0]}(" in (REPO / path).read_text(), (
                    mutant.id, test)


@pytest.mark.slow
def test_each_forked_run_sees_the_files_as_they_are_then(tmp_path: Path) -> None:
    """The pytest server (scripts/fork_server.py) imports no project module
    itself: a run after an edit sees the edit, a run after the restore sees the original,
    and a run past its timeout is killed."""
    script = load_script("critical_mutants")
    copy = tmp_path / "copy"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy2(REPO / "scripts" / "fork_server.py", copy / "scripts")
    package = copy / "plugins" / "dp_ops"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("VALUE = 1\n")
    (copy / "tests").mkdir()
    (copy / "tests" / "test_probe.py").write_text(
        "import time\n\nimport dp_ops\n\n\n"
        "def test_value():\n    assert dp_ops.VALUE == 1\n\n\n"
        "def test_sleeps():\n    time.sleep(60)\n")
    server = script.PytestServer(copy)
    try:
        probe = ("tests/test_probe.py::test_value",)
        assert server.run(probe)[0] == 0
        (package / "__init__.py").write_text("VALUE = 2\n")  # the "mutant"
        status, _, tail = server.run(probe)
        assert status == 1 and "test_value" in tail
        (package / "__init__.py").write_text("VALUE = 1\n")
        assert server.run(probe)[0] == 0
        status, seconds, _ = server.run(("tests/test_probe.py::test_sleeps",), timeout=3)
        assert status == -9 and seconds < 30
    finally:
        server.close()
