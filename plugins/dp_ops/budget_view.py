"""What the "Privacy budget" view of the Airflow UI shows, computed from the ledger and the
published releases (no Airflow here: :mod:`dp_ops.airflow.budget_plugin` serves it).

Per report: the composed epsilon per user-day of every date against the cap recorded in
the ledger (the same totals as ``python -m dp_ops ledger``: :meth:`Ledger.totals`), the
headroom, the dates above a normal run, every spend grouped by date, kind, run and reason,
and the release history with each release's maximum epsilon, suppression and gate
outcome. Nothing here reads a private file: the ledger holds epsilons and ids, the
manifests only public figures.

Whoever can write the data root writes the manifests, so nothing read from one is trusted:
a release is shown only when its manifest is the one the ledger recorded at publish (any
other directory under ``releases/`` is listed as not the ledger's, with none of its
figures), every value is checked for the type the page needs (a release whose manifest is
not a JSON object with them is shown as a malformed manifest) and escaped, no symlink under
``releases/`` is followed, and :func:`release_file` serves only what the current release
the ledger recorded publishes. The plugin serves every page and file with a policy under
which no script runs (:mod:`dp_ops.airflow.budget_plugin`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from dp_ops.errors import PublishRefused
from dp_ops.layout import DataRoot
from dp_ops.privacy.ledger import EPS_TOLERANCE, Ledger, Spend
from dp_ops.steps.ledger_binding import RELEASE_RECORD
from dp_ops.steps.release import current_release

MANIFEST_FILE = "manifest.json"
# A real manifest lists each file of its release (a few thousand at most): far below this.
# Above it the manifest is not read (a planted huge file would stall the page).
MAX_MANIFEST_BYTES = 32 << 20


@dataclass(frozen=True)
class DateBudget:
    day: date
    spent: float
    cap: float
    normal_run: float

    @property
    def headroom(self) -> float:
        return self.cap - self.spent

    @property
    def above_normal(self) -> bool:
        return self.spent > self.normal_run + EPS_TOLERANCE


@dataclass(frozen=True)
class SpendGroup:
    """The spends of one date by one run, of one kind and reason."""

    day: date
    kind: str
    run_id: str
    reason: str
    method_version: str
    slots: int
    epsilon: float


@dataclass(frozen=True)
class ReleaseRow:
    """One release of the history, as its manifest states it. A value the manifest lacks,
    or holds with another type than the page needs, is None (a share: its value None) and
    ``problems`` says what is wrong; the page shows such a value as invalid."""

    release_id: str
    first_date: str | None
    last_date: str | None
    epsilon_max: float | None
    published_share: dict[str, float | None]
    gate_success: bool | None
    gate_evaluated: int | None
    latest: bool
    problems: tuple[str, ...] = ()

    @property
    def malformed(self) -> bool:
        return bool(self.problems)


@dataclass
class ReportBudget:
    report: str
    cap: float
    normal_run: float
    dates: list[DateBudget] = field(default_factory=list)
    spends: list[SpendGroup] = field(default_factory=list)
    releases: list[ReleaseRow] = field(default_factory=list)

    @property
    def totals(self) -> dict[str, float]:
        return {d.day.isoformat(): d.spent for d in self.dates}

    @property
    def above_normal(self) -> list[DateBudget]:
        return [d for d in self.dates if d.above_normal]


def group_spends(spends: Iterable[Spend]) -> list[SpendGroup]:
    groups: dict[tuple[date, str, str, str, str], list[float]] = {}
    for s in spends:
        key = (s.slot.day, s.kind, s.run_id, s.reason, s.method_version)
        groups.setdefault(key, []).append(s.epsilon)
    return [SpendGroup(day, kind, run_id, reason, version, len(eps), math.fsum(eps))
            for (day, kind, run_id, reason, version), eps in sorted(groups.items())]


_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _iso_date(value: object) -> str | None:
    """``value`` if it is a date as ``YYYY-MM-DD``, else None."""
    if not isinstance(value, str) or not _ISO_DATE.fullmatch(value):
        return None
    try:
        date.fromisoformat(value)
    except ValueError:
        return None
    return value


def _number(value: object) -> float | None:
    """``value`` if it is a finite number, else None (JSON ``true`` is a bool, not 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _share(value: object) -> float | None:
    number = _number(value)
    return number if number is not None and 0 <= number <= 1 else None


def _shares(suppression: Mapping[str, Any]) -> dict[str, float | None]:
    """The published share of each kind of value a manifest reports (mobility: cells,
    symptoms: daily and weekly values); None for a share that is no number in [0, 1]."""
    out: dict[str, float | None] = {}
    values = suppression.get("values")
    if isinstance(values, dict):
        for name, part in values.items():
            if isinstance(part, dict) and "published_share" in part:
                out[str(name)] = _share(part["published_share"])
    if "published_share" in suppression:
        out["values"] = _share(suppression["published_share"])
    return out


def _section(manifest: Mapping[str, Any], key: str, problems: list[str]) -> dict[str, Any]:
    """``manifest[key]``, a JSON object; ``{}`` (and a problem noted) when it is not."""
    value = manifest.get(key)
    if isinstance(value, dict):
        return value
    problems.append(f"{key}: {'missing' if value is None else 'not an object'}")
    return {}


def release_row(release_id: str, manifest: object, *, latest: bool) -> ReleaseRow:
    """The history row of release ``release_id`` from its parsed ``manifest.json``
    (anything JSON can hold): every field the page shows is checked for its type, and
    each missing or mistyped one is named in ``problems``."""
    if not isinstance(manifest, dict):
        return malformed_row(release_id, f"{MANIFEST_FILE} holds a JSON "
                             f"{type(manifest).__name__}, not an object", latest=latest)
    problems: list[str] = []

    def check(name: str, raw: object, value: object, expected: str) -> None:
        if value is None:
            problems.append(f"{name}: {'missing' if raw is None else 'not ' + expected}")

    first, last = _iso_date(manifest.get("first_date")), _iso_date(manifest.get("last_date"))
    check("first_date", manifest.get("first_date"), first, "a date")
    check("last_date", manifest.get("last_date"), last, "a date")
    epsilon = _section(manifest, "epsilon", problems)
    epsilon_max = _number(epsilon.get("per_user_day_max"))
    if epsilon_max is not None and epsilon_max < 0:
        epsilon_max = None
    if epsilon:
        check("epsilon.per_user_day_max", epsilon.get("per_user_day_max"), epsilon_max,
              "a number >= 0")
    shares = _shares(_section(manifest, "suppression", problems))
    problems += [f"suppression: the published share of {name} is not a number in [0, 1]"
                 for name, share in shares.items() if share is None]
    gate = _section(manifest, "gate", problems)
    success = gate.get("success") if isinstance(gate.get("success"), bool) else None
    raw_evaluated = gate.get("evaluated")
    evaluated = (raw_evaluated if isinstance(raw_evaluated, int)
                 and not isinstance(raw_evaluated, bool) and raw_evaluated >= 0 else None)
    if gate:
        check("gate.success", gate.get("success"), success, "true or false")
        check("gate.evaluated", raw_evaluated, evaluated, "a count")
    return ReleaseRow(release_id=release_id, first_date=first, last_date=last,
                      epsilon_max=epsilon_max, published_share=shares, gate_success=success,
                      gate_evaluated=evaluated, latest=latest, problems=tuple(problems))


def malformed_row(release_id: str, problem: str, *, latest: bool) -> ReleaseRow:
    return ReleaseRow(release_id=release_id, first_date=None, last_date=None,
                      epsilon_max=None, published_share={}, gate_success=None,
                      gate_evaluated=None, latest=latest, problems=(problem,))


def _manifest_bytes(path: Path) -> bytes:
    """The bytes of the ``manifest.json`` at ``path``; raises ValueError naming the
    problem. Never follows a symlink (O_NOFOLLOW): a link to a private file must not be
    read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"{MANIFEST_FILE} cannot be opened ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{MANIFEST_FILE} is not a regular file")
        data = fh.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{MANIFEST_FILE} is larger than {MAX_MANIFEST_BYTES} bytes")
    return data


def _parse_manifest(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{MANIFEST_FILE} is not JSON ({str(exc)[:80]})") from exc


NOT_RECORDED = ("not a release this ledger recorded at publish (planted, edited, or "
                "published under another ledger): its figures are not shown")


def recorded_releases(ledger: Ledger, report: str) -> dict[str, str]:
    """Release id -> the sha256 of its manifest, as the ledger recorded each at publish
    (:func:`dp_ops.steps.ledger_binding.record_release`)."""
    prefix = RELEASE_RECORD.format(release_id="")
    return {name[len(prefix):]: sha
            for name, sha in ledger.derived_current(report, prefix).items()}


def latest_release_id(root: DataRoot, report: str) -> str | None:
    """The release ``published/<report>/latest`` points to, when it is a symlink to a
    directory directly under ``releases/``; None otherwise (a ``latest`` pointing
    elsewhere names no release, even one with a release's name)."""
    latest = root.latest_release(report)
    if not latest.is_symlink():
        return None
    target = latest.resolve()
    releases = (root.published_dir(report) / "releases").resolve()
    return target.name if target.parent == releases and target.is_dir() else None


def release_history(root: DataRoot, report: str, ledger: Ledger) -> list[ReleaseRow]:
    """Every release of ``report`` under ``published/<report>/releases``, newest first,
    shown from its manifest only when those bytes are the manifest ``ledger`` recorded at
    publish: any other directory there (a symlink, a planted or edited release) is listed
    as malformed, with none of its figures, and is never the latest."""
    releases = root.published_dir(report) / "releases"
    if not releases.is_dir():
        return []
    latest = latest_release_id(root, report)
    recorded = recorded_releases(ledger, report)
    rows = []
    for path in sorted(releases.iterdir(), reverse=True):
        if path.is_symlink():
            rows.append(malformed_row(path.name, "a symlink, not followed", latest=False))
            continue
        if not path.is_dir() or not os.path.lexists(path / MANIFEST_FILE):
            continue  # not a release (yet): publish writes the manifest before the rename
        try:
            data = _manifest_bytes(path / MANIFEST_FILE)
        except ValueError as exc:
            rows.append(malformed_row(path.name, str(exc), latest=False))
            continue
        if hashlib.sha256(data).hexdigest() != recorded.get(path.name):
            rows.append(malformed_row(path.name, NOT_RECORDED, latest=False))
            continue
        try:
            manifest = _parse_manifest(data)
        except ValueError as exc:
            rows.append(malformed_row(path.name, str(exc), latest=False))
            continue
        rows.append(release_row(path.name, manifest, latest=path.name == latest))
    return rows


def report_budget(root: DataRoot, ledger: Ledger, report: str, *, cap: float,
                  normal_run: float) -> ReportBudget:
    """``cap``: the report's configured cap, used only when the ledger has not recorded one
    yet (before its first spend)."""
    policy = ledger.policy(report)
    cap = policy.cap if policy is not None else cap
    totals = ledger.totals(report)
    out = ReportBudget(report=report, cap=cap, normal_run=normal_run)
    out.dates = [DateBudget(day, spent, cap, normal_run) for (_, day), spent in totals.items()]
    out.spends = group_spends(ledger.spends(report))
    out.releases = release_history(root, report, ledger)
    return out


def to_json(budgets: Sequence[ReportBudget]) -> dict[str, Any]:
    def default(value: Any) -> Any:
        if isinstance(value, date):
            return value.isoformat()
        raise TypeError(type(value).__name__)

    out = {}
    for b in budgets:
        out[b.report] = json.loads(json.dumps({
            "cap": b.cap, "normal_run": b.normal_run, "totals": b.totals,
            "above_normal": [d.day.isoformat() for d in b.above_normal],
            "headroom_min": min((d.headroom for d in b.dates), default=b.cap),
            "spends": [asdict(s) for s in b.spends],
            "releases": [{**asdict(r), "malformed": r.malformed} for r in b.releases]},
            default=default))
    return out


# ------------------------------------------------------------------------------ HTML --
# The page is the template templates/budget_view.html (dp_ops.templating: autoescape on);
# what follows builds its values, numbers formatted as text, and nothing here writes markup.
def _chart(b: ReportBudget, width: int = 900, height: int = 180) -> dict[str, Any] | None:
    """Composed epsilon per date as bars against the cap (a dashed line) and a normal
    run (a dotted line); bars above a normal run in amber, over the cap in red. None
    without spends."""
    if not b.dates:
        return None
    top = max(b.cap, max(d.spent for d in b.dates)) * 1.08
    bar = width / len(b.dates)
    pad = 0.15 * bar if bar > 4 else 0.0

    def y(value: float) -> float:
        return height - value / top * height

    bars = [{"x": f"{i * bar + pad:.2f}", "y": f"{y(d.spent):.2f}",
             "width": f"{max(bar - 2 * pad, 0.5):.2f}", "height": f"{height - y(d.spent):.2f}",
             "fill": ("#c0392b" if d.spent > d.cap + EPS_TOLERANCE
                      else "#e67e22" if d.above_normal else "#2e86c1"),
             "title": f"{d.day}: {d.spent:.4f} of {d.cap:.4f} (headroom {d.headroom:.4f})"}
            for i, d in enumerate(b.dates)]
    return {"width": width, "height": height, "bars": bars, "cap_y": f"{y(b.cap):.2f}",
            "normal_y": f"{y(b.normal_run):.2f}", "cap_label_y": f"{max(y(b.cap) - 4, 10):.2f}",
            "cap": f"{b.cap:.4f}", "first": str(b.dates[0].day), "last": str(b.dates[-1].day)}


def _release_values(r: ReleaseRow, release_link: str) -> dict[str, Any]:
    """One release row's values. Every one came from a file anyone who can write the data
    root can edit: a value that is None (missing or of the wrong type, see
    :func:`release_row`) is shown as invalid, and the template escapes the rest."""
    return {
        "release_id": r.release_id,
        "link": release_link if r.latest and release_link else "",
        "problems": "; ".join(r.problems),
        "first_date": r.first_date or None,
        "last_date": r.last_date or None,
        "epsilon_max": None if r.epsilon_max is None else f"{r.epsilon_max:.4f}",
        "shares": [(k, None if v is None else f"{v:.2%}")
                   for k, v in sorted(r.published_share.items())],
        "gate": (None if r.gate_success is None
                 else {True: "passed", False: "FAILED"}[r.gate_success]),
        "evaluated": r.gate_evaluated,
    }


def _report_values(b: ReportBudget, links: Mapping[str, str]) -> dict[str, Any]:
    """The values of one report's section of the page."""
    tight = min(b.dates, key=lambda d: d.headroom, default=None)
    return {
        "report": b.report,
        "cards": [("dates with spends", str(len(b.dates))),
                  ("cap per user-day", f"{b.cap:.4f}"),
                  ("a normal run", f"{b.normal_run:.4f}"),
                  ("most spent on a date",
                   f"{max((d.spent for d in b.dates), default=0):.4f}"),
                  ("least headroom", f"{tight.headroom:.4f} ({tight.day})" if tight else "-"),
                  ("dates above a normal run", str(len(b.above_normal)))],
        "chart": _chart(b),
        "above_normal": [(str(d.day), f"{d.spent:.4f}", f"{d.normal_run:.4f}",
                          f"{d.headroom:.4f}") for d in b.above_normal],
        "spends": [{"day": str(s.day), "kind": s.kind, "slots": s.slots,
                    "epsilon": f"{s.epsilon:.4f}", "run_id": s.run_id, "reason": s.reason,
                    "method_version": s.method_version} for s in b.spends],
        "releases": [_release_values(r, links.get("release", "")) for r in b.releases],
        "docs_link": links.get("data_docs", ""),
    }


PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.4rem} h2{margin-top:2rem;border-bottom:1px solid #ddd}
.cards{display:flex;flex-wrap:wrap;gap:.6rem;margin:.8rem 0}
.card{border:1px solid #ddd;border-radius:6px;padding:.5rem .8rem;min-width:9rem}
.card b{display:block;font-size:1.15rem}.card span{color:#666;font-size:.8rem}
.chart{width:100%;max-width:900px;height:auto;border:1px solid #eee}
.lbl{font-size:11px;fill:#444}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
td,th{border:1px solid #ddd;padding:.2rem .5rem;text-align:left}
th{background:#f5f5f5}.muted{color:#666;font-size:.85rem}.bad{color:#c0392b}
table.spends{max-height:30rem;display:block;overflow:auto}
"""


def render_page(budgets: Sequence[ReportBudget], links: dict[str, dict[str, str]],
                ledger_check: str) -> str:
    """The Privacy budget page: a section per report of ``budgets``, with the links of
    ``links[report]`` (``release``, ``data_docs``) and the ledger's state ``ledger_check``."""
    from dp_ops.templating import render

    return render("budget_view.html", style=PAGE_STYLE, ledger_check=ledger_check,
                  sections=[_report_values(b, links.get(b.report, {})) for b in budgets])


def data_docs_index(root: DataRoot) -> Path | None:
    """The Great Expectations Data Docs site of the data root, if it was built."""
    candidates = sorted(root.root.glob("gx/**/data_docs/local_site/index.html"))
    return candidates[0] if candidates else None


def data_docs_file(root: DataRoot, relative: str) -> bytes | None:
    """The content of the file ``relative`` of the Data Docs site
    (:func:`data_docs_index`), read from the data root without following any symlink
    (a link from ``gx/`` to the private areas must not serve them); None if absent."""
    index = data_docs_index(root)
    if index is None:
        return None
    site = index.parent.relative_to(root.root).as_posix()
    try:
        return _read_inside(root.root.resolve(), f"{site}/{relative}")
    except OSError:
        return None


# Great Expectations' own index page builds its table of validations with scripts from
# CDNs, which the plugin's policy does not run: the view lists the site's validation pages
# itself. A real site holds a few pages per gate run; past this many, the oldest go unlisted.
MAX_LISTED_PAGES = 2000



@dataclass(frozen=True)
class DataDocsPage:
    """One validation result page of the Data Docs site: ``validations/<suite>/<run>/
    <time>/<name>`` (GX's layout; a page elsewhere under ``validations/`` shows its path
    in ``name``)."""

    path: str  # relative to the site, as stored

    @property
    def parts(self) -> list[str]:
        return self.path.split("/")

    @property
    def suite(self) -> str:
        return self.parts[1] if len(self.parts) == 5 else ""

    @property
    def run(self) -> str:
        return self.parts[2] if len(self.parts) == 5 else ""

    @property
    def time(self) -> str:
        return self.parts[3] if len(self.parts) == 5 else ""

    @property
    def name(self) -> str:
        return self.parts[4] if len(self.parts) == 5 else self.path

    @property
    def href(self) -> str:
        from urllib.parse import quote

        return quote(self.path)


def data_docs_pages(root: DataRoot) -> list[DataDocsPage] | None:
    """The validation result pages of the Data Docs site (:func:`data_docs_index`), newest
    first (by the time in the path), or None if no site was built or it is reached only
    through a symlink. Listed without following any symlink, like :func:`data_docs_file`
    reads them."""
    index = data_docs_index(root)
    if index is None:
        return None
    site = index.parent.relative_to(root.root).as_posix()
    try:
        os.close(_open_inside(root.root.resolve(), site, directory=True))
    except OSError:
        return None
    try:
        fd = _open_inside(root.root.resolve(), f"{site}/validations", directory=True)
    except OSError:
        return []
    pages = []
    try:
        for top, _, names, top_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            for name in names:
                if name.endswith(".html") and stat.S_ISREG(
                        os.stat(name, dir_fd=top_fd, follow_symlinks=False).st_mode):
                    pages.append(DataDocsPage(
                        "validations/" + os.path.normpath(os.path.join(top, name))))
    finally:
        os.close(fd)
    return sorted(pages, key=lambda p: (p.time, p.path), reverse=True)


def render_data_docs_index(pages: Sequence[DataDocsPage]) -> str:
    """The index of the Data Docs site (``templates/data_docs_index.html``): every page of
    ``pages`` up to :data:`MAX_LISTED_PAGES`."""
    from dp_ops.templating import render

    return render("data_docs_index.html", pages=pages[:MAX_LISTED_PAGES], style=PAGE_STYLE,
                  more=max(len(pages) - MAX_LISTED_PAGES, 0))


# --------------------------------------------------------------- the release's files --
# verified_release's memory: (latest's link, its manifest's stat, the ledger and its last
# chain entry) -> the verified manifest
_VERIFIED: dict[tuple[object, ...], dict[str, Any]] = {}
_VERIFYING = threading.Lock()


def verified_release(root: DataRoot, report: str, ledger: Ledger) -> dict[str, Any] | None:
    """The manifest of the release ``latest`` points to, when ``ledger`` verifies and
    recorded that manifest at publish, and the release verifies against it
    (:func:`current_release` with the ledger: a link to a directory under ``releases/``
    whose manifest names it and whose files match their checksums); None before the first
    release or when any of this fails. A release directory the ledger never recorded is
    never served, however consistent its own manifest.

    A release page loads one chart per region, each a request: the full verification,
    which hashes every file and recomputes the ledger's chain, is done once per state of
    ``latest``, the manifest (link text, manifest inode, size and mtime) and the ledger
    (its URL and last chain entry) and remembered; :func:`release_file` still checks the
    sha256 of each file it serves."""
    latest = root.latest_release(report)
    try:
        manifest_stat = os.stat(latest / MANIFEST_FILE)
        key: tuple[object, ...] | None = (
            str(latest), os.readlink(latest), manifest_stat.st_dev, manifest_stat.st_ino,
            manifest_stat.st_size, manifest_stat.st_mtime_ns, ledger.url, ledger.head())
    except OSError:
        key = None
    if key is not None and key in _VERIFIED:
        return _VERIFIED[key]
    with _VERIFYING:  # a page's charts arrive together: one of them verifies
        if key is not None and key in _VERIFIED:
            return _VERIFIED[key]
        if not ledger.verify().ok:
            return None
        try:
            manifest = current_release(root, report, ledger)
        except PublishRefused:
            return None
        if key is not None and manifest is not None:
            if len(_VERIFIED) >= 16:  # a few reports, each with its current release
                _VERIFIED.clear()
            _VERIFIED[key] = manifest
    return manifest


def release_file(root: DataRoot, report: str, manifest: Mapping[str, Any],
                 relative: str) -> bytes | None:
    """The content of the file ``relative`` of the verified release ``manifest`` (from
    :func:`verified_release`) when the release publishes it, else None: a file the
    manifest lists under ``files`` whose content still has its sha256, the manifest
    itself, or its signature file when it signs the manifest (:func:`_signs`). Read inside
    the release directory without following any symlink (a listed name that is, or passes
    through, a link out of it is not served; nor ``..``)."""
    from dp_ops.release_signing import SIGNATURE_FILE

    files = manifest.get("files")
    release_id = manifest.get("release_id")
    if not isinstance(files, dict) or not isinstance(release_id, str):
        return None
    meta = files.get(relative)
    if relative not in (MANIFEST_FILE, SIGNATURE_FILE) and not isinstance(meta, dict):
        return None
    release = (root.published_dir(report) / "releases" / release_id).resolve()
    try:
        data = _read_inside(release, relative)
        if relative == SIGNATURE_FILE and not _signs(
                data, _read_inside(release, MANIFEST_FILE), manifest):
            return None
    except OSError:
        return None
    if meta is not None and hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        return None  # changed since the release was verified
    return data


def _signs(signature: bytes, manifest_bytes: bytes, manifest: Mapping[str, Any]) -> bool:
    """Whether ``signature`` is a good SSH signature of ``manifest_bytes`` by the key the
    manifest names (its fingerprint, recorded in the ledger with the manifest): the view
    serves a release's signature file only then, never a planted one."""
    from dp_ops import sshsig
    from dp_ops.release_signing import NAMESPACE

    fields = manifest.get("signature")
    named = fields.get("public_key_fingerprint") if isinstance(fields, dict) else None
    armored = signature.decode("utf-8", errors="replace")
    key = sshsig.signer_key(armored)
    if key is None or not isinstance(named, str) or sshsig.fingerprint(key) != named:
        return False
    return sshsig.verify(armored, manifest_bytes, NAMESPACE, [sshsig.TrustedKey(key)]).ok


def _open_inside(base: Path, relative: str, *, directory: bool = False) -> int:
    """A descriptor of ``base/relative`` (a directory if ``directory``), opened one path
    component at a time with O_NOFOLLOW (no symlink followed, even one swapped in after a
    check); OSError when it is not there or the path leaves ``base``."""
    parts = relative.split("/")
    if not relative or any(p in ("", ".", "..") for p in parts):
        raise FileNotFoundError(relative)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        last = os.O_DIRECTORY if directory else os.O_NONBLOCK
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | last, dir_fd=fd)
    finally:
        os.close(fd)


def _read_inside(base: Path, relative: str) -> bytes:
    """The bytes of the regular file ``base/relative`` (:func:`_open_inside`); OSError
    when it is not there, not a regular file, or the path leaves ``base``."""
    file_fd = _open_inside(base, relative)
    with os.fdopen(file_fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            raise IsADirectoryError(relative)
        return fh.read()
