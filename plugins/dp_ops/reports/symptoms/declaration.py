"""The Search Trends Symptoms dataset, declared: what the factory runs for it
(:class:`~dp_ops.reports.declared.Report`; docs/design.md, Symptoms dataset).

Per day the factory ingests the search activity, bounds it (``bounding``), noises A (one
cell per region and symptom of the public list) and B (users with any search) per region
and level, and reports the day (``daily.report_day``: A and B paired, the reliability
rule applied); the release parts assemble the daily and weekly series, scale them and
gate and publish them. Weeks start on the spec's ``terms_change_weekday``.
"""

from __future__ import annotations

from collections.abc import Mapping

from dp_ops.api import DataRoot, Report
from dp_ops.reports.symptoms.bounding import BOUNDING, bounding_params
from dp_ops.reports.symptoms.config import SymptomsConfig, group_cells, load_symptoms_config
from dp_ops.reports.symptoms.daily import report_day
from dp_ops.reports.symptoms.release import PARTS
from dp_ops.reports.symptoms.reliability import prepare_ratio_tests
from dp_ops.reports.symptoms.spec import SPEC
from dp_ops.sources.search_activity import read_symptoms, symptom_list


def cells(root: DataRoot, cfg: SymptomsConfig) -> Mapping[str, tuple[str, ...]]:
    """A per symptom of the data root's public list, and B."""
    return group_cells(read_symptoms(symptom_list(root)))


REPORT = Report[SymptomsConfig](
    spec=SPEC,
    load_config=load_symptoms_config,
    bounding=BOUNDING,
    bounding_params=bounding_params,
    cells=cells,
    report_day=report_day,
    release=PARTS,
    # the reliability rule's ratio tests, built once per process
    prepare=prepare_ratio_tests,
)
