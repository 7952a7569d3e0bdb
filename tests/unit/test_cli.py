"""``python -m dp_ops``: one clear error line on the terminal, the detail in the log file."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dp_ops import cli


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in root.handlers[len(handlers):]:
        handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_an_error_is_one_line_and_the_traceback_goes_to_the_log(
        dp_data_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["run", "mobility", "--start", "2020-01-01", "--end", "2020-01-01"])
    err = capsys.readouterr().err
    assert code == 2
    log_file = dp_data_root / "logs" / "dp_ops.log"
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and "regions.csv" in lines[0]
    assert lines[1:] == [f"  (details: {log_file})"]
    assert "Traceback" not in err
    detail = log_file.read_text()
    assert "Traceback (most recent call last)" in detail and "regions.csv" in detail


def test_verbose_shows_the_traceback_on_the_terminal_too(
        dp_data_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--verbose", "run", "mobility", "--start", "2020-01-02",
                     "--end", "2020-01-01"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: --end 2020-01-01 is before --start 2020-01-02" in err
    assert "Traceback (most recent call last)" in err


def test_a_bad_argument_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "mobility", "--start", "2020-02-30", "--end", "2020-03-01"])
    assert exit_info.value.code == 2
    assert "date='2020-02-30': not a calendar date" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--start", "20200216", "--end", "2020-02-16"],
     "date='20200216': expected a date as YYYY-MM-DD"),
    (["--start", "2020-02-16", "--end", "2020-02-16", "--reason", "a\nforged line"],
     "control characters are not allowed"),
    (["--start", "2020-02-16", "--end", "2020-02-16", "--reason", "\x1b[31mred"],
     "control characters are not allowed"),
    (["--start", "2020-02-16", "--end", "2020-02-16", "--reason", "x" * 100_000],
     "at most 500 characters"),
    (["--start", "2020-02-16", "--end", "2020-02-16", "--run-id", "daily\n3 forged"],
     "control characters are not allowed"),
    (["--start", "2020-02-16", "--end", "2020-02-16", "--region", "R" * 1_000_000],
     "a region_id is 1-64"),
])
def test_typed_values_are_checked_before_anything_runs(
        argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14, finding 10: a date like 20200216, a reason or run id holding a newline or
    an escape or 100 KB, a 1 MB region id: each is refused by the CLI, and the error
    echoes at most a short prefix of the value."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "mobility", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err) < 2000


# -- the installed commands ----------------------------------------------------------------

def _help(*command: str) -> str:
    res = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.mark.parametrize("command", [
    (sys.executable, "-m", "dp_ops"),
    (str(Path(sys.executable).with_name("dp-ops")),),
    (sys.executable, "-m", "dp_demo"),
    (str(Path(sys.executable).with_name("dp-demo")),),
])
def test_every_documented_subcommand_is_there(command: tuple[str, ...]) -> None:
    """``generate`` and ``evaluate`` come from dp_demo through the ``dp_ops.commands``
    entry points; ``run`` and ``ledger`` from dp_ops itself; both packages are installed,
    so no PYTHONPATH is needed."""
    text = _help(*command)
    for sub in ("generate", "run", "ledger", "evaluate"):
        assert sub in text
    assert "--renoise" in _help(*command, "run")
    assert "--users" in _help(*command, "generate")


def test_the_demo_commands_are_plugged_in_not_imported() -> None:
    names = {ep.name: ep.value for ep in cli.plugin_commands()}
    assert names == {"evaluate": "dp_demo.cli:evaluate_command",
                     "generate": "dp_demo.cli:generate_command"}
    assert "dp_demo" not in Path(cli.__file__).read_text()
