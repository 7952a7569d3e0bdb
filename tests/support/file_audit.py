"""Record every file a pipeline step opens, at the system-call level, and check each read of
the data root against issue 31's rule: everything published is bound to the ledger.

pyarrow and DuckDB open files in C++, where Python's audit hooks never see them, so the
step runs in a child process under ``strace -f`` (every thread and child), which logs each
``open``/``openat`` with its flags and the path of the descriptor it returned (``-y``:
symlinks such as ``published/<report>/latest`` resolved), and each rename and link (a file
the step wrote and then moved into place is still its own output).

The child (this file run as a script) marks the calls of the functions that read a file
as the ledger recorded it: each call is logged with the paths it verifies, and bracketed
by two ``open`` calls of a path that never exists, which strace logs in order with the
thread's other opens. An open of a private or intermediate file then passes only if:

(a) it happens inside such a call, in the same thread, for a path that call verifies, and
    is that call's first open of the path (a hash pass and then a parse pass by another
    reader is two opens: the second is reported);
(b) the same step wrote the file earlier (created it, or moved its own file there); or
(c) the file is on :data:`ALLOWED`, each entry with why reading it unverified is safe.

Anything else is an unverified read and is reported with the file's path, the step, and
the Python call sites that opened it (from an audit hook in the child; an open that no
Python call made came from pyarrow or DuckDB).
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

# The opens strace must log, and the calls that move a file the step wrote (so that the
# file in place is still the step's output).
TRACED_CALLS = "open,openat,openat2,creat,rename,renameat,renameat2,link,linkat"
# A directory that never exists: an open of <MARKER>/begin/<n> or <MARKER>/end/<n> fails
# at once and tells the trace where verified-read call n starts and ends.
MARKER = "/.dp-file-audit-marker"

# (c) Files of the data root that gate and publish may read without a ledger check, as
# glob patterns relative to the data root (``*`` crosses ``/``), each with why that is safe.
ALLOWED: dict[str, str] = {
    "reference/regions.csv": "public input (the region table), published as such",
    "reference/symptoms.txt": "public input (the symptom list), published as such",
    "gx/*": "the Great Expectations project: suites, checkpoints, Data Docs and the record "
            "of validated day files. It decides which rules run, never a value: every "
            "value validated and published comes from the verified per-day files",
    "ledger.sqlite": "the ledger itself: every row is a link of a hash chain MAC'd under "
                     "the ledger key, kept outside the data root, and verified on use",
    "ledger.sqlite-*": "SQLite's journal, WAL and shared-memory files of the ledger",
    "ledger_identity.json": "the data root's ledger id, MAC'd under the ledger key and "
                            "verified on every read (steps/ledger_binding.py)",
    "ledger_head.json": "the data root's high-water mark, MAC'd and verified on every read "
                        "(steps/ledger_binding.py)",
    "*.lock": "lock files, opened only to flock them: their contents are never read",
}


@dataclass(frozen=True)
class VerifiedReader:
    """A function that reads files as the ledger recorded them: ``paths`` gives, from its
    bound arguments, the files one call of it may open once (without opening any)."""

    module: str
    name: str
    paths: Callable[[Mapping[str, Any]], list[Path]]
    why: str


def _release_files(args: Mapping[str, Any]) -> list[Path]:
    """Every file of the release ``latest`` points at but its manifest (which
    :func:`dp_ops.steps.release.current_release` parses from an open of its own)."""
    target = args["root"].latest_release(args["report"]).resolve()
    if not target.is_dir():
        return []
    return [p for p in target.rglob("*") if p.is_file() and p.name != "manifest.json"]


READERS: tuple[VerifiedReader, ...] = (
    VerifiedReader("dp_ops.engine.files", "read_as_recorded",
                   lambda a: [a["path"], *a["path"].parent.glob(f".{a['path'].name}.*.pending")],
                   "a file (or its pending version after a crash) read once and accepted "
                   "only if its bytes are the version the ledger recorded"),
    VerifiedReader("dp_ops.steps.day_files", "read_day_bytes",
                   lambda a: [a["root"].report_file(a["report"], a["day"])],
                   "a day's report file: read once, its sha256 compared with the ledger's "
                   "record, parsed from those bytes"),
    VerifiedReader("dp_ops.steps.noising", "read_stored", lambda a: [a["path"]],
                   "stored noise: read once, checked against the ledger's record"),
    VerifiedReader("dp_ops.steps.derived", "verify_recorded", lambda a: [a["target"]],
                   "derived state (baseline, scaling factors, method updates): its sha256 "
                   "compared with the version the ledger recorded last"),
    VerifiedReader("dp_ops.steps.derived", "read_recorded", lambda a: [a["target"]],
                   "derived state parsed from the very bytes checked against the ledger"),
    VerifiedReader("dp_ops.steps.release", "read_staged",
                   lambda a: [a["stage"] / "staged.json", a["stage"] / "staged.mac"],
                   "the staged record, parsed from the bytes whose MAC under the ledger "
                   "key verified"),
    VerifiedReader("dp_ops.steps.release", "verify_checksums",
                   lambda a: [a["directory"] / name for name in a["files"]],
                   "staged release files, each hashed against the staged record"),
    VerifiedReader("dp_ops.steps.release", "current_release", _release_files,
                   "the files of the release latest points at, each hashed against its "
                   "manifest"),
    VerifiedReader("dp_ops.steps.ledger_binding", "release_problems",
                   lambda a: sorted(a["root"].root.glob("published/*/releases/*/manifest.json")),
                   "each release's manifest, read once and compared with the sha256 the "
                   "ledger recorded at publish"),
    VerifiedReader("dp_ops.reports.symptoms.period", "_load", lambda a: [a["path"]],
                   "the symptoms period cache, whose MAC under the ledger key is checked "
                   "on the bytes read"),
    VerifiedReader("dp_ops.steps.release", "_read_manifest",
                   lambda a: [a["target"] / "manifest.json"] if a["ledger"] is not None
                   else [],
                   "a release's manifest, read once, compared with the sha256 the ledger "
                   "recorded at publish and parsed from those bytes (without a ledger it is "
                   "not verified, and its read counts as unverified)"),
    VerifiedReader("dp_ops.steps.release", "latest_release_file",
                   lambda a: [a["root"].latest_release(a["report"]).resolve() / a["name"]],
                   "a file of the current release, read once and checked against its "
                   "manifest (itself checked against the ledger), parsed from those bytes"),
)


# -- the child ---------------------------------------------------------------------------

def _install_readers(log: Any) -> list[str]:
    """Wrap each verified reader that this version of dp_ops has, wherever it was
    imported by name; return the ones installed. Each call is logged (one JSON line: its
    number and the files it verifies) and bracketed by marker opens."""
    import importlib

    counter = itertools.count(1)
    lock = threading.Lock()
    installed = []
    for reader in READERS:
        try:
            module = importlib.import_module(reader.module)
        except ImportError:
            continue
        original = getattr(module, reader.name, None)
        if original is None:
            continue  # an older dp_ops: the reads it would verify count as unverified
        signature = inspect.signature(original)

        def wrapper(*args: Any, __f: Any = original, __r: VerifiedReader = reader,
                    __s: inspect.Signature = signature, **kwargs: Any) -> Any:
            bound = __s.bind(*args, **kwargs)
            bound.apply_defaults()
            paths = [os.path.realpath(p) for p in __r.paths(bound.arguments)]
            with lock:
                n = next(counter)
                log.write(json.dumps({"call": n, "reader": f"{__r.module}.{__r.name}",
                                      "paths": paths}) + "\n")
                log.flush()
            _mark("begin", n)
            try:
                return __f(*args, **kwargs)
            finally:
                _mark("end", n)

        wrapper.__name__ = original.__name__
        wrapper.__qualname__ = original.__qualname__
        wrapper.__doc__ = original.__doc__
        setattr(module, reader.name, wrapper)
        installed.append(f"{reader.module}.{reader.name}")
        # modules that imported it by name before it was wrapped (those imported later
        # get the wrapper from the module)
        for other in list(sys.modules.values()):
            for attr, value in list(vars(other).items()) if other is not None else []:
                if value is original:
                    setattr(other, attr, wrapper)
    return installed


def _mark(kind: str, n: int) -> None:
    try:
        os.close(os.open(f"{MARKER}/{kind}/{n}", os.O_RDONLY))
    except OSError:
        pass  # the marker never exists: the failed open is the mark


def _install_open_log(root: Path, log: Any) -> None:
    """Log each Python-level open for reading of a file under ``root`` with its dp_ops
    call sites (for the messages: strace tells what was opened, this from where; an open
    strace saw and this did not came from C++: pyarrow or DuckDB)."""
    prefix = str(root) + os.sep
    lock = threading.Lock()

    def reading(mode: Any, flags: Any) -> bool:
        if isinstance(mode, str):
            return mode.startswith("r") or ("a" in mode and "+" in mode)
        flags = int(flags or 0)
        return ((flags & os.O_ACCMODE) != os.O_WRONLY and not flags & os.O_TRUNC
                and not (flags & os.O_CREAT and flags & os.O_EXCL))

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if (event != "open" or not isinstance(args[0], (str, bytes, os.PathLike))
                or not reading(args[1], args[2])):
            return
        path = os.path.realpath(os.fsdecode(args[0]))
        if not path.startswith(prefix):
            return
        frame: Any = sys._getframe(1)
        sites: list[str] = []
        while frame is not None and len(sites) < 3:
            filename = frame.f_code.co_filename
            if "/dp_ops/" in filename:
                sites.append(f"{filename.split('/dp_ops/', 1)[1]}:{frame.f_lineno} "
                             f"{frame.f_code.co_name}")
            frame = frame.f_back
        with lock:
            log.write(json.dumps({"open": path, "sites": " <- ".join(sites)}) + "\n")
            log.flush()

    sys.addaudithook(hook)


def _child(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="file_audit")
    parser.add_argument("report")
    parser.add_argument("step", choices=["prepare", "gate", "publish"])
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--day", type=date.fromisoformat)
    parser.add_argument("--calls", type=Path, help="where to log verified-read calls")
    args = parser.parse_args(argv)

    from dp_ops.layout import DataRoot
    from dp_ops.reports.registry import load_report
    from dp_ops.steps.noise_request import NoiseRequest

    report = load_report(args.report)
    if args.step == "prepare":  # the day's steps before the gate, untraced
        report.ingest(args.day)
        report.bound(args.day)
        report.noise(NoiseRequest(day=args.day, run_id=args.run_id))
        if report.needs_baseline(args.day) and "baseline" not in report.skipped_after_noise(
                args.day):
            report.build_baseline()
        report.report_day(args.day)
        return 0
    with open(args.calls, "w", encoding="utf-8") as log:
        installed = _install_readers(log)
        log.write(json.dumps({"installed": installed}) + "\n")
        _install_open_log(DataRoot.from_env().root, log)
        if args.step == "gate":
            result = report.gate(run_id=args.run_id)
        else:
            result = report.publish(run_id=args.run_id)
    print(result.summary)
    return 0


# -- the parent ------------------------------------------------------------------------

def strace_or_skip() -> str:
    """The path of a working ``strace``: installed with apt-get when missing and this is
    root (as CI is); otherwise the test is skipped, saying how to run it. As root, or
    under CI, a strace that cannot be installed or cannot trace is an error."""
    import pytest

    # imported here: the child (this file run as a script) has no ``support`` on its path
    from support.ci import in_ci

    exe = shutil.which("strace")
    root = os.geteuid() == 0
    if exe is None and root and shutil.which("apt-get"):
        done = subprocess.run(
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
            "--no-install-recommends strace", shell=True, capture_output=True, text=True,
            timeout=600)
        exe = shutil.which("strace")
        if exe is None:
            pytest.fail(f"strace is missing and apt-get could not install it:\n"
                        f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
    if exe is None:
        message = ("strace is missing and this is not root (or has no apt-get): the file "
                   "access audit needs it; sudo apt-get install strace")
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    probe = subprocess.run([exe, "-f", "-qq", "-o", os.devnull, "true"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        message = f"strace cannot trace here ({probe.stderr.strip()[-300:]})"
        if root or in_ci():
            pytest.fail(message)
        pytest.skip(message + "; run as root or allow ptrace")
    return exe


@dataclass(frozen=True)
class Call:
    n: int
    reader: str
    paths: frozenset[str]


@dataclass
class Trace:
    """What one traced step did: its system-call log, its verified-read calls and the
    Python call sites of its opens under the data root."""

    step: str
    root: Path
    strace_log: Path
    calls: dict[int, Call]
    installed: list[str]
    sites: dict[str, Counter[str]]  # path: its Python-level opens for reading, by call site
    output: str


def run_child(root: Path, env: Mapping[str, str], report: str, step: str, *, run_id: str,
              day: date | None = None, calls: Path | None = None,
              prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """This file run as a script in a child process (under ``prefix``: strace)."""
    cmd = [*prefix, sys.executable, __file__, report, step, "--run-id", run_id]
    if day is not None:
        cmd += ["--day", day.isoformat()]
    if calls is not None:
        cmd += ["--calls", str(calls)]
    done = subprocess.run(cmd, env={**env, "DP_DATA_ROOT": str(root)}, cwd=str(root.parent),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (f"{step} of {report} failed: exit {done.returncode}\n"
                                  f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done


def traced_step(root: Path, env: Mapping[str, str], report: str, step: str, *,
                run_id: str, workdir: Path, strace: str) -> Trace:
    """Run ``step`` (gate or publish) of ``report`` on ``root`` in a traced child."""
    workdir.mkdir(parents=True, exist_ok=True)
    log, calls_file = workdir / f"{step}.strace", workdir / f"{step}.calls.jsonl"
    done = run_child(root, env, report, step, run_id=run_id, calls=calls_file,
                     prefix=(strace, "-f", "-qq", "-s", "4096", "-y", "-e",
                             f"trace={TRACED_CALLS}", "-o", str(log)))
    calls: dict[int, Call] = {}
    installed: list[str] = []
    sites: dict[str, Counter[str]] = defaultdict(Counter)
    for line in calls_file.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if "call" in entry:
            calls[entry["call"]] = Call(entry["call"], entry["reader"],
                                        frozenset(entry["paths"]))
        elif "installed" in entry:
            installed = entry["installed"]
        else:
            sites[entry["open"]][entry["sites"]] += 1
    return Trace(step, Path(os.path.realpath(root)), log, calls, installed, dict(sites),
                 done.stdout)


# -- reading strace's log ----------------------------------------------------------------

@dataclass(frozen=True)
class Open:
    tid: int
    path: str  # absolute, as resolved by the kernel when the open succeeded
    flags: str
    ok: bool


@dataclass(frozen=True)
class Move:
    src: str
    dst: str


_LINE = re.compile(r"^(\d+)\s+(.*)$")
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+)(?:<(.*)>)?")
_FD = re.compile(r"^(AT_FDCWD|-?\d+)(?:<(.*)>)?$")


def _unescape(text: str) -> str:
    """A string as strace prints it (C escapes, octal bytes) as the path it names."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        m = re.match(r"[0-7]{1,3}|x[0-9a-fA-F]{2}|.", text[i + 1:])
        assert m is not None
        esc = m.group(0)
        if esc[0] == "x":
            out.append(int(esc[1:], 16))
        elif esc[0].isdigit():
            out.append(int(esc, 8))
        else:
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "v": b"\v", "f": b"\f"}.get(
                esc, esc.encode())
        i += 1 + len(esc)
    return os.fsdecode(bytes(out))


def _args(text: str) -> list[str]:
    """strace's argument list split at its top-level commas."""
    args, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
        i += 1
    args.append(text[start:].strip())
    return args


def _paths(args: list[str], cwd: str) -> Iterator[str]:
    """The path arguments of a call, each joined to its directory argument (``-y``
    prints a descriptor with its path) or, without one, to the child's cwd."""
    base = cwd
    for arg in args:
        fd = _FD.match(arg)
        if fd:
            base = fd.group(2) or cwd
        elif arg.startswith('"'):
            path = _unescape(arg[1:-1].removesuffix('"...'))
            yield os.path.normpath(os.path.join(base, path))
            base = cwd


def read_strace(log: Path, cwd: str) -> list[Open | Move | tuple[str, int, int]]:
    """The events of a strace log in order: opens, moves, and marks (``("begin"|"end",
    call, tid)``). A call interrupted by another thread's (``<unfinished ...>``) is put
    back together at the place it started."""
    events: list[Any] = []
    pending: dict[int, tuple[int, str]] = {}
    for raw in log.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
        m = _LINE.match(raw)
        if not m:
            continue
        tid, rest = int(m.group(1)), m.group(2)
        if rest.endswith("<unfinished ...>"):
            pending[tid] = (len(events), rest.removesuffix("<unfinished ...>").rstrip())
            events.append(None)
            continue
        if rest.startswith("<... "):
            slot, head = pending.pop(tid, (None, ""))
            if slot is None:
                continue
            rest = head + rest.split("resumed>", 1)[1]
            events[slot] = _event(tid, rest, cwd)
            continue
        events.append(_event(tid, rest, cwd))
    return [e for e in events if e is not None]


def _event(tid: int, text: str, cwd: str) -> Open | Move | tuple[str, int, int] | None:
    m = _CALL.match(text)
    if not m:
        return None  # signals, exits
    name, args, result, fd_path = m.group(1), _args(m.group(2)), int(m.group(3)), m.group(4)
    paths = list(_paths(args, cwd))
    if name in ("open", "openat", "openat2", "creat"):
        if not paths:
            return None
        path = paths[0]
        if path.startswith(MARKER + "/"):
            kind, n = path[len(MARKER) + 1:].split("/")
            return (kind, int(n), tid)
        flags = "O_WRONLY|O_CREAT|O_TRUNC" if name == "creat" else next(
            (a for a in args if "O_" in a), "")
        ok = result >= 0
        return Open(tid, os.path.normpath(_unescape(fd_path)) if ok and fd_path else path,
                    flags, ok)
    if result == 0 and len(paths) == 2:
        return Move(paths[0], paths[1])
    return None


# -- the rule --------------------------------------------------------------------------

@dataclass
class Finding:
    """Unverified opens of one file in one step."""

    step: str
    path: str  # relative to the data root
    unverified: int = 0
    opens: int = 0  # every open of it for reading in the step, verified or not
    inside: set[str] = field(default_factory=set)  # verified readers it was opened within
    sites: Counter[str] = field(default_factory=Counter)  # Python opens, by call site

    def describe(self) -> str:
        inside = "".join(f" (inside {r}, past its one verified read)" for r in sorted(
            self.inside))
        python = sum(self.sites.values())
        where = [f"{site} x{n}" for site, n in self.sites.items()]
        if self.opens > python:
            where.append(f"pyarrow/DuckDB (no Python open) x{self.opens - python}")
        return (f"{self.step}: {self.path}: {self.unverified} of its {self.opens} opens for "
                f"reading unverified{inside}. Opened by: {'; '.join(where)}")


def allowed(rel: str) -> bool:
    return any(fnmatch.fnmatchcase(rel, pattern) for pattern in ALLOWED)


def unverified_reads(trace: Trace) -> tuple[list[Finding], Counter[str]]:
    """The opens for reading of files under the data root that are neither (a) the one
    open of a verified-read call for that file, (b) of a file the step wrote, nor (c)
    allowed; and, for the record, how many opens each rule let through."""
    root = str(trace.root) + os.sep
    events = read_strace(trace.strace_log, str(trace.root.parent))
    directories = {os.path.dirname(e.path) for e in events if isinstance(e, Open)}
    written: set[str] = set()
    active: dict[int, list[int]] = defaultdict(list)  # tid: open calls, innermost last
    used: set[tuple[int, str]] = set()  # (call, path) whose one open happened
    findings: dict[str, Finding] = {}
    reads_of: Counter[str] = Counter()
    passed: Counter[str] = Counter()
    for event in events:
        if isinstance(event, tuple):
            kind, n, tid = event
            if kind == "begin":
                active[tid].append(n)
            elif n in active[tid]:
                active[tid].remove(n)
            continue
        if isinstance(event, Move):
            moved = {p for p in written
                     if p == event.src or p.startswith(event.src + os.sep)}
            written |= {event.dst + p[len(event.src):] for p in moved}
            continue
        if not event.ok or "O_DIRECTORY" in event.flags or "O_PATH" in event.flags:
            continue
        path = event.path
        if not path.startswith(root) or path in directories or os.path.isdir(path):
            continue  # outside the data root, or a directory (listed or fsync'ed)
        writes = "O_WRONLY" in event.flags or "O_RDWR" in event.flags
        fresh = "O_TRUNC" in event.flags or ("O_CREAT" in event.flags
                                             and "O_EXCL" in event.flags)
        reads = "O_WRONLY" not in event.flags and not fresh
        if reads:
            rel = path[len(root):]
            if allowed(rel):
                passed["(c) allowed"] += 1
            elif path in written:
                passed["(b) the step's own output"] += 1
            else:
                call = next((n for n in reversed(active[event.tid])
                             if path in trace.calls[n].paths and (n, path) not in used), None)
                if call is not None:
                    used.add((call, path))
                    passed[f"(a) {trace.calls[call].reader}"] += 1
                else:
                    finding = findings.setdefault(rel, Finding(
                        trace.step, rel, sites=trace.sites.get(path, Counter())))
                    finding.unverified += 1
                    finding.inside.update(trace.calls[n].reader for n in active[event.tid]
                                          if path in trace.calls[n].paths)
                reads_of[rel] += 1
        if writes or fresh:
            written.add(path)
    for rel, finding in findings.items():
        finding.opens = reads_of[rel]
    return sorted(findings.values(), key=lambda f: f.path), passed


def opened_for_reading(trace: Trace, pattern: str) -> int:
    """How many opens for reading of files matching ``pattern`` (relative to the data
    root) the step made: shows that the trace saw the reads it audits."""
    root = str(trace.root) + os.sep
    return sum(1 for e in read_strace(trace.strace_log, str(trace.root.parent))
               if isinstance(e, Open) and e.ok and e.path.startswith(root)
               and "O_WRONLY" not in e.flags
               and fnmatch.fnmatchcase(e.path[len(root):], pattern))


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
