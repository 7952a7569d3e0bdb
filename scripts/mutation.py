#!/usr/bin/env python
"""Mutation testing of the code whose failure breaks the privacy guarantee or the published
numbers (``make mutation``): mutmut (pinned in requirements-mutation.txt) mutates every
function of the modules below, runs the fast tests that reach each mutant, and this script
writes the score per module and the surviving mutants to
``benchmarks/results/mutation.{md,json}``, stamped with commit and date.

    python scripts/mutation.py [--module noise ...] [--max-children N]

mutmut expects the package under ``src/`` (it names a mutant's module from its path), so
the run happens in a staging copy, ``.mutation/``: the repository's tracked files with
``plugins/`` as ``src/``. mutmut keeps its results there (``.mutation/mutants/``) and
reruns only what changed, so a second run after adding tests is quick;
``cd .mutation && ../.venv/bin/mutmut browse`` shows each mutant's diff.

Score = killed / (mutants - listed equivalent), where killed includes timeouts (the mutant
made the tests hang) and everything else (survived, reached by no fast test, or not
checked yet when a run was stopped) counts against it. The results are stamped with the
commit staged for the run. ``tests/mutation/equivalent.toml`` lists mutants that change no
behaviour, each with its reason; a listed name that no longer exists is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGE = REPO / ".mutation"
RESULTS = REPO / "benchmarks" / "results"
EQUIVALENT = REPO / "tests" / "mutation" / "equivalent.toml"

# module (short name) -> its file under plugins/; the fast tests of tests/unit/{privacy,
# steps,reports} run once to find which tests reach which function
MODULES = {
    "noise": "dp_ops/privacy/noise.py",
    "inference": "dp_ops/privacy/inference.py",
    "ledger": "dp_ops/privacy/ledger.py",
    "ledger_schema": "dp_ops/privacy/ledger_schema.py",
    "ledger_key": "dp_ops/privacy/ledger_key.py",
    "noising": "dp_ops/steps/noising.py",
    "mobility_suites": "dp_ops/reports/mobility/suites.py",
    "symptoms_suites": "dp_ops/reports/symptoms/suites.py",
    "mobility_estimates": "dp_ops/reports/mobility/estimates.py",
    "symptoms_reliability": "dp_ops/reports/symptoms/reliability.py",
}
TESTS = ["tests/unit/privacy", "tests/unit/steps", "tests/unit/reports"]
KILLED = {"killed", "timeout", "caught by type check"}


def stage(modules: list[str]) -> None:
    """``.mutation/``: the tracked files, ``plugins/`` as ``src/``, and mutmut's settings.
    mutmut's own results (``mutants/``) are kept between runs."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    STAGE.mkdir(exist_ok=True)
    for name in filter(None, names):
        src = REPO / name
        if not src.is_file():
            continue
        rel = Path("src", *Path(name).parts[1:]) if name.startswith("plugins/") else Path(name)
        target = STAGE / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != src.read_bytes():
            shutil.copy2(src, target)
    settings = {
        "source_paths": ["src"],
        "only_mutate": [f"src/{MODULES[m]}" for m in modules],
        "also_copy": ["pytest.ini", "include/", "scripts/", "dags/"],
        "pytest_add_cli_args": ["-m", "not slow", "-p", "no:cacheprovider"],
        "pytest_add_cli_args_test_selection": TESTS,
        # workers forked from a server that has only collected the tests: forked from the
        # process that ran them (mutmut's default), they would inherit its caches (the
        # samplers of exact_sampler, built by unmutated code) and the mutants of
        # everything cached would survive untested
        "process_isolation": "forkserver",
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    pyproject = (REPO / "pyproject.toml").read_text() + "\n".join(lines) + "\n"
    (STAGE / "pyproject.toml").write_text(pyproject)
    # the results are of the code staged now: stamp them with this commit (and whether
    # the working tree differed from it)
    head = _git("rev-parse", "--short", "HEAD")
    dirty = "+changes" if _git("status", "--porcelain", "--untracked-files=no") else ""
    (STAGE / "staged_commit").write_text(head + dirty + "\n")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()


def outcomes(modules: list[str]) -> dict[str, dict[str, str]]:
    """Per module, each mutant's status (mutmut's names: killed, survived, no tests, ...)."""
    from mutmut.stats import status_by_exit_code

    out = {}
    for m in modules:
        meta = STAGE / "mutants" / "src" / f"{MODULES[m]}.meta"
        data = json.loads(meta.read_text()) if meta.is_file() else {"exit_code_by_key": {}}
        out[m] = {k: status_by_exit_code[v] for k, v in data["exit_code_by_key"].items()}
    return out


def equivalent() -> dict[str, str]:
    data = tomllib.loads(EQUIVALENT.read_text()) if EQUIVALENT.is_file() else {}
    return {str(e["mutant"]): str(e["reason"]) for e in data.get("equivalent", [])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--module", nargs="+", choices=sorted(MODULES), default=sorted(MODULES))
    p.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    p.add_argument("--report-only", action="store_true",
                   help="summarise the last run without running mutmut")
    args = p.parse_args(argv)
    started = time.perf_counter()
    if not args.report_only:
        stage(args.module)
        mutmut = Path(sys.executable).with_name("mutmut")
        res = subprocess.run([str(mutmut), "run", "--max-children", str(args.max_children)],
                             cwd=STAGE)
        if res.returncode not in (0, 1):
            print(f"mutmut run exited {res.returncode}", file=sys.stderr)
            return res.returncode
    seconds = time.perf_counter() - started
    report(outcomes(args.module), equivalent(), seconds)
    return 0


def report(by_module: dict[str, dict[str, str]], known: dict[str, str], seconds: float) -> None:
    staged = STAGE / "staged_commit"
    commit = staged.read_text().strip() if staged.is_file() else "unknown"
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    rows, survivors = [], []
    for module, statuses in by_module.items():
        counts = Counter(statuses.values())
        listed = sum(1 for k in statuses if k in known)
        killed = sum(counts[s] for s in KILLED)
        scored = len(statuses) - listed
        rows.append({"module": MODULES[module], "mutants": len(statuses), "killed": killed,
                     "equivalent": listed, "survived": counts["survived"],
                     "no_tests": counts["no tests"], "not_checked": counts["not checked"],
                     "score": round(killed / scored, 4) if scored else None})
        survivors += [{"mutant": k, "status": s} for k, s in sorted(statuses.items())
                      if s not in KILLED and k not in known]
    stale = sorted(set(known) - {k for s in by_module.values() for k in s})
    total = sum(int(r["mutants"]) for r in rows)  # type: ignore[call-overload]
    killed = sum(int(r["killed"]) for r in rows)  # type: ignore[call-overload]
    listed = sum(int(r["equivalent"]) for r in rows)  # type: ignore[call-overload]
    score = killed / (total - listed) if total > listed else 0.0
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "mutation.json").write_text(json.dumps(
        {"commit": commit, "date": stamp, "seconds": round(seconds), "score": round(score, 4),
         "modules": rows, "survivors": survivors, "stale_equivalents": stale}, indent=2) + "\n")
    lines = [f"Mutation score, commit {commit}, {stamp} (`make mutation`, mutmut, fast tests):"
             f" {killed} of {total - listed} killed = {score:.1%} ({listed} listed "
             f"equivalent; {seconds:.0f} s)", "",
             "| module | mutants | killed | equivalent | survived | no fast test | not checked "
             "| score |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['module']} | {r['mutants']} | {r['killed']} | {r['equivalent']} | "
              f"{r['survived']} | {r['no_tests']} | {r['not_checked']} | "
              f"{'' if r['score'] is None else format(r['score'], '.1%')} |" for r in rows]
    lines += ["", f"Surviving mutants ({len(survivors)}; `cd .mutation && ../.venv/bin/mutmut "
              "show NAME` prints one):", ""] + [f"- {s['mutant']} ({s['status']})"
                                               for s in survivors]
    if stale:
        lines += ["", "Listed as equivalent but no longer a mutant: " + ", ".join(stale)]
    (RESULTS / "mutation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:4 + len(rows)]))


if __name__ == "__main__":
    raise SystemExit(main())
