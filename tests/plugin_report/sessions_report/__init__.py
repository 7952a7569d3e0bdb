"""A plug-in report with a source of its own, defined only in the tests: minutes of app
sessions per region and day, from ``raw/app_sessions``. It imports only ``dp_ops.api``
(docs/writing-a-report.md)."""
