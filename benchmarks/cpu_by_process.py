#!/usr/bin/env python
"""CPU time of a command and every process under it, by kind of process: run the
command, read ``/proc/<pid>/stat`` of each descendant every ``--interval`` seconds and
keep each process's last reading and its last command line (Airflow renames its forked
processes: ``airflow task supervisor: ...``, ``airflow task runner: ...``).

    python benchmarks/cpu_by_process.py [--interval 0.05] -- make demo

Prints, per kind (the command line with ids, dates and numbers taken out), the number
of processes and their CPU seconds (user + system), and how much of the command's own
total (``getrusage`` of its children) the readings cover: a process that lives less
than one interval, or its last interval, is missed. With ``--airflow-db`` (the SQLite
metadata DB of the Airflow the command ran, e.g. ``airflow_home/airflow.db`` for ``make
demo``), the task processes (``airflow worker -- <task instance id>``) are also summed
per DAG and task. Linux only.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int, float] | None:
    """(parent pid, start time, CPU seconds of the process itself) or None when it is
    gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / _TICKS


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def kind(cmdline: str) -> str:
    """The command line without paths to interpreters, ids, dates and numbers."""
    text = re.sub(r"\S*/(python[\d.]*|airflow)\b", r"\1", cmdline)
    text = re.sub(r"(dag_id|task_id|run_id|map_index|ti_id|id)=\S+", r"\1=…", text)
    text = re.sub(r"\d{4}-\d{2}-\d{2}\S*", "<date>", text)
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b", "<uuid>", text)
    text = re.sub(r"\d+", "N", text)
    return text[:110]


def _descendants(root: int, parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for pid, ppid in parents.items():
        children[ppid].append(pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--airflow-db", type=Path, default=None)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given (put it after --)")
    start = time.monotonic()
    proc = subprocess.Popen(command)
    cpu: dict[tuple[int, int], float] = {}  # (pid, start time): a reused pid is another
    names: dict[tuple[int, int], str] = {}
    while proc.poll() is None:
        parents: dict[int, int] = {}
        readings: dict[int, tuple[int, float]] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                got = _stat(int(entry.name))
                if got is not None:
                    parents[int(entry.name)] = got[0]
                    readings[int(entry.name)] = got[1:]
        for pid in _descendants(proc.pid, parents) | {proc.pid}:
            if pid in readings:
                started, seconds = readings[pid]
                cpu[(pid, started)] = seconds
                names[(pid, started)] = _cmdline(pid) or names.get((pid, started), "?")
        time.sleep(args.interval)
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    by_kind: dict[str, list[float]] = defaultdict(list)
    for key, seconds in cpu.items():
        by_kind[kind(names[key])].append(seconds)
    seen = sum(cpu.values())
    print(f"\n{' '.join(command)}: exit {proc.returncode}, {wall:.0f} s wall, {total:.0f} CPU-s "
          f"(user {usage.ru_utime:.0f}, system {usage.ru_stime:.0f}); the readings cover "
          f"{seen:.0f} CPU-s ({seen / total:.0%})" if total else "no CPU used")
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>6}  kind")
    for name, values in sorted(by_kind.items(), key=lambda kv: -sum(kv[1]))[:args.top]:
        print(f"{sum(values):8.1f} {sum(values) / max(total, 1e-9):6.1%} {len(values):6d}  {name}")
    if args.airflow_db is not None:
        per_task(cpu, names, args.airflow_db, total)
    return proc.returncode


def per_task(cpu: dict[tuple[int, int], float], names: dict[tuple[int, int], str],
             db: Path, total: float) -> None:
    """The task processes' CPU per DAG and task, their task instance ids looked up in
    the Airflow metadata DB ``db``."""
    if not db.is_file():
        print(f"\n{db} does not exist: no task processes by task")
        return
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tasks = {str(i).replace("-", ""): f"{d}.{t}" for i, d, t in con.execute(
            "SELECT id, dag_id, task_id FROM task_instance")}
    finally:
        con.close()
    by_task: dict[str, list[float]] = defaultdict(list)
    for key, seconds in cpu.items():
        m = re.fullmatch(r"airflow worker -- ([0-9a-f-]{36})", names[key])
        if m:
            by_task[tasks.get(m[1].replace("-", ""), "?")].append(seconds)
    print(f"\ntask processes by task (ids from {db}):")
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>6} {'mean':>6}  task")
    for name, values in sorted(by_task.items(), key=lambda kv: -sum(kv[1])):
        print(f"{sum(values):8.1f} {sum(values) / max(total, 1e-9):6.1%} {len(values):6d} "
              f"{sum(values) / len(values):6.2f}  {name}")


if __name__ == "__main__":
    sys.exit(main())
