"""The release page (docs/design.md, Outputs): ``index.html`` in every release directory, a
static page to look at rather than read: what the release covers, the privacy spent
behind it, how much was published and why the rest was not, its files, its gate, and
per region the chart drawn at staging (:mod:`dp_ops.steps.charts`).

The page is the template ``release_page.html`` (:mod:`dp_ops.templating`: autoescape
on, no value marked safe); this module only gathers its values. It knows no report: the
"What is published" section (``<section id="published">``, the report's own figures from
its manifest) is the report's own template, named with the function that gives its values
(:class:`PublishedSection`); it uses the macros of ``_page.html`` (``card``, ``table``).

The page is written by the publish step into the staged directory just before it is
promoted (the manifest's figures are known only then) and is listed in the manifest
with its checksum like every other file.

A rerun that reproduces a release must reproduce this page byte for byte, so it holds
nothing that names a run or a place: no run id, no time, no absolute path. The page
links nothing outside the release directory: whoever serves releases must not be invited
to serve the data root, where the private areas live. So the gate's Data Docs site is
*named* (its path under the data root, for the operators who have it), not linked; the
page itself states the gate's outcome (expectations evaluated, all passed).

The page has no script and loads nothing from elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dp_ops.release_signing import how_to_check
from dp_ops.steps.charts import LEVEL_LABELS, chart_file
from dp_ops.steps.data_statement import STATEMENT_FILE
from dp_ops.steps.release import sha256_file
from dp_ops.templating import number, render

INDEX_FILE = "index.html"
PAGE_TEMPLATE = "release_page.html"


@dataclass(frozen=True)
class PublishedSection:
    """A report's "What is published" section: its template (``<package>:<file>``, in the
    report package's ``templates`` directory), rendered with ``published`` set to what
    ``values`` gives for the release's manifest."""

    template: str
    values: Callable[[Mapping[str, Any]], Mapping[str, Any]]

    def render(self, manifest: Mapping[str, Any]) -> str:
        """The section alone, for ``manifest``."""
        return render(self.template, published=self.values(manifest))


def _href(path: str) -> str:
    """A relative URL for a path inside the release (or above it)."""
    return quote(path, safe="/._-~")


def _privacy(manifest: Mapping[str, Any]) -> dict[str, Any]:
    eps = manifest.get("epsilon") or {}
    split = eps.get("split_per_level")
    return {
        "max": eps.get("per_user_day_max"), "normal": eps.get("per_user_day_normal_run"),
        "cap": eps.get("cap"), "delta": eps.get("delta"),
        "unit": eps.get("privacy_unit", "user-day"), "composition": eps.get("composition", ""),
        "dates_accounted": eps.get("dates_accounted"),
        "over": list(eps.get("dates_over_normal_run") or []),
        "split": sorted(split.items()) if split else [],
        "updates": [[u.get("method_version"), u.get("effective_date"),
                     ", ".join(u.get("categories", [])), number(u.get("groups"))]
                    for u in manifest.get("method_updates") or []],
    }


def _files(manifest: Mapping[str, Any]) -> dict[str, Any]:
    files = manifest.get("files") or {}
    signature = manifest.get("signature") or {}
    signed = None
    if signature.get("format") == "sshsig":
        signed = {"href": _href(str(signature.get("file"))), "name": signature.get("file")}
    return {
        "files": [{"href": _href(name), "name": name,
                   "bytes": f"{int(files[name].get('bytes', 0)):,}",
                   "sha256": str(files[name].get("sha256", ""))[:16]}
                  for name in sorted(files) if not name.startswith("charts/")],
        "signature": signed,
    }


def _anchor(region_id: str) -> str:
    return "r-" + chart_file(region_id).removeprefix("charts/").removesuffix(".png")


def _short_names(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Region names without their country, grouped under their parent (``Harrow County:
    Demopolis, Northgate``) below the first sub-region level; each with its chart's
    anchor where it has a chart (``file``), else None."""
    groups: dict[str, list[tuple[str, str | None]]] = {}
    for c in entries:
        names = [str(n) for n in (c.get("names") or [c["title"]])]
        anchor = _anchor(str(c["region_id"])) if c.get("file") else None
        groups.setdefault(" / ".join(names[1:-1]), []).append((names[-1], anchor))
    return list(groups.items())


def _levels(charts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for level in sorted({int(c["level"]) for c in charts}):
        here = [c for c in charts if int(c["level"]) == level]
        drawn = [c for c in here if c.get("file")]
        missing = [c for c in here if not c.get("file")]
        out.append({
            "level": level, "name": LEVEL_LABELS.get(level, f"Level {level}"),
            "regions": len(here),
            "drawn": [{"anchor": _anchor(str(c["region_id"])), "title": c["title"],
                       "href": _href(str(c["file"])), "alt": c["alt"],
                       "width": int(c["width"]), "height": int(c["height"])} for c in drawn],
            "drawn_names": _short_names(drawn),
            "missing_names": _short_names(missing),
            "missing_grouped": any(len(c.get("names") or ()) > 2 for c in missing),
        })
    return out


def render_index(manifest: Mapping[str, Any], charts: Sequence[Mapping[str, Any]], *,
                 title: str, published: PublishedSection, data_docs_href: str | None = None,
                 data_docs_path: str | None = None,
                 uncharted_levels: Sequence[int] = (), statement: str | None = None) -> str:
    """The page, titled ``title`` (the report's), for ``manifest`` (its files, this page
    aside) and the chart entries recorded at staging
    (:meth:`dp_ops.steps.charts.ChartEntry.as_dict`); ``published`` is the report's "What
    is published" section; ``uncharted_levels`` are the report's levels the deployment
    does not chart; ``statement`` the release's data statement (Markdown), shown as a
    section."""
    gate = manifest.get("gate") or {}
    return render(
        PAGE_TEMPLATE, title=title, release_id=str(manifest.get("release_id", "")),
        first_date=manifest.get("first_date", ""), last_date=manifest.get("last_date", ""),
        method_version=manifest.get("method_version", ""),
        software_version=manifest.get("software_version", ""),
        privacy=_privacy(manifest),
        published_template=published.template, published=published.values(manifest),
        **_files(manifest), charts_drawn=sum(1 for c in charts if c.get("file")),
        how_to_check=how_to_check(manifest),
        # a release is published only if all passed
        gate={"evaluated": gate.get("evaluated"),
              "outcome": "all passed" if gate.get("success") else "not all passed",
              "docs": bool(data_docs_href or data_docs_path), "docs_path": data_docs_path},
        uncharted=[LEVEL_LABELS.get(int(lv), f"Level {lv}") for lv in uncharted_levels],
        levels=_levels(charts), statement=statement, statement_file=STATEMENT_FILE)


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
