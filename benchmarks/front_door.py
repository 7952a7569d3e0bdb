#!/usr/bin/env python
"""The first two commands as a newcomer runs them: ``make demo`` and ``make test`` (and the
inner loop, ``make test-fast``) on a fresh clone of this checkout's commit, timed whole.

    python benchmarks/front_door.py [--only demo,test-fast,test] [--cold-cache] [--repeat N]

Each command runs in its own new clone (``git clone`` of HEAD into a temporary directory),
so each one builds ``.venv`` from the pinned files first, as on a fresh machine: the wall
time includes the environment build. The installer's download cache is the machine's
(``~/.cache/uv``, pip's) unless ``--cold-cache`` gives the clone an empty one, as on a
machine that never installed these packages. For ``make demo`` the clone's own results
file (``benchmarks/results/demo.json``) gives the backfills' part, and it is copied over
this checkout's ``demo.{md,json}`` (a first run on a fresh data root); for the tests, the
log gives pytest's summary, the critical mutants' and the slowest test phases.

Writes ``benchmarks/results/front_door_<command>.{md,json}`` per command measured, stamped
with the commit, date and machine; prints one line per command. Exit status: 1 when a
command failed (its figures are then not written).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import results_file  # noqa: E402

COMMANDS = ("demo", "test-fast", "test")
# what each acceptance point allows, in seconds (issue targets, not measurements)
LIMITS = {"demo": 300, "test-fast": 120, "test": 1200}


def log(msg: str) -> None:
    print(f"[front-door {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def venv_seconds(clone: Path, started: float) -> float | None:
    """Seconds from the command's start until ``make venv`` finished (the mtime of
    ``.venv/.installed``, which it touches last)."""
    marker = clone / ".venv" / ".installed"
    return marker.stat().st_mtime - started if marker.exists() else None


def demo_parts(clone: Path) -> dict[str, Any]:
    """What the clone's ``make demo`` wrote of its own run: end to end (after the
    environment) and each DAG's backfill."""
    path = clone / "benchmarks" / "results" / "demo.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {"demo_s": data.get("seconds"),
            "backfill_done_after_s": data.get("backfill_done_after_seconds", {}),
            "runs_executing_after_s": data.get("runs_executing_after_seconds")}


# The results files a command writes in its clone, copied over this checkout's when it
# succeeds: the committed figure is then a first run's on a fresh clone (a demo re-run on
# a data root holding stored noise and gate records does less).
# (make test's critical_mutants.{md,json} are not: every make test rewrites them, so they
# are not committed; the front door's own file carries their summary line.)
OWN_RESULTS = {"demo": ("demo.md", "demo.json")}


def copy_results(clone: Path, command: str) -> list[str]:
    """Copy the clone's own results files of ``command`` (:data:`OWN_RESULTS`, stamped
    with the clone's commit) over this checkout's; return the names copied."""
    copied = []
    for name in OWN_RESULTS.get(command, ()):
        source = clone / "benchmarks" / "results" / name
        if source.is_file():
            shutil.copyfile(source, REPO / "benchmarks" / "results" / name)
            copied.append(name)
    return copied


_PYTEST_SUMMARY = re.compile(r"^=*\s*\d+ (passed|failed).* in [\d.]+s")
_MUTANTS_SUMMARY = re.compile(r"^\d+ of \d+ critical mutants killed")


def test_parts(log_text: str) -> dict[str, Any]:
    """From a ``make test``/``make test-fast`` log: pytest's summary line, the critical
    mutants' summary line, and the slowest durations pytest listed (``--durations``)."""
    lines = log_text.splitlines()
    parts: dict[str, Any] = {}
    for line in lines:
        if _PYTEST_SUMMARY.match(line):
            parts["pytest_summary"] = line.strip("= ")
        elif _MUTANTS_SUMMARY.match(line):
            parts["mutants_summary"] = line.strip()
    slowest: list[str] = []
    for i, line in enumerate(lines):
        if "slowest" in line and "durations" in line:
            for row in lines[i + 1:]:
                if not re.match(r"^[\d.]+s (call|setup|teardown) ", row):
                    break
                slowest.append(row)
    if slowest:
        parts["slowest"] = slowest[:30]
    return parts


def measure(command: str, workdir: Path, cold_cache: bool) -> dict[str, Any]:
    clone = workdir / command
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, check=True,
                            capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if "/.venv/" not in p)
    if cold_cache:
        env["UV_CACHE_DIR"] = str(workdir / f"uv-cache-{command}")
        env["PIP_NO_CACHE_DIR"] = "1"
    log_path = workdir / f"{command}.log"
    log(f"make {command} in {clone} (log {log_path})")
    started = time.time()
    t0 = time.monotonic()
    with log_path.open("w") as out:
        status = subprocess.run(["make", command], cwd=clone, env=env, stdout=out,
                                stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    figures: dict[str, Any] = {"command": f"make {command}", "commit": commit,
                               "exit_status": status,
                               "wall_s": round(wall, 1),
                               "venv_build_s": _rounded(venv_seconds(clone, started)),
                               "cold_cache": cold_cache, "limit_s": LIMITS[command]}
    if command == "demo":
        figures.update(demo_parts(clone))
    else:
        figures.update(test_parts(log_path.read_text()))
    figures["clone"] = str(clone)
    if status != 0:
        figures["log_tail"] = log_path.read_text().splitlines()[-40:]
    return figures


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of the middle run by wall time (the faster middle one of an even
    count), with every run's wall, environment and pytest figures under ``runs``, in the
    order they ran."""
    middle = sorted(runs, key=lambda r: r["wall_s"])[(len(runs) - 1) // 2]
    figures = dict(middle)
    figures["runs"] = [{k: r.get(k) for k in ("wall_s", "venv_build_s", "pytest_summary",
                                                "mutants_summary", "demo_s",
                                                "runs_executing_after_s")} for r in runs]
    return figures


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def report(figures: dict[str, Any]) -> str:
    lines = ["| what | seconds |", "|---|---:|",
             f"| `{figures['command']}` on a fresh clone (wall, environment included) "
             f"| {figures['wall_s']:.0f} |"]
    if figures.get("venv_build_s") is not None:
        lines.append(f"| of which building `.venv` | {figures['venv_build_s']:.0f} |")
    if figures.get("demo_s") is not None:
        lines.append(f"| of which the demo after the environment (its `demo.md`) | "
                     f"{figures['demo_s']:.0f} |")
    walls = [run["wall_s"] for run in figures.get("runs", [])]
    if len(walls) > 1:
        lines.append(f"| the {len(walls)} runs, each on its own fresh clone (wall; the "
                     f"figures here are the median run's) | "
                     f"{', '.join(f'{w:.0f}' for w in walls)} |")
    for dag, seconds in sorted(figures.get("backfill_done_after_s", {}).items()):
        lines.append(f"| {dag} backfill done, from the demo's start | {seconds:.0f} |")
    done, executing = figures.get("backfill_done_after_s"), figures.get("runs_executing_after_s")
    if done and executing is not None:
        lines.append(f"| the backfills themselves, from the scheduler's start ({executing:.0f} "
                     f"s into the demo) to the last run done (target: at most 180 s) | "
                     f"{max(done.values()) - executing:.0f} |")
    for key, what in (("pytest_summary", "pytest"), ("mutants_summary", "critical mutants")):
        if figures.get(key):
            lines.append(f"| {what}: {figures[key]} | |")
    cache = ("an empty download cache" if figures["cold_cache"]
             else "this machine's download cache")
    lines += ["", f"Installer cache: {cache}. The issue's target for this command: "
              f"at most {figures['limit_s']} s."]
    if figures.get("slowest"):
        lines += ["", "Slowest test phases (pytest `--durations`):", "", "```",
                  *figures["slowest"], "```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(COMMANDS),
                   help=f"commands to measure, comma separated (default {','.join(COMMANDS)})")
    p.add_argument("--cold-cache", action="store_true",
                   help="give each clone an empty uv/pip download cache")
    p.add_argument("--keep", action="store_true", help="keep the clones afterwards")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each command N times, each on its own fresh clone, and report "
                        "the median run with every run's wall time (this machine is "
                        "shared: one run's figure can be off by a tenth)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    commands = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(commands) - set(COMMANDS))
    if unknown:
        raise SystemExit(f"--only: unknown command(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(COMMANDS)}")
    workdir = Path(tempfile.mkdtemp(prefix="dp_front_door-"))
    failed = False
    try:
        for command in commands:
            runs = []
            for i in range(args.repeat):
                run_dir = workdir / f"{command}-run{i + 1}"
                run_dir.mkdir()
                run = measure(command, run_dir, args.cold_cache)
                verdict = "ok" if run["exit_status"] == 0 else "FAILED"
                log(f"make {command}: {verdict}, {run['wall_s']:.0f} s wall "
                    f"(environment {run['venv_build_s']} s)")
                runs.append(run)
                if run["exit_status"] != 0:
                    break
            if any(run["exit_status"] != 0 for run in runs):
                failed = True
                print("\n".join(runs[-1].get("log_tail", [])), file=sys.stderr)
                continue
            figures = median_run(runs)
            figures["copied"] = copy_results(Path(figures.pop("clone")), command)
            name = "front_door_" + command.replace("-", "_")
            # the stamp names the commit the clone measured, not the checkout's HEAD now
            measured = {**results_file.stamp(), "commit": figures["commit"], "uncommitted": []}
            results_file.stamp = lambda measured=measured: measured
            path = results_file.write(name, f"make {command} on a fresh clone",
                                      report(figures), figures)
            log(f"wrote {path}")
    finally:
        if args.keep:
            log(f"clones kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
