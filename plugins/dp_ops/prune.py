"""``python -m dp_ops prune``: remove private intermediate files past their retention.

What it removes: the per-date partitions of ``work/clean`` (clean raw rows),
``work/bounded`` (true aggregates) and ``quarantine`` (rejected raw rows) whose newest file
was written more than ``retention_days`` ago (default ``RETENTION_DAYS``, 30). Nothing
else: never ``raw/`` (the input, owned by whoever delivers it), ``noise/`` (the stored
noisy values the ledger paid for), the ledger, the baseline, reports or releases.

Why that is safe: every pruned file can be rebuilt from ``raw/``, and every step that
needs one rebuilds it first (a rerun of a day runs ``ingest`` and ``bound_contributions``
again; their output is the same). What needs them later: a method update reads the
bounded aggregates of its 4-week comparison window (``run_method_update`` names the days
to re-bound when they are gone); the demo's evaluation reads bounded aggregates. The
quarantine is kept for operators to read the rejected rows of recent days.

A dry run is the default: it lists what would go and how much; ``--apply`` removes it.

Nothing is followed through a symlink: an area, a dataset directory or a partition that is
a symlink (whoever can write the data root can make one, say ``quarantine`` pointing at
another disk) is skipped and named in the output, and the rest is pruned. Removal opens
each directory from the data root down with O_NOFOLLOW, so a symlink swapped in after the
scan is refused too.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dp_ops.layout import DataRoot

RETENTION_DAYS = 30


@dataclass(frozen=True)
class Candidate:
    path: Path
    age_days: float
    bytes: int


# The prunable private areas, relative to the data root.
PRIVATE_AREAS = (Path("work/clean"), Path("work/bounded"), Path("quarantine"))


@dataclass(frozen=True)
class Scan:
    """The ``date=...`` partitions of the private areas, and the symlinks met on the way
    (not followed: neither they nor what they point to are pruned)."""

    partitions: list[Path] = field(default_factory=list)
    symlinks: list[Path] = field(default_factory=list)


def _first_symlink(root: Path, relative: Path) -> Path | None:
    """The first component of ``root / relative`` below ``root`` that is a symlink."""
    path = root
    for part in relative.parts:
        path = path / part
        if path.is_symlink():
            return path
    return None


def scan(root: DataRoot) -> Scan:
    """Every ``date=...`` partition directory under the prunable private areas
    (``<area>/<dataset>/date=...``), reached without following a symlink."""
    out = Scan()
    for area in PRIVATE_AREAS:
        link = _first_symlink(root.root, area)
        if link is not None:
            if link not in out.symlinks:  # ``work`` itself: met for clean and bounded
                out.symlinks.append(link)
            continue
        path = root.root / area
        if not path.is_dir():
            continue
        for dataset in sorted(path.iterdir()):
            if dataset.is_symlink():
                out.symlinks.append(dataset)
            elif dataset.is_dir():
                for part in sorted(dataset.glob("date=*")):  # lists; follows nothing
                    if part.is_symlink():
                        out.symlinks.append(part)
                    elif part.is_dir():
                        out.partitions.append(part)
    return out


def private_partitions(root: DataRoot) -> list[Path]:
    """Every ``date=...`` partition under the prunable private areas (no symlink)."""
    return scan(root).partitions


def _files(part: Path) -> list[os.stat_result]:
    """The lstat of every regular file under ``part``; symlinks neither followed nor
    counted (their target is not what prune removes)."""
    out = []
    for directory, _, names in os.walk(part, followlinks=False):
        for name in names:
            st = os.lstat(os.path.join(directory, name))
            if stat.S_ISREG(st.st_mode):
                out.append(st)
    return out


def candidates(root: DataRoot, retention_days: float, now: float | None = None
               ) -> list[Candidate]:
    """Partitions whose newest file is older than ``retention_days``."""
    if not retention_days >= 0:
        raise ValueError(f"retention_days={retention_days!r}: must be >= 0")
    now = time.time() if now is None else now
    out = []
    for part in private_partitions(root):
        files = _files(part)
        newest = max((st.st_mtime for st in files), default=part.lstat().st_mtime)
        age = (now - newest) / 86400
        if age > retention_days:
            out.append(Candidate(part, age, sum(st.st_size for st in files)))
    return out


def remove_partition(root: Path, part: Path) -> None:
    """``shutil.rmtree`` of ``part``, a directory below ``root``, reached by opening each
    directory from ``root`` down with O_NOFOLLOW: a component that became a symlink
    since the scan raises OSError (ELOOP, ENOTDIR) instead of being followed, and rmtree
    with ``dir_fd`` removes nothing through a symlink either."""
    *parents, name = part.relative_to(root).parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for component in parents:
            inner = os.open(component, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                            dir_fd=fd)
            os.close(fd)
            fd = inner
        shutil.rmtree(name, dir_fd=fd)
    finally:
        os.close(fd)


def prune(root: DataRoot, retention_days: float = RETENTION_DAYS, *, apply: bool = False,
          now: float | None = None) -> list[Candidate]:
    """The candidates; removed when ``apply``. A partition that cannot be removed (it
    became a symlink since the scan, say) is reported on stderr and left out of the
    result; the others are still removed."""
    found = candidates(root, retention_days, now)
    if not apply:
        return found
    removed = []
    for c in found:
        try:
            remove_partition(root.root, c.path)
        except OSError as exc:
            print(f"prune: {c.path} not removed ({exc.strerror or exc}); skipped",
                  file=sys.stderr)
            continue
        removed.append(c)
    return removed


def _target(link: Path) -> str:
    """`` (to <target>)``, the target quoted: anyone who can write the data root chose it,
    and it is printed to an operator's terminal (no control characters)."""
    try:
        return f" (to {os.readlink(link)!r})"
    except OSError:
        return ""


def describe(found: list[Candidate], root: DataRoot, retention_days: float,
             applied: bool) -> str:
    total = sum(c.bytes for c in found)
    verb = "removed" if applied else "would remove (dry run; --apply to remove)"
    lines = [f"{verb} {len(found)} partition(s), {total / 1e6:.1f} MB, of work/clean, "
             f"work/bounded and quarantine written more than {retention_days:g} days ago"]
    for c in found:
        lines.append(f"  {c.path.relative_to(root.root)}  ({c.age_days:.0f} days, "
                     f"{c.bytes / 1e6:.2f} MB)")
    for link in scan(root).symlinks:
        lines.append(f"skipped {link.relative_to(root.root)}: a symlink{_target(link)}, "
                     "not followed; remove it or replace it by a directory")
    return "\n".join(lines)
