"""The Great Expectations plumbing of the release gate.

The release gate's runner: Great Expectations validation of candidate release tables.

Each report brings its own expectation suites (``dp_ops.reports.<report>.suites``);
:func:`run_suites` validates each (suite, table) pair in one GX context and returns what
failed, and :func:`require_pass` stops the release unless everything passed. Failure
messages name the expectation, the column and counts or aggregate observations only,
never row values; the full report is in the GX Data Docs site under ``gx_dir``, which the
on-call engineer opens from the message. The Data Docs pages themselves list a sample of
the failing values (GX's SUMMARY result format): noisy estimates and public region
attributes, the same kind of values a release publishes, never raw rows or user ids.

The GX context is built in code at every gate (:func:`~dp_ops.gx.project.project_config`):
suites, validation definitions and the data source live in memory, and nothing GX reads as
configuration comes from the data root, which someone without the ledger key can write (no
``great_expectations.yml``, ``config_variables.yml`` or ``plugins/``; one left by an older
version is ignored and can be deleted). On disk under ``gx_dir`` are only the Data Docs
site and the validation results its index lists: data GX renders, never the gate's verdict.
A file lock on ``gx_dir`` makes concurrent calls in one process or across processes safe:
validations share it, the site index and pruning take it exclusively (:func:`run_suites`).
Each run writes its own validation pages; the site index is rebuilt on failure and
otherwise at most every ``DP_DOCS_INDEX_SECONDS`` (120), when stored validation results
and their Data Docs pages are also pruned to ``KEEP_VALIDATIONS`` a suite. The record of
which files earlier gates validated carries a MAC under the ledger key
(:mod:`~dp_ops.gx.validated`).

The gate reads only noisy values and public region attributes (post-processing), so it
costs no privacy budget. No Airflow imports; ``dp_ops.airflow.operators`` wraps it.

Modules: :mod:`~dp_ops.gx.suites` (building suites, what they check),
:mod:`~dp_ops.gx.project` (the context built in code, its locks and Data Docs site),
:mod:`~dp_ops.gx.runner` (:func:`~dp_ops.gx.runner.run_suites`, the validation itself),
:mod:`~dp_ops.gx.memo` (what GX recomputes per metric, kept for one validation),
:mod:`~dp_ops.gx.result` (the gate's verdict and its log-safe failure lines) and
:mod:`~dp_ops.gx.validated` (what earlier gates validated).
"""

import os

# GX reads this when it is imported and when a context is built; opt out before either.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
