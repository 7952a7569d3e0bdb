"""Fault injection for the crash tests: die hard (SIGKILL) at a named point.

Production code calls :func:`fault_point` at the moments where a crash is most dangerous
(between two writes that belong together). It does nothing unless the environment asks
for a fault:

- ``DP_FAULT=<point>[@<n>][,<point>[@<n>]...]``: kill this process with ``SIGKILL`` the
  ``n``-th time (default: the first time) it reaches ``<point>``. SIGKILL cannot be caught:
  no ``finally`` block, no atexit handler and no Airflow task callback runs, exactly like
  the kernel's OOM killer or a pulled plug.
- ``DP_FAULT_ONCE=<path>``: fire only if ``<path>`` does not exist yet, and create it just
  before dying; a retry of the same task (which inherits the environment) then runs
  through. Used where Airflow itself retries the killed task.

An unknown point name in ``DP_FAULT`` is refused at the first call, so a typo cannot make a
crash test pass by never crashing.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

from dp_ops.errors import FaultConfigError

FAULT_ENV = "DP_FAULT"
FAULT_ONCE_ENV = "DP_FAULT_ONCE"

# Every point, where it sits, and the state a crash there leaves behind.
POINTS: dict[str, str] = {
    "noise.after_reserve": "ledger spend committed, no noise drawn yet",
    "noise.after_draw": "noise drawn in memory for a spend, not stored",
    "noise.after_store": "a spend's noisy values written to a pending file and recorded in "
                         "the ledger, not yet moved into place (later spends of the day "
                         "may be undrawn)",
    "release.mid_write": "the first file of a candidate release written in staging, the "
                         "rest not",
    "publish.before_rename": "manifest written into the staged release, not moved to "
                             "published/",
    "publish.after_rename": "release directory moved under published/<report>/releases/, "
                            "latest not repointed",
    "publish.after_scaling": "a report's state fixed at its first release (scaling "
                             "factors) stored, the release not promoted",
}

_passes: Counter[str] = Counter()


def parse_faults(spec: str) -> dict[str, int]:
    """``"a@2,b"`` -> ``{"a": 2, "b": 1}``, refusing unknown points."""
    faults: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, count = item.partition("@")
        if name not in POINTS:
            raise FaultConfigError(f"{FAULT_ENV}={spec!r}: unknown fault point {name!r}; "
                                   f"known points: {', '.join(POINTS)}")
        try:
            n = int(count) if count else 1
        except ValueError:
            n = 0
        if n < 1:
            raise FaultConfigError(f"{FAULT_ENV}={spec!r}: {item!r} needs a count >= 1")
        faults[name] = n
    return faults


def fault_point(name: str) -> None:
    """Die with SIGKILL here if ``DP_FAULT`` asks for ``name`` (see the module docstring)."""
    if name not in POINTS:
        raise FaultConfigError(f"fault_point({name!r}): not a registered point")
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    wanted = parse_faults(spec).get(name)
    if wanted is None:
        return
    _passes[name] += 1
    if _passes[name] != wanted:
        return
    once = os.environ.get(FAULT_ONCE_ENV)
    if once:
        try:
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return  # already fired once (this is the retry)
        os.write(fd, name.encode())
        os.fsync(fd)
        os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
