#!/usr/bin/env python
"""Mutation testing of the code whose failure breaks the privacy guarantee or the published
numbers (``make mutation``): mutmut (pinned in requirements-mutation.txt) mutates every
function of the modules below, runs the fast tests that reach each mutant, and this script
writes the score per module and the surviving mutants to
``benchmarks/results/mutation.{md,json}``, stamped with commit and date.

    python scripts/mutation.py [--module noise ...] [--max-children N]

mutmut expects the package under ``src/`` (it names a mutant's module from its path), so
each group of modules (``GROUPS``) is run in a staging copy, ``.mutation/<group>/``: the
repository's tracked files with ``plugins/`` as ``src/``, and the fast tests of the folders
next to that code. mutmut keeps its results there and reruns only what changed, so a run
can be stopped and resumed; ``--recheck`` then runs the survivors again (mutmut keeps a
survivor's verdict when only tests changed);
``cd .mutation/privacy && ../../.venv/bin/mutmut show NAME`` prints a mutant's diff.

The tests run as in ``make test``: with a throwaway PostgreSQL server
(``scripts/with_test_postgres.sh``), so the ledger's tests run on both backends. Before
any test, mypy (strict, as ``make test`` runs it) checks every mutant: one it
rejects is "caught by type check". A test that hangs is failed by pytest-timeout after
``TEST_TIMEOUT_S``, and mutmut stops a mutant whose tests use far more CPU than unmutated.

Score = killed / (mutants - listed equivalent), where killed includes timeouts (the mutant
made the tests hang) and mutants mypy rejects; everything else (survived, reached by no
fast test, or not checked yet when a run was stopped) counts against it. The results are
stamped with the commit staged for the run. ``tests/mutation/equivalent.toml`` lists
mutants that change no behaviour, each with its reason; a listed name that no longer exists
is reported, and so is a listed mutant a test kills (it counts as killed, not listed).
``--recheck`` skips the listed ones: they survived every test when they were listed.
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
STAGES = REPO / ".mutation"
RESULTS = REPO / "benchmarks" / "results"
EQUIVALENT = REPO / "tests" / "mutation" / "equivalent.toml"

# module (short name) -> its file under plugins/
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
    "symptoms_selection": "dp_ops/reports/symptoms/selection.py",
}
# Each group is one mutmut run in its own folder (.mutation/<group>/) with the fast tests
# in the folders of its code: a mutant counts as killed only by a test next to the code it
# breaks, and a survivor costs those tests, not the whole suite that happens to call it.
GROUPS = {
    "privacy": (["noise", "ledger", "ledger_schema", "ledger_key"], ["tests/unit/privacy"]),
    "steps": (["noising"], ["tests/unit/steps", "tests/unit/reports/mobility/test_estimates.py"]),
    "reports": (["inference", "mobility_suites", "symptoms_suites", "mobility_estimates",
                 "symptoms_reliability", "symptoms_selection"],
                ["tests/unit/reports", "tests/unit/privacy/test_inference.py"]),
}
KILLED = {"killed", "timeout", "caught by type check"}
# a test that runs longer than this under a mutant has been made to hang (the slowest fast
# test takes well under a tenth of it); pytest-timeout fails it, which kills the mutant
TEST_TIMEOUT_S = 120
# mutmut's CPU-time limit per mutant: (the tests' own time + a constant) x 2 x the
# multiplier. The constant covers what a worker does before its first test: importing
# Great Expectations takes seconds (with less, unmutated code of the gates was reported as
# hanging); the privacy tests need no such import, and a hung mutant costs the limit.
TIMEOUT_CONSTANT_S = {"privacy": 2, "steps": 10, "reports": 10}
TIMEOUT_MULTIPLIER = 3

# mypy as `make test` runs it, on the mutated copy: a mutant it rejects never reaches a test
MYPY_INI = """[mypy]
python_version = 3.11
mypy_path = src
strict = True
# mutmut's trampolines carry `type: ignore` comments that strict mode would report
warn_unused_ignores = False
[mypy-pandas.*]
ignore_missing_imports = True
[mypy-pyarrow.*]
ignore_missing_imports = True
[mypy-randomgen.*]
ignore_missing_imports = True
[mypy-great_expectations.*]
implicit_reexport = True
"""


def group_of(module: str) -> str:
    return next(g for g, (mods, _) in GROUPS.items() if module in mods)


def stage(group: str, modules: list[str]) -> Path:
    """``.mutation/<group>/``: the tracked files, ``plugins/`` as ``src/``, and mutmut's
    settings. mutmut's own results (``mutants/``) are kept between runs."""
    where = STAGES / group
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    where.mkdir(parents=True, exist_ok=True)
    for name in filter(None, names):
        src = REPO / name
        rel = Path("src", *Path(name).parts[1:]) if name.startswith("plugins/") else Path(name)
        target = where / rel
        if src.is_symlink() and src.is_dir():
            # plugins/dp_ops/sql -> include/sql: a real copy, whatever mutmut does with links
            shutil.copytree(src, target, dirs_exist_ok=True)
            continue
        if not src.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != src.read_bytes():
            shutil.copy2(src, target)
        # mutmut copies src/ into mutants/src/ once and afterwards refreshes only the
        # Python files: a changed data file of the package (a column schema, the SQL)
        # would stay stale there and fail the clean test run
        copy = where / "mutants" / rel
        if (name.startswith("plugins/") and src.suffix != ".py" and copy.parent.is_dir()
                and (not copy.exists() or copy.read_bytes() != src.read_bytes())):
            shutil.copy2(src, copy)
    (where / "mypy-mutants.ini").write_text(MYPY_INI)
    settings = {
        "source_paths": ["src"],
        "only_mutate": [f"src/{MODULES[m]}" for m in modules],
        "also_copy": ["pytest.ini", "include/", "scripts/", "dags/", "mypy-mutants.ini"],
        "pytest_add_cli_args": ["-m", "not slow", "-p", "no:cacheprovider",
                                f"--timeout={TEST_TIMEOUT_S}"],
        "pytest_add_cli_args_test_selection": GROUPS[group][1],
        "timeout_multiplier": TIMEOUT_MULTIPLIER,
        "timeout_constant": TIMEOUT_CONSTANT_S[group],
        # mutmut recognises mypy's JSON by the word "mypy" in the command
        "type_check_command": [sys.executable, "-m", "mypy", "--config-file",
                               "mypy-mutants.ini", "--output", "json", "-p", "dp_ops"],
        # workers forked from a server that has only collected the tests: forked from the
        # process that ran them (mutmut's default), they would inherit its caches (the
        # samplers of exact_sampler, built by unmutated code) and the mutants of
        # everything cached would survive untested
        "process_isolation": "forkserver",
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    pyproject = (REPO / "pyproject.toml").read_text() + "\n".join(lines) + "\n"
    (where / "pyproject.toml").write_text(pyproject)
    # the results are of the code staged now: stamp them with this commit (and whether
    # the working tree differed from it)
    head = _git("rev-parse", "--short", "HEAD")
    dirty = "+changes" if _git("status", "--porcelain", "--untracked-files=no") else ""
    (where / "staged_commit").write_text(head + dirty + "\n")
    return where


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()


def outcomes(modules: list[str]) -> dict[str, dict[str, str]]:
    """Per module, each mutant's status (mutmut's names: killed, survived, no tests, ...)."""
    from mutmut.stats import status_by_exit_code

    out = {}
    for m in modules:
        meta = STAGES / group_of(m) / "mutants" / "src" / f"{MODULES[m]}.meta"
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
    p.add_argument("--recheck", action="store_true",
                   help="run the survivors of earlier runs again (after adding tests)")
    p.add_argument("--report-only", action="store_true",
                   help="summarise the last run without running mutmut")
    args = p.parse_args(argv)
    started = time.perf_counter()
    chosen = [m for m in MODULES if m in args.module]
    if not args.report_only:
        for group, (mods, _) in GROUPS.items():
            mine = [m for m in mods if m in chosen]
            if not mine:
                continue
            where = stage(group, mine)
            print(f"== mutmut over {', '.join(mine)} ({where.relative_to(REPO)})", flush=True)
            code = run_mutmut(where, args.max_children)
            # mutmut keeps a survivor's verdict when tests are added: check those again,
            # except the ones listed as equivalent (they survived every test when listed,
            # and no test can kill an equivalent mutant; each costs a whole test selection)
            listed = equivalent()
            again = [k for statuses in outcomes(mine).values()
                     for k, s in statuses.items()
                     if s in ("survived", "no tests") and k not in listed]
            if args.recheck and again and code in (0, 1):
                print(f"== {len(again)} survivors against the current tests", flush=True)
                code = run_mutmut(where, args.max_children, again)
            if code not in (0, 1):
                print(f"mutmut run exited {code}", file=sys.stderr)
                return code
    seconds = time.perf_counter() - started
    report(outcomes(chosen), equivalent(), None if args.report_only else seconds)
    return 0


def run_mutmut(where: Path, max_children: int, names: list[str] | None = None) -> int:
    """``mutmut run`` in ``where`` (only ``names``, when given), with a throwaway
    PostgreSQL server as in make test: the ledger's tests run on both backends, so its
    PostgreSQL-only code meets its tests too."""
    mutmut = Path(sys.executable).with_name("mutmut")
    # support.mutation_order (tests/support) runs a mutant's tests cheapest first; given through
    # the environment, it is not part of the settings mutmut fingerprints (a change there
    # discards every stored verdict), and the order changes no verdict
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
           "PYTEST_ADDOPTS": f"{os.environ.get('PYTEST_ADDOPTS', '')} -p support.mutation_order"}
    return subprocess.run(["bash", str(REPO / "scripts" / "with_test_postgres.sh"),
                           str(mutmut), "run", "--max-children", str(max_children),
                           *(names or [])], cwd=where, env=env).returncode


def report(by_module: dict[str, dict[str, str]], known: dict[str, str],
           seconds: float | None) -> None:
    """Writes the results; ``seconds`` is this run's time (None: the stored verdicts of
    earlier runs, summarised)."""
    commits = set()
    for module in (m for m, statuses in by_module.items() if statuses):
        staged = STAGES / group_of(module) / "staged_commit"
        commits.add(staged.read_text().strip() if staged.is_file() else "unknown")
    commit = ", ".join(sorted(commits))
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    rows, survivors, wrongly_listed = [], [], []
    for module, statuses in by_module.items():
        counts = Counter(statuses.values())
        # a listed mutant that a test kills is not equivalent: it counts as killed, not
        # listed, and is reported below
        listed = sum(1 for k, s in statuses.items() if k in known and s not in KILLED)
        killed = sum(counts[s] for s in KILLED)
        wrongly_listed += [k for k, s in statuses.items() if k in known and s in KILLED]
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
        {"commit": commit, "date": stamp,
         "seconds": None if seconds is None else round(seconds), "score": round(score, 4),
         "modules": rows, "survivors": survivors, "stale_equivalents": stale,
         "listed_but_killed": sorted(wrongly_listed)}, indent=2) + "\n")
    not_run = [str(r["module"]) for r in rows if r["score"] is None]
    lines = [f"Mutation score, commit {commit}, {stamp} (`make mutation`, mutmut, fast tests):"
             f" {killed} of {total - listed} killed = {score:.1%} ({listed} listed "
             f"equivalent; " + ("from the stored verdicts" if seconds is None else
                                 f"{seconds:.0f} s") + ")" + (f"; not run yet: {', '.join(not_run)}"
                                                 if not_run else ""), "",
             "| module | mutants | killed | equivalent | survived | no fast test | not checked "
             "| score |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['module']} | {r['mutants']} | {r['killed']} | {r['equivalent']} | "
              f"{r['survived']} | {r['no_tests']} | {r['not_checked']} | "
              f"{'not run yet' if r['score'] is None else format(r['score'], '.1%')} |"
              for r in rows]
    lines += ["", f"Surviving mutants ({len(survivors)}; `cd .mutation/GROUP && "
              "../../.venv/bin/mutmut show NAME` prints one):", ""]
    lines += [f"- {s['mutant']} ({s['status']})" for s in survivors]
    if stale:
        lines += ["", "Listed as equivalent but no longer a mutant: " + ", ".join(stale)]
    if wrongly_listed:
        lines += ["", "Listed as equivalent but killed by a test (counted as killed; remove "
                  "from equivalent.toml): " + ", ".join(sorted(wrongly_listed))]
    (RESULTS / "mutation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:4 + len(rows)]))


if __name__ == "__main__":
    raise SystemExit(main())
