"""The tests' CLI children forked from ``scripts/fork_server.py`` (``support.cli_server``)
run as ``subprocess.run`` would run them: the environment, working directory and standard
input asked for, both outputs captured, the exit code or the signal, the timeout, and
the project's files as they are at each run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import cli_server
from support.pipeline_helpers import REPO, child_env

pytestmark = pytest.mark.slow  # the server imports Great Expectations, pandas, DuckDB

PROBE = '''\
import os
import signal
import sys
import threading
import time

import probe_value

print("argv", sys.argv[1:], "cwd", os.getcwd())
print("env", sorted(k for k in os.environ if k.startswith("PROBE_")), os.environ.get("PROBE_A"))
print("stdin", repr(sys.stdin.read()))
print("value", probe_value.VALUE)
print("to stderr", file=sys.stderr)
action = sys.argv[1]
if action == "kill":
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
if action == "sleep":
    time.sleep(60)
if action == "raise":
    raise ValueError("probe failed")
if action == "thread":
    threading.Thread(target=lambda: (time.sleep(1), print("thread done"))).start()
if action == "message":
    sys.exit("a message")
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else None)
'''


@pytest.fixture(scope="module")
def server() -> Iterator[cli_server.CliServer]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DP_", "PROBE_"))}
    one = cli_server.CliServer({**env, "PROBE_SERVER": "the server's own"})
    yield one
    one.close()


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "probe_value.py").write_text("VALUE = 1\n")
    return tmp_path


def both(server: cli_server.CliServer, probe_dir: Path, *argv: str
         ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PROBE_A": "a value"}
    forked = server.run(list(argv), env, probe_dir, timeout=60, module="probe")
    fresh = subprocess.run([sys.executable, "-m", "probe", *argv], env=env, cwd=probe_dir,
                           capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    return forked, fresh


@pytest.mark.parametrize("argv", [("exit",), ("exit", "3"), ("raise",), ("message",),
                                  ("kill",), ("thread",)])
def test_a_forked_run_ends_and_prints_as_a_new_interpreter_does(
        server: cli_server.CliServer, probe_dir: Path, argv: tuple[str, ...]) -> None:
    forked, fresh = both(server, probe_dir, *argv)
    assert forked.returncode == fresh.returncode
    assert forked.stdout == fresh.stdout
    # the interpreter's traceback starts in runpy, which the server calls otherwise
    assert forked.stderr == "".join(line for line in fresh.stderr.splitlines(keepends=True)
                                    if '"<frozen runpy>"' not in line)
    assert forked.args == [sys.executable, "-m", "probe", *argv]


def test_the_child_has_exactly_the_environment_asked_for(
        server: cli_server.CliServer, probe_dir: Path) -> None:
    """A variable of the server's environment that the run's does not hold is gone."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROBE_")}
    got = server.run(["exit"], {**env, "PROBE_B": "b"}, probe_dir, timeout=60,
                     module="probe")
    assert "env ['PROBE_B'] None" in got.stdout
    assert f"cwd {probe_dir}" in got.stdout and "stdin ''" in got.stdout


def test_each_run_imports_the_project_s_files_as_they_are_then(
        server: cli_server.CliServer, probe_dir: Path) -> None:
    env = dict(os.environ)
    assert "value 1" in server.run(["exit"], env, probe_dir, 60, module="probe").stdout
    # another size: the first run may have left a bytecode cache from this second, and
    # a .pyc is checked against its source's size and modification second only
    (probe_dir / "probe_value.py").write_text("VALUE = 22\n")
    assert "value 22" in server.run(["exit"], env, probe_dir, 60, module="probe").stdout


def test_a_run_past_its_timeout_is_killed_and_raises(
        server: cli_server.CliServer, probe_dir: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        server.run(["sleep"], dict(os.environ), probe_dir, timeout=2, module="probe")
    assert "argv ['sleep']" in str(raised.value.output)
    # the server goes on serving
    assert server.run(["exit"], dict(os.environ), probe_dir, 60, module="probe").returncode == 0


def test_the_dp_ops_cli_answers_as_from_a_new_interpreter(
        server: cli_server.CliServer, tmp_path: Path) -> None:
    env = child_env(tmp_path / "data")
    forked = server.run(["run", "nosuchreport"], env, REPO, timeout=120)
    fresh = subprocess.run([sys.executable, "-m", "dp_ops", "run", "nosuchreport"],
                           env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert forked.returncode == fresh.returncode == 2
    assert (forked.stdout, forked.stderr) == (fresh.stdout, fresh.stderr)
