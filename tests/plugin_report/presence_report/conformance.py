"""mypy's check that the presence report keeps the factory's protocols: its steps module
is a ``ReportSteps`` and its release parts are ``ReleaseParts`` over its config. No other
module imports this one; mypy reads it with the package (mypy.ini)."""

from __future__ import annotations

from dp_ops.reports.protocol import ReportSteps
from dp_ops.steps.release_flow import ReleaseParts
from presence_report import steps
from presence_report.config import PresenceConfig
from presence_report.release import PresenceRelease

STEPS: ReportSteps[PresenceConfig] = steps
PARTS: ReleaseParts[PresenceConfig] = PresenceRelease()
