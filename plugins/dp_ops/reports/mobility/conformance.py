"""mypy's check that the mobility report keeps the factory's protocols: its steps module is
a ``ReportSteps`` over its config, with the baseline and method-update capabilities.
No other module imports this one (the spec stays a light value that imports no
step, so the package has no import circle through it); mypy reads it with the rest of
the package (mypy.ini), so a report that drops or changes a step fails the type check,
not a run."""

from __future__ import annotations

from dp_ops.reports.mobility import steps
from dp_ops.reports.mobility.config import MobilityConfig
from dp_ops.reports.protocol import BaselineSteps, MethodUpdateSteps, ReportSteps

CHECKED: ReportSteps[MobilityConfig] = steps
BASELINE: BaselineSteps[MobilityConfig] = steps
METHOD_UPDATES: MethodUpdateSteps[MobilityConfig] = steps
