"""The release page (SPEC section 8): ``index.html`` in every release directory, a
static page to look at rather than read: what the release covers, the privacy spent
behind it, how much was published and why the rest was not, its files, its gate, and
per region the chart drawn at staging (:mod:`dp_ops.steps.charts`).

The page is written by the publish step into the staged directory just before it is
promoted (the manifest's figures are known only then) and is listed in the manifest
with its checksum like every other file.

A rerun that reproduces a release must reproduce this page byte for byte, so it holds
nothing that names a run or a place: no run id, no time, no absolute path. The gate's
Data Docs are linked by a relative path from the release's permanent directory
(``published/<report>/releases/<id>/``) to the Data Docs site index of the GX project,
which is stable; the run's own validation page is not linked (its path names the run,
and the site keeps only the latest results a suite). The page itself states the gate's
outcome (expectations evaluated, all passed).

Every text is escaped; the page has no script and loads nothing from elsewhere.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dp_ops.steps.charts import CATEGORY_LABELS as CATEGORY_NAMES
from dp_ops.steps.charts import LEVEL_NAMES, chart_file
from dp_ops.steps.release import sha256_file

INDEX_FILE = "index.html"

REPORT_TITLES = {"mobility": "Community Mobility Report",
                 "symptoms": "Search Trends symptoms dataset"}
MOBILITY_ROW_REASONS = {
    "published": "published",
    "all_values_unreliable": "no change reliable enough (all six suppressed)",
    "contributors_under_minimum": "too few contributing users",
    "area_under_minimum": "region under the minimum area",
}

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
color:#202124;margin:0;background:#f8f9fa}
main{max-width:980px;margin:0 auto;padding:24px 20px 60px;background:#fff}
h1{font-size:26px;margin:0 0 4px}h2{font-size:20px;margin:36px 0 10px;
border-bottom:1px solid #dadce0;padding-bottom:4px}h3{font-size:16px;margin:22px 0 8px}
.sub{color:#5f6368;margin:0 0 14px}code{font-size:13px;background:#f1f3f4;padding:1px 4px;
border-radius:3px}nav a{margin-right:14px}a{color:#1a0dab}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0}
.card{border:1px solid #dadce0;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px;color:#1a73e8}.card span{color:#5f6368;font-size:13px}
table{border-collapse:collapse;margin:8px 0;font-size:14px}
th,td{border-bottom:1px solid #e8eaed;padding:4px 10px;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#5f6368;font-size:13px}.toc{line-height:1.9}
figure{margin:14px 0 26px}figure img{max-width:100%;height:auto;border:1px solid #e8eaed}
figcaption{font-weight:600;margin-bottom:4px}figcaption a{font-weight:400;font-size:13px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _href(path: str) -> str:
    """A relative URL for a path inside the release (or above it), escaped for HTML."""
    return _e(quote(path, safe="/._-~"))


def _number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return _e(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) >= 1000 else f"{value:.6g}"
    return _e(value)


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "\u2013"


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{value}</b><span>{_e(label)}</span></div>'


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    def cell(tag: str, i: int, text: str) -> str:
        cls = ' class="n"' if i in numeric else ""
        return f"<{tag}{cls}>{text}</{tag}>"

    out = ["<table>", "<thead><tr>" + "".join(cell("th", i, _e(h)) for i, h in enumerate(head))
           + "</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>"
            for row in rows]
    out.append("</tbody></table>")
    return "\n".join(out)


# -- sections ------------------------------------------------------------------------------
def _privacy(manifest: Mapping[str, Any]) -> str:
    eps = manifest.get("epsilon") or {}
    over = list(eps.get("dates_over_normal_run") or [])
    out = ['<section id="privacy"><h2>Privacy</h2>', '<div class="cards">',
           _card(_number(eps.get("per_user_day_max")),
                 "epsilon per user-day, most spent on any date"),
           _card(_number(eps.get("per_user_day_normal_run")), "epsilon of a normal run"),
           _card(_number(eps.get("cap")), "epsilon cap per user-day"),
           _card(_number(eps.get("delta")), "delta"), "</div>"]
    if over:
        shown = ", ".join(_e(d) for d in over[:10]) + (" \u2026" if len(over) > 10 else "")
        extra = (f"{len(over):,} spent more than a normal run (a method update or a "
                 f"re-noise): {shown}")
    else:
        extra = "none spent more than a normal run"
    out.append(f"<p>Privacy unit: {_e(eps.get('privacy_unit', 'user-day'))}; composition: "
               f"{_e(eps.get('composition', ''))}. {_number(eps.get('dates_accounted'))} "
               f"dates of noise feed this release; {extra}.</p>")
    split = eps.get("split_per_level")
    if split:
        out.append("<p>Epsilon per level and user-day: " + ", ".join(
            f"{_e(k)} {_number(v)}" for k, v in sorted(split.items())) + ".</p>")
    updates = manifest.get("method_updates") or []
    if updates:
        rows = [[_e(u.get("method_version")), _e(u.get("effective_date")),
                 _e(", ".join(u.get("categories", []))), _number(u.get("groups"))]
                for u in updates]
        out += ["<h3>Method updates in effect</h3>",
                _table(["method version", "effective", "categories", "groups"], rows, {3})]
    out.append('<p class="note">Every published value is a differentially private estimate '
               "(Laplace noise); values too noisy to be useful, and regions or days with "
               "too few people, are not published.</p></section>")
    return "\n".join(out)


def _published_mobility(manifest: Mapping[str, Any]) -> str:
    rows = manifest.get("rows") or {}
    supp = manifest.get("suppression") or {}
    reasons = {str(k): int(v) for k, v in (supp.get("row_reasons") or {}).items()}
    domain = int(rows.get("domain") or sum(reasons.values()))
    published = int(rows.get("published") or 0)
    out = ['<section id="published"><h2>What is published</h2>', '<div class="cards">',
           _card(f"{published:,}", "region-days published"),
           _card(f"{domain:,}", "region-days in the release"),
           _card(_share(published, domain), "share published"), "</div>"]
    order = sorted(reasons, key=lambda k: (k != "published", -reasons[k], k))
    out += ["<h3>Region-days by outcome</h3>", _table(
        ["outcome", "region-days", "share"],
        [[_e(MOBILITY_ROW_REASONS.get(k, k)), f"{reasons[k]:,}", _share(reasons[k], domain)]
         for k in order], {1, 2})]
    shares = supp.get("published_share_of_eligible_by_level") or {}
    if shares:
        categories = sorted({c for v in shares.values() for c in v},
                            key=lambda c: (list(CATEGORY_NAMES).index(c)
                                           if c in CATEGORY_NAMES else 99, c))
        body = [[_e(LEVEL_NAMES.get(int(level), f"Level {level}")),
                 *[_share(float(values.get(c, 0.0)), 1.0) for c in categories]]
                for level, values in sorted(shares.items(), key=lambda kv: int(kv[0]))]
        out += ["<h3>Changes published, as a share of the region-days that passed the area "
                "and contributor rules</h3>",
                _table(["level", *[CATEGORY_NAMES.get(c, c) for c in categories]], body,
                       set(range(1, len(categories) + 1)))]
    out.append("</section>")
    return "\n".join(out)


def _published_symptoms(manifest: Mapping[str, Any]) -> str:
    rows = manifest.get("rows") or {}
    supp = manifest.get("suppression") or {}
    values = supp.get("values") or {}
    series = supp.get("series") or {}
    out = ['<section id="published"><h2>What is published</h2>', '<div class="cards">',
           _card(f"{int(rows.get('daily') or 0):,}", "rows in the daily file"),
           _card(f"{int(rows.get('weekly') or 0):,}", "rows in the weekly file"),
           _card(f"{int(supp.get('regions_in_daily_file') or 0):,}",
                 "regions in the daily file"),
           _card(f"{int(supp.get('regions_in_weekly_file') or 0):,}",
                 "regions in the weekly file"), "</div>"]
    body = []
    for res in ("daily", "weekly"):
        v = values.get(res) or {}
        total, pub = int(v.get("values") or 0), int(v.get("published") or 0)
        body.append([_e(res), f"{int(series.get(res) or 0):,}", f"{pub:,}", f"{total:,}",
                     _share(pub, total)])
    out += ["<h3>Values by resolution</h3>",
            _table(["resolution", "series decided", "values published", "values",
                    "share published"], body, {1, 2, 3, 4}),
            f"<p>{int(supp.get('series_with_published_daily_values') or 0):,} series have "
            "daily values published. A (region, symptom) series goes to the daily file when "
            "its daily values are mostly reliable, else only to the weekly file; a value "
            "that fails the reliability rule is not published. "
            f"{int(supp.get('new_scaling_factors') or 0):,} scaling factors were fixed by "
            "this release.</p>"]
    params = manifest.get("parameters") or {}
    if params:
        out += ["<h3>Parameters</h3>", _table(
            ["parameter", "value"],
            [[_e(k), _number(v)] for k, v in sorted(params.items())], {1})]
    out.append("</section>")
    return "\n".join(out)


def _files(manifest: Mapping[str, Any], charts: int) -> str:
    files = manifest.get("files") or {}
    data = [name for name in sorted(files) if not name.startswith("charts/")]
    rows = [[f'<a href="{_href(n)}">{_e(n)}</a>', f"{int(files[n].get('bytes', 0)):,}",
             f"<code>{_e(str(files[n].get('sha256', ''))[:16])}</code>"] for n in data]
    rows.append([f'<a href="{_href("manifest.json")}">manifest.json</a>', "",
                 "checksums of every file"])
    return "\n".join([
        '<section id="files"><h2>Files</h2>',
        _table(["file", "bytes", "sha256 (first 16)"], rows, {1}),
        f'<p class="note">{charts:,} charts in <code>charts/</code>, one per region '
        "below. Full checksums of every file, this page included, are in the manifest."
        "</p></section>"])


def _gate(manifest: Mapping[str, Any], data_docs_href: str | None,
          data_docs_path: str | None) -> str:
    gate = manifest.get("gate") or {}
    outcome = ("all passed" if gate.get("success")
               else "not all passed")  # a release is published only if all passed
    out = ['<section id="gate"><h2>Release gate</h2>',
           f"<p>Before publication Great Expectations validated this release: "
           f"{_number(gate.get('evaluated'))} expectations evaluated, {_e(outcome)} "
           "(schema, area and contributor rules, value ranges, unique keys, every date "
           "present, nothing from before the public start).</p>"]
    if data_docs_href:
        where = (f"; under the data root the site is <code>{_e(data_docs_path)}</code>"
                 if data_docs_path else "")
        out.append(f'<p><a href="{_href(data_docs_href)}">GX Data Docs</a> (validation '
                   "results of the latest gate runs, on the machine that publishes). "
                   "The link is relative to this release's permanent directory, "
                   f"<code>releases/{_e(manifest.get('release_id', ''))}/</code>{where}.</p>")
    else:
        out.append("<p>No Data Docs site was recorded for this gate run.</p>")
    out.append("</section>")
    return "\n".join(out)


def _anchor(region_id: str) -> str:
    return "r-" + chart_file(region_id).removeprefix("charts/").removesuffix(".png")


def _short_names(entries: Sequence[Mapping[str, Any]]) -> str:
    """Region names without their country, grouped under their parent (``Harrow County:
    Demopolis, Northgate``) below the first sub-region level; links where ``file``."""
    groups: dict[str, list[str]] = {}
    for c in entries:
        names = [str(n) for n in (c.get("names") or [c["title"]])]
        parent = " / ".join(names[1:-1])
        name = _e(names[-1])
        if c.get("file"):
            name = f'<a href="#{_e(_anchor(str(c["region_id"])))}">{name}</a>'
        groups.setdefault(parent, []).append(name)
    return "<br>".join((f"{_e(parent)}: " if parent else "") + ", ".join(names)
                       for parent, names in groups.items())


def _regions(charts: Sequence[Mapping[str, Any]], uncharted: Sequence[int]) -> str:
    levels = sorted({int(c["level"]) for c in charts})
    out = ['<section id="regions"><h2>Regions</h2>']
    if uncharted:
        names = ", ".join(_e(LEVEL_NAMES.get(int(lv), f"Level {lv}")) for lv in uncharted)
        out.append(f'<p class="note">Not charted in this deployment (execution setting '
                   f"<code>chart_levels</code>): {names}. Their values are in the files "
                   "above.</p>")
    if not charts and not uncharted:
        out.append("<p>No region is published in this release.</p>")
    for level in levels:
        here = [c for c in charts if int(c["level"]) == level]
        drawn = [c for c in here if c.get("file")]
        missing = [c for c in here if not c.get("file")]
        name = LEVEL_NAMES.get(level, f"Level {level}")
        out.append(f"<h3>{_e(name)}: {len(drawn):,} of {len(here):,} published</h3>")
        if drawn:
            out.append(f'<p class="toc">{_short_names(drawn)}</p>')
        if missing:
            grouped = any(len(c.get("names") or ()) > 2 for c in missing)
            out.append('<p class="note">Nothing published in this release:'
                       f'{"<br>" if grouped else " "}{_short_names(missing)}</p>')
    for level in levels:
        drawn = [c for c in charts if int(c["level"]) == level and c.get("file")]
        if not drawn:
            continue
        out.append(f'<h3 id="level-{level}">{_e(LEVEL_NAMES.get(level, f"Level {level}"))}'
                   "</h3>")
        for c in drawn:
            # one attribute a line: the file name (which holds the region id) never
            # shares a line with the values of the alt text (the leak scan reads lines)
            out += [f'<figure id="{_e(_anchor(str(c["region_id"])))}">',
                    f'<figcaption>{_e(c["title"])} <a href="#regions">(all regions)</a>'
                    "</figcaption>",
                    f'<img src="{_href(str(c["file"]))}"',
                    f' alt="{_e(c["alt"])}"',
                    f' width="{int(c["width"])}" height="{int(c["height"])}" loading="lazy">',
                    "</figure>"]
    out.append("</section>")
    return "\n".join(out)


def render_index(manifest: Mapping[str, Any], charts: Sequence[Mapping[str, Any]], *,
                 data_docs_href: str | None = None, data_docs_path: str | None = None,
                 uncharted_levels: Sequence[int] = ()) -> str:
    """The page for ``manifest`` (its files, this page aside) and the chart entries
    recorded at staging (:meth:`dp_ops.steps.charts.ChartEntry.as_dict`); ``uncharted_levels``
    are the report's levels the deployment does not chart."""
    report = str(manifest.get("report", ""))
    title = REPORT_TITLES.get(report, report)
    release_id = str(manifest.get("release_id", ""))
    published = (_published_mobility(manifest) if report == "mobility"
                 else _published_symptoms(manifest))
    drawn = sum(1 for c in charts if c.get("file"))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)} \u2013 release {_e(release_id)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="sub">Release <code>{_e(release_id)}</code> \u00b7 '
        f"{_e(manifest.get('first_date', ''))} to {_e(manifest.get('last_date', ''))} "
        f"\u00b7 method {_e(manifest.get('method_version', ''))} \u00b7 software "
        f"{_e(manifest.get('software_version', ''))}</p>",
        '<nav><a href="#privacy">Privacy</a><a href="#published">What is published</a>'
        '<a href="#files">Files</a><a href="#gate">Release gate</a>'
        '<a href="#regions">Regions</a></nav>',
        _privacy(manifest), published, _files(manifest, drawn),
        _gate(manifest, data_docs_href, data_docs_path), _regions(charts, uncharted_levels),
        "</main></body></html>", "",
    ]
    return "\n".join(parts)


def write_release_index(files_dir: Path, manifest: Mapping[str, Any],
                        charts: Sequence[Mapping[str, Any]], *, data_docs: str | None,
                        release_dir: Path, data_root: Path,
                        uncharted_levels: Sequence[int] = ()) -> dict[str, dict[str, Any]]:
    """Write ``index.html`` into the staged ``files_dir`` of the release that will live at
    ``release_dir``; return ``manifest["files"]`` with the page added."""
    href = path = None
    if data_docs:
        href = Path(os.path.relpath(data_docs, release_dir)).as_posix()
        path = Path(os.path.relpath(data_docs, data_root)).as_posix()
    page = render_index(manifest, charts, data_docs_href=href, data_docs_path=path,
                        uncharted_levels=uncharted_levels)
    target = files_dir / INDEX_FILE
    target.write_text(page, encoding="utf-8", newline="\n")
    files = dict(manifest.get("files") or {})
    files[INDEX_FILE] = {"sha256": sha256_file(target), "bytes": target.stat().st_size}
    return dict(sorted(files.items()))
