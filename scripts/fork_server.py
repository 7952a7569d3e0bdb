#!/usr/bin/env python
"""Run pytest again and again in one copy of the repository, each run in a fresh child
forked from a process that has imported the heavy third-party libraries once.

    python scripts/pytest_fork_server.py COPY

For ``scripts/critical_mutants.py``: each mutant's tests used to start a new interpreter,
which spent longer importing pandas, DuckDB and Great Expectations than running the
tests. This server imports those libraries (never the project's own packages: ``dp_ops``,
``dp_demo``, the tests), then reads one JSON request a line on standard input,
``{"args": [...], "log": PATH, "timeout": SECONDS}``, forks a child that runs
``pytest.main(args)`` in ``COPY`` with its output in ``PATH``, and answers
``{"status": N}``: pytest's exit status, or -9 when the child ran past its timeout and
was killed, or 128 + the signal that ended it.

A child imports the project's modules itself, from the files as they are when it starts
(the mutant in place), and compiles them without a bytecode cache
(``PYTHONDONTWRITEBYTECODE`` is set by the caller): nothing of them is in the server.
The server must stay single-threaded (a fork copies only the forking thread); it checks
both after its imports.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import sys
import threading
import time
from pathlib import Path

# Imported once, shared by every child: third-party only (what the mutants' tests and
# the code under test import, the slowest first).
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
        raise SystemExit(f"pytest_fork_server: the preload imported {own[:5]}: a child "
                         "would run them instead of the mutated files")
    if threading.active_count() != 1:
        raise SystemExit("pytest_fork_server: the preload started threads: forking "
                         "would copy only this one")


def run_child(copy: Path, args: list[str], log: Path) -> None:
    """In the forked child: pytest in ``copy``, output to ``log``; never returns."""
    status = 3
    try:
        os.chdir(copy)
        sys.path[0] = str(copy)  # as `python -m pytest` run in the copy has it
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        # the server's requests come on fd 0: nothing in the child may read them (pytest's
        # capture puts /dev/null there too, but only once it has started)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(os.devnull)  # noqa: SIM115  (the child exits without closing)
        import pytest

        status = int(pytest.main(args))
    except BaseException as exc:  # noqa: BLE001  (the status is the child's only answer)
        print(f"pytest_fork_server: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def wait(pid: int, timeout: float) -> int:
    """The child's exit status, or -9 once ``timeout`` seconds passed (it is killed)."""
    deadline = time.monotonic() + timeout
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3: poll instead
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return (os.WEXITSTATUS(status) if os.WIFEXITED(status)
                        else 128 + os.WTERMSIG(status))
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                return -9
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(0.02, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def serve(copy: Path) -> None:
    preload()
    for line in sys.stdin:
        request = json.loads(line)
        # nothing buffered may be written twice: the child gets a copy of the buffers
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(copy, list(request["args"]), Path(request["log"]))
        status = wait(pid, float(request.get("timeout", 900)))
        sys.stdout.write(json.dumps({"status": status}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: pytest_fork_server.py COPY")
    serve(Path(sys.argv[1]).resolve())
