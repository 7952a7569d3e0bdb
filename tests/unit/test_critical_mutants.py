"""The critical-mutant set (tests/mutation/critical_mutants.toml and critical/*.toml, run by
scripts/critical_mutants.py in `make test`) stays applicable: every mutant's text occurs
exactly once in today's code and every test it names exists. Killing them is the script's
job; this catches a mutant that drifted from the code in the fast tier. Not statistical."""

from __future__ import annotations

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
