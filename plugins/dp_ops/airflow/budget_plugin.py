"""The "Privacy budget" view: an Airflow plugin (a FastAPI app and a navigation entry).

Registered through the ``airflow.plugins`` entry point of this package (pyproject.toml),
so every Airflow process that has dp_ops installed loads it; no file goes into Airflow's
plugins folder. The api-server mounts the app at ``/dp-budget`` and the UI shows
**Browse > Privacy budget**, which opens it.

Airflow does not authenticate a plugin's FastAPI app: every route here depends on
Airflow's own ``requires_access_dag("GET")``, so it takes the same credential as the REST
API (the UI's ``_token`` cookie or an ``Authorization: Bearer`` token) and the same
permission as reading a DAG; without one it answers 401, with an invalid one 403.

Routes:

- ``/dp-budget/``: the page (:func:`dp_ops.budget_view.render_page`);
- ``/dp-budget/api/budget``: the same figures as JSON (the totals are
  :meth:`Ledger.totals`, what ``python -m dp_ops ledger`` prints);
- ``/dp-budget/release/<report>/<file>``: the published release (``latest``), e.g. its
  ``index.html`` page, which the ``publish`` task links to;
- ``/dp-budget/data-docs/<file>``: the Great Expectations Data Docs, which the ``gate``
  task links to.

The ledger is ``DP_LEDGER_URL`` (or the data root's default), the data root
``DP_DATA_ROOT``, as for the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin

from dp_ops.airflow.links import URL_PREFIX, DataDocsLink, ReleasePageLink

if TYPE_CHECKING:
    from fastapi import FastAPI


REPORTS = ("mobility", "symptoms")


def _safe_file(base: Path, relative: str) -> Path:
    """``base / relative`` if it is a file inside ``base``; else 404 (no ``..``, no
    symlink out of it)."""
    from fastapi import HTTPException

    base = base.resolve()
    target = (base / relative).resolve()
    if not target.is_relative_to(base) or not target.is_file():
        raise HTTPException(status_code=404, detail="not found")
    return target


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
        for name in REPORTS:
            report = load_report(name)
            out.append(report_budget(root, ledger, name, cap=report.cap,
                                     normal_run=report.cfg.run_epsilon))
    finally:
        ledger.dispose()
    return out, state


def create_app() -> FastAPI:
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI
    from fastapi.responses import FileResponse, HTMLResponse

    app = FastAPI(title="dp-ops privacy budget", docs_url=None, redoc_url=None,
                  openapi_url=None)
    guard = [Depends(requires_access_dag(method="GET"))]

    @app.get("/", response_class=HTMLResponse, dependencies=guard)
    def page() -> HTMLResponse:
        from dp_ops.budget_view import render_page

        budgets, state = _budgets()
        links = {b.report: {"release": f"{URL_PREFIX}/release/{b.report}/index.html",
                            "data_docs": f"{URL_PREFIX}/data-docs/index.html"}
                 for b in budgets}
        return HTMLResponse(render_page(budgets, links, state))

    @app.get("/api/budget", dependencies=guard)
    def budget_json() -> dict[str, Any]:
        from dp_ops.budget_view import to_json

        budgets, state = _budgets()
        return {"ledger": state, "reports": to_json(budgets)}

    @app.get("/release/{report}/{path:path}", dependencies=guard)
    def release_file(report: str, path: str) -> FileResponse:
        from fastapi import HTTPException

        from dp_ops import settings

        if report not in REPORTS:
            raise HTTPException(status_code=404, detail="not found")
        latest = settings.data_root().root / "published" / report / "latest"
        return FileResponse(_safe_file(latest, path or "index.html"))

    @app.get("/data-docs/{path:path}", dependencies=guard)
    def data_docs(path: str) -> FileResponse:
        from fastapi import HTTPException

        from dp_ops import settings
        from dp_ops.budget_view import data_docs_index

        index = data_docs_index(settings.data_root())
        if index is None:
            raise HTTPException(status_code=404, detail="no Data Docs built yet")
        return FileResponse(_safe_file(index.parent, path or "index.html"))

    return app


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
