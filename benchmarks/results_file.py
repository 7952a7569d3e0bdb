"""Where measured figures live: each measuring command writes one results file,
``benchmarks/results/<name>.md`` and ``.json``, stamped with the commit it measured and the
date. README.md and the docs link here and carry no figures of their own."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def _git(*argv: str) -> str:
    done = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)
    # rstrip only: a porcelain status line starts with a space
    return done.stdout.rstrip() if done.returncode == 0 else ""


def machine() -> str:
    """The processor model and the memory of this machine (Linux), else the platform."""
    model, mem_kib = "", 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except (OSError, ValueError):
        pass
    memory = f", {mem_kib / 2**20:.0f} GiB" if mem_kib else ""
    return f"{model or platform.machine() or 'unknown processor'}{memory}"


def stamp() -> dict[str, Any]:
    """The commit measured (with the files that differ from it, if any), the date in UTC,
    the machine (processor and memory) and its core count."""
    dirty = [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no")
             .splitlines()]
    return {"commit": _git("rev-parse", "HEAD") or "unknown", "uncommitted": dirty,
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(), "cores": os.cpu_count(),
            "python": platform.python_version()}


def stamp_line(s: dict[str, Any]) -> str:
    changed = (f", with uncommitted changes to {', '.join(s['uncommitted'])}"
               if s["uncommitted"] else "")
    where = f"{s['machine']}, " if s.get("machine") else ""
    return (f"Measured at commit {s['commit'][:12]}{changed}, {s['date']}, "
            f"{where}{s['cores']} cores, Python {s['python']}.")


def write(name: str, title: str, body: str, data: dict[str, Any],
          results_dir: Path = RESULTS) -> Path:
    """Write ``<name>.md`` (title, stamp, body) and ``<name>.json`` (stamp and data) into
    ``results_dir``; return the Markdown file's path."""
    s = stamp()
    results_dir.mkdir(parents=True, exist_ok=True)
    md = results_dir / f"{name}.md"
    md.write_text(f"# {title}\n\n{stamp_line(s)}\n\n{body.rstrip()}\n")
    (results_dir / f"{name}.json").write_text(
        json.dumps({"stamp": s, **data}, indent=2, default=str) + "\n")
    return md
