"""The HTML pages dp_ops renders (the release page, the Privacy budget view, the index of
the gate's Data Docs site) come from Jinja2 templates, through one environment: autoescape
on for every template, an undefined name an error. A value reaches a page only as template
data, escaped where it is placed; no template marks a value safe (the test of this module
checks it), so text read from the data root (manifests, ledger reasons, run ids) cannot
become markup.

Templates are found in ``dp_ops/templates`` by their file name, and in a report's own
package as ``<package>:<file name>`` (the file in that package's ``templates`` directory):
a report ships the templates of its own page sections.

Every value is escaped as :func:`html.escape` escapes it (``&``, ``<``, ``>``, both quotes),
by the environment's ``finalize``: a page reads the same whatever escaping library is
installed, and a release page, whose bytes are checksummed in the manifest, is rebuilt to
the byte."""

from __future__ import annotations

import html
import re
from functools import cache
from typing import Any

import jinja2
from markupsafe import Markup

TEMPLATE_DIR = "templates"


class _Loader(jinja2.BaseLoader):
    """``name`` from dp_ops's templates, ``package:name`` from that package's."""

    def __init__(self) -> None:
        self._loaders: dict[str, jinja2.PackageLoader] = {}

    def _loader(self, package: str) -> jinja2.PackageLoader:
        if package not in self._loaders:
            self._loaders[package] = jinja2.PackageLoader(package, TEMPLATE_DIR)
        return self._loaders[package]

    def get_source(self, environment: jinja2.Environment, template: str
                   ) -> tuple[str, str | None, Any]:
        package, sep, name = template.rpartition(":")
        return self._loader(package if sep else "dp_ops").get_source(environment, name)


def _escaped(value: object) -> Markup:
    """What a ``{{ ... }}`` places: markup built by a template (a macro's, a filter's
    output) as it is, anything else escaped."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def number(value: Any) -> str:
    """A figure as text: integers with thousands separators, floats to six significant
    digits (thousands separated from 1,000), anything else as ``str`` gives it."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) >= 1000 else f"{value:.6g}"
    return str(value)


def share(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` (one decimal), a dash when ``whole`` is 0."""
    return f"{100 * part / whole:.1f}%" if whole else "\u2013"


def markdown_html(text: str) -> str:
    """The data statement's Markdown as HTML (the subset it uses: headings, paragraphs,
    bullet lists, pipe tables, ``code`` and **bold**), every text escaped here."""
    out: list[str] = []
    blocks = re.split(r"\n\s*\n", text.strip())
    for block in blocks:
        lines = block.splitlines()
        if lines[0].startswith("#"):
            depth = min(len(lines[0]) - len(lines[0].lstrip("#")) + 1, 4)
            out.append(f"<h{depth}>{_inline(lines[0].lstrip('#').strip())}</h{depth}>")
        elif all(line.startswith("|") for line in lines):
            cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
            head, body = cells[0], [r for r in cells[1:] if not set("".join(r)) <= set("-:")]
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head)
                       + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row)
                                 + "</tr>" for row in body) + "</tbody></table>")
        elif all(line.startswith("- ") or line.startswith("  ") for line in lines):
            items: list[str] = []
            for line in lines:
                if line.startswith("- "):
                    items.append(line[2:])
                else:
                    items[-1] += " " + line.strip()
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
        else:
            out.append(f"<p>{_inline(' '.join(line.strip() for line in lines))}</p>")
    return "\n".join(out)


def _inline(text: str) -> str:
    escaped = html.escape(text, quote=False)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def markdown(text: str, drop_title: bool = False) -> Markup:
    """:func:`markdown_html` of ``text``, which escapes every text itself: the one filter
    whose output is markup. ``drop_title``: without a first ``#`` heading of plain text
    (where the page gives the section its own heading)."""
    out = markdown_html(str(text))
    if drop_title:
        out = re.sub(r"^<h2>[^<]*</h2>", "", out, count=1)
    return Markup(out)


FILTERS = {"number": number, "share": share, "markdown": markdown}


@cache
def environment() -> jinja2.Environment:
    """The environment of dp_ops's templates (see the module docstring)."""
    env = jinja2.Environment(
        loader=_Loader(),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_escaped,
    )
    env.filters.update(FILTERS)
    return env


def render(name: str, **values: object) -> str:
    """Template ``name`` (see the module docstring) rendered with ``values``."""
    return environment().get_template(name).render(**values)
