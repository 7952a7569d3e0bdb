"""The two reports. Each is a package with a ``steps`` module that satisfies
:class:`dp_ops.reports.protocol.ReportSteps`; :func:`dp_ops.reports.registry.report_steps`
finds it by name."""
