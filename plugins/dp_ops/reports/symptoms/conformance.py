"""mypy's check that the symptoms dataset keeps the factory's protocols: its steps module
is a ``ReportSteps`` over its config. No other module imports this one (the spec
stays a light value that imports no step, so the package has no import circle through
it); mypy reads it with the rest of the package (mypy.ini), so a report that drops or
changes a step fails the type check, not a run."""

from __future__ import annotations

from dp_ops.reports.protocol import ReportSteps
from dp_ops.reports.symptoms import steps
from dp_ops.reports.symptoms.config import SymptomsConfig

CHECKED: ReportSteps[SymptomsConfig] = steps
