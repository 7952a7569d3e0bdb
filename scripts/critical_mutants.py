#!/usr/bin/env python
"""Apply each critical mutant of ``tests/mutation/critical_mutants.toml`` alone to a copy of
the repository and check that its tests fail: a small, realistic bug in the code whose
failure would break the privacy guarantee or the published numbers must never pass the
fast test suite. Part of ``make test`` (and so of CI).

    python scripts/critical_mutants.py [--only ID ...] [--list]

The repository's tracked files are copied once per worker (``--jobs``, default one per
core) to a temporary directory; each worker takes the next mutant, applies its edits in
its own copy (each ``old`` text must occur exactly once in its file, so a
mutant that no longer matches the code fails the run instead of passing silently), the
mutant's tests run in a pytest child (fast tier, first failure stops it) with the copy's
``plugins`` first on ``PYTHONPATH``, and the file is restored. The child is forked from
the copy's pytest server (``scripts/fork_server.py``), which has imported the heavy
third-party libraries once; the child imports the project's modules from the copy as it
is then, without a bytecode cache. First the union of all the
mutants' tests runs once on the unmutated copies (shared out among the workers): it must
pass, else nothing is proven.

A mutant is *killed* when pytest reports failed tests (exit status 1). Any other outcome
fails the run: survived (exit 0), or a mutant that broke collection or import (exit 2-5:
such a mutant proves nothing about the tests, rewrite it). Prints one line per mutant and
writes ``benchmarks/results/critical_mutants.{md,json}``, stamped with commit and date.
Exit status 0 only when every mutant is killed.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fork_server import Client, ServerStopped  # noqa: E402  (the server's own client)

REPO = Path(__file__).resolve().parents[1]
MUTANTS = REPO / "tests" / "mutation" / "critical_mutants.toml"
# further sets, one file per area (tests/mutation/critical/<area>.toml), loaded after it
MUTANT_DIR = REPO / "tests" / "mutation" / "critical"
RESULTS = REPO / "benchmarks" / "results"


@dataclass(frozen=True)
class Edit:
    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    id: str
    why: str
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]


def mutant_files() -> list[Path]:
    """The main set, then every area's set in name order."""
    return [MUTANTS, *sorted(MUTANT_DIR.glob("*.toml"))]


def load_mutants(paths: list[Path] | None = None) -> list[Mutant]:
    """The mutants of ``paths`` (default :func:`mutant_files`); each names its edits
    (``file``/``old``/``new`` inline, or a list ``edits``) and the tests that must kill it.
    An id is unique across all the files."""
    out: list[Mutant] = []
    seen: set[str] = set()
    for path in paths if paths is not None else mutant_files():
        out += _load_file(path, seen)
    return out


def _load_file(path: Path, seen: set[str]) -> list[Mutant]:
    data = tomllib.loads(path.read_text())
    out = []
    for i, entry in enumerate(data.get("mutant", []), 1):
        where = f"{path.name}, mutant {i} ({entry.get('id', '?')})"
        try:
            raw = entry.get("edits") or [{k: entry[k] for k in ("file", "old", "new")}]
            edits = tuple(Edit(str(e["file"]), str(e["old"]), str(e["new"])) for e in raw)
            mutant = Mutant(str(entry["id"]), str(entry["why"]), edits,
                            tuple(str(t) for t in entry["tests"]))
        except KeyError as exc:
            raise SystemExit(f"{where}: missing {exc.args[0]!r}") from None
        if mutant.id in seen:
            raise SystemExit(f"{where}: duplicate id")
        if not mutant.tests or any(e.old == e.new for e in edits):
            raise SystemExit(f"{where}: needs tests and edits that change something")
        seen.add(mutant.id)
        out.append(mutant)
    return out


def copy_repository(dst: Path) -> None:
    """The tracked files (the working tree's versions) under ``dst``; a tracked symlink
    (``plugins/dp_ops/sql`` -> ``include/sql``) stays a symlink, so a mutant of the SQL
    is what the package reads."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_symlink():
            target = dst / name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), target)
        elif src.is_file():
            target = dst / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


class PytestServer:
    """``scripts/fork_server.py`` for one copy: each :meth:`run` is a pytest run
    in a child forked from a process that imported the heavy libraries once, instead of
    a new interpreter importing them again for every mutant."""

    def __init__(self, copy: Path) -> None:
        self.copy = copy
        # no bytecode cache: a mutant and the original it replaces may have the same size
        # and the same modification second, which is all a .pyc is checked against
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": os.pathsep.join(
            [str(copy / "plugins"), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self._client = Client(copy, env)
        self._runs = 0

    def run(self, tests: tuple[str, ...], timeout: float = 900
            ) -> tuple[int, float, str]:
        """pytest's exit status on ``tests`` (fast tier, stop at the first failure; -9
        when it ran past ``timeout`` seconds), its wall time, and the failing test
        (``FAILED ...``) or else the last lines of its output."""
        self._runs += 1
        # beside the copy, not in it: a test that looks at the repository's files never
        # sees it
        log = self.copy.parent / f"{self.copy.name}-run-{self._runs}.log"
        # each copy its own pytest temporary root: workers run side by side
        args = ["-q", "-x", "-m", "not slow", "-p", "no:cacheprovider", "--no-header",
                f"--basetemp={self.copy / '.pytest-tmp'}", *tests]
        started = time.perf_counter()
        try:
            answer = self._client.request({"pytest": args, "log": str(log),
                                           "timeout": timeout})
        except ServerStopped as stopped:
            raise SystemExit(str(stopped)) from None
        seconds = time.perf_counter() - started
        status = int(answer["status"])
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        failed = [line for line in lines if line.startswith("FAILED ")]
        tail = failed[0][:160] if failed else "\n".join(lines[-3:])
        return status, seconds, tail

    def close(self) -> None:
        self._client.close()


def run_unmutated(servers: list[PytestServer], tests: tuple[str, ...]
                  ) -> tuple[int, float, str]:
    """``tests`` on the unmutated copies, shared out among the servers side by side: the
    first failing share's status and tail (0 when every share passes), and the wall
    time."""
    shares = [tests[i::len(servers)] for i in range(len(servers))]
    results: list[tuple[int, float, str]] = [(0, 0.0, "")] * len(servers)

    def work(i: int) -> None:
        if shares[i]:
            results[i] = servers[i].run(shares[i])

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(servers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failing = [r for r in results if r[0] != 0]
    status, _, tail = failing[0] if failing else (0, 0.0, "")
    return status, time.perf_counter() - started, tail


def apply(copy: Path, mutant: Mutant) -> dict[Path, bytes]:
    """Apply ``mutant``'s edits in ``copy``; return the originals to restore."""
    originals: dict[Path, bytes] = {}
    for edit in mutant.edits:
        path = copy / edit.file
        if not path.is_file():
            raise SystemExit(f"mutant {mutant.id}: no file {edit.file}")
        originals.setdefault(path, path.read_bytes())
        text = path.read_text()
        found = text.count(edit.old)
        if found != 1:
            raise SystemExit(f"mutant {mutant.id}: {edit.old!r} occurs {found} times in "
                             f"{edit.file} (must be exactly once: update the mutant)")
        path.write_text(text.replace(edit.old, edit.new))
    return originals


def run_one(server: PytestServer, mutant: Mutant) -> dict[str, object]:
    """Apply ``mutant`` in the server's copy, run its tests, restore the files; its result
    row."""
    originals = apply(server.copy, mutant)
    try:
        status, seconds, tail = server.run(mutant.tests)
    finally:
        for path, data in originals.items():
            path.write_bytes(data)
    outcome = {0: "SURVIVED", 1: "killed"}.get(status, f"BROKEN (pytest exit {status})")
    return {"id": mutant.id, "outcome": outcome, "seconds": round(seconds, 1),
            "why": mutant.why, "tests": list(mutant.tests),
            "killed_by": tail.removeprefix("FAILED ") if status == 1 else None,
            "tail": tail}


def run_mutants(mutants: list[Mutant], servers: list[PytestServer]
                ) -> list[dict[str, object]]:
    """Each mutant alone, one worker per copy (its server), each taking the next mutant;
    the rows in the mutants' order, each line printed as its mutant ends."""
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(mutants)):
        todo.put(i)
    rows: dict[int, dict[str, object]] = {}
    printing = threading.Lock()

    def work(server: PytestServer) -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            row = run_one(server, mutants[i])
            rows[i] = row
            with printing:
                print(f"{row['outcome']:>8}  {row['id']}  ({row['seconds']} s)")
                if row["outcome"] == "killed":
                    print(f"          by {row['killed_by']}")
                else:
                    tail = str(row["tail"]).replace("\n", "\n          ")
                    print(f"          {row['why']}\n          {tail}")
                sys.stdout.flush()

    workers = [threading.Thread(target=work, args=(server,)) for server in servers]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out = [rows[i] for i in range(len(mutants))]
    for row in out:
        del row["tail"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", metavar="ID", help="run these mutants only")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="mutants run side by side, each in its own copy (default: cores)")
    args = p.parse_args(argv)
    mutants = load_mutants()
    if args.only:
        unknown = set(args.only) - {m.id for m in mutants}
        if unknown:
            raise SystemExit(f"--only: no mutant {sorted(unknown)}")
        mutants = [m for m in mutants if m.id in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.id}: {m.why}")
        return 0
    started = time.perf_counter()
    jobs = max(1, min(args.jobs, len(mutants)))
    with tempfile.TemporaryDirectory(prefix="critical_mutants_") as tmp:
        copies = [Path(tmp) / f"copy{i}" for i in range(jobs)]
        for copy in copies:
            copy.mkdir()
            copy_repository(copy)
        servers = [PytestServer(copy) for copy in copies]
        try:
            everything = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
            status, seconds, tail = run_unmutated(servers, everything)
            print(f"unmutated: pytest exit {status} in {seconds:.1f} s", flush=True)
            if status != 0:
                print(f"the mutants' tests fail on the unmutated code, so no mutant proves "
                      f"anything:\n{tail}")
                return 1
            rows = run_mutants(mutants, servers)
        finally:
            for server in servers:
                server.close()
    total = time.perf_counter() - started
    killed = sum(r["outcome"] == "killed" for r in rows)
    print(f"{killed} of {len(rows)} critical mutants killed in {total:.0f} s")
    if not args.only:  # a partial run leaves the whole set's last results as they are
        write_results(rows, total)
    return 0 if killed == len(rows) else 1


def write_results(rows: list[dict[str, object]], total: float) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    killed = sum(r["outcome"] == "killed" for r in rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "critical_mutants.json").write_text(json.dumps(
        {"commit": commit, "date": stamp, "seconds": round(total, 1), "killed": killed,
         "mutants": rows}, indent=2) + "\n")
    lines = [f"Critical mutants, commit {commit}, {stamp}: {killed} of {len(rows)} killed "
             f"in {total:.0f} s (`python scripts/critical_mutants.py`)", "",
             "| mutant | outcome | s | what it breaks |", "|---|---|---:|---|"]
    lines += [f"| {r['id']} | {r['outcome']} | {r['seconds']} | {r['why']} |" for r in rows]
    (RESULTS / "critical_mutants.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
