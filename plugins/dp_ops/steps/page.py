"""The release page (docs/design.md, Outputs): ``index.html`` in every release directory, a
static page to look at rather than read: what the release covers, the privacy spent
behind it, how much was published and why the rest was not, its files, its gate, and
per region the chart drawn at staging (:mod:`dp_ops.steps.charts`).

This module knows no report: the "What is published" section (``<section
id="published">``, the report's own figures from its manifest) is rendered by a function
the report passes in (:data:`PublishedSection`); the report builds it with the HTML
helpers here (:func:`escape`, :func:`number`, :func:`share`, :func:`card`,
:func:`table`).

The page is written by the publish step into the staged directory just before it is
promoted (the manifest's figures are known only then) and is listed in the manifest
with its checksum like every other file.

A rerun that reproduces a release must reproduce this page byte for byte, so it holds
nothing that names a run or a place: no run id, no time, no absolute path. The page
links nothing outside the release directory: whoever serves releases must not be invited
to serve the data root, where the private areas live. So the gate's Data Docs site is
*named* (its path under the data root, for the operators who have it), not linked; the
page itself states the gate's outcome (expectations evaluated, all passed).

Every text is escaped; the page has no script and loads nothing from elsewhere.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dp_ops.release_signing import how_to_check
from dp_ops.steps.charts import LEVEL_LABELS, chart_file
from dp_ops.steps.data_statement import STATEMENT_FILE, markdown_html, statement_section
from dp_ops.steps.release import sha256_file

INDEX_FILE = "index.html"

# renders a report's "What is published" section from its manifest
PublishedSection = Callable[[Mapping[str, Any]], str]

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


def escape(value: Any) -> str:
    """``str(value)`` escaped for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def _href(path: str) -> str:
    """A relative URL for a path inside the release (or above it), escaped for HTML."""
    return escape(quote(path, safe="/._-~"))


def number(value: Any) -> str:
    """A figure for the page: integers with thousands separators, floats to six
    significant digits, anything else escaped as text."""
    if isinstance(value, bool) or value is None:
        return escape(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) >= 1000 else f"{value:.6g}"
    return escape(value)


def share(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` (one decimal), a dash when ``whole`` is 0."""
    return f"{100 * part / whole:.1f}%" if whole else "\u2013"


def card(value: str, label: str) -> str:
    """A figure card: ``value`` is HTML already (escaped by the caller), ``label`` text."""
    return f'<div class="card"><b>{value}</b><span>{escape(label)}</span></div>'


def table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """A table: ``head`` is text, the cells of ``rows`` HTML already (escaped by the
    caller); the columns in ``numeric`` are right-aligned."""
    def cell(tag: str, i: int, text: str) -> str:
        cls = ' class="n"' if i in numeric else ""
        return f"<{tag}{cls}>{text}</{tag}>"

    out = ["<table>", "<thead><tr>" + "".join(cell("th", i, escape(h)) for i, h in enumerate(head))
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
           card(number(eps.get("per_user_day_max")),
                "epsilon per user-day, most spent on any date"),
           card(number(eps.get("per_user_day_normal_run")), "epsilon of a normal run"),
           card(number(eps.get("cap")), "epsilon cap per user-day"),
           card(number(eps.get("delta")), "delta"), "</div>"]
    if over:
        shown = ", ".join(escape(d) for d in over[:10]) + (" \u2026" if len(over) > 10 else "")
        extra = (f"{len(over):,} spent more than a normal run (a method update or a "
                 f"re-noise): {shown}")
    else:
        extra = "none spent more than a normal run"
    out.append(f"<p>Privacy unit: {escape(eps.get('privacy_unit', 'user-day'))}; composition: "
               f"{escape(eps.get('composition', ''))}. {number(eps.get('dates_accounted'))} "
               f"dates of noise feed this release; {extra}.</p>")
    split = eps.get("split_per_level")
    if split:
        out.append("<p>Epsilon per level and user-day: " + ", ".join(
            f"{escape(k)} {number(v)}" for k, v in sorted(split.items())) + ".</p>")
    updates = manifest.get("method_updates") or []
    if updates:
        rows = [[escape(u.get("method_version")), escape(u.get("effective_date")),
                 escape(", ".join(u.get("categories", []))), number(u.get("groups"))]
                for u in updates]
        out += ["<h3>Method updates in effect</h3>",
                table(["method version", "effective", "categories", "groups"], rows, {3})]
    out.append('<p class="note">Every published value is a differentially private estimate '
               "(Laplace noise); values too noisy to be useful, and regions or days with "
               "too few people, are not published.</p></section>")
    return "\n".join(out)


def _files(manifest: Mapping[str, Any], charts: int) -> str:
    files = manifest.get("files") or {}
    data = [name for name in sorted(files) if not name.startswith("charts/")]
    rows = [[f'<a href="{_href(n)}">{escape(n)}</a>', f"{int(files[n].get('bytes', 0)):,}",
             f"<code>{escape(str(files[n].get('sha256', ''))[:16])}</code>"] for n in data]
    rows.append([f'<a href="{_href("manifest.json")}">manifest.json</a>', "",
                 "checksums of every file"])
    signature = manifest.get("signature") or {}
    if signature.get("format") == "sshsig":
        rows.append([f'<a href="{_href(str(signature.get("file")))}">'
                     f'{escape(signature.get("file"))}</a>', "", "signature of the manifest"])
    return "\n".join([
        '<section id="files"><h2>Files</h2>',
        table(["file", "bytes", "sha256 (first 16)"], rows, {1}),
        f'<p class="note">{charts:,} charts in <code>charts/</code>, one per region '
        "below. Full checksums of every file, this page included, are in the manifest."
        "</p>", markdown_html(how_to_check(manifest)), "</section>"])


def _gate(manifest: Mapping[str, Any], data_docs_href: str | None,
          data_docs_path: str | None) -> str:
    gate = manifest.get("gate") or {}
    outcome = ("all passed" if gate.get("success")
               else "not all passed")  # a release is published only if all passed
    out = ['<section id="gate"><h2>Release gate</h2>',
           f"<p>Before publication Great Expectations validated this release: "
           f"{number(gate.get('evaluated'))} expectations evaluated, {escape(outcome)} "
           "(schema, area and contributor rules, value ranges, unique keys, every date "
           "present, nothing from before the public start).</p>"]
    if data_docs_href or data_docs_path:
        where = (f"<code>{escape(data_docs_path)}</code> under the data root"
                 if data_docs_path else "the data root's <code>gx/</code> directory")
        out.append(f"<p>The validation results (GX Data Docs) are kept with the data, at "
                   f"{where}, on the machine that publishes. They are not published with "
                   "the release and this page does not link to them.</p>")
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
        name = escape(names[-1])
        if c.get("file"):
            name = f'<a href="#{escape(_anchor(str(c["region_id"])))}">{name}</a>'
        groups.setdefault(parent, []).append(name)
    return "<br>".join((f"{escape(parent)}: " if parent else "") + ", ".join(names)
                       for parent, names in groups.items())


def _regions(charts: Sequence[Mapping[str, Any]], uncharted: Sequence[int]) -> str:
    levels = sorted({int(c["level"]) for c in charts})
    out = ['<section id="regions"><h2>Regions</h2>']
    if uncharted:
        names = ", ".join(escape(LEVEL_LABELS.get(int(lv), f"Level {lv}")) for lv in uncharted)
        out.append(f'<p class="note">Not charted in this deployment (execution setting '
                   f"<code>chart_levels</code>): {names}. Their values are in the files "
                   "above.</p>")
    if not charts and not uncharted:
        out.append("<p>No region is published in this release.</p>")
    for level in levels:
        here = [c for c in charts if int(c["level"]) == level]
        drawn = [c for c in here if c.get("file")]
        missing = [c for c in here if not c.get("file")]
        name = LEVEL_LABELS.get(level, f"Level {level}")
        out.append(f"<h3>{escape(name)}: {len(drawn):,} of {len(here):,} published</h3>")
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
        out.append(f'<h3 id="level-{level}">{escape(LEVEL_LABELS.get(level, f"Level {level}"))}'
                   "</h3>")
        for c in drawn:
            # one attribute a line: the file name (which holds the region id) never
            # shares a line with the values of the alt text (the leak scan reads lines)
            out += [f'<figure id="{escape(_anchor(str(c["region_id"])))}">',
                    f'<figcaption>{escape(c["title"])} <a href="#regions">(all regions)</a>'
                    "</figcaption>",
                    f'<img src="{_href(str(c["file"]))}"',
                    f' alt="{escape(c["alt"])}"',
                    f' width="{int(c["width"])}" height="{int(c["height"])}" loading="lazy">',
                    "</figure>"]
    out.append("</section>")
    return "\n".join(out)


def render_index(manifest: Mapping[str, Any], charts: Sequence[Mapping[str, Any]], *,
                 title: str, published: PublishedSection, data_docs_href: str | None = None,
                 data_docs_path: str | None = None,
                 uncharted_levels: Sequence[int] = (), statement: str | None = None) -> str:
    """The page, titled ``title`` (the report's), for ``manifest`` (its files, this page
    aside) and the chart entries
    recorded at staging (:meth:`dp_ops.steps.charts.ChartEntry.as_dict`); ``published``
    renders the report's "What is published" section from the manifest;
    ``uncharted_levels`` are the report's levels the deployment does not chart;
    ``statement`` the release's data statement (Markdown), shown as a section."""
    release_id = str(manifest.get("release_id", ""))
    published_section = published(manifest)
    drawn = sum(1 for c in charts if c.get("file"))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)} \u2013 release {escape(release_id)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">Release <code>{escape(release_id)}</code> \u00b7 '
        f"{escape(manifest.get('first_date', ''))} to {escape(manifest.get('last_date', ''))} "
        f"\u00b7 method {escape(manifest.get('method_version', ''))} \u00b7 software "
        f"{escape(manifest.get('software_version', ''))}</p>",
        '<nav><a href="#privacy">Privacy</a><a href="#published">What is published</a>'
        '<a href="#files">Files</a><a href="#gate">Release gate</a>'
        '<a href="#regions">Regions</a>'
        + ('<a href="#statement">Data statement</a>' if statement else "") + "</nav>",
        _privacy(manifest), published_section, _files(manifest, drawn),
        _gate(manifest, data_docs_href, data_docs_path), _regions(charts, uncharted_levels),
        statement_section(statement) if statement else "",
        "</main></body></html>", "",
    ]
    return "\n".join(parts)


def write_release_index(files_dir: Path, manifest: Mapping[str, Any],
                        charts: Sequence[Mapping[str, Any]], *, title: str,
                        published: PublishedSection,
                        data_docs: str | None, release_dir: Path, data_root: Path,
                        uncharted_levels: Sequence[int] = (), statement: str | None = None
                        ) -> dict[str, dict[str, Any]]:
    """Write ``index.html`` (:func:`render_index`, with the report's ``published``
    section) and, given, the data ``statement`` as ``DATASTATEMENT.md`` into the staged
    ``files_dir`` of the release that will live at ``release_dir``; return
    ``manifest["files"]`` with both added."""
    href = path = None
    if data_docs:
        href = Path(os.path.relpath(data_docs, release_dir)).as_posix()
        path = Path(os.path.relpath(data_docs, data_root)).as_posix()
    page = render_index(manifest, charts, title=title, published=published,
                        data_docs_href=href,
                        data_docs_path=path, uncharted_levels=uncharted_levels,
                        statement=statement)
    files = dict(manifest.get("files") or {})
    written = {INDEX_FILE: page} | ({STATEMENT_FILE: statement} if statement else {})
    for name, text in written.items():
        target = files_dir / name
        target.write_text(text, encoding="utf-8", newline="\n")
        files[name] = {"sha256": sha256_file(target), "bytes": target.stat().st_size}
    return dict(sorted(files.items()))
