"""A report of the factory's plug-in kind, defined only in the tests: how many users were
present (had any stay) in each region on each day. It edits nothing in ``dp_ops``; the
tests register it through the ``dp_ops.reports`` entry point of the distribution beside it
(``presence_report-0.1.dist-info``) and run it through the same DAG factory, noise step,
ledger, gate and release flow as the two built-in reports (docs/writing-a-report.md)."""
