"""A plug-in report defined only in the tests: users present (with any stay) per region
and day. It imports only ``dp_ops.api`` (docs/writing-a-report.md)."""
