"""The HTML pages dp_ops renders (the Privacy budget view, the index of the gate's Data Docs
site) come from the Jinja2 templates in ``dp_ops/templates``, through one environment:
autoescape on for every template, an undefined name an error. A value reaches a page only
as template data, escaped where it is placed; no template marks a value safe (the test of
this module checks it), so text read from the data root (manifests, ledger reasons, run
ids) cannot become markup."""

from __future__ import annotations

from functools import cache

import jinja2

TEMPLATE_DIR = "templates"


@cache
def environment() -> jinja2.Environment:
    """The environment of dp_ops's templates (the package's ``templates`` directory)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("dp_ops", TEMPLATE_DIR),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(name: str, **values: object) -> str:
    """Template ``name`` of ``dp_ops/templates`` rendered with ``values``."""
    return environment().get_template(name).render(**values)
