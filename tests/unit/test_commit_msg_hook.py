"""The commit-msg hook (scripts/commit-msg, installed by ``make hooks``) refuses a subject
longer than 72 characters and names its length."""

from __future__ import annotations

import subprocess
from pathlib import Path

HOOK = Path(__file__).resolve().parents[2] / "scripts" / "commit-msg"


def _hook(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message)
    return subprocess.run(["bash", str(HOOK), str(path)], capture_output=True, text=True,
                          timeout=30)


def test_a_subject_of_72_characters_passes_and_73_is_refused(tmp_path: Path) -> None:
    assert _hook(tmp_path, "x" * 72 + "\n\nA body line " + "y" * 100 + "\n").returncode == 0
    refused = _hook(tmp_path, "x" * 73 + "\n")
    assert refused.returncode == 1
    assert "73 characters" in refused.stderr


def test_comment_lines_are_not_the_subject(tmp_path: Path) -> None:
    assert _hook(tmp_path, "# " + "z" * 100 + "\nShort subject\n").returncode == 0
    assert _hook(tmp_path, "# only a comment\n").returncode == 0
