"""The benchmark: one synthetic day of N stays, our public-places step against PipelineDP,
OpenDP and a non-private DuckDB floor, plus the noise sampler and a whole pipeline day.

    make bench                                  # the default full run (1M, 4M, 16M)
    make bench BENCH_ARGS="--sizes 250k,1M"     # a quick run
    .venv/bin/python benchmarks/run.py --help

Every contender runs in a fresh child process (``measure.run_measured``): wall time of
the child's timed section (after its imports: from the clean Parquet file on disk to
noisy cells), the child process's wall time, and its peak RSS from ``os.wait4``. Results
go to ``benchmarks/results/<run>/`` (``results.json``, ``results.md``, one log per
child) and are copied to ``benchmarks/results/latest.{json,md}``. See README.md for what
each contender does and what the peers do differently.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from measure import Measurement, run_measured

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"
PEERS_PYTHON = BENCH_DIR / ".venv-peers" / "bin" / "python"

# contender -> (label in the table, interpreter, script)
CONTENDERS: dict[str, tuple[str, str, str]] = {
    "duckdb-floor": ("(d) DuckDB floor, non-private", "project", "contenders.py"),
    "ours-step": ("(a) ours: the bound and noise steps", "project", "contenders.py"),
    "ours-places": ("(a') ours: places-only SQL + noise", "project", "contenders.py"),
    "opendp": ("(c) OpenDP 0.16 Polars", "peers", "peer_opendp.py"),
    "pipelinedp": ("(b) PipelineDP 0.3.1 LocalBackend", "peers", "peer_pipelinedp.py"),
}
DEFAULT_SIZES = "1M,4M,16M"
HEADLINE = "ours-step"
# Discrete Laplace variance per cell at epsilon 0.44, sensitivity 1 (a = e^-0.44):
# 2a / (1 - a)^2. Used only to judge noisy sums against the exact bounded sums.
_A = math.exp(-0.44)
CELL_VARIANCE = 2 * _A / (1 - _A) ** 2
PLACE_CATEGORY_COUNT = 7


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size like 250k, 1M, 16000000")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[match.group(2).lower()]
    if value < 1000:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 1000 stays")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    return sorted({parse_size(t) for t in text.split(",") if t.strip()})


def human(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


@dataclass
class Run:
    """One contender at one size."""

    contender: str
    stays: int
    measurement: Measurement | None = None
    skipped: str = ""

    @property
    def ok(self) -> bool:
        return self.measurement is not None and self.measurement.ok

    @property
    def seconds(self) -> float | None:
        return float(self.measurement.result["seconds"]) if self.ok else None

    def status(self) -> str:
        if self.skipped:
            return f"not run: {self.skipped}"
        m = self.measurement
        assert m is not None
        if m.ok:
            if m.contended(os.cpu_count() or 1):
                return (f"ok, CONTENDED: other processes used {m.other_cpu_s:.0f} CPU-s "
                        "meanwhile")
            return "ok"
        if m.timed_out:
            return f"TIMEOUT after {m.process_s:.0f} s"
        reason = "failed"
        for pattern, label in ((r"Out of Memory Error", "DuckDB out of memory"),
                               (r"MemoryError", "MemoryError"),
                               (r"disk guard", "killed by the disk guard"),
                               (r"No space left", "disk full")):
            if re.search(pattern, m.log):
                reason = label
                break
        return f"FAILED ({reason}) after {m.process_s:.0f} s"

    def as_dict(self) -> dict[str, Any]:
        return {"contender": self.contender, "stays": self.stays, "status": self.status(),
                "seconds": self.seconds,
                "measurement": self.measurement.as_dict() if self.measurement else None}


def tree_state() -> dict[str, Any]:
    """What pipeline code is measured: git HEAD, uncommitted files of the pipeline, and a
    hash of the pipeline's Python and SQL as they are on disk."""
    import hashlib
    import subprocess

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    digest = hashlib.sha256()
    files = sorted([*(REPO / "plugins" / "dp_ops").rglob("*.py"),
                    *(REPO / "include" / "sql").glob("*.sql")])
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "plugins",
                                      "include").splitlines()]
    return {"head": git("rev-parse", "HEAD"), "dirty": dirty, "fingerprint": digest.hexdigest()}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        stamp = datetime.now().strftime("%Y%m%dT%H%M%S")
        self.out = args.results_dir / stamp
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = args.data_dir / "runs" / stamp
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.runs: list[Run] = []
        self.extra: dict[str, Any] = {}
        self.contended = 0
        self.t0 = time.perf_counter()
        self.tree = tree_state()

    # -- children ---------------------------------------------------------------------
    def env(self, interpreter: str) -> dict[str, str]:
        # No PYTHONPATH for any child: the project's venv has dp_ops installed (make venv:
        # pip install -e .), the peers' venv must see only its own packages, and every
        # child is a script in benchmarks/, whose directory Python puts on sys.path itself
        # (so the benchmark's modules import each other).
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        if interpreter == "project":
            env["GX_ANALYTICS_ENABLED"] = "false"
        return env

    def child(self, name: str, interpreter: str, argv: list[str],
              timeout: float | None = None) -> Measurement:
        python = str(PROJECT_PYTHON if interpreter == "project" else self.args.peers_python)
        tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
        result = self.out / f"{tag}.result.json"
        log = self.out / f"{tag}.log"
        self.say(f"  {name} ...")
        m = run_measured(name, [python, *argv, "--result", str(result)], result_file=result,
                         log_file=log, env=self.env(interpreter), cwd=REPO,
                         timeout_s=timeout, guard_path=self.args.data_dir,
                         min_free_bytes=int(self.args.min_free_gib * 2**30))
        state = "ok" if m.ok else ("timeout" if m.timed_out else f"exit {m.exit_code}")
        self.say(f"    {state}: process {m.process_s:.1f} s, peak RSS {m.peak_rss_mib:.0f} MiB"
                 + (f", timed {m.result['seconds']:.2f} s" if m.ok else "")
                 + (f"; other processes used {m.other_cpu_s:.1f} CPU-s meanwhile"
                    if m.contended(os.cpu_count() or 1) else ""))
        self.contended += m.contended(os.cpu_count() or 1)
        return m

    def say(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f} s] {text}", flush=True)

    # -- steps ------------------------------------------------------------------------
    def dataset(self, stays: int) -> Path:
        a = self.args
        path = a.data_dir / f"stays-{human(stays)}-seed{a.seed}-{a.sub_regions}x{a.finest}"
        if str(stays) in self.extra.get("datasets", {}):
            return path  # made (or found) earlier in this run
        m = self.child(f"generate-{human(stays)}", "project", [
            str(BENCH_DIR / "synth.py"), "--stays", str(stays), "--out", str(path),
            "--seed", str(a.seed), "--sub-regions", str(a.sub_regions),
            "--finest", str(a.finest)], timeout=a.timeout)
        if not m.ok:
            raise SystemExit(f"generating {stays} stays failed; see {self.out}")
        self.extra.setdefault("datasets", {})[str(stays)] = {
            "path": str(path), "process_s": m.process_s, "peak_rss_mib": m.peak_rss_mib,
            **m.result}
        return path

    def contender(self, name: str, stays: int, data: Path) -> Run:
        _, interpreter, script = CONTENDERS[name]
        run = Run(name, stays)
        self.runs.append(run)
        a = self.args
        if name == "pipelinedp" and stays > a.pipelinedp_max:
            run.skipped = f"capped at {human(a.pipelinedp_max)} (--pipelinedp-max)"
            return run
        if name == "opendp" and stays > a.opendp_max:
            run.skipped = f"capped at {human(a.opendp_max)} (--opendp-max)"
            return run
        failed = [r for r in self.runs if r.contender == name and r.stays < stays
                  and r.measurement is not None and not r.ok]
        if failed and not a.retry_after_failure:
            run.skipped = (f"failed at {human(failed[0].stays)} "
                           "(--retry-after-failure to try anyway)")
            return run
        work = self.scratch / f"{name}-{human(stays)}"
        if interpreter == "project" and script == "contenders.py":
            argv = [str(BENCH_DIR / script), name, "--data", str(data), "--work", str(work)]
        else:
            argv = [str(BENCH_DIR / script), "--data", str(data)]
        run.measurement = self.child(f"{name}-{human(stays)}", interpreter, argv,
                                     timeout=a.timeout)
        if not a.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        return run

    def helper(self, name: str, data: Path, work: Path, label: str,
               timeout: float | None = None) -> Measurement:
        return self.child(label, "project", [str(BENCH_DIR / "contenders.py"), name, "--data",
                                             str(data), "--work", str(work)],
                          timeout=timeout or self.args.timeout)

    def whole_day(self) -> None:
        a = self.args
        window = self.dataset(a.window_stays)
        day_size = a.whole_day_size or min(a.sizes)
        data = self.dataset(day_size)
        work = self.scratch / "whole-day"
        prep = self.helper("whole-day-prepare", window, work,
                           f"whole-day-prepare-window-{human(a.window_stays)}")
        info: dict[str, Any] = {"stays": day_size, "window_stays": a.window_stays,
                                "prepare": prep.as_dict()}
        if prep.ok:
            info["day"] = self.helper("whole-day", data, work,
                                      f"whole-day-{human(day_size)}").as_dict()
        self.extra["whole_day"] = info
        if not a.keep_work:
            shutil.rmtree(work, ignore_errors=True)

    def run(self) -> dict[str, Any]:
        a = self.args
        self.say(f"benchmark run {self.out.name}: sizes {', '.join(map(human, a.sizes))}")
        data = {n: self.dataset(n) for n in a.sizes}
        for n in a.sizes:
            self.say(f"N = {human(n)} stays")
            for name in a.contenders:
                self.contender(name, n, data[n])
            exact = self.helper("exact-bounded", data[n], self.scratch / f"exact-{n}",
                                f"exact-bounded-{human(n)}")
            self.extra.setdefault("exact_bounded", {})[str(n)] = exact.result
        self.say("noise sampler")
        self.extra["noise_rate"] = self.helper("noise-rate", data[a.sizes[0]],
                                               self.scratch / "noise", "noise-rate").as_dict()
        if not a.skip_whole_day:
            self.say("whole day")
            self.whole_day()
        report = evaluate(self)
        done = [r.stays for r in self.runs if r.contender == HEADLINE and r.ok]
        if (any(t["status"] != "PASS" for t in report["targets"]) and not a.skip_profile
                and (done or a.profile_size)):
            n = a.profile_size or max(done)
            if n not in data:
                data[n] = self.dataset(n)
            self.say(f"a target is missed: profiling the bounding query at {human(n)}")
            prof = self.helper("profile-bounding", data[n], self.scratch / "profile",
                               f"profile-bounding-{human(n)}")
            report["profile"] = {"stays": n, **prof.as_dict()}
        report["total_wall_s"] = time.perf_counter() - self.t0
        report["contended_children"] = self.contended
        end = tree_state()
        report["tree"] = self.tree | {"changed_during_run":
                                      end["fingerprint"] != self.tree["fingerprint"]}
        if report["tree"]["changed_during_run"]:
            self.say("WARNING: the pipeline code changed during this run; rerun")
        if not a.keep_work:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return report


# -- evaluation -----------------------------------------------------------------------

def _fit(points: list[tuple[int, float]]) -> dict[str, float] | None:
    """Least-squares slope (s per million stays) and log-log exponent of t(N)."""
    if len(points) < 2:
        return None
    xs = [n / 1e6 for n, _ in points]
    ys = [t for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mlx, mly = sum(lx) / len(lx), sum(ly) / len(ly)
    exponent = (sum((a - mlx) * (b - mly) for a, b in zip(lx, ly, strict=True))
                / sum((a - mlx) ** 2 for a in lx))
    return {"slope_s_per_million": slope, "intercept_s": my - slope * mx,
            "loglog_exponent": exponent, "points": len(points)}


def _check_sums(bench: Bench, run: Run) -> dict[str, Any] | None:
    """How far each level's sum of noisy place counts is from the exact bounded sum, in
    standard deviations of the summed noise (|z| > 6 would mean a different computation)."""
    if not run.ok or "noisy_place_sum_by_level" not in run.measurement.result:
        return None
    exact = bench.extra.get("exact_bounded", {}).get(str(run.stays), {}).get("kept_by_level")
    by_level = bench.extra.get("datasets", {}).get(str(run.stays), {}).get("regions_by_level")
    if not exact or not by_level:
        return None
    z = {}
    for level, noisy in run.measurement.result["noisy_place_sum_by_level"].items():
        cells = PLACE_CATEGORY_COUNT * by_level[level]
        z[level] = (noisy - exact[level]) / math.sqrt(cells * CELL_VARIANCE)
    return {"z_by_level": z, "max_abs_z": max(abs(v) for v in z.values())}


def evaluate(bench: Bench) -> dict[str, Any]:
    a = bench.args
    runs = bench.runs
    by = {(r.contender, r.stays): r for r in runs}

    def seconds(name: str, n: int) -> float | None:
        r = by.get((name, n))
        return r.seconds if r else None

    fits = {}
    for name in a.contenders:
        pts = [(r.stays, r.seconds) for r in runs if r.contender == name and r.ok]
        fit = _fit(sorted(pts))
        if fit:
            fits[name] = fit

    def extrapolated(name: str, n: int) -> tuple[float | None, bool]:
        """Measured seconds, else linear from the largest measured size (labelled)."""
        t = seconds(name, n)
        if t is not None:
            return t, False
        done = [r for r in runs if r.contender == name and r.ok]
        if not done:
            return None, False
        last = max(done, key=lambda r: r.stays)
        if last.stays >= n:
            return None, False
        return last.seconds * n / last.stays, True

    targets: list[dict[str, Any]] = []

    def target(name: str, subject: str, measured: str, ok: bool | None, detail: str) -> None:
        targets.append({"target": name, "subject": subject, "measured": measured,
                        "status": "PASS" if ok else ("GAP" if ok is False else "GAP (n/a)"),
                        "detail": detail})

    subjects = {HEADLINE: "ours (a)", "ours-places": "ours places-only (a'), secondary"}
    for subject, label in [(s, lab) for s, lab in subjects.items() if s in a.contenders]:
        ours_sizes = [r.stays for r in runs if r.contender == subject]
        for peer, factor in (("pipelinedp", 50.0), ("opendp", 5.0)):
            if peer not in a.contenders:
                continue
            ratios = []
            for n in ours_sizes:
                t_ours = seconds(subject, n)
                t_peer, extra = extrapolated(peer, n)
                if t_ours is None or t_peer is None:
                    ratios.append((n, None, extra))
                else:
                    ratios.append((n, t_peer / t_ours, extra))
            text = ", ".join(f"{human(n)}: " + ("n/a" if r is None else f"{r:.1f}x")
                             + (" (peer extrapolated)" if e and r is not None else "")
                             for n, r, e in ratios)
            known = [r for _, r, _ in ratios if r is not None]
            ok = None if not known else (all(r >= factor for r in known)
                                         and len(known) == len(ratios))
            target(f">= {factor:.0f}x faster than {peer}", label, text, ok,
                   f"peer seconds / {label} seconds, same N")
        floor_ratios = []
        for n in ours_sizes:
            t_ours, t_floor = seconds(subject, n), seconds("duckdb-floor", n)
            floor_ratios.append((n, None if t_ours is None or t_floor is None
                                 else t_ours / t_floor))
        # target: within 2x of the floor on the largest day (at small N both are
        # dominated by fixed costs; every ratio is shown)
        at_largest = dict(floor_ratios).get(max(ours_sizes)) if ours_sizes else None
        target(f"within 2x of the non-private floor at {human(max(a.sizes))}", label,
               ", ".join(f"{human(n)}: " + ("n/a" if r is None else f"{r:.2f}x")
                         for n, r in floor_ratios),
               None if at_largest is None else (at_largest <= 2
                                                and max(ours_sizes) == max(a.sizes)),
               f"{label} seconds / floor seconds")
        big = max(a.sizes)
        r_big = by.get((subject, big))
        target(f"peak RSS < 2 GiB at {human(big)}", label,
               f"{r_big.measurement.peak_rss_mib:.0f} MiB" if r_big and r_big.ok
               else (r_big.status() if r_big else "not run"),
               (r_big.measurement.peak_rss_mib < 2048) if r_big and r_big.ok else None,
               "child's ru_maxrss")
        fit = fits.get(subject)
        complete = all(by.get((subject, n)) and by[(subject, n)].ok for n in a.sizes)
        target("time linear in N", label,
               (f"{fit['slope_s_per_million']:.2f} s per 1M stays, log-log exponent "
                f"{fit['loglog_exponent']:.2f} over {fit['points']} sizes") if fit
               else "fewer than 2 sizes completed",
               (fit["loglog_exponent"] <= 1.15 and complete) if fit else None,
               "exponent <= 1.15 over every size")
    noise = bench.extra.get("noise_rate", {})
    rate = noise.get("result", {}).get("samples_per_s")
    target("noise >= 10M samples/s/core", "noise sampler",
           f"{rate / 1e6:.1f}M samples/s (1 thread)" if rate else "failed",
           (rate >= 10e6) if rate else None, "sample_discrete_laplace, AES-128-CTR")

    checks = {f"{r.contender}-{r.stays}": c for r in runs if (c := _check_sums(bench, r))}
    return {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
            "runs": [r.as_dict() for r in runs], "fits": fits, "targets": targets,
            "sum_checks": checks, "extra": bench.extra,
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}


# -- output ---------------------------------------------------------------------------

def markdown(report: dict[str, Any]) -> str:
    runs = report["runs"]
    ours = {r["stays"]: r["seconds"] for r in runs if r["contender"] == HEADLINE and r["seconds"]}
    lines = ["# Benchmark results", "",
             "Wall s: the child's timed section (clean Parquet on disk -> noisy cells; no "
             "interpreter start or imports). Process s: the whole child process. Peak RSS: "
             "the child's ru_maxrss from os.wait4. Ratio: contender wall / ours (a) wall at "
             "the same N (> 1: ours is faster).", "",
             "| contender | N | wall s | process s | peak RSS MiB | ratio vs ours (a) | "
             "status |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        label = CONTENDERS[r["contender"]][0]
        m = r["measurement"]
        wall = f"{r['seconds']:.2f}" if r["seconds"] is not None else "-"
        proc = f"{m['process_s']:.1f}" if m else "-"
        rss = f"{m['peak_rss_mib']:.0f}" if m else "-"
        base = ours.get(r["stays"])
        ratio = (f"{r['seconds'] / base:.2f}" if base and r["seconds"] is not None else "-")
        lines.append(f"| {label} | {human(r['stays'])} | {wall} | {proc} | {rss} | {ratio} | "
                     f"{r['status']} |")
    # extrapolated peer rows, clearly labelled
    for peer in ("pipelinedp", "opendp"):
        done = [r for r in runs if r["contender"] == peer and r["seconds"]]
        if not done:
            continue
        last = max(done, key=lambda r: r["stays"])
        for r in runs:
            if r["contender"] == peer and r["seconds"] is None and r["stays"] > last["stays"]:
                est = last["seconds"] * r["stays"] / last["stays"]
                base = ours.get(r["stays"])
                lines.append(f"| {CONTENDERS[peer][0]} **EXTRAPOLATED** (linear from "
                             f"{human(last['stays'])}) | {human(r['stays'])} | ~{est:.0f} | - | "
                             f"- | {f'{est / base:.1f}' if base else '-'} | not measured |")
    extra = report["extra"]
    noise = extra.get("noise_rate", {})
    if noise.get("result"):
        res = noise["result"]
        lines.append(f"| noise sampler ({res['size'] // 10**6}M draws x "
                     f"{len(res['samples_per_s_all'])}) | - | "
                     f"{res['seconds']:.2f} | {noise['process_s']:.1f} | "
                     f"{noise['peak_rss_mib']:.0f} | - | "
                     f"{res['samples_per_s'] / 1e6:.1f}M samples/s/core |")
    whole = extra.get("whole_day", {})
    day = whole.get("day")
    if day:
        lines.append(f"| whole day, all steps (run_days) | {human(whole['stays'])} | "
                     + (f"{day['result']['seconds']:.2f}" if day["result"] else "-")
                     + f" | {day['process_s']:.1f} | {day['peak_rss_mib']:.0f} | - | "
                     + ("ok" if day["exit_code"] == 0 else "FAILED") + " |")
    settings = next((r["measurement"]["result"].get("execution") for r in runs
                     if r["contender"] == HEADLINE and r["seconds"] is not None), None)
    if settings:
        lines += ["", "Pipeline execution settings of (a) (`dp_ops.settings`, from the "
                  "environment): " + ", ".join(f"{k}={v}" for k, v in settings.items())]
    datasets = extra.get("datasets", {})
    if datasets:
        lines += ["", "Synthetic days: " + "; ".join(
            f"{human(int(n))} stays = {d.get('users', 0):,} users, "
            f"{d.get('bytes', 0) / 2**20:.0f} MiB Parquet, generated in "
            f"{d.get('seconds', 0):.1f} s at "
            f"{d.get('generator_peak_rss_mib', 0):.0f} MiB peak RSS"
            + (" (cached from an earlier run)" if d.get("reused") else "")
            for n, d in sorted(datasets.items(), key=lambda kv: int(kv[0])))]
    lines += ["", "## Targets", "", "| target | subject | measured | status |",
              "|---|---|---|---|"]
    for t in report["targets"]:
        lines.append(f"| {t['target']} | {t['subject']} | {t['measured']} | {t['status']} |")
    if report["fits"]:
        lines += ["", "## Scaling (successful sizes only)", "",
                  "| contender | s per 1M stays | intercept s | log-log exponent | sizes |",
                  "|---|---:|---:|---:|---:|"]
        for name, f in report["fits"].items():
            lines.append(f"| {CONTENDERS[name][0]} | {f['slope_s_per_million']:.2f} | "
                         f"{f['intercept_s']:.2f} | {f['loglog_exponent']:.2f} | "
                         f"{f['points']} |")
    lines += ["", "## Breakdowns", ""]
    for r in runs:
        res = (r["measurement"] or {}).get("result") or {}
        parts = {k: v for k, v in res.items() if k.endswith("_s") and k != "seconds"}
        if parts:
            lines.append(f"- {r['contender']} {human(r['stays'])}: " + ", ".join(
                f"{k[:-2]} {v:.2f} s" for k, v in parts.items()))
    if day and day.get("result"):
        steps = day["result"]["steps_s"]
        lines.append(f"- whole day {human(whole['stays'])} (baseline window: 35 days of "
                     f"{human(whole['window_stays'])} stays, prepared untimed in "
                     f"{whole['prepare']['process_s']:.0f} s): "
                     + ", ".join(f"{k} {v:.2f} s" for k, v in steps.items()))
    if noise.get("result"):
        res = noise["result"]
        lines.append(f"- noise sampler: AES-CTR raw {res['aes_ctr_raw_u64_per_s'] / 1e6:.0f}M "
                     f"u64/s, one numpy float geometric draw "
                     f"{res['geometric_per_s'] / 1e6:.0f}M/s (the exact sampler uses about "
                     "one raw word per draw; benchmarks/sampler.py compares it with "
                     "numpy's float sampler at every epsilon / sensitivity)")
    if report["sum_checks"]:
        lines += ["", "## Same computation? (sum of noisy place counts vs exact bounded sum)",
                  "", "Per level, (noisy sum - exact sum of min(pairs, 4) per user) / sd of "
                  "the summed noise; |z| above ~4 would mean a different computation.", "",
                  "| run | z level 0 | z level 1 | z level 2 |", "|---|---:|---:|---:|"]
        for key, c in report["sum_checks"].items():
            z = c["z_by_level"]
            lines.append(f"| {key} | " + " | ".join(f"{z.get(str(lv), float('nan')):+.2f}"
                                                   for lv in range(3)) + " |")
    prof = report.get("profile")
    if prof and prof.get("result"):
        p = prof["result"]
        lines += ["", "## Profile of (a): the bound step at "
                  f"{human(prof['stays'])} stays "
                  "(DuckDB JSON profiler on each query the step runs, pipeline settings)", ""]
        if p.get("error"):
            lines.append(f"The step failed after {p['query_s']:.1f} s: {p['error']}")
        lines += [f"{p['queries']} quer{'y' if p['queries'] == 1 else 'ies'} "
                  f"({', '.join(f'{s:.1f}' for s in p['query_wall_s'])} s wall), "
                  f"{p['cpu_s']:.1f} s CPU in all (2 threads); spilled "
                  f"{p['spilled_gib']:.2f} GiB to disk in all (largest temp dir "
                  f"{p['peak_temp_dir_gib']:.2f} GiB); peak buffer memory "
                  f"{p['peak_buffer_gib']:.2f} GiB. Operator seconds are thread time summed "
                  "over threads and queries.", "",
                  "| operator | s | share | rows out | what |",
                  "|---|---:|---:|---:|---|"]
        for o in p["top_operators"]:
            lines.append(f"| {o['operator']} | {o['seconds']:.2f} | {o['share']:.0%} | "
                         f"{o['rows']} | `{o['detail']}` |")
    tree = report.get("tree", {})
    if tree:
        lines += ["", f"Pipeline code measured: git {tree.get('head', '?')[:12]}"
                  + (f", uncommitted changes in {', '.join(tree['dirty'])}"
                     if tree.get("dirty") else ", clean")
                  + f"; fingerprint {tree.get('fingerprint', '?')[:12]}."]
        if report.get("contended_children"):
            lines.append(f"**WARNING: {report['contended_children']} child process(es) ran "
                         "while other processes used more than 10% of the machine (see "
                         "status): those timings are not comparable. Rerun on a quiet "
                         "machine.**")
        if tree.get("changed_during_run"):
            lines.append("**WARNING: the pipeline code (plugins/dp_ops, include/sql) changed "
                         "during this run; its rows may mix two versions. Rerun.**")
    lines += ["", f"Total wall time of the benchmark run: {report['total_wall_s']:.0f} s "
              f"({report['total_wall_s'] / 60:.1f} min).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES),
                        help=f"stays per day, comma separated (default {DEFAULT_SIZES})")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help=f"subset of {','.join(CONTENDERS)}")
    parser.add_argument("--pipelinedp-max", type=parse_size, default=4_000_000,
                        help="largest N for PipelineDP (default 4M: it is the slowest "
                             "contender by far, and 16M would add a long wait)")
    parser.add_argument("--opendp-max", type=parse_size, default=16_000_000,
                        help="largest N for OpenDP (default 16M)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds before a contender is killed (default 900)")
    parser.add_argument("--retry-after-failure", action="store_true",
                        help="run a contender at larger N even after it failed at a smaller N")
    parser.add_argument("--whole-day-size", type=parse_size, default=None,
                        help="stays of the timed whole day (default: the smallest size)")
    parser.add_argument("--window-stays", type=parse_size, default=100_000,
                        help="stays per baseline-window day of the whole-day run (100k)")
    parser.add_argument("--skip-whole-day", action="store_true")
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument("--profile-size", type=parse_size, default=None,
                        help="N of the profile run when a target is missed (default: the "
                             "largest N at which (a) completed)")
    parser.add_argument("--seed", type=int, default=2020)
    parser.add_argument("--sub-regions", type=int, default=50)
    parser.add_argument("--finest", type=int, default=3000)
    parser.add_argument("--data-dir", type=Path, default=BENCH_DIR / "data")
    parser.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    parser.add_argument("--peers-python", type=Path, default=PEERS_PYTHON)
    parser.add_argument("--min-free-gib", type=float, default=8.0,
                        help="kill a child when the data disk has less free space (DuckDB "
                             "spills there; default 8)")
    parser.add_argument("--keep-work", action="store_true",
                        help="keep each contender's scratch data root")
    args = parser.parse_args(argv)
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = [c for c in args.contenders if c not in CONTENDERS]
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; choose from {list(CONTENDERS)}")
    needs_peers = {"opendp", "pipelinedp"} & set(args.contenders)
    if needs_peers and not args.peers_python.exists():
        parser.error(f"{args.peers_python} missing: run `make bench` (it builds the peers "
                     "venv from benchmarks/requirements-peers.txt)")
    args.data_dir = args.data_dir.resolve()
    bench = Bench(args)
    report = bench.run()
    text = markdown(report)
    (bench.out / "results.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (bench.out / "results.md").write_text(text)
    shutil.copyfile(bench.out / "results.json", args.results_dir / "latest.json")
    shutil.copyfile(bench.out / "results.md", args.results_dir / "latest.md")
    print()
    print(text)
    print(f"results: {bench.out}/results.{{md,json}} (also {args.results_dir}/latest.*)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
