#!/usr/bin/env python
"""Run pytest, or a module as ``python -m`` would, again and again in one copy of the
repository, each run in a fresh child forked from a process that has imported the heavy
third-party libraries once.

    python scripts/fork_server.py COPY

A new interpreter spends longer importing pandas, DuckDB and Great Expectations than the
critical mutants' tests spend running (``scripts/critical_mutants.py``) or than the crash
and ledger-attack tests' ``python -m dp_ops`` children spend working
(``tests/support/cli_server.py``). This server imports those libraries (never the
project's own packages: ``dp_ops``, ``dp_demo``, the tests), then reads one JSON request
a line on standard input and forks a child for each:

- ``{"pytest": [...], "log": PATH, "timeout": SECONDS}``: ``pytest.main(args)`` in
  ``COPY``, its output in ``PATH``;
- ``{"module": NAME, "argv": [...], "env": {...}, "cwd": DIR, "stdout": PATH,
  "stderr": PATH, "timeout": SECONDS}``: the module run as ``python -m NAME ARGV...``
  in ``DIR`` with exactly the environment ``env``, standard input ``/dev/null`` and its
  two outputs in the two files.

Each answer is ``{"status": N, "exit": E, "signal": S, "timed_out": B}``: the child's
exit code ``E`` or the signal ``S`` that ended it (the other is null), ``B`` when it ran
past its timeout and was killed, and ``N`` the one number the mutants' runner reads:
``E``, or 128 + ``S``, or -9 after a timeout.

A child imports the project's modules itself, from the files as they are when it starts
(a mutant in place), and compiles them without a bytecode cache when the caller set
``PYTHONDONTWRITEBYTECODE``: nothing of them is in the server. Every child shares the
server's hash seed, where new interpreters would each draw one. The server must stay
single-threaded (a fork copies only the forking thread); it checks both after its
imports.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Imported once, shared by every child: third-party only (what the tests and the code
# under test import, the slowest first).
PRELOAD = ("great_expectations", "pandas", "numpy", "pyarrow", "pyarrow.parquet", "duckdb",
           "sqlalchemy", "alembic", "scipy.stats", "matplotlib",
           "matplotlib.backends.backend_agg", "PIL.Image", "jinja2", "hypothesis", "pytest")
# The project's own top-level packages: a child must import them from its copy.
OWN = ("dp_ops", "dp_demo", "support", "conftest", "tests")


def preload() -> None:
    """Import :data:`PRELOAD` and check that none of it brought in the project's own
    modules or a thread."""
    for name in PRELOAD:
        importlib.import_module(name)
    own = sorted(m for m in sys.modules if m.split(".", 1)[0] in OWN)
    if own:
        raise SystemExit(f"fork_server: the preload imported {own[:5]}: a child "
                         "would run them instead of the files as they are")
    if threading.active_count() != 1:
        raise SystemExit("fork_server: the preload started threads: forking "
                         "would copy only this one")


def _redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o600)
    os.dup2(opened, fd)
    os.close(opened)


def _quiet_stdin() -> None:
    """The server's requests come on fd 0: nothing in a child may read them."""
    _redirect(0, os.devnull, os.O_RDONLY)
    sys.stdin = open(os.devnull)  # noqa: SIM115  (the child exits without closing)


def run_pytest(copy: Path, args: list[str], log: Path) -> int:
    """In the forked child: pytest in ``copy``, output to ``log``; its exit status."""
    os.chdir(copy)
    sys.path[0] = str(copy)  # as `python -m pytest` run in the copy has it
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)  # one open file for both, so neither writes over the other
    os.dup2(fd, 2)
    os.close(fd)
    # pytest's capture puts /dev/null on fd 0 too, but only once it has started
    _quiet_stdin()
    import pytest

    return int(pytest.main(args))


def run_module(name: str, argv: list[str], env: dict[str, str], cwd: Path,
               stdout: Path, stderr: Path) -> int:
    """In the forked child: ``python -m name argv...`` in ``cwd`` with the environment
    ``env``; the exit code the interpreter would give."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[0] = str(cwd)  # as `python -m` puts the working directory first
    _redirect(1, str(stdout), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _redirect(2, str(stderr), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    _quiet_stdin()
    sys.argv = [name, *argv]  # runpy sets argv[0] to the module's file
    try:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = _exit_code(done.code)
    except BaseException as exc:  # noqa: BLE001  (printed as the interpreter prints it)
        _print_from_module(exc)
        code = 1
    # what the interpreter does at its end: wait for the threads that are not daemons,
    # then run the exit functions
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    return code


def _print_from_module(exc: BaseException) -> None:
    """The traceback of ``exc`` from the module's own frames on: this server's and
    runpy's frames are not the module's (the interpreter shows its two runpy frames)."""
    tb = exc.__traceback__
    ours = (__file__, runpy.__file__, runpy.run_module.__code__.co_filename)
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _exit_code(code: object) -> int:
    """The interpreter's exit code for ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_child(copy: Path, request: dict[str, Any]) -> None:
    """In the forked child: the request's run; never returns."""
    status = 3 if "pytest" in request else 1
    try:
        if "pytest" in request:
            status = run_pytest(copy, list(request["pytest"]), Path(request["log"]))
        else:
            status = run_module(str(request["module"]), list(request["argv"]),
                                dict(request["env"]), Path(request["cwd"]),
                                Path(request["stdout"]), Path(request["stderr"]))
    except BaseException as exc:  # noqa: BLE001  (the status is the child's only answer)
        print(f"fork_server: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def wait(pid: int, timeout: float) -> dict[str, Any]:
    """How the child ended: its exit code or signal, or killed once ``timeout`` seconds
    passed (see the module docstring)."""
    deadline = time.monotonic() + timeout
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3: poll instead
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.WIFEXITED(status):
                    code = os.WEXITSTATUS(status)
                    return {"status": code, "exit": code, "signal": None,
                            "timed_out": False}
                signal = os.WTERMSIG(status)
                return {"status": 128 + signal, "exit": None, "signal": signal,
                        "timed_out": False}
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return {"status": -9, "exit": None, "signal": 9, "timed_out": True}
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(0.02, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


class ServerStopped(RuntimeError):
    """The server process ended before it answered."""


class Client:
    """A server process for ``copy`` (started with ``env``) and the requests sent to it,
    one at a time; each answer is the dict the module docstring describes. Importing
    this module imports only the standard library: the client preloads nothing."""

    def __init__(self, copy: Path, env: Mapping[str, str]) -> None:
        self.copy = copy
        self._process = subprocess.Popen(
            [sys.executable, str(copy / "scripts" / "fork_server.py"), str(copy)],
            cwd=copy, env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        self._lock = threading.Lock()

    def request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        with self._lock:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            raise ServerStopped(f"the fork server of {self.copy} stopped "
                                f"(exit {self._process.wait()})")
        return dict(json.loads(line))

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=60)


def serve(copy: Path) -> None:
    preload()
    for line in sys.stdin:
        request = json.loads(line)
        # nothing buffered may be written twice: the child gets a copy of the buffers
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(copy, request)
        answer = wait(pid, float(request.get("timeout", 900)))
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: fork_server.py COPY")
    serve(Path(sys.argv[1]).resolve())
