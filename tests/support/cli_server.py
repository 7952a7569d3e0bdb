"""``python -m dp_ops ...`` children for the tests, forked from a server that imported the
heavy third-party libraries once (``scripts/fork_server.py``).

The crash, ledger-attack and ``previous`` tests start the CLI some sixty times in a
``make test``; a new interpreter spends most of each run importing Great Expectations,
pandas and DuckDB. A forked child imports the project's own modules fresh, from the
files, and gets exactly the environment, working directory and standard input
(``/dev/null``) asked for, so it runs as ``subprocess.run`` would run it. What differs:
every child shares the server's hash seed (:func:`run` with ``fresh=True`` starts a new
interpreter, for a run whose result must not depend on one).

One server per test process, started at the first use and stopped when the process
exits.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class CliServer:
    """One ``scripts/fork_server.py`` process and the runs asked of it, one at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        # imported here: support.pipeline_helpers imports this module
        from support.pipeline_helpers import load_script

        self._client = load_script("fork_server").Client(REPO, env)
        self._lock = threading.Lock()
        self._outputs = Path(tempfile.mkdtemp(prefix="dp-cli-server-"))

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float,
            module: str = "dp_ops") -> subprocess.CompletedProcess[str]:
        """``python -m module argv...`` as a forked child: a ``CompletedProcess`` as
        ``subprocess.run(..., capture_output=True, text=True)`` returns it (a negative
        return code for a signal), or ``subprocess.TimeoutExpired`` once it was killed
        after ``timeout`` seconds."""
        with self._lock:  # the two output files are reused by every run
            stdout, stderr = self._outputs / "stdout", self._outputs / "stderr"
            answer = self._client.request(
                {"module": module, "argv": argv, "env": env, "cwd": str(cwd),
                 "stdout": str(stdout), "stderr": str(stderr), "timeout": timeout})
            out = stdout.read_text(errors="replace")
            err = stderr.read_text(errors="replace")
        args = [sys.executable, "-m", module, *argv]
        if answer["timed_out"]:
            raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err)
        code = answer["exit"] if answer["signal"] is None else -int(answer["signal"])
        return subprocess.CompletedProcess(args, int(code), out, err)

    def close(self) -> None:
        self._client.close()
        for name in ("stdout", "stderr"):
            (self._outputs / name).unlink(missing_ok=True)
        self._outputs.rmdir()


_server: CliServer | None = None
_starting = threading.Lock()


def server() -> CliServer:
    """This process's server, started at the first call."""
    global _server
    with _starting:
        if _server is None:
            # the caller's environment without its DP_* settings: those are each run's own
            env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
            env["GX_ANALYTICS_ENABLED"] = "false"
            _server = CliServer(env)
            atexit.register(_server.close)
        return _server


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 600,
        fresh: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m dp_ops argv...`` with ``env`` in ``cwd``, output captured as text:
    forked from this process's server, or in a new interpreter when ``fresh``."""
    if fresh:
        return subprocess.run([sys.executable, "-m", "dp_ops", *argv], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout)
    return server().run(argv, env, cwd, timeout)
