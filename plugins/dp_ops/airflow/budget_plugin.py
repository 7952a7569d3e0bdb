"""The "Privacy budget" view: an Airflow plugin (a FastAPI app and a navigation entry).

Registered through the ``airflow.plugins`` entry point of this package (pyproject.toml),
so every Airflow process that has dp_ops installed loads it; no file goes into Airflow's
plugins folder. The api-server mounts the app at ``/dp-budget`` and the UI shows
**Browse > Privacy budget**, which opens it.

Airflow does not authenticate a plugin's FastAPI app: every route here depends on
Airflow's own ``requires_access_dag("GET", param_dag_id=...)``, so it takes the same
credential as the REST API (the UI's ``_token`` cookie or an ``Authorization: Bearer``
token) and the same permission as reading the report's daily DAG; without one it answers
401, with an invalid one or without that permission 403. The DAG checked is fixed by the
route (:func:`report_dags`): given none, ``requires_access_dag`` would take a ``dag_id``
query parameter, and a viewer could name a DAG they may read.

Routes:

- ``/dp-budget/``: the page (:func:`dp_ops.budget_view.render_page`); both reports' DAGs;
- ``/dp-budget/api/budget``: the same figures as JSON (the totals are
  :meth:`Ledger.totals`, what ``python -m dp_ops ledger`` prints); both reports' DAGs;
- ``/dp-budget/release/<report>/<file>``: a file of the published release (``latest``),
  e.g. its ``index.html`` page, which the ``publish`` task links to; that report's DAG.
  Only the release the ledger recorded at publish, when it and the ledger verify, and
  only the files its manifest lists (and the manifest): anything else is 404
  (:func:`dp_ops.budget_view.verified_release`, :func:`dp_ops.budget_view.release_file`);
- ``/dp-budget/data-docs/<file>``: the Great Expectations Data Docs, which the ``gate``
  task links to; its index is the view's own list of the validation pages
  (:func:`dp_ops.budget_view.render_data_docs_index`); both reports' DAGs.

The Data Docs and the release pages are files of the data root, which people without the
ledger key can write: every response carries :data:`CONFINED_HEADERS`, under which no
script runs and nothing is loaded from another origin, and a file that is neither a page
nor what a page shows is sent as a download.

The ledger is ``DP_LEDGER_URL`` (or the data root's default), the data root
``DP_DATA_ROOT``, as for the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin

from dp_ops.airflow.links import URL_PREFIX, DataDocsLink, ReleasePageLink

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.responses import Response


def report_dags() -> dict[str, str]:
    """Report name -> the daily DAG whose read permission guards its figures and files,
    for every installed report."""
    from dp_ops.reports.spec import report_specs

    return {name: spec.daily_dag_id for name, spec in report_specs().items()}


# No script runs (none is allowed from anywhere, and the sandbox forbids it), nothing is
# fetched from another origin, no form is sent, and only Airflow's own pages may frame a
# response. The sandbox keeps the origin (allow-same-origin) so that a page's own images
# and stylesheets load with the viewer's session cookie (SameSite=Lax, which a sandboxed
# origin would not send): safe without allow-scripts. allow-downloads: a release page's
# CSV and Parquet links.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'; "
    "sandbox allow-same-origin allow-downloads")
CONFINED_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY,
                    "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer"}
# Shown in the browser: pages and what they embed. Anything else (CSV, Parquet, JSON, SVG)
# is a download.
INLINE_TYPES = frozenset({"text/html", "text/css", "image/png", "image/jpeg", "image/gif",
                          "image/webp", "image/x-icon", "image/vnd.microsoft.icon"})


def _file_response(content: bytes | None, name: str) -> Response:
    import mimetypes

    from fastapi import HTTPException
    from fastapi.responses import Response

    if content is None:
        raise HTTPException(status_code=404, detail="not found")
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    headers = {} if media_type in INLINE_TYPES else {"Content-Disposition": "attachment"}
    return Response(content, media_type=media_type, headers=headers)


def _budgets() -> tuple[list[Any], str]:
    from dp_ops import settings
    from dp_ops.budget_view import report_budget
    from dp_ops.privacy.ledger import Ledger
    from dp_ops.reports.registry import load_report

    root = settings.data_root()
    ledger = Ledger(settings.ledger(root))
    try:
        check = ledger.verify()
        state = ("the ledger's hash chain verifies" if check.ok
                 else f"THE LEDGER FAILS VERIFICATION: {check.problem}")
        out = []
        for name in report_dags():
            report = load_report(name)
            out.append(report_budget(root, ledger, name, cap=report.cap,
                                     normal_run=report.cfg.run_epsilon))
    finally:
        ledger.dispose()
    return out, state


def create_app() -> FastAPI:
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import HTMLResponse

    app = FastAPI(title="dp-ops privacy budget", docs_url=None, redoc_url=None,
                  openapi_url=None)
    dags = report_dags()

    @app.middleware("http")
    async def confine(request: Request, call_next: Callable[[Request], Any]) -> Response:
        response: Response = await call_next(request)
        response.headers.update(CONFINED_HEADERS)
        return response

    def guard(*dag_ids: str) -> list[Any]:
        # param_dag_id fixes the DAG checked: without it requires_access_dag reads a
        # dag_id path or query parameter, which the caller chooses
        return [Depends(requires_access_dag(method="GET", param_dag_id=d)) for d in dag_ids]

    every_report = guard(*dags.values())

    @app.get("/", response_class=HTMLResponse, dependencies=every_report)
    def page() -> HTMLResponse:
        from dp_ops.budget_view import render_page

        budgets, state = _budgets()
        links = {b.report: {"release": f"{URL_PREFIX}/release/{b.report}/index.html",
                            "data_docs": f"{URL_PREFIX}/data-docs/index.html"}
                 for b in budgets}
        return HTMLResponse(render_page(budgets, links, state))

    @app.get("/api/budget", dependencies=every_report)
    def budget_json() -> dict[str, Any]:
        from dp_ops.budget_view import to_json

        budgets, state = _budgets()
        return {"ledger": state, "reports": to_json(budgets)}

    for report in dags:
        # one route per report, so that its DAG is fixed by the path, not read from it
        app.get(f"/release/{report}/{{path:path}}", dependencies=guard(dags[report]),
                name=f"release_file_{report}")(_release_route(report))

    @app.get("/data-docs/{path:path}", dependencies=every_report)
    def data_docs(path: str) -> Response:
        from dp_ops import settings
        from dp_ops.budget_view import data_docs_file, data_docs_pages, render_data_docs_index

        root = settings.data_root()
        if path in ("", "index.html"):
            pages = data_docs_pages(root)
            if pages is None:
                raise HTTPException(status_code=404, detail="not found")
            return HTMLResponse(render_data_docs_index(pages))
        return _file_response(data_docs_file(root, path), path)

    return app


def _release_route(report: str) -> Callable[[str], Response]:
    """The endpoint serving ``report``'s published release."""

    def serve_release_file(path: str) -> Response:
        from dp_ops import settings
        from dp_ops.budget_view import release_file, verified_release
        from dp_ops.privacy.ledger import Ledger

        root = settings.data_root()
        ledger = Ledger(settings.ledger(root))
        try:
            manifest = verified_release(root, report, ledger)
        finally:
            ledger.dispose()
        name = path or "index.html"
        content = None if manifest is None else release_file(root, report, manifest, name)
        return _file_response(content, name)

    return serve_release_file


_APP: list[FastAPI] = []


class BudgetViewPlugin(AirflowPlugin):
    name = "dp_ops_privacy_budget"

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]  # a list on the base
        """Built when the api-server asks for it, not when a worker loads the plugin (the
        app imports the api-server's security module)."""
        if not _APP:
            _APP.append(create_app())
        return [{"app": _APP[0], "url_prefix": URL_PREFIX, "name": "Privacy budget"}]

    external_views = [{"name": "Privacy budget", "href": f"{URL_PREFIX.lstrip('/')}/",
                       "destination": "nav", "category": "browse",
                       "url_route": "privacy-budget"}]
    operator_extra_links = [DataDocsLink(), ReleasePageLink()]
