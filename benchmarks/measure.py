"""Run one contender in a fresh child process and measure it from the outside.

Wall time is measured around the child by the parent; peak memory is the child's own
``ru_maxrss`` as returned by ``os.wait4`` (Linux reports KiB), so each number covers one
process from interpreter start to exit and nothing else (the parent's memory, or an
earlier contender's, never counts). The child writes what it timed inside itself (the
computation alone, without interpreter start and imports) to a JSON file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Measurement:
    name: str
    argv: list[str]
    exit_code: int | None
    process_s: float
    peak_rss_mib: float
    cpu_s: float
    timed_out: bool
    other_cpu_s: float | None = None
    result: dict[str, Any] = field(default_factory=dict)
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and bool(self.result)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "argv": self.argv, "exit_code": self.exit_code,
                "process_s": round(self.process_s, 3),
                "peak_rss_mib": round(self.peak_rss_mib, 1), "cpu_s": round(self.cpu_s, 3),
                "timed_out": self.timed_out,
                "other_cpu_s": None if self.other_cpu_s is None else round(self.other_cpu_s, 1),
                "result": self.result, "log": self.log}

    def contended(self, cores: int) -> bool:
        """Other processes used more than 10% of the machine while the child ran."""
        return (self.other_cpu_s is not None
                and self.other_cpu_s > 0.10 * cores * self.process_s)


def _busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (Linux /proc/stat)."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_measured(name: str, argv: list[str], *, result_file: Path, log_file: Path,
                 env: dict[str, str] | None = None, timeout_s: float | None = None,
                 cwd: Path | None = None, guard_path: Path | None = None,
                 min_free_bytes: int = 0) -> Measurement:
    """Run ``argv`` to completion, or kill its process group after ``timeout_s``, or as soon
    as the disk holding ``guard_path`` has less than ``min_free_bytes`` free (DuckDB spills
    to disk beyond its memory limit; a runaway spill must not fill the machine's disk)."""
    result_file.unlink(missing_ok=True)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    busy_before = _busy_cpu_seconds()
    with open(log_file, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
        timed_out = False
        guard_note = ""
        polls = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            polls += 1
            if guard_path is not None and min_free_bytes and polls % 25 == 0:
                free = shutil.disk_usage(guard_path).free
                if free < min_free_bytes:
                    guard_note = (f"\n[benchmark disk guard] killed: {free / 2**30:.1f} GiB "
                                  f"free under {guard_path}\n")
            if guard_note or (timeout_s is not None and time.perf_counter() - t0 > timeout_s):
                timed_out = not guard_note
                os.killpg(proc.pid, signal.SIGKILL)  # the child leads its own group
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        elapsed = time.perf_counter() - t0
    busy_after = _busy_cpu_seconds()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    child_cpu = usage.ru_utime + usage.ru_stime
    # CPU that other processes took while the child ran: the machine is shared, and a
    # timing taken next to someone else's workload is not comparable
    other_cpu = (None if busy_before is None or busy_after is None
                 else max(0.0, busy_after - busy_before - child_cpu))
    result: dict[str, Any] = {}
    if result_file.is_file():
        result = json.loads(result_file.read_text())
    if guard_note:
        with open(log_file, "a") as log_text:
            log_text.write(guard_note)
    text = log_file.read_text(errors="replace")
    return Measurement(name=name, argv=argv, exit_code=None if timed_out else proc.returncode,
                       process_s=elapsed, peak_rss_mib=usage.ru_maxrss / 1024.0,
                       cpu_s=child_cpu, timed_out=timed_out, other_cpu_s=other_cpu,
                       result=result, log=text[-4000:])
