"""The reports. Each is a package with a ``spec`` module (its
:class:`~dp_ops.reports.spec.ReportSpec`, registered under ``dp_ops.reports``) and a
``declaration`` module (its :class:`~dp_ops.reports.declared.Report`);
:func:`dp_ops.reports.registry.load_report` finds one by name and binds it."""
