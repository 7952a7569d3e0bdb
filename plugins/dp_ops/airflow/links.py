"""The task links of the gate and publish tasks (Airflow operator extra links), to pages the
"Privacy budget" plugin serves behind Airflow's authentication
(:mod:`dp_ops.airflow.budget_plugin`). Imported at DAG-parse time: Airflow SDK only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

URL_PREFIX = "/dp-budget"


class DataDocsLink(BaseOperatorLink):
    """The gate task's link to the Great Expectations Data Docs of its validations."""

    name = "Data Docs"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        return f"{URL_PREFIX}/data-docs/index.html"


class ReleasePageLink(BaseOperatorLink):
    """The publish task's link to the page of its report's published release."""

    name = "Release page"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        if str(getattr(operator, "step", "publish")) != "publish":
            return ""
        return f"{URL_PREFIX}/release/{getattr(operator, 'report', '')}/index.html"
