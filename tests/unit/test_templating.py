"""The HTML pages' templates (``dp_ops/templates``, :mod:`dp_ops.templating`): every one is
rendered with autoescape on, none marks a value safe, and the wheel ships them all."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

import jinja2
import pytest

from dp_ops.templating import TEMPLATE_DIR, environment, render

PACKAGE = Path(__file__).resolve().parents[2] / "plugins" / "dp_ops"
# dp_ops's own and those the built-in reports ship in their packages
TEMPLATES = sorted(PACKAGE.rglob(f"{TEMPLATE_DIR}/*.html"))
HOSTILE = "<img src=x onerror=alert(1)>'\""


def test_there_are_templates() -> None:
    assert [t.relative_to(PACKAGE).as_posix() for t in TEMPLATES] == [
        "reports/mobility/templates/published.html",
        "reports/symptoms/templates/published.html",
        "templates/_page.html", "templates/budget_view.html",
        "templates/data_docs_index.html", "templates/release_page.html",
        "templates/table_published.html"]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_template_is_autoescaped(template: Path) -> None:
    env = environment()
    assert env.autoescape is True
    relative = template.relative_to(PACKAGE)
    name = (template.name if relative.parts[0] == TEMPLATE_DIR
            else "dp_ops." + ".".join(relative.parts[:-2]) + ":" + template.name)
    compiled = env.get_template(name)
    assert compiled.environment is env


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_no_template_marks_a_value_safe(template: Path) -> None:
    text = template.read_text()
    for construct in (r"\|\s*safe\b", r"\bMarkup\b", r"autoescape\s+false"):
        assert not re.search(construct, text), f"{template.name}: {construct}"


def test_a_hostile_value_is_escaped_where_it_is_placed() -> None:
    page = render("data_docs_index.html", style="", more=0, pages=[
        type("Page", (), {"time": HOSTILE, "suite": HOSTILE, "run": HOSTILE,
                          "href": HOSTILE, "name": HOSTILE})()])
    assert "<img" not in page
    # escaped as html.escape escapes (the release page is rebuilt to the byte)
    assert "&lt;img src=x onerror=alert(1)&gt;&#x27;&quot;" in page


def test_an_undefined_value_is_an_error() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render("data_docs_index.html", style="", more=0)


def test_the_wheel_ships_every_template() -> None:
    config = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["dp_ops"]
    for template in TEMPLATES:
        relative = template.relative_to(PACKAGE).as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative
